package vigil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/snapshot"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestOpenTakesOverManySessions: Open takes over many sessions at once
// (recoverWorkers at a time), each as one by one did: its lease, its
// state, a new incarnation, the model call that was in flight issued
// again and answered. Run with -race it also checks that takeovers in
// parallel share nothing they should not.
func TestOpenTakesOverManySessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung, err := script.Parse([]byte("name: hung\nagents:\n  main:\n    turns:\n      - delay: 1000h\n"))
		must(t, err)
		answers, err := script.Parse([]byte("name: answers\nagents:\n  main:\n    turns:\n      - say: \"recovered\"\n"))
		must(t, err)
		st := memstore.New()
		ctx := context.Background()
		first := openWith(t, st, hung, nil)
		ids := make([]SessionID, 3*recoverWorkers+7)
		for i := range ids {
			sess, err := first.CreateSession(ctx, &SessionParams{Prompt: "hello"})
			must(t, err)
			ids[i] = sess.ID
		}
		synctest.Wait() // every session's model call is in flight
		must(t, first.Close())

		rt := openWith(t, st, answers, nil)
		rt.mu.Lock()
		n := len(rt.actors)
		rt.mu.Unlock()
		if n != len(ids) {
			t.Fatalf("Open took over %d sessions, want %d", n, len(ids))
		}
		for _, id := range ids {
			must(t, rt.WaitQuiescent(ctx, id))
			s, err := rt.State(ctx, id)
			must(t, err)
			runs := s.Agents[core.MainAgent].Runs
			if s.Incarnation != 1 || len(runs) != 1 || runs[0].Status != core.RunCompleted || runs[0].Reply != "recovered" {
				t.Fatalf("session %s after the takeover: incarnation %d, runs %+v; want incarnation 1 (one takeover) and run 1 completed by the call issued again", id, s.Incarnation, runs)
			}
		}
	})
}

// callCounter counts the calls Open makes of a store: lease acquisitions,
// one by one and many at once, and the reads of sessions' snapshots and
// events.
type callCounter struct {
	*memstore.Store
	ones, manys              atomic.Int64
	tails, snapshots, events atomic.Int64
}

func (c *callCounter) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*store.Lease, error) {
	c.ones.Add(1)
	return c.Store.LeaseAcquire(ctx, p)
}

func (c *callCounter) LeaseAcquireMany(ctx context.Context, p *store.LeaseAcquireManyParams) (*store.LeaseAcquireManyResult, error) {
	c.manys.Add(1)
	return c.Store.LeaseAcquireMany(ctx, p)
}

func (c *callCounter) TailLoadMany(ctx context.Context, p *store.TailLoadManyParams) ([]store.Tail, error) {
	c.tails.Add(1)
	return c.Store.TailLoadMany(ctx, p)
}

func (c *callCounter) SnapshotLoad(ctx context.Context, session string) (*store.Snapshot, error) {
	c.snapshots.Add(1)
	return c.Store.SnapshotLoad(ctx, session)
}

func (c *callCounter) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	c.events.Add(1)
	return c.Store.EventList(ctx, p)
}

// TestOpenAcquiresLeasesInChunks: Open acquires the leases of the sessions
// it takes over a chunk at a time, not one transaction each; a session
// whose lease another live owner holds is left to it, and its takeover
// alone tries the lease again.
func TestOpenAcquiresLeasesInChunks(t *testing.T) {
	ctx := context.Background()
	st := &callCounter{Store: memstore.New()}
	first := openWith(t, st, mustParse(t, idleScenario), nil)
	ids := createSessions(t, first, 2*acquireChunk+5)
	must(t, first.Close())
	// Another owner, alive, holds one of them.
	if _, err := st.Store.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: string(ids[7]), Owner: "elsewhere", TTL: time.Hour, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st.ones.Store(0)
	rt := openWith(t, st, mustParse(t, idleScenario), nil)
	if n, m := st.manys.Load(), st.ones.Load(); n != 3 || m != 1 {
		t.Errorf("Open of %d sessions made %d LeaseAcquireMany and %d LeaseAcquire calls; want 3 (chunks of %d) and 1 (the held one's own try)", len(ids), n, m, acquireChunk)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for i, id := range ids {
		if got := rt.actors[core.SessionID(id)] != nil; got != (i != 7) {
			t.Errorf("session %d (%s) taken over: %v, want %v", i, id, got, i != 7)
		}
	}
}

// TestOpenReadsTailsInChunks: Open reads the snapshots and the events
// after them of the sessions it takes over a chunk at a time
// (TailLoadMany), after a crash (events after the snapshots) and after a
// clean stop (none): no takeover reads its own, nor its projection the
// events again.
func TestOpenReadsTailsInChunks(t *testing.T) {
	ctx := context.Background()
	st := &callCounter{Store: memstore.New()}
	first := openWith(t, st, mustParse(t, idleScenario), nil)
	ids := createSessions(t, first, 2*acquireChunk+5)
	for _, id := range ids[:10] {
		must(t, first.Hold(ctx, id, &HoldParams{By: "test", Reason: "events after the snapshot"}))
	}
	// A crash: the runtime's stop writes nothing.
	st.FailWrites(errors.New("the process was killed"))
	must(t, first.Close())
	st.FailWrites(nil)
	for _, stop := range []string{"a crash", "a clean stop"} {
		st.tails.Store(0)
		st.snapshots.Store(0)
		st.events.Store(0)
		rt := openWith(t, st, mustParse(t, idleScenario), nil)
		if n, s, e := st.tails.Load(), st.snapshots.Load(), st.events.Load(); n != 3 || s != 0 || e != 0 {
			t.Errorf("Open of %d sessions after %s made %d TailLoadMany, %d SnapshotLoad and %d EventList calls; want 3 (chunks of %d), 0 and 0", len(ids), stop, n, s, e, acquireChunk)
		}
		for _, id := range ids[:10] {
			s, err := rt.SessionStatus(ctx, id)
			must(t, err)
			if s.Hold == nil {
				t.Errorf("session %s after %s: not held; its last event was lost", id, stop)
			}
		}
		must(t, rt.Close())
	}
}

// TestLoadStateTailReadsOn: a tail read in part (TailLoadMany cut at its
// Limit) is read on from the store, to the same state and events as a
// read from scratch.
func TestLoadStateTailReadsOn(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	sess, _ := crashedAfterInputs(t, st, 6)
	want, wantTail, err := loadStateTail(ctx, st, string(sess.ID), nil)
	must(t, err)
	tails, err := st.TailLoadMany(ctx, &store.TailLoadManyParams{Sessions: []string{string(sess.ID)}, Limit: 2})
	must(t, err)
	if len(tails) != 1 || tails[0].Complete || wantTail.End-wantTail.After <= 2 {
		t.Fatalf("the tail read: %+v; want one cut at 2 of %d events", tails, wantTail.End-wantTail.After)
	}
	wantSnap, err := snapshot.Encode(want)
	must(t, err)
	// Read on in pages of 1 to 4 events, then of more than there are:
	// each page read while the one before is applied.
	for _, page := range []int{1, 2, 3, 4, eventPage} {
		got, gotTail, err := loadStateTailPaged(ctx, st, string(sess.ID), &tails[0], page)
		must(t, err)
		if got.Seq != want.Seq || (got.Hold == nil) != (want.Hold == nil) || gotTail.After != wantTail.After || gotTail.End != wantTail.End {
			t.Fatalf("pages of %d: read on from a cut tail: seq %d, tail %d..%d; want seq %d, tail %d..%d",
				page, got.Seq, gotTail.After, gotTail.End, want.Seq, wantTail.After, wantTail.End)
		}
		if keep := wantTail.End-wantTail.After < int64(page); keep != (gotTail.Events != nil) || keep && len(gotTail.Events) != len(wantTail.Events) {
			t.Fatalf("pages of %d: %d events kept of %d, want them kept only when they fit in a page", page, len(gotTail.Events), wantTail.End-wantTail.After)
		}
		if b, err := snapshot.Encode(got); err != nil || !bytes.Equal(b, wantSnap) {
			t.Fatalf("pages of %d: the state read on differs from the one read at once (%v)", page, err)
		}
	}
}

// TestLoadStateTailSnapshotElsewhere: a snapshot whose state is at another
// event than the store recorded it at (a store that kept a later save's
// sequence, say) is read on from its state's own event, to the state read
// with no snapshot; and a store that fails while the tail is read ahead
// gives its error, with nothing left running.
func TestLoadStateTailSnapshotElsewhere(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	sess, mid := crashedAfterInputs(t, st, 4)
	want, err := loadState(ctx, st, string(sess.ID))
	must(t, err)
	wantSnap, err := snapshot.Encode(want)
	must(t, err)
	data, err := snapshot.Encode(mid)
	must(t, err)
	for _, at := range []int64{mid.Seq - 1, mid.Seq + 2} {
		pre := &store.Tail{Session: string(sess.ID), Snapshot: &store.Snapshot{Session: string(sess.ID), Seq: at, Data: data}}
		got, tail, err := loadStateTailPaged(ctx, st, string(sess.ID), pre, 2)
		must(t, err)
		if b, err := snapshot.Encode(got); err != nil || !bytes.Equal(b, wantSnap) || tail.After != mid.Seq || tail.End != want.Seq {
			t.Fatalf("snapshot of the state at %d recorded at %d: tail %d..%d, state the same: %v (%v); want tail %d..%d", mid.Seq, at, tail.After, tail.End, bytes.Equal(b, wantSnap), err, mid.Seq, want.Seq)
		}
	}
	failing := &failingList{Store: st}
	pre := &store.Tail{Session: string(sess.ID), Snapshot: &store.Snapshot{Session: string(sess.ID), Seq: mid.Seq, Data: data}}
	if _, _, err := loadStateTailPaged(ctx, failing, string(sess.ID), pre, 1); !errors.Is(err, errListFailed) {
		t.Fatalf("a failing EventList gave %v, want its error", err)
	}
}

// TestDecodeEvents: a page large enough to be decoded on several
// processors gives each record's event in its place, and the error of its
// first record that does not decode.
func TestDecodeEvents(t *testing.T) {
	recs := make([]store.Record, 3001)
	for i := range recs {
		recs[i] = store.Record{Session: "s", Seq: int64(i + 1), Type: "hold.set", Data: []byte(fmt.Sprintf(`{"by":"u%d"}`, i))}
	}
	events, err := decodeEvents(recs)
	must(t, err)
	if len(events) != len(recs) {
		t.Fatalf("%d events of %d records", len(events), len(recs))
	}
	for i, e := range events {
		if h, ok := e.Body.(*core.HoldSet); !ok || e.Seq != recs[i].Seq || h.By != fmt.Sprintf("u%d", i) {
			t.Fatalf("event %d: %+v (%+v), want hold.set by u%d at %d", i, e, e.Body, i, recs[i].Seq)
		}
	}
	recs[2999].Data, recs[1500].Data = []byte("{"), []byte("{")
	if _, err := decodeEvents(recs); err == nil || !strings.Contains(err.Error(), "s#1501") {
		t.Fatalf("two records that do not decode gave %v, want the first one's error (s#1501)", err)
	}
}

// crashedAfterInputs creates a session on st, gives it n inputs (holds
// and resumes, an event each) and stops its runtime as a crash would,
// with no snapshot. It returns the session and its state before the
// inputs.
func crashedAfterInputs(t *testing.T, st *memstore.Store, n int) (*Session, *core.State) {
	t.Helper()
	ctx := context.Background()
	rt := openWith(t, st, mustParse(t, idleScenario), nil)
	sess, err := rt.CreateSession(ctx, &SessionParams{})
	must(t, err)
	before, err := loadState(ctx, st, string(sess.ID))
	must(t, err)
	for i := range n {
		if i%2 == 0 {
			must(t, rt.Hold(ctx, sess.ID, &HoldParams{By: "test", Reason: "events"}))
		} else {
			must(t, rt.Resume(ctx, sess.ID, "test"))
		}
	}
	st.FailWrites(errors.New("the process was killed")) // no snapshot at stop
	must(t, rt.Close())
	st.FailWrites(nil)
	return sess, before
}

var errListFailed = errors.New("the store's disk went away")

// failingList is a store whose second EventList call fails.
type failingList struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *failingList) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	if s.calls.Add(1) == 2 {
		return nil, errListFailed
	}
	return s.Store.EventList(ctx, p)
}

// blockingTails blocks the second TailLoadMany call until its context
// ends, and closes blocked when it does.
type blockingTails struct {
	*memstore.Store
	calls   atomic.Int64
	blocked chan struct{}
}

func (s *blockingTails) TailLoadMany(ctx context.Context, p *store.TailLoadManyParams) ([]store.Tail, error) {
	if s.calls.Add(1) == 2 {
		close(s.blocked)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.TailLoadMany(ctx, p)
}

// TestCloseDuringAdoption: Close while a pass of the adoption loop takes
// sessions over, its first chunk done and its second reading tails, leaves
// none of the leases it acquired held: the first chunk's sessions stop
// and release theirs, the second's are given up (or taken over and then
// released), and the sessions it did not come to keep the leases they had.
func TestCloseDuringAdoption(t *testing.T) {
	ctx := context.Background()
	st := &blockingTails{Store: memstore.New(), blocked: make(chan struct{})}
	first := openWith(t, st, mustParse(t, idleScenario), nil)
	ids := createSessions(t, first, 3*acquireChunk+5)
	st.FailWrites(errors.New("the process was killed")) // its leases stay held
	must(t, first.Close())
	st.FailWrites(nil)
	before, err := st.LeaseList(ctx)
	must(t, err)
	epochs := map[string]int64{}
	for _, l := range before {
		if l.Released {
			t.Fatalf("lease of %s released by a crashed runtime", l.Session)
		}
		epochs[l.Session] = l.Epoch
	}

	var adopt atomic.Bool
	rt := openWith(t, st, mustParse(t, idleScenario), func(o *Options) {
		o.LeaseTTL = 300 * time.Millisecond // an adoption pass every 100 ms
		o.Adopt = func(SessionSummary) bool { return adopt.Load() }
	})
	adopt.Store(true)
	<-st.blocked // the pass took the first chunk over and reads the second's tails
	must(t, rt.Close())

	after, err := st.LeaseList(ctx)
	must(t, err)
	taken, untouched := 0, 0
	for _, l := range after {
		switch {
		case l.Epoch == epochs[l.Session]:
			untouched++
		case !l.Released:
			t.Errorf("lease of %s at epoch %d (was %d) held after Close", l.Session, l.Epoch, epochs[l.Session])
		default:
			taken++
		}
	}
	if taken < acquireChunk || untouched < acquireChunk || taken+untouched != len(ids) {
		t.Errorf("%d sessions' leases taken and released, %d untouched, of %d; want the first chunk or two taken, the last untouched", taken, untouched, len(ids))
	}
}

// createSessions creates n sessions on rt without a prompt and returns
// their ids.
func createSessions(t *testing.T, rt *Runtime, n int) []SessionID {
	t.Helper()
	ids := make([]SessionID, n)
	for i := range ids {
		sess, err := rt.CreateSession(context.Background(), &SessionParams{})
		must(t, err)
		ids[i] = sess.ID
	}
	return ids
}
