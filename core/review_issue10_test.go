package core

import (
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// A message told it joins run 1, whose next round a spent budget then
// prevents, is promised anew: run 2 answers it once the budget is raised.
func TestJoinedMessagePromisedAnewWhenABudgetEndsTheRun(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "w", "name": "w1", "run_in_background": true, "budget_rounds": 1}))
	h.answer("main", chat.Text("idle"))
	out := h.step(UserMessage{To: "w1", Text: "hello"})
	h.answer("w1", use("x1", "ListAgents", map[string]any{}))
	m := h.s.Msgs[out.Msg.ID]
	w := h.s.Agent("w1")
	if w.Blocked == nil || m.Outcome != OutcomeQueuedBehindStop || m.Run != 1 || !strings.Contains(m.Reason, "ended budget_exceeded") {
		t.Fatalf("message %+v after the budget ended run 1 (blocked %v)", m, w.Blocked)
	}
	h.step(SetBudget{Agent: "w1", Budget: Budget{Rounds: 5}})
	h.answer("w1", chat.Text("hello to you"))
	if m.AnsweredBy != 2 {
		t.Fatalf("answered by run %d, want 2", m.AnsweredBy)
	}
}

// A provider process that waits for a person's answer is not silent: the
// turn is not ended at the silence deadline while the request is pending.
func TestApprovalWaitIsNotProviderSilence(t *testing.T) {
	h, _ := newExternal(t)
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent, Session: "cc"})
	h.step(ExternalPermission{Agent: MainAgent, Request: "r1", Tool: "Bash", Input: []byte(`{"command":"make"}`), UseID: "tu1"})
	h.now = h.now.Add(31 * time.Minute)
	out := h.step(Tick{})
	for _, e := range out.Effects {
		if _, ok := e.(Interrupt); ok {
			t.Fatal("the turn was interrupted as silent while a person may still answer")
		}
	}
	if r := h.s.Agents[MainAgent].Run; r == nil || !r.Cancelling.IsZero() || len(h.s.Approvals) != 1 {
		t.Fatalf("run %+v, approvals %d", r, len(h.s.Approvals))
	}
}

// A turn the provider process begins on its own neither releases a spent
// budget's block nor runs unchecked: it is asked to end and ends
// budget_exceeded, and the agent stays blocked.
func TestExternalTurnsStayUnderTheBudget(t *testing.T) {
	h, _ := newExternalWith(t, Config{Budget: Budget{Rounds: 1}})
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent, Session: "cc"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "ok", Usage: chat.Usage{InputTokens: 10, OutputTokens: 5}, NumTurns: 1})
	a := h.s.Agents[MainAgent]
	if a.Blocked == nil || a.Blocked.Kind != FailBudget || a.Runs[0].Status != RunBudgetExceeded || a.Runs[0].Reply != "ok" {
		t.Fatalf("after the turn that spent the budget: blocked %+v, run %+v", a.Blocked, a.Runs[0])
	}
	for range 3 {
		out := h.step(ExternalTurnStarted{Agent: MainAgent})
		asked := false
		for _, e := range out.Effects {
			_, asked = e.(Interrupt)
		}
		if !asked {
			t.Fatal("a turn over the budget was not asked to end")
		}
		h.step(ExternalTurnEnded{Agent: MainAgent, Result: "woke", Usage: chat.Usage{InputTokens: 10, OutputTokens: 5}, NumTurns: 1})
		if a.Blocked == nil || a.Runs[len(a.Runs)-1].Status != RunBudgetExceeded {
			t.Fatalf("a turn of its own released the budget: %+v", a.Runs[len(a.Runs)-1])
		}
	}
}

// A request the process asked between the agent's turns (a background
// subagent inside it) stays for a person when the agent's next turn ends;
// a request of the turn that vigil ends is answered no, never left unanswered.
func TestExternalRequestsOutliveOtherTurns(t *testing.T) {
	h, _ := newExternal(t)
	var answers []AnswerPermission
	prev := h.onEffect
	h.onEffect = func(e Effect) {
		prev(e)
		if a, ok := e.(AnswerPermission); ok {
			answers = append(answers, a)
		}
	}
	h.step(UserPrompt{Text: "start a background agent"})
	h.step(ExternalTurnStarted{Agent: MainAgent, Session: "cc"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "launched", NumTurns: 1})
	h.step(ExternalPermission{Agent: MainAgent, Request: "bg", Tool: "Bash", Input: []byte(`{"command":"make"}`), UseID: "tu9"})
	h.step(UserPrompt{Text: "how is it going?"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalPermission{Agent: MainAgent, Request: "mine", Tool: "Bash", Input: []byte(`{"command":"make test"}`), UseID: "tu10"})
	h.step(CancelRun{Agent: "main", By: "test"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "stopped", NumTurns: 1, Interrupted: true})
	if len(h.s.Approvals) != 1 {
		t.Fatalf("approvals left %d, want the background one", len(h.s.Approvals))
	}
	for _, p := range h.s.Approvals {
		if p.External != "bg" {
			t.Fatalf("left %+v", p)
		}
	}
	if len(answers) != 1 || answers[0].Request != "mine" || answers[0].Allow {
		t.Fatalf("answers to the process: %+v", answers)
	}
}

// A sibling's SendMessage is not promised the notifications, which go to
// the target's owner.
func TestSiblingSendIsNotPromisedTheOwnersNotification(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "w one", "name": "w1", "run_in_background": true}),
		use("u2", "Agent", map[string]any{"prompt": "w two", "name": "w2", "run_in_background": true}))
	h.answer("main", chat.Text("idle"))
	h.answer("w2", use("s1", "SendMessage", map[string]any{"to": "w1", "message": "what is 2+2?"}))
	res := lastUser(h.pending("w2"))
	if strings.Contains(res, "t1#") || !strings.Contains(res, "notify its owner, not you") {
		t.Fatalf("w2 was told: %s", res)
	}
}

// Issue 10's "Why": a ScheduleWakeup with delay 0 looped for ever (230,600
// events in 90 s), and a hold did not stop it. Under a budget the loop
// ends by itself, held or not: a run ends budget_exceeded and the session
// is quiescent with main blocked.
func TestWakeupLoopEndsUnderTheBudgetEvenHeld(t *testing.T) {
	h := newHarness(t, Config{Budget: Budget{Rounds: 40}})
	h.step(UserPrompt{Text: "keep checking"})
	h.step(HoldQueue{By: "user"})
	main := h.s.Agents[MainAgent]
	for i := 0; i < 200 && main.Blocked == nil; i++ {
		if main.Run == nil {
			h.step(Tick{}) // the wakeup is due at once
			continue
		}
		c := h.pending("main")
		if strings.Contains(lastUser(c), "timer_id") {
			h.answer("main", chat.Text("sleeping"))
			continue
		}
		h.answer("main", use("w", "ScheduleWakeup", map[string]any{"prompt": "check again", "delay_seconds": 0}))
	}
	last := main.Runs[len(main.Runs)-1]
	if main.Blocked == nil || main.Blocked.Kind != FailBudget || last.Status != RunBudgetExceeded || !strings.Contains(last.Error, "model rounds 40 of 40") {
		t.Fatalf("the loop did not end under the budget: blocked %+v, last run %+v", main.Blocked, last)
	}
	if main.Tree.Rounds != 40 || !h.s.Quiescent() {
		t.Fatalf("rounds %d, quiescent %v", main.Tree.Rounds, h.s.Quiescent())
	}
}

// Issue 10's "Why": a shell task's notification named a path relative to
// vigil's data directory, which Read cannot open, and notifications reached
// the model without saying they are not user input.
func TestNotificationPathAndFraming(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "build"})
	h.answer("main", use("b1", "Bash", map[string]any{"command": "make", "run_in_background": true}))
	started := lastUser(h.pending("main"))
	h.answer("main", chat.Text("waiting"))
	h.step(ProcessExited{Task: "t1", ExitCode: 0, Tail: "ok"})
	note := lastUser(h.pending("main"))
	for _, text := range []string{started, note} {
		if strings.Contains(text, "tasks/t1.output") || !strings.Contains(text, `TaskOutput {\"task_id\": \"t1\"}`) && !strings.Contains(text, `TaskOutput {"task_id": "t1"}`) {
			t.Errorf("the model is given a path it cannot open, or no TaskOutput pointer: %s", text)
		}
	}
	if !strings.HasPrefix(note, "<task-notification>\n[SYSTEM NOTIFICATION - NOT USER INPUT]") || !strings.Contains(note, "not approval or consent") {
		t.Errorf("the notification is not framed as not user input: %s", note)
	}
}
