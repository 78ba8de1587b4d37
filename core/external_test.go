package core

import (
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
)

func newExternal(t *testing.T) (*harness, *[]Deliver) {
	h := &harness{t: t, c: New(Config{}), s: NewState(), calls: map[CallID]CallModel{}}
	var delivered []Deliver
	h.step(CreateSession{Session: Session{ID: "s1"}, Driver: DriverExternal})
	h.onEffect = func(e Effect) {
		if d, ok := e.(Deliver); ok {
			delivered = append(delivered, d)
		}
	}
	return h, &delivered
}

func TestExternalTurnAndWake(t *testing.T) {
	h, delivered := newExternal(t)
	h.step(UserPrompt{Text: "start a background agent"})
	if len(*delivered) != 1 || !strings.Contains((*delivered)[0].Text, "start a background agent") {
		t.Fatalf("delivered = %+v", *delivered)
	}
	if len(h.calls) != 0 {
		t.Fatal("a model call was made for an external agent")
	}
	h.step(ExternalTurnStarted{Agent: MainAgent, Session: "cc-1"})
	h.step(ExternalTask{Agent: MainAgent, ID: "abc", Kind: TaskAgent, Status: "running", Description: "compute"})
	h.step(ExternalMessage{Agent: MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("launched")}}})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "launched", NumTurns: 2})
	main := h.s.Agents[MainAgent]
	if main.Run != nil || len(main.Runs) != 1 || main.ExternalSession != "cc-1" {
		t.Fatalf("main: run %v runs %d session %q", main.Run, len(main.Runs), main.ExternalSession)
	}
	// A prompt while the process's turn runs waits for the turn to end.
	m := h.step(UserMessage{To: "main", Text: "hi"}).Msg
	if m.Outcome != OutcomeResumed {
		t.Fatalf("idle external agent: %s", m.Outcome)
	}
	h.step(ExternalTurnStarted{Agent: MainAgent})
	m2 := h.step(UserMessage{To: "main", Text: "second"}).Msg
	if m2.Outcome != OutcomeQueuedBehindStop {
		t.Fatalf("busy external agent: %s", m2.Outcome)
	}
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "hello"})
	if main.Run == nil || main.Run.Seq != 3 {
		t.Fatal("the queued message did not start the next run")
	}
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "second answered"})
	// The subagent finishes while main is idle; the process wakes itself.
	h.step(ExternalTask{Agent: MainAgent, ID: "abc", Kind: TaskAgent, Status: "completed", Summary: "42", Notify: true})
	n := h.s.Note(NoteKey{Task: "t1", Run: 1})
	if n == nil || n.Reply != "42" || n.Delivery != DeliverProvider {
		t.Fatalf("mirrored notification: %+v", n)
	}
	h.step(ExternalTurnEnded{Agent: MainAgent, NumTurns: 0}) // the empty result before a wake
	h.step(ExternalTurnStarted{Agent: MainAgent})
	if main.Run == nil || main.Run.Kind != RunProviderWake {
		t.Fatalf("the wake turn was not recorded as a provider-wake run: %+v", main.Run)
	}
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "woke: 42", Wake: true})
	if st := Status(h.s); len(st) != 0 {
		t.Fatalf("status: %+v", st)
	}
}

func TestExternalProcessExitLosesTasks(t *testing.T) {
	h, delivered := newExternal(t)
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "sub", Kind: TaskAgent, Status: "running"})
	h.step(ExternalTask{Agent: MainAgent, ID: "bash1", Kind: TaskShell, Status: "running", Description: "sleep 100"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	h.step(ProviderExited{Agent: MainAgent, Reason: "killed"})
	for _, k := range []NoteKey{{Task: "t1", Run: 1}, {Task: "t2"}} {
		n := h.s.Note(k)
		if n == nil || n.Status != string(TaskLost) {
			t.Fatalf("note %s: %+v", k, n)
		}
	}
	if h.s.Tasks["t2"].Status != TaskLost {
		t.Fatalf("shell mirror: %s", h.s.Tasks["t2"].Status)
	}
	// The lost notifications wake the agent: a new run is delivered (the
	// runtime starts a new process, resuming the provider session).
	main := h.s.Agents[MainAgent]
	if main.Run == nil || len(*delivered) != 2 || !strings.Contains((*delivered)[1].Text, "lost") {
		t.Fatalf("no run for the lost notifications: %+v", *delivered)
	}
}

func TestExternalNowInterrupts(t *testing.T) {
	h, _ := newExternal(t)
	var interrupted bool
	prev := h.onEffect
	h.onEffect = func(e Effect) {
		prev(e)
		if _, ok := e.(Interrupt); ok {
			interrupted = true
		}
	}
	h.step(UserPrompt{Text: "long task"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(UserPrompt{Text: "stop that", Priority: PriorityNow})
	if !interrupted {
		t.Fatal("a now prompt did not interrupt the provider's turn")
	}
}
