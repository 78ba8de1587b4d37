package postgres

// The benchmarks, one per lever of the write path:
//
//	go test -run '^$' -bench . -benchtime 3s ./store/postgres/
//
// Besides the rate, each reports what the server did per step, read from
// the server itself so that the figures hold for any version of this
// package: srv-commits/step (pg_stat_database.xact_commit: fewer than 1
// means group commit), srv-rows/step (tuples inserted and updated in all
// tables: the rows a step costs) and WAL-B/step (bytes of WAL written,
// what each fsync has to carry). With store.StatsReader, steps/commit and
// rows/step come from the store's own counters too.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/storetest"
)

// serverCounters are the server's counters of one database.
type serverCounters struct {
	commits, rows int64
	wal           int64 // pg_current_wal_lsn, in bytes (cluster-wide)
}

// readCounters reads the counters of the database dsn names from a new
// connection. pg_stat_database lags behind the backends' work; call it after
// the store's connections are closed (a backend flushes its counters when it
// exits) to read everything they did.
func readCounters(b *testing.B, dsn string) serverCounters {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	// Wait for the store's backends to exit and flush their counters.
	for i := 0; ; i++ {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i == 500 {
			b.Fatalf("%d backends of the benchmark still connected", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var c serverCounters
	if err := conn.QueryRow(ctx, `SELECT xact_commit, tup_inserted + tup_updated, pg_current_wal_lsn() - '0/0'::pg_lsn
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.commits, &c.rows, &c.wal); err != nil {
		b.Fatal(err)
	}
	return c
}

// walNow reads the server's WAL position.
func walNow(b *testing.B, dsn string) int64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var lsn int64
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// benchServer runs fn (which appends b.N steps) on stores opened on a fresh
// database and reports what the server and the store counted per step.
// Counters from before fn (migration, leases) are included; they are
// negligible at benchmark sizes.
func benchServer(b *testing.B, nodes int, fn func(ss []*Store)) {
	b.Helper()
	dsn := testDB(b)
	ss := make([]*Store, nodes)
	for i := range ss {
		ss[i] = openTest(b, dsn)
	}
	wal := walNow(b, dsn)
	fn(ss)
	var st store.Stats
	haveStats := false
	for _, s := range ss {
		if sr, ok := any(s).(store.StatsReader); ok {
			x := sr.Stats()
			st.Commits, st.Appends, st.Rows = st.Commits+x.Commits, st.Appends+x.Appends, st.Rows+x.Rows
			haveStats = true
		}
		_ = s.Close()
	}
	c := readCounters(b, dsn)
	n := float64(b.N)
	b.ReportMetric(float64(c.commits)/n, "srv-commits/step")
	b.ReportMetric(float64(c.rows)/n, "srv-rows/step")
	b.ReportMetric(float64(c.wal-wal)/n, "WAL-B/step")
	if haveStats && st.Commits > 0 && st.Appends > 0 {
		b.ReportMetric(float64(st.Appends)/float64(st.Commits), "steps/commit")
		b.ReportMetric(float64(st.Rows)/float64(st.Appends), "rows/step")
	}
}

// BenchmarkAppend appends steps of 6 events of ~300 bytes plus a projection
// (session, agent and run rows) from 8 concurrent sessions; an op is one
// step. Lever 1: one log row per step instead of six.
func BenchmarkAppend(b *testing.B) {
	benchServer(b, 1, func(ss []*Store) { storetest.BenchAppend(b, ss[0], 8, 6, 300) })
}

// BenchmarkAppendSerial is BenchmarkAppend from one session: each step
// waits for its own commit, the latency of one durable step.
func BenchmarkAppendSerial(b *testing.B) {
	benchServer(b, 1, func(ss []*Store) { storetest.BenchAppend(b, ss[0], 1, 6, 300) })
}

// BenchmarkReplay reads a session of 100,000 events back; an op is a full
// replay.
func BenchmarkReplay(b *testing.B) {
	storetest.BenchReplay(b, openTest(b, testDB(b)), 100_000)
}

// BenchmarkSnapshotLoad reads a 64 MiB snapshot back, as a recovery does;
// an op is one read.
func BenchmarkSnapshotLoad(b *testing.B) {
	storetest.BenchSnapshotLoad(b, openTest(b, testDB(b)), 64<<20)
}

// BenchmarkDurableNotifications appends the step that ends a subagent run
// (run.ended, notification.written, the session and run rows and the new
// note row) from 8 concurrent sessions. Levers 1 and 2.
func BenchmarkDurableNotifications(b *testing.B) {
	benchServer(b, 1, func(ss []*Store) { storetest.BenchNotifications(b, ss[0], 8) })
}

// BenchmarkDurableNotifications100 is BenchmarkDurableNotifications from
// 100 concurrent sessions. Lever 2: group commit shows as steps/commit.
func BenchmarkDurableNotifications100(b *testing.B) {
	benchServer(b, 1, func(ss []*Store) { storetest.BenchNotifications(b, ss[0], 100) })
}

// BenchmarkDurableNotificationsTwoNodes is BenchmarkDurableNotifications100
// from two stores ("nodes") on one database, 50 sessions each: the two
// nodes' groups share the global order.
func BenchmarkDurableNotificationsTwoNodes(b *testing.B) {
	benchServer(b, 2, func(ss []*Store) { benchNotesNodes(b, ss, 50) })
}

// BenchmarkDurableNotificationsTwoNodesWatched is
// BenchmarkDurableNotificationsTwoNodes with a Watch on each store
// (each listening to the notifications of every commit, the other
// node's included), drained as a follower would be woken: the cost of
// LISTEN/NOTIFY on the write path. wakes/s counts receives on both.
func BenchmarkDurableNotificationsTwoNodesWatched(b *testing.B) {
	benchServer(b, 2, func(ss []*Store) {
		ctx, cancel := context.WithCancel(context.Background())
		var wakes atomic.Int64
		var wg sync.WaitGroup
		for _, s := range ss {
			ch, err := s.Watch(ctx)
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				for range ch {
					wakes.Add(1)
				}
			})
		}
		benchNotesNodes(b, ss, 50)
		cancel()
		wg.Wait()
		b.ReportMetric(float64(wakes.Load())/b.Elapsed().Seconds(), "wakes/s")
	})
}

// benchNotesNodes is storetest.BenchNotifications spread over several
// stores, perNode sessions on each; an op is one step.
func benchNotesNodes(b *testing.B, ss []*Store, perNode int) {
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	type sess struct {
		s     *Store
		name  string
		epoch int64
	}
	var all []sess
	for n, s := range ss {
		for i := range perNode {
			name := fmt.Sprintf("n%d-%d", n, i)
			l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: name, Owner: fmt.Sprint("node", n), TTL: time.Hour, Now: base})
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, sess{s, name, l.Epoch})
		}
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	for _, x := range all {
		wg.Go(func() {
			last := int64(0)
			for i := 1; next.Add(1) <= int64(b.N); i++ {
				at := base.Add(time.Duration(last) * time.Millisecond)
				rs := []store.Record{
					{Session: x.name, Seq: last + 1, At: at, Type: "run.ended",
						Data: fmt.Appendf(nil, `{"agent":"a1","seq":%d,"status":"completed","reply":"all tests pass"}`, i)},
					{Session: x.name, Seq: last + 2, At: at, Type: "notification.written",
						Data: fmt.Appendf(nil, `{"note":{"key":{"task":"t1","run":%d},"owner":"main","agent":"a1","kind":"agent","status":"completed"},"pad":"%0300d"}`, i, 0)},
				}
				p := &store.Projection{
					Session: &store.SessionRow{ID: x.name, Created: base, Updated: at, LastSeq: last + 2},
					Runs:    []store.RunRow{{Session: x.name, Agent: "a1", Seq: i, Kind: "task", Status: "completed", Started: at, Ended: at, Reply: "all tests pass"}},
					Notes: []store.NoteRow{{Session: x.name, Task: "t1", Run: i, Owner: "main", Status: "completed",
						Delivery: "queued", Written: at, New: true}},
				}
				if _, err := x.s.EventAppend(ctx, &store.EventAppendParams{Session: x.name, Epoch: x.epoch, Records: rs, Projection: p}); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				last += 2
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "notes/s")
}

// BenchmarkLeaseRenewUnderLoad renews the leases of 100 sessions, in one
// LeaseRenew, while those sessions append notification steps; an op is
// one renewal. Renewals do not go through the writer: they lock the lease
// rows in the order a group does (no deadlock to wait out), and wait at
// most for the group in flight.
func BenchmarkLeaseRenewUnderLoad(b *testing.B) {
	s := openTest(b, testDB(b))
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const sessions = 100
	refs := make([]store.LeaseRef, sessions)
	for i := range refs {
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: fmt.Sprint("s", i), Owner: "A", TTL: time.Hour, Now: base})
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = store.LeaseRef{Session: l.Session, Epoch: l.Epoch}
	}
	stop := make(chan struct{})
	var appends atomic.Int64
	var wg sync.WaitGroup
	for _, ref := range refs {
		wg.Go(func() {
			for i := int64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := &store.Projection{Session: &store.SessionRow{ID: ref.Session, Created: base, Updated: base, LastSeq: i},
					Notes: []store.NoteRow{{Session: ref.Session, Task: "t1", Run: int(i), Owner: "main", Status: "completed", Delivery: "queued", Written: base, New: true}}}
				if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: ref.Session, Epoch: ref.Epoch,
					Records: []store.Record{{Seq: i, At: base, Type: "notification.written", Data: []byte(`{}`)}}, Projection: p}); err != nil {
					b.Error(err)
					return
				}
				appends.Add(1)
			}
		})
	}
	var worst time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		res, err := s.LeaseRenew(ctx, &store.LeaseRenewParams{Owner: "A", Leases: refs, TTL: time.Hour, Now: base.Add(time.Duration(i) * time.Second)})
		if err != nil || len(res.Renewed) != sessions {
			b.Fatalf("renew: %+v, %v", res, err)
		}
		worst = max(worst, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
	b.ReportMetric(float64(appends.Load())/b.Elapsed().Seconds(), "appends/s")
}
