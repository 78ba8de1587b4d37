package core

import (
	"slices"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// askHarness is a session in permission mode ask, whose main agent has
// asked to run a Bash command: approval p1 waits for a person.
func askHarness(t *testing.T, tools ...chat.Block) *harness {
	t.Helper()
	h := &harness{t: t, c: New(Config{}), s: NewState(), calls: map[CallID]CallModel{}}
	h.step(CreateSession{Session: Session{ID: "s1", Permissions: Permissions{Mode: PermAsk}}})
	h.step(UserPrompt{Text: "clean up"})
	h.answer("main", append(tools, use("u9", "Bash", map[string]any{"command": "rm -rf build"}))...)
	if h.s.Approvals["p1"] == nil {
		t.Fatalf("no approval p1: %+v", h.s.Approvals)
	}
	return h
}

// checkWhy asserts agent name's Why: its kind, exact text, whether it
// needs a person and the items it holds up.
func checkWhy(t *testing.T, s *State, name, kind, text string, needsYou bool, holdsUp ...ItemID) Why {
	t.Helper()
	w := WhyOf(s, s.Agent(name))
	if w.Kind != kind || w.Text != text || w.NeedsYou != needsYou || !slices.Equal(w.HoldsUp, holdsUp) {
		t.Fatalf("why of %s:\n got %s %q needs_you=%v holds_up=%v\nwant %s %q needs_you=%v holds_up=%v",
			name, w.Kind, w.Text, w.NeedsYou, w.HoldsUp, kind, text, needsYou, holdsUp)
	}
	return w
}

// statusOf is the inbox status of agent name; it fails when there is none.
func statusOf(t *testing.T, s *State, name string) InboxStatus {
	t.Helper()
	for _, st := range Status(s) {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no inbox status for %s: %+v", name, Status(s))
	return InboxStatus{}
}

// An approval pending while the user queue is held: the approval is the
// answer, the hold is said after it, the inbox is not draining, and the
// deadline is the approval's (the hold has none).
func TestWhyApprovalAndHold(t *testing.T) {
	h := askHarness(t)
	h.step(HoldQueue{By: "alice", Reason: "reviewing"})
	h.step(UserPrompt{Text: "and then the docs"})
	p1 := h.s.Approvals["p1"]
	w := checkWhy(t, h.s, "main", WhyApproval,
		"waiting for approval p1 (Bash: rm -rf build), denied at 09:00:00 if unanswered; 1 user prompt held by alice", true)
	if !w.Until.Equal(p1.Deadline) || !w.Since.Equal(p1.Asked) || w.On != "approval p1" {
		t.Fatalf("why %+v, want since %v until %v", w, p1.Asked, p1.Deadline)
	}
	st := statusOf(t, h.s, "main")
	if st.Draining || st.Held != 1 || st.Reason != w.Text || !st.Until.Equal(p1.Deadline) {
		t.Fatalf("status %+v", st)
	}
	if p := RunProgress(h.s, h.now, time.Minute); len(p) != 1 || p[0].Waiting != "approval p1" {
		t.Fatalf("progress %+v", p)
	}
	// Answered, the run goes on; the held prompt is said after the tool.
	h.step(AnswerApproval{Approval: "p1", Allow: true})
	checkWhy(t, h.s, "main", WhyTool, "tool Bash running; 1 user prompt held by alice", false)
}

// Notifications that arrive while an approval is pending wait behind it,
// and the why names each of them.
func TestWhyApprovalAndQueuedNotifications(t *testing.T) {
	var spawns []chat.Block
	for i, name := range []string{"w1", "w2", "w3"} {
		spawns = append(spawns, use("s"+string(rune('1'+i)), "Agent", map[string]any{"prompt": "work on " + name, "name": name, "run_in_background": true}))
	}
	h := askHarness(t, spawns...)
	for _, name := range []string{"w1", "w2", "w3"} {
		h.answer(name, chat.Text(name+" done"))
	}
	main := h.s.Agents[MainAgent]
	if len(main.Inbox) != 3 {
		t.Fatalf("main's inbox: %+v", main.Inbox)
	}
	ids := itemIDList(main.Inbox)
	checkWhy(t, h.s, "main", WhyApproval,
		"waiting for approval p1 (Bash: rm -rf build), denied at 09:00:00 if unanswered; 3 notifications wait behind it (t1#1, t2#1, t3#1)", true, ids...)
	if st := statusOf(t, h.s, "main"); st.Draining || st.Items != 3 {
		t.Fatalf("status %+v", st)
	}
	// The workers are idle with nothing to do.
	checkWhy(t, h.s, "w1", WhyIdle, "idle", false)
}

// A run that fails while the user queue is held: the backoff is the
// answer, with its retry time; the notification it gave back is named and
// the held prompt said after it.
func TestWhyBackoffAndHold(t *testing.T) {
	h := newHarness(t, Config{RetryBase: time.Second, RetryAttempts: 3})
	h.step(UserPrompt{Text: "start a worker"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting for w1"))
	h.step(HoldQueue{By: "alice"})
	h.step(UserPrompt{Text: "then this"})
	h.answer("w1", chat.Text("w1 result"))
	h.fail("main", "anthropic: server (HTTP 500): boom", FailTransient)
	main := h.s.Agents[MainAgent]
	if main.Retry == nil || len(main.Inbox) != 2 {
		t.Fatalf("retry %+v, inbox %+v", main.Retry, main.Inbox)
	}
	w := checkWhy(t, h.s, "main", WhyBackoff,
		"backing off after a failed run, retry at 08:00:01 (retry 2 of 3; run 2 failed: anthropic: server (HTTP 500): boom); "+
			"1 notification not yet seen by the model (t1#1); 1 user prompt held by alice", false, noteItem(t, main))
	if !w.Until.Equal(main.Retry.At) {
		t.Fatalf("until %v, want the retry at %v", w.Until, main.Retry.At)
	}
	if st := statusOf(t, h.s, "main"); st.Draining || st.Held != 1 || !st.Until.Equal(main.Retry.At) || st.Reason != w.Text {
		t.Fatalf("status %+v", st)
	}
	// At the retry the notification runs; the prompt stays held.
	h.now = main.Retry.At
	h.step(Tick{})
	checkWhy(t, h.s, "main", WhyModel, "model call in flight; 1 user prompt held by alice", false)
	h.answer("main", chat.Text("w1 is done"))
	w = checkWhy(t, h.s, "main", WhyHeld, "1 user prompt held by alice", false, main.Inbox[0].ID)
	if !w.Since.Equal(h.s.Hold.Since) {
		t.Fatalf("held since %v, want %v", w.Since, h.s.Hold.Since)
	}
}

// A spent budget stops an agent: it needs a person, and the message
// queued for it is named.
func TestWhyBudgetStop(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "w", "name": "w1", "run_in_background": true, "budget_rounds": 1}))
	h.answer("main", chat.Text("idle"))
	h.answer("w1", use("x1", "ListAgents", map[string]any{}))
	out := h.step(UserMessage{To: "w1", Text: "hello"})
	w1 := h.s.Agent("w1")
	if w1.Blocked == nil || w1.Blocked.Kind != FailBudget {
		t.Fatalf("w1 not stopped by its budget: %+v", w1.Blocked)
	}
	w := checkWhy(t, h.s, "w1", WhyBudget,
		"budget spent: the budget of w1's agent tree: model rounds 1 of 1; 1 message not yet seen by the model ("+string(out.Msg.ID)+")", true, w1.Inbox[0].ID)
	if !w.Since.Equal(w1.Blocked.Since) {
		t.Fatalf("since %v, want %v", w.Since, w1.Blocked.Since)
	}
	if st := statusOf(t, h.s, "w1"); st.Draining || st.Reason != w.Text {
		t.Fatalf("status %+v", st)
	}
}

// noteItem is the id of the one notification item in a's inbox.
func noteItem(t *testing.T, a *Agent) ItemID {
	t.Helper()
	for _, it := range a.Inbox {
		if it.Kind == KindNotification {
			return it.ID
		}
	}
	t.Fatalf("no notification in %s's inbox", a.Name)
	return ""
}

// A notification's inbox preview is one line: who, which run, how it
// ended, and the reply, the error or a shell task's last output line.
func TestNoteSummary(t *testing.T) {
	one := 1
	for _, c := range []struct {
		n    Note
		want string
	}{
		{Note{Key: NoteKey{Task: "t1", Run: 2}, Kind: TaskAgent, AgentName: "worker", Status: "completed", Reply: "the tests pass\nall 40 of them"},
			"worker run 2 completed: the tests pass ⏎ all 40 of them"},
		{Note{Key: NoteKey{Task: "t1", Run: 3}, Kind: TaskAgent, Agent: "a1", Status: "failed", Reply: "half", Error: "overloaded"},
			"a1 run 3 failed: overloaded"},
		{Note{Key: NoteKey{Task: "t3"}, Kind: TaskShell, Status: "failed", ExitCode: &one, Output: "make test\nFAIL vigil/core\n\n"},
			"task t3 failed (exit 1): FAIL vigil/core"},
		{Note{Key: NoteKey{Task: "t4"}, Kind: TaskShell, Status: "completed"}, "task t4 completed"},
	} {
		if got := NoteSummary(&c.n); got != c.want {
			t.Errorf("NoteSummary(%+v) = %q, want %q", c.n, got, c.want)
		}
	}
}
