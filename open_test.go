package vigil

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/script"
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
