package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// benchSessions leases sessions fresh sessions (named so that a store can
// be reused across benchmark runs) and returns their names and epochs.
func benchSessions(b *testing.B, s store.Store, n int) ([]string, []int64) {
	b.Helper()
	prefix := fmt.Sprintf("b%x-", rand.Uint64())
	names, epochs := make([]string, n), make([]int64, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
		epochs[i] = acquire(b, s, names[i], "bench", base).Epoch
	}
	return names, epochs
}

// benchSteps appends b.N steps from one goroutine per session; step makes
// the i-th step (from 1) of a session whose log ends at last.
func benchSteps(b *testing.B, s store.Store, sessions int, step func(sess string, i int, last int64) ([]store.Record, *store.Projection)) {
	b.Helper()
	names, epochs := benchSessions(b, s, sessions)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := range sessions {
		wg.Go(func() {
			last := int64(0)
			for i := 1; next.Add(1) <= int64(b.N); i++ {
				rs, p := step(names[g], i, last)
				if _, err := s.EventAppend(context.Background(), &store.EventAppendParams{Session: names[g], Epoch: epochs[g], Records: rs, Projection: p}); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				last += int64(len(rs))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// padJSON returns a JSON object of about size bytes.
func padJSON(size int, format string, args ...any) []byte {
	head := fmt.Sprintf(format, args...)
	pad := max(size-len(head)-12, 0)
	out := make([]byte, 0, size)
	out = append(out, `{"body":`...)
	out = append(out, head...)
	out = append(out, `,"pad":"`...)
	for i := range pad {
		out = append(out, byte('a'+i%26))
	}
	return append(out, `"}`...)
}

// BenchAppend measures steps of events records of size bytes each, plus a
// projection (session, agent and run rows), appended concurrently to
// sessions sessions; an op is one step. It reports appends/s and events/s.
func BenchAppend(b *testing.B, s store.Store, sessions, events, size int) {
	benchSteps(b, s, sessions, func(sess string, i int, last int64) ([]store.Record, *store.Projection) {
		rs := make([]store.Record, events)
		at := base.Add(time.Duration(last) * time.Millisecond)
		for k := range rs {
			rs[k] = store.Record{Session: sess, Seq: last + int64(k) + 1, At: at, Type: "transcript.appended",
				Data: padJSON(size, `{"agent":"main","run":%d,"k":%d}`, i, k)}
		}
		return rs, &store.Projection{
			Session: &store.SessionRow{ID: sess, Title: "bench", Created: base, Updated: at, LastSeq: last + int64(events)},
			Agents:  []store.AgentRow{{Session: sess, ID: "main", Name: "main", State: "running", Runs: i}},
			Runs:    []store.RunRow{{Session: sess, Agent: "main", Seq: i, Kind: "prompt", Status: "running", Started: at}},
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
}

// BenchNotifications measures the step that ends a subagent's run: a
// run.ended and a notification.written record, the run row and the new
// note row (unique by task and run), appended concurrently to sessions
// sessions. It reports notes/s.
func BenchNotifications(b *testing.B, s store.Store, sessions int) {
	benchSteps(b, s, sessions, func(sess string, i int, last int64) ([]store.Record, *store.Projection) {
		at := base.Add(time.Duration(last) * time.Millisecond)
		rs := []store.Record{
			{Session: sess, Seq: last + 1, At: at, Type: "run.ended",
				Data: fmt.Appendf(nil, `{"agent":"a1","seq":%d,"status":"completed","reply":"all tests pass"}`, i)},
			{Session: sess, Seq: last + 2, At: at, Type: "notification.written",
				Data: padJSON(400, `{"note":{"key":{"task":"t1","run":%d},"owner":"main","agent":"a1","kind":"agent","status":"completed"}}`, i)},
		}
		return rs, &store.Projection{
			Session: &store.SessionRow{ID: sess, Created: base, Updated: at, LastSeq: last + 2},
			Runs:    []store.RunRow{{Session: sess, Agent: "a1", Seq: i, Kind: "task", Status: "completed", Started: at, Ended: at, Reply: "all tests pass"}},
			Notes: []store.NoteRow{{Session: sess, Task: "t1", Run: i, Owner: "main", Status: "completed",
				Delivery: "queued", Written: at, New: true}},
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "notes/s")
}

// BenchReplay fills one session with n records of about 300 bytes (once,
// untimed) and measures reading them all back with EventList; an op is a
// full replay. It reports events/s.
func BenchReplay(b *testing.B, s store.Store, n int) {
	names, epochs := benchSessions(b, s, 1)
	const chunk = 5000
	for from := 1; from <= n; from += chunk {
		rs := make([]store.Record, min(chunk, n-from+1))
		for k := range rs {
			seq := int64(from + k)
			rs[k] = store.Record{Session: names[0], Seq: seq, At: base.Add(time.Duration(seq)), Type: "transcript.appended",
				Data: padJSON(300, `{"seq":%d}`, seq)}
		}
		appendOK(b, s, names[0], epochs[0], rs, nil)
	}
	b.ResetTimer()
	for range b.N {
		rs, err := s.EventList(context.Background(), &store.EventListParams{Session: names[0]})
		if err != nil || len(rs) != n {
			b.Fatalf("replay: %d records, %v", len(rs), err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
}

// BenchSnapshotLoad reads a session's snapshot of size bytes back, as a
// recovery does (TailLoadMany of the session, which has no events after
// it); an op is one read. Before each, the process gives its free memory
// back to the system, so that each read's memory is new to the process as
// in a recovery after a restart (each page a fault): a copy too many shows.
func BenchSnapshotLoad(b *testing.B, s store.Store, size int) {
	names, epochs := benchSessions(b, s, 1)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	ctx := context.Background()
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: names[0], Epoch: epochs[0], Seq: 1, Data: data}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		debug.FreeOSMemory()
		b.StartTimer()
		tails, err := s.TailLoadMany(ctx, &store.TailLoadManyParams{Sessions: names})
		if err != nil || len(tails) != 1 || tails[0].Snapshot == nil || len(tails[0].Snapshot.Data) != size {
			b.Fatalf("load: %d tails, %v", len(tails), err)
		}
	}
}
