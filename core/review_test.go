package core

import (
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// A turn a provider process never begins goes silent: vigil interrupts it,
// and at the cancel deadline stops the process and gives the items back, so
// the next process is handed the notification and its turn delivers it.
func TestSilentUnbegunTurnGivesItsItemsBack(t *testing.T) {
	h, delivered := newExternalWith(t, Config{ProviderSilence: time.Minute})
	var stops int
	prev := h.onEffect
	h.onEffect = func(e Effect) {
		prev(e)
		if _, ok := e.(StopProvider); ok {
			stops++
		}
	}
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "sub", Kind: TaskAgent, Status: "running"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	h.step(ProviderExited{Agent: MainAgent, Reason: "killed"})
	main := h.s.Agents[MainAgent]
	key := NoteKey{Task: "t1", Run: 1}
	if main.Run == nil || !strings.Contains((*delivered)[len(*delivered)-1].Text, "lost") {
		t.Fatalf("no run for the lost note")
	}
	// The new process hangs: it never begins the turn.
	h.now = main.Run.Expect
	h.step(Tick{})
	h.now = main.Run.Cancelling
	before := len(*delivered)
	h.step(Tick{})
	last := main.Runs[len(main.Runs)-1]
	if stops != 1 || last.Status != RunInterrupted || len(last.Returned) != 1 {
		t.Fatalf("the silent turn: stops %d, run %+v", stops, last)
	}
	// Backing off, then handed to the next process.
	if main.Retry == nil {
		t.Fatalf("no backoff after the silent turn")
	}
	h.step(ProviderExited{Agent: MainAgent, Reason: "stopped"})
	h.now = main.Retry.At
	h.step(Tick{})
	if len(*delivered) == before || !strings.Contains((*delivered)[len(*delivered)-1].Text, "lost") {
		t.Fatalf("the notification was not handed to a new process: %+v", (*delivered)[before:])
	}
	h.step(ExternalTurnStarted{Agent: MainAgent})
	if n := h.s.Note(key); n.DeliveredRun != main.Run.Seq {
		t.Fatalf("note %s delivered to run %d, want %d", key, n.DeliveredRun, main.Run.Seq)
	}
}

// A foreground subagent that keeps reporting keeps its owner's turn alive.
func TestForegroundSubagentKeepsItsOwnersTurnAlive(t *testing.T) {
	h, _ := newExternalWith(t, Config{ProviderSilence: time.Minute})
	var interrupts int
	prev := h.onEffect
	h.onEffect = func(e Effect) {
		prev(e)
		if _, ok := e.(Interrupt); ok {
			interrupts++
		}
	}
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	// main calls the Agent tool in the foreground; the subagent works.
	h.step(ExternalMessage{Agent: MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{use("u1", "Agent", map[string]any{"prompt": "work"})}}})
	h.step(ExternalTask{Agent: MainAgent, ID: "sub", Kind: TaskAgent, Status: "running"})
	for range 6 {
		h.now = h.now.Add(20 * time.Second)
		h.step(ExternalMessage{Agent: MainAgent, Mirror: "sub", Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("still working")}}})
		h.step(Tick{})
	}
	main := h.s.Agents[MainAgent]
	if interrupts > 0 || (main.Run != nil && !main.Run.Cancelling.IsZero()) {
		t.Errorf("main's turn was cancelled as silent while its foreground subagent reported every 20s (interrupts=%d, drops=%v)", interrupts, h.s.Drops)
	}
}

// A message a cancelled run carried is answered by the run that saw it:
// that run lists it, the cancelled one does not.
func TestCarriedMessageAnsweredByTheRunThatSawIt(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "start"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("started"))
	h.answer("w1", chat.Text("w1 done"))
	h.answer("main", chat.Text("ok")) // main's run for w1's notification
	m := h.step(UserMessage{To: "w1", Text: "hello"}).Msg
	w1 := h.s.Agent("w1")
	if m.Outcome != OutcomeResumed || w1.Run == nil {
		t.Fatalf("msg %+v", m)
	}
	h.step(CancelRun{Agent: "w1", By: "user"}) // call in flight; model never saw m1
	n2 := h.s.Note(NoteKey{Task: w1.Task, Run: 2})
	t.Logf("note w1#2 answered=%v, carried=%d, m.AnsweredBy=%d", n2.Answered, len(w1.Carried), h.s.Msgs[m.ID].AnsweredBy)
	h.step(UserMessage{To: "w1", Text: "again"})
	h.answer("w1", chat.Text("answered both"))
	n3 := h.s.Note(NoteKey{Task: w1.Task, Run: 3})
	t.Logf("note w1#3 answered=%v, m.AnsweredBy=%d", n3.Answered, h.s.Msgs[m.ID].AnsweredBy)
	if len(n2.Answered) > 0 || h.s.Msgs[m.ID].AnsweredBy != 3 || len(n3.Answered) != 2 {
		t.Errorf("m1: run 2's notification lists %v, AnsweredBy %d, run 3's notification lists %v", n2.Answered, h.s.Msgs[m.ID].AnsweredBy, n3.Answered)
	}
}

// A message pending on a round that then fails for good is promised to
// the next run, once a person releases the blocked agent; other agents'
// messages meanwhile are rejected with the reason; the promise is kept.
func TestPendingMessageToAnAgentThatBlocks(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "start"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	// main sends to w1 while w1's first round is in flight.
	h.answer("main", use("u2", "SendMessage", map[string]any{"to": "w1", "message": "extra"}))
	m1 := h.s.Msgs["m1"]
	if m1.Outcome != OutcomePending {
		t.Fatalf("m1 %+v", m1)
	}
	h.fail("w1", "401", FailAuth)
	w1 := h.s.Agent("w1")
	if m1.Outcome != OutcomeQueuedBehindStop || m1.Run != 1 || !strings.Contains(m1.Reason, "once a person releases w1") {
		t.Fatalf("m1: %s run %d %q", m1.Outcome, m1.Run, m1.Reason)
	}
	h.answer("main", use("u3", "SendMessage", map[string]any{"to": "w1", "message": "more"}))
	if m2 := h.s.Msgs["m2"]; m2.Outcome != OutcomeRejected || !strings.Contains(m2.Reason, "blocked") {
		t.Fatalf("m2: %s %q", m2.Outcome, m2.Reason)
	}
	h.step(RetryAgent{Agent: "w1", By: "test"})
	h.answer("w1", chat.Text("done, with extra"))
	if w1.Runs[1].Seq != 2 || m1.AnsweredBy != 2 {
		t.Fatalf("m1 answered by run %d, promised run 2", m1.AnsweredBy)
	}
}

// A tool round, a join, a now-interrupt, a recover and a failure: the cut
// leaves exactly the tool results, and the retry sends each item once.
func TestCutAfterJoinInterruptRecover(t *testing.T) {
	h := newHarness(t, Config{RetryBase: time.Second})
	h.step(UserPrompt{Text: "work"})
	h.answer("main", use("u1", "Read", map[string]any{"file_path": "x"}), use("u2", "Read", map[string]any{"file_path": "y"}))
	h.step(UserPrompt{Text: "joined-A"})
	for _, tl := range h.tools {
		h.step(ToolDone{Agent: tl.Agent, UseID: tl.UseID, Result: "contents " + tl.UseID})
	}
	main := h.s.Agents[MainAgent]
	n := len(main.Transcript)
	h.step(UserPrompt{Text: "now-B", Priority: PriorityNow})
	h.step(Recover{Incarnation: 2})
	h.fail("main", "boom", FailTransient)
	if len(main.Transcript) != n {
		t.Fatalf("transcript %d, want %d", len(main.Transcript), n)
	}
	last := main.Transcript[n-1]
	if len(last.Content) != 2 || last.Content[0].Type != chat.BlockToolResult || last.Content[1].Type != chat.BlockToolResult {
		t.Fatalf("last: %+v", last)
	}
	h.now = main.Retry.At
	h.step(Tick{})
	c := h.pending("main")
	var all strings.Builder
	for _, m := range c.Messages {
		for _, b := range m.Content {
			all.WriteString(b.Text)
		}
	}
	for _, w := range []string{"joined-A", "now-B"} {
		if k := strings.Count(all.String(), w); k != 1 {
			t.Errorf("%s appears %d times", w, k)
		}
	}
	h.answer("main", chat.Text("done"))
	if len(main.Inbox) != 0 {
		t.Fatal("inbox")
	}
}

// A turn a person cancelled is not handed to a new process when the old
// one exits before it began it; the cancelled prompt is dropped, loudly.
func TestCancelledTurnIsNotRedelivered(t *testing.T) {
	h, delivered := newExternal(t)
	h.step(UserPrompt{Text: "go"})
	h.step(CancelRun{Agent: "main", By: "user"})
	main := h.s.Agents[MainAgent]
	before := len(*delivered)
	h.step(ProviderExited{Agent: MainAgent, Reason: "exit"})
	if main.Run != nil || len(*delivered) > before {
		t.Fatalf("a run the user cancelled was handed to a new process: run %+v", main.Run)
	}
	if last := main.Runs[len(main.Runs)-1]; last.Status != RunCancelled || h.s.Drops["cancelled-unseen"] != 1 || len(main.Inbox) != 0 {
		t.Fatalf("the cancelled run %+v, drops %v, inbox %+v", last, h.s.Drops, main.Inbox)
	}
}

// Closing ends a backoff: a closed session is quiescent at once.
func TestClosingEndsRetry(t *testing.T) {
	h := newHarness(t, Config{RetryBase: time.Minute, RetryMaxDelay: time.Minute})
	backgroundNote(h)
	h.fail("main", "529", FailTransient)
	h.step(CloseSession{Reason: "done"})
	main := h.s.Agents[MainAgent]
	if !h.s.Quiescent() {
		t.Errorf("a closed session is not quiescent (agent retry %v, blocked %v)", main.Retry, main.Blocked)
	}
}
