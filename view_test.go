package vigil

import (
	"context"
	"errors"
	"testing"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestViewAbandoned: a read whose context ends while it waits behind a
// busy session returns, and its function never runs after that (it would
// write the caller's variables after the caller read them: a data race
// the race detector reports).
func TestViewAbandoned(t *testing.T) {
	rt := openWith(t, memstore.New(), mustParse(t, idleScenario), nil)
	ctx := context.Background()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go"})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))
	held, release := make(chan struct{}), make(chan struct{})
	busy := make(chan error, 1)
	go func() {
		busy <- rt.Inspect(ctx, sess.ID, func(*core.State) { close(held); <-release })
	}()
	<-held
	cctx, cancel := context.WithCancel(ctx)
	ran := false
	got := make(chan error, 1)
	go func() {
		got <- rt.inspect(cctx, sess.ID, func(*core.State) { ran = true })
	}()
	// The read is queued behind the busy one (the actor runs one at a
	// time); cancel it there.
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned read: %v, want canceled", err)
	}
	close(release)
	must(t, <-busy)
	// One more read on the session's goroutine: the abandoned one, queued
	// before it, has had its turn.
	must(t, rt.Inspect(ctx, sess.ID, func(*core.State) {}))
	if ran {
		t.Error("the abandoned read's function ran after its caller returned")
	}
}
