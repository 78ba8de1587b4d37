package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/storetest"
)

// TestFull simulates a full disk with PRAGMA max_page_count on the write
// connection: writes fail with ErrFull and keep nothing; once the limit is
// raised, writes go on with nothing lost.
func TestFull(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), nil)
	pragma := func(t *testing.T, q string) {
		t.Helper()
		err := s.write(context.Background(), "pragma", func(w *writer) error {
			var pages int64
			if err := w.conn.QueryRowContext(context.Background(), "PRAGMA page_count").Scan(&pages); err != nil {
				return err
			}
			_, err := w.conn.ExecContext(context.Background(), fmt.Sprintf(q, pages))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	storetest.RunFault(t, s, storetest.Fault{
		Break: func(t *testing.T) { pragma(t, "PRAGMA max_page_count = %d") },
		Heal:  func(t *testing.T) { pragma(t, "PRAGMA max_page_count = 1073741823 -- was %d") },
		Want:  store.ErrFull,
	})
}

// TestTwoStores opens one file twice: both write safely (SQLite's locks
// serialise them, busy waits absorb the contention) and leases fence them
// like two nodes.
func TestTwoStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.db")
	a := openTest(t, path, nil)
	b := openTest(t, path, nil)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	acq := func(s *Store, sess, owner string, at time.Time) (*store.Lease, error) {
		return s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: owner, TTL: time.Minute, Now: at})
	}
	la, err := acq(a, "shared", "node-a", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acq(b, "shared", "node-b", now); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("second store took a held lease: %v", err)
	}

	// Both write their own sessions at once.
	const steps = 40
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i, s := range []*Store{a, b, a, b} {
		sess := fmt.Sprintf("own%d", i)
		l, err := acq(s, sess, fmt.Sprint("node", i), now)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for seq := int64(1); seq <= steps; seq++ {
				_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: l.Epoch,
					Records: []store.Record{{Seq: seq, At: now, Type: "t", Data: []byte("{}")}}})
				if err != nil {
					errs <- fmt.Errorf("%s seq %d: %w", sess, seq, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		all, err := s.EventListAll(ctx, &store.EventListAllParams{})
		if err != nil || len(all) != 4*steps {
			t.Fatalf("list all: %d, %v", len(all), err)
		}
		next := map[string]int64{}
		for i, r := range all {
			if (i > 0 && r.Global <= all[i-1].Global) || r.Seq != next[r.Session]+1 {
				t.Fatalf("bad order at %d: %+v", i, r)
			}
			next[r.Session] = r.Seq
		}
	}

	// Node b takes "shared" over after expiry; node a is fenced.
	lb, err := acq(b, "shared", "node-b", now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.EventAppend(ctx, &store.EventAppendParams{Session: "shared", Epoch: lb.Epoch, Records: []store.Record{{Seq: 1, At: now, Type: "t", Data: []byte("{}")}}}); err != nil {
		t.Fatal(err)
	}
	_, err = a.EventAppend(ctx, &store.EventAppendParams{Session: "shared", Epoch: la.Epoch, Records: []store.Record{{Seq: 2, At: now, Type: "t", Data: []byte("{}")}}})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append by the old node: %v, want ErrFenced", err)
	}
}
