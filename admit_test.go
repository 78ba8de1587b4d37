package vigil

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/vigilrun/vigil/internal/admit"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestStepsWaitForTheGate: a runtime's steps take a slot of its gate
// (Options.CPUSlots), and a background agent's model call waits for its
// turn with the lowest priority, while the main agent's calls do not wait
// at all. With the only slot held, a session's result waits; once the slot
// is free, the run ends with its notification delivered, and exactly one
// call (the worker's) went through the gate as new background work.
func TestStepsWaitForTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Parse([]byte(`
name: gate
agents:
  main:
    turns:
      - tools:
          - Agent: {name: w1, prompt: "one", run_in_background: true}
      - say: "waiting"
    on:
      notification:
        - say: "{{.Notification.Agent}} reported"
  w1:
    turns: [{say: "part one is done"}]
`))
		must(t, err)
		rt := openWith(t, memstore.New(), sc, func(o *Options) { o.CPUSlots = 1 })
		ctx := context.Background()
		rt.gate.Acquire(admit.Step) // the node's only slot: nothing steps
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go"})
		must(t, err)
		synctest.Wait()
		st := rt.gate.Stats()
		if st.Waiting[admit.Step] != 1 {
			t.Fatalf("with the slot held, %d steps wait (want the main agent's answer: 1); stats %+v", st.Waiting[admit.Step], st)
		}
		rt.gate.Release()
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		d, err := rt.SessionGet(ctx, sess.ID, &SessionGetParams{Notifications: true})
		must(t, err)
		if len(d.Notifications) != 1 || d.Notifications[0].DeliveredRun == 0 {
			t.Fatalf("notifications %+v, want the worker's, delivered", d.Notifications)
		}
		if st := rt.gate.Stats(); st.Taken[admit.Start] != 1 {
			t.Fatalf("%d model calls went through the gate as background work, want 1 (the worker's; the main agent's do not): %+v", st.Taken[admit.Start], st)
		}
	})
}

// TestNoGate: by default (CPUSlots 0) a runtime runs without a gate.
func TestNoGate(t *testing.T) {
	sc, err := script.Parse([]byte("name: plain\nagents:\n  main:\n    turns:\n      - say: done\n"))
	must(t, err)
	rt := openWith(t, memstore.New(), sc, nil)
	if rt.gate != nil || rt.CPUStats() != (CPUStats{}) {
		t.Fatal("a runtime made a gate by default")
	}
	sess, err := rt.CreateSession(context.Background(), &SessionParams{Prompt: "go"})
	must(t, err)
	must(t, rt.WaitQuiescent(context.Background(), sess.ID))
}
