package mcpserver

import (
	"testing"
)

// TestWaitSeesNewSpawns: a wait over all of the caller's tasks that is
// blocked on one task wakes for a task spawned after it blocked.
func TestWaitSeesNewSpawns(t *testing.T) {
	t.Parallel()
	srv, _, ctx := newTestServer(t, Options{Owner: "me"})
	blocked := make(chan struct{}, 8)
	srv.onBlock = func(string) { blocked <- struct{}{} }
	slow, err := srv.spawn(ctx, "me", SpawnInput{Name: "slow", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out WaitOutput
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.out, r.err = srv.wait(ctx, "me", WaitInput{TimeoutSeconds: new(60)})
		done <- r
	}()
	<-blocked                                                            // the wait is blocked on slow (2s)
	f1, err := srv.spawn(ctx, "me", SpawnInput{Name: "f1", Prompt: "y"}) // answers at once
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.out.Notifications) != 1 || r.out.Notifications[0].ID != f1.Task+"#1" {
		t.Fatalf("wait: %v %+v", r.err, r.out)
	}
	if len(r.out.Running) != 1 || r.out.Running[0].Task != slow.Task {
		t.Fatalf("still running: %+v", r.out.Running)
	}
}
