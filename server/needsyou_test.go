package server

import (
	"slices"
	"testing"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
)

// TestSessionsNeedsYou: GET /api/sessions lists what a person must act on
// in each session (needs_you), and ?needs_you=1 keeps only the sessions
// that have something: the one whose main agent waits for an approval,
// not the idle one. needs_you=0 keeps all; a value that is not a boolean
// is refused.
func TestSessionsNeedsYou(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	idle := h.create(CreateSessionRequest{Provider: "echo", Prompt: "hello"})
	h.quiet(idle)
	waiting := h.create(CreateSessionRequest{Provider: "shell", Prompt: "echo approved", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	h.wait(waiting, "approval request", func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })
	var aps ApprovalList
	h.must("GET", "/api/sessions/"+waiting+"/approvals", nil, 200, &aps)
	if len(aps.Approvals) != 1 {
		t.Fatalf("approvals: %+v", aps)
	}
	want := []string{"approval " + string(aps.Approvals[0].ID) + ": Bash (main)"}

	var list SessionList
	h.must("GET", "/api/sessions", nil, 200, &list)
	if len(list.Sessions) != 2 {
		t.Fatalf("sessions: %+v", list)
	}
	for _, s := range list.Sessions {
		if string(s.ID) == waiting && !slices.Equal(s.NeedsYou, want) || string(s.ID) == idle && s.NeedsYou != nil {
			t.Errorf("session %s: needs_you %q (waiting %s needs %q, idle %s none)", s.ID, s.NeedsYou, waiting, want, idle)
		}
	}
	for _, q := range []string{"1", "true"} {
		h.must("GET", "/api/sessions?needs_you="+q, nil, 200, &list)
		if len(list.Sessions) != 1 || string(list.Sessions[0].ID) != waiting || !slices.Equal(list.Sessions[0].NeedsYou, want) {
			t.Errorf("needs_you=%s: %+v; want only %s with %q", q, list.Sessions, waiting, want)
		}
	}
	h.must("GET", "/api/sessions?needs_you=0", nil, 200, &list)
	if len(list.Sessions) != 2 {
		t.Errorf("needs_you=0: %+v; want both sessions", list.Sessions)
	}
	h.mustErr("GET", "/api/sessions?needs_you=maybe", nil, 400, "invalid")

	// Answered: nobody is needed any more.
	yes := true
	h.must("POST", "/api/sessions/"+waiting+"/approvals/"+string(aps.Approvals[0].ID), ApprovalRequest{Allow: &yes}, 200, &aps)
	h.must("GET", "/api/sessions?needs_you=1", nil, 200, &list)
	if len(list.Sessions) != 0 {
		t.Errorf("needs_you=1 after the answer: %+v; want none", list.Sessions)
	}
}
