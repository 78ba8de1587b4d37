package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/storetest"
)

func rec(seq int64, tag string) []store.Record {
	return []store.Record{{Seq: seq, At: time.Unix(0, seq), Type: "t", Data: fmt.Appendf(nil, `{"seq":%d,"by":%q}`, seq, tag)}}
}

// TestTwoNodesFencing runs two stores ("nodes") on one database. Node A
// appends in a loop while node B takes the session over after A's lease
// expired: A must be fenced from then on, every append A was told
// succeeded must be in the log, and all of them before B's first.
func TestTwoNodesFencing(t *testing.T) {
	dsn := testDB(t)
	a, b := openTest(t, dsn), openTest(t, dsn)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	la, err := a.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "node-a", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "node-b", TTL: time.Minute, Now: now}); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("node b took a held lease: %v", err)
	}

	progress := make(chan int64, 1000)
	var ackedA []int64
	var aErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(progress)
		for {
			last, err := a.LastSeq(ctx, "s")
			if err != nil {
				aErr = err
				return
			}
			if _, err := a.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: la.Epoch, Records: rec(last+1, "a")}); err != nil {
				aErr = err
				return
			}
			ackedA = append(ackedA, last+1)
			progress <- last + 1
		}
	})
	// B takes over once A has written 20 events (its lease long expired by
	// B's clock) and appends while A is still trying.
	for seq := range progress {
		if seq == 20 {
			break
		}
	}
	lb, err := b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "node-b", TTL: time.Minute, Now: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var ackedB []int64
	for range 20 {
		last, err := b.LastSeq(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: lb.Epoch, Records: rec(last+1, "b")}); err != nil {
			t.Fatalf("node b: %v", err)
		}
		ackedB = append(ackedB, last+1)
	}
	for range progress {
	}
	wg.Wait()
	if !errors.Is(aErr, store.ErrFenced) {
		t.Fatalf("node a stopped with %v, want ErrFenced", aErr)
	}
	got, err := b.EventList(ctx, &store.EventListParams{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ackedA)+len(ackedB) {
		t.Fatalf("log has %d events; a acked %d, b acked %d", len(got), len(ackedA), len(ackedB))
	}
	for i, r := range got {
		want := "a"
		if i >= len(ackedA) {
			want = "b"
		}
		if r.Seq != int64(i)+1 || !strings.Contains(string(r.Data), `"by":"`+want+`"`) {
			t.Fatalf("event %d: %d %s, want written by %s", i, r.Seq, r.Data, want)
		}
	}
	t.Logf("a wrote %d events then was fenced (%v); b wrote %d", len(ackedA), aErr, len(ackedB))
}

// terminate ends every other connection to the test database, as a server
// restart or an administrator would.
func terminate(t testing.TB, dsn string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServerGoesAway terminates the store's connections: the next write
// fails with ErrUnavailable or is retried on a new connection; either way
// writes go on and nothing committed is lost.
func TestServerGoesAway(t *testing.T) {
	dsn := testDB(t)
	s := openTest(t, dsn)
	storetest.RunFault(t, s, storetest.Fault{
		Break: func(t *testing.T) {
			if n := terminate(t, dsn); n == 0 {
				t.Fatal("no connection of the store to terminate")
			}
		},
		Heal:       func(*testing.T) {},
		Want:       store.ErrUnavailable,
		MayRecover: true,
	})
}

// TestServerGoesAwayMidRun terminates the connections repeatedly while
// sessions append: appends either succeed, are retried, or fail with
// ErrUnavailable (the writer then checks the log before going on); at the
// end every acknowledged append is in a contiguous log.
func TestServerGoesAwayMidRun(t *testing.T) {
	dsn := testDB(t)
	s := openTest(t, dsn)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const sessions, steps = 4, 60
	progress := make(chan struct{}, sessions*steps)
	errs := make(chan error, sessions)
	acked := make([]int64, sessions)
	unavailable := make([]int, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		sess := fmt.Sprintf("s%d", i)
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "n", TTL: time.Minute, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for seq := int64(1); seq <= steps; {
				_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: l.Epoch, Records: rec(seq, sess)})
				switch {
				case err == nil:
					acked[i] = seq
					seq++
					progress <- struct{}{}
				case errors.Is(err, store.ErrUnavailable):
					// The outcome may be unknown: the log says.
					unavailable[i]++
					last, lerr := s.LastSeq(ctx, sess)
					if lerr != nil {
						continue
					}
					// What committed counts as acknowledged.
					for ; seq <= last; seq++ {
						acked[i] = seq
						progress <- struct{}{}
					}
				default:
					errs <- fmt.Errorf("%s seq %d: %w", sess, seq, err)
					return
				}
			}
		})
	}
	killed := 0
	for n := 1; n <= sessions*steps; n++ {
		<-progress
		if n%40 == 0 {
			killed += terminate(t, dsn)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range sessions {
		sess := fmt.Sprintf("s%d", i)
		got, err := s.EventList(ctx, &store.EventListParams{Session: sess})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != steps || acked[i] != steps {
			t.Fatalf("%s: %d events, last acked %d, want %d", sess, len(got), acked[i], steps)
		}
		for k, r := range got {
			if r.Seq != int64(k)+1 || string(r.Data) != string(rec(r.Seq, sess)[0].Data) {
				t.Fatalf("%s: event %d is %d %s", sess, k, r.Seq, r.Data)
			}
		}
	}
	t.Logf("terminated %d connections; appends that returned ErrUnavailable: %v", killed, unavailable)
}
