package core

import (
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

func newExternal(t *testing.T) (*harness, *[]Deliver) { return newExternalWith(t, Config{}) }

// newExternalWith is newExternal with a core configuration.
func newExternalWith(t *testing.T, cfg Config) (*harness, *[]Deliver) {
	h := &harness{t: t, c: New(cfg), s: NewState(), calls: map[CallID]CallModel{}}
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

// The sequence of simulator seed 610484: a mirrored subagent's run ends,
// its own background command ends (a notification the process owes the
// subagent), and then the process reports the subagent stopped, by a stop
// asked while run 1 was ending. The stop must not be dropped as stale:
// the subagent will not be woken for the notification, so it goes to
// main's inbox, and main's next run delivers it.
func TestExternalStopOfIdleSubagentRoutesItsNotifications(t *testing.T) {
	h, delivered := newExternal(t)
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "x5", Kind: TaskAgent, Status: "running"})
	h.step(ExternalTask{Agent: MainAgent, ID: "x6", Kind: TaskShell, Owner: "x5", Status: "running", Description: "sleep"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	sub := h.s.Agent("cc-x5")
	h.step(CancelRun{Agent: sub.Name, By: "user"}) // asks the process to stop x5
	h.step(ExternalTask{Agent: MainAgent, ID: "x5", Kind: TaskAgent, Status: "completed", Summary: "done", Notify: true})
	h.step(ExternalTask{Agent: MainAgent, ID: "x6", Kind: TaskShell, Owner: "x5", Status: "completed", Summary: "exit 0", Notify: true})
	bashNote := h.s.Note(NoteKey{Task: "t2"})
	if bashNote == nil || bashNote.Owner != sub.ID || bashNote.Delivery != DeliverProvider || bashNote.DeliverBy.IsZero() {
		t.Fatalf("the command's notification, owed to the idle subagent with a deadline: %+v", bashNote)
	}
	before := len(*delivered)
	h.step(ExternalTask{Agent: MainAgent, ID: "x5", Kind: TaskAgent, Status: "killed", Summary: "stopped", Notify: true})
	if got := h.s.Tasks[sub.Task].Status; got != TaskStopped {
		t.Fatalf("the stopped subagent's task is %s", got)
	}
	main := h.s.Agents[MainAgent]
	bashNote = h.s.Note(NoteKey{Task: "t2"})
	if bashNote.Delivery != DeliverInbox || bashNote.Owner != MainAgent || bashNote.Item == "" {
		t.Fatalf("the command's notification did not go to main's inbox: %+v", bashNote)
	}
	if main.Run == nil || len(*delivered) != before+1 || !strings.Contains((*delivered)[before].Text, "t2") {
		t.Fatalf("main was not run for the notification: run %+v, delivered %+v", main.Run, *delivered)
	}
	if h.s.Drops["stale-provider-report"] != 0 {
		t.Fatalf("the stop report was dropped: %v", h.s.Drops)
	}
	// A later command of the stopped subagent goes to main at once.
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "seen"})
	h.step(ExternalTask{Agent: MainAgent, ID: "x7", Kind: TaskShell, Owner: "x5", Status: "running", Description: "late"})
	h.step(ExternalTask{Agent: MainAgent, ID: "x7", Kind: TaskShell, Owner: "x5", Status: "completed", Notify: true})
	if n := h.s.Note(NoteKey{Task: "t3"}); n == nil || n.Delivery != DeliverInbox || n.Owner != MainAgent {
		t.Fatalf("a stopped subagent's later notification: %+v", n)
	}
	// The process may still resume the subagent (a message to it): a new run.
	h.step(ExternalTask{Agent: MainAgent, ID: "x5", Kind: TaskAgent, Status: "running"})
	if sub.Run == nil || h.s.Tasks[sub.Task].Status != TaskRunning {
		t.Fatalf("a stopped subagent was not resumed: %+v", sub.Run)
	}
}

// A mirrored run the process never ends, and a notification it never
// delivers, have deadlines: at them vigil ends the run, asks the process
// to stop the subagent, and hands the notifications to main's inbox.
func TestExternalProviderSilenceDeadlines(t *testing.T) {
	h, _ := newExternalWith(t, Config{ProviderSilence: time.Minute})
	var stops []StopExternal
	h.onEffect = func(e Effect) {
		if s, ok := e.(StopExternal); ok {
			stops = append(stops, s)
		}
	}
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "hung", Kind: TaskAgent, Status: "running"})
	h.step(ExternalTask{Agent: MainAgent, ID: "ok", Kind: TaskAgent, Status: "running"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	hung, ok := h.s.Agent("cc-hung"), h.s.Agent("cc-ok")
	if hung.Run.Expect.IsZero() {
		t.Fatal("a mirrored run has no deadline")
	}
	// ok reports progress; hung says nothing.
	h.now = h.now.Add(40 * time.Second)
	h.step(ExternalMessage{Agent: MainAgent, Mirror: "ok", Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("working")}}})
	h.step(ExternalTask{Agent: MainAgent, ID: "ok", Kind: TaskAgent, Status: "completed", Summary: "fine", Notify: true})
	okNote := h.s.Note(NoteKey{Task: ok.Task, Run: 1})
	if okNote.DeliverBy.IsZero() {
		t.Fatal("a notification the process owes idle main has no deadline")
	}
	if d := NextDeadline(h.s); !d.Equal(hung.Run.Expect) {
		t.Fatalf("next deadline %v, want the hung run's %v", d, hung.Run.Expect)
	}
	h.now = hung.Run.Expect.Add(-2 * time.Millisecond) // a step adds 1ms
	h.step(Tick{})
	if hung.Run == nil {
		t.Fatal("the run ended before its deadline")
	}
	h.step(Tick{})
	if hung.Run != nil || hung.Runs[0].Status != RunInterrupted {
		t.Fatalf("the hung run did not end at its deadline: %+v", hung.Runs)
	}
	if len(stops) != 1 || stops[0].Task != "hung" {
		t.Fatalf("the process was not asked to stop the hung subagent: %+v", stops)
	}
	main := h.s.Agents[MainAgent]
	n := h.s.Note(NoteKey{Task: hung.Task, Run: 1})
	if n == nil || n.Delivery != DeliverInbox || n.Owner != MainAgent || !strings.Contains(n.Reply, "reported nothing") {
		t.Fatalf("the hung run's notification: %+v", n)
	}
	if main.Run == nil {
		t.Fatal("main was not run for the hung run's notification")
	}
	// main's turn takes in the ok note the process owed it.
	h.step(ExternalTurnStarted{Agent: MainAgent})
	if okNote = h.s.Note(okNote.Key); okNote.DeliveredRun != main.Run.Seq {
		t.Fatalf("ok's notification: %+v", okNote)
	}
	// main's turn never ends: it is interrupted at its deadline, then
	// ended as a failure (its process stopped), and retried.
	h.now = main.Run.Expect
	h.step(Tick{})
	if main.Run == nil || main.Run.Cancelling.IsZero() || !main.Run.Silent {
		t.Fatalf("a silent turn was not interrupted: %+v", main.Run)
	}
	h.now = main.Run.Cancelling
	h.step(Tick{})
	if main.Run != nil || main.Runs[len(main.Runs)-1].Status != RunInterrupted {
		t.Fatalf("the silent turn did not end: %+v", main.Runs)
	}
	if h.s.Drops["provider-silent"] != 2 {
		t.Fatalf("drops: %v", h.s.Drops)
	}
}

// A notification the process owes an idle owner and never delivers goes to
// main's inbox at its deadline.
func TestExternalUndeliveredNotificationDeadline(t *testing.T) {
	h, _ := newExternalWith(t, Config{ProviderSilence: time.Minute})
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "b1", Kind: TaskShell, Status: "running", Description: "sleep"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	h.step(ExternalTask{Agent: MainAgent, ID: "b1", Kind: TaskShell, Status: "completed", Notify: true})
	n := h.s.Note(NoteKey{Task: "t1"})
	// Owed, it is work to come: a caller that takes quiescence for "done"
	// and closes the session would drop it.
	if h.s.Quiescent() {
		t.Fatal("the session reads quiescent while the process owes main a notification")
	}
	h.now = n.DeliverBy
	h.step(Tick{})
	if n = h.s.Note(n.Key); n.Delivery != DeliverInbox || n.Item == "" || h.s.Agents[MainAgent].Run == nil {
		t.Fatalf("the overdue notification: %+v", n)
	}
}

// A notification the process delivers in main's next turn keeps the
// session from quiescence until that turn takes it in.
func TestExternalOwedNotificationIsNotQuiescent(t *testing.T) {
	h, _ := newExternalWith(t, Config{ProviderSilence: time.Minute})
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "b1", Kind: TaskShell, Status: "running", Description: "sleep"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	if h.s.Quiescent() {
		t.Fatal("quiescent with a live command")
	}
	h.step(ExternalTask{Agent: MainAgent, ID: "b1", Kind: TaskShell, Status: "completed", Notify: true})
	if h.s.Quiescent() {
		t.Fatal("quiescent while the process owes main the command's notification")
	}
	h.step(ExternalTurnStarted{Agent: MainAgent})
	if n := h.s.Note(NoteKey{Task: "t1"}); n.DeliveredRun == 0 {
		t.Fatalf("the wake turn did not take the notification in: %+v", n)
	}
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "done", Wake: true})
	if !h.s.Quiescent() {
		t.Fatalf("not quiescent after the wake turn: %+v", h.s.Agents[MainAgent])
	}
}

// A task stopped while its owner is idle gets no turn from the process
// (the CLI's stop_task notifies "stopped" and runs none): vigil's inbox
// delivers its notification at once.
func TestExternalStoppedWhileIdleGoesToInbox(t *testing.T) {
	h, _ := newExternalWith(t, Config{ProviderSilence: time.Minute})
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "b1", Kind: TaskShell, Status: "running", Description: "sleep"})
	h.step(ExternalTurnEnded{Agent: MainAgent, Result: "started"})
	h.step(ExternalTask{Agent: MainAgent, ID: "b1", Kind: TaskShell, Status: "stopped", Notify: true})
	n := h.s.Note(NoteKey{Task: "t1"})
	if n == nil || n.Delivery != DeliverInbox || n.Item == "" || h.s.Agents[MainAgent].Run == nil {
		t.Fatalf("the stopped task's notification: %+v, main run %+v", n, h.s.Agents[MainAgent].Run)
	}
}

// A mirrored subagent takes the name its provider gives it; a name taken
// already gets the agent's id appended.
func TestExternalMirrorNames(t *testing.T) {
	h, _ := newExternalWith(t, Config{ProviderSilence: time.Minute})
	h.step(UserPrompt{Text: "go"})
	h.step(ExternalTurnStarted{Agent: MainAgent})
	h.step(ExternalTask{Agent: MainAgent, ID: "x1", Kind: TaskAgent, Name: "codex-0199aa", Status: "running"})
	h.step(ExternalTask{Agent: MainAgent, ID: "x2", Kind: TaskAgent, Name: "codex-0199aa", Status: "running"})
	h.step(ExternalTask{Agent: MainAgent, ID: "x3", Kind: TaskAgent, Status: "running"})
	for _, name := range []string{"codex-0199aa", "codex-0199aa-a2", "cc-x3"} {
		if h.s.Agent(name) == nil {
			t.Errorf("no agent %s among %v", name, h.s.Order)
		}
	}
}
