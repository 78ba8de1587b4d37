package core

import (
	"slices"
	"testing"
)

// TestAttention: the reasons a person must act, in order: approvals as
// asked (p2 before p10), then blocked agents in creation order, a budget's
// block told apart from a failure's; a closed agent, a subagent whose run
// failed (its owner's to handle) and a failure followed by a run in
// progress need nobody; a closed session needs nobody at all.
func TestAttention(t *testing.T) {
	s := NewState()
	s.Session.ID = "s"
	add := func(id AgentID, name string) *Agent {
		a := &Agent{ID: id, Name: name, State: AgentIdle}
		s.Agents[id] = a
		s.Order = append(s.Order, id)
		return a
	}
	main := add(MainAgent, "main")
	worker := add("a1", "worker")
	closed := add("a2", "gone")
	failedSub := add("a3", "scout")
	if got := Attention(s); got != nil {
		t.Fatalf("an idle session: %q, want none", got)
	}

	s.Approvals["p10"] = &Approval{ID: "p10", Agent: "a1", Tool: "Write"}
	s.Approvals["p2"] = &Approval{ID: "p2", Agent: MainAgent, Tool: "Bash"}
	worker.Blocked = &Block{Reason: "auth refused", Kind: FailAuth}
	closed.Blocked, closed.State = &Block{Kind: FailAuth}, AgentClosed
	failedSub.Runs = []RunSummary{{Seq: 1, Status: RunFailed}}
	main.Blocked = &Block{Reason: "budget exceeded", Kind: FailBudget}
	want := []string{"approval p2: Bash (main)", "approval p10: Write (worker)", "budget spent: main", "run failed: worker"}
	if got := Attention(s); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}

	// The main agent's failed run, unblocked: the person's to look at,
	// until it runs again or backs off to retry.
	s.Approvals = map[ApprovalID]*Approval{}
	main.Blocked, worker.Blocked = nil, nil
	main.Runs = []RunSummary{{Seq: 1, Status: RunCompleted}, {Seq: 2, Status: RunFailed}}
	if got, want := Attention(s), []string{"run failed: main"}; !slices.Equal(got, want) {
		t.Fatalf("main's failed run: %q, want %q", got, want)
	}
	main.Retry = &Retry{Attempt: 2}
	if got := Attention(s); got != nil {
		t.Fatalf("main backing off to retry: %q, want none", got)
	}
	main.Retry, main.Run = nil, &Run{Seq: 3}
	if got := Attention(s); got != nil {
		t.Fatalf("main running again: %q, want none", got)
	}

	main.Run, main.Blocked = nil, &Block{Kind: FailBudget}
	s.Session.Closed = true
	if got := Attention(s); got != nil {
		t.Fatalf("a closed session: %q, want none", got)
	}
}
