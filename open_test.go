package vigil

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/core"
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

// leaseCounter counts a store's lease acquisitions, one by one and many
// at once.
type leaseCounter struct {
	*memstore.Store
	ones, manys atomic.Int64
}

func (c *leaseCounter) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*store.Lease, error) {
	c.ones.Add(1)
	return c.Store.LeaseAcquire(ctx, p)
}

func (c *leaseCounter) LeaseAcquireMany(ctx context.Context, p *store.LeaseAcquireManyParams) (*store.LeaseAcquireManyResult, error) {
	c.manys.Add(1)
	return c.Store.LeaseAcquireMany(ctx, p)
}

// TestOpenAcquiresLeasesInChunks: Open acquires the leases of the sessions
// it takes over a chunk at a time, not one transaction each; a session
// whose lease another live owner holds is left to it, and its takeover
// alone tries the lease again.
func TestOpenAcquiresLeasesInChunks(t *testing.T) {
	ctx := context.Background()
	st := &leaseCounter{Store: memstore.New()}
	first := openWith(t, st, mustParse(t, idleScenario), nil)
	ids := make([]SessionID, 2*acquireChunk+5)
	for i := range ids {
		sess, err := first.CreateSession(ctx, &SessionParams{})
		must(t, err)
		ids[i] = sess.ID
	}
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
