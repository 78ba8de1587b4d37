package core

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// harness drives the core by hand: effects are collected, and the test
// decides when each model call answers.
type harness struct {
	t      *testing.T
	c      *Core
	s      *State
	now    time.Time
	events []Event
	calls  map[CallID]CallModel
	order  []CallID
	tools  []ExecTool
	shells []StartShell
	// onEffect sees every effect, when set.
	onEffect func(Effect)
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, c: New(cfg), s: NewState(), calls: map[CallID]CallModel{}}
	h.step(CreateSession{Session: Session{ID: "s1", Permissions: Permissions{Mode: PermBypass}}})
	return h
}

func (h *harness) step(in Input) Output {
	h.t.Helper()
	if h.now.IsZero() {
		h.now = time.Unix(1_800_000_000, 0).UTC()
	}
	h.now = h.now.Add(time.Millisecond)
	out := h.c.Step(h.s, h.now, in)
	if out.Err != nil {
		h.t.Fatalf("%T: %v", in, out.Err)
	}
	h.events = append(h.events, out.Events...)
	for _, e := range out.Effects {
		if h.onEffect != nil {
			h.onEffect(e)
		}
		switch e := e.(type) {
		case CallModel:
			h.calls[e.Call] = e
			h.order = append(h.order, e.Call)
		case CancelCall:
			delete(h.calls, e.Call)
		case ExecTool:
			h.tools = append(h.tools, e)
		case StartShell:
			h.shells = append(h.shells, e)
		}
	}
	// Replaying the events must rebuild the same state.
	if got := Replay(h.events); !reflect.DeepEqual(stateJSON(got), stateJSON(h.s)) {
		h.t.Fatalf("replay differs after %T:\n got %s\nwant %s", in, stateJSON(got), stateJSON(h.s))
	}
	return out
}

func stateJSON(s *State) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pending returns the in-flight call of the named agent.
func (h *harness) pending(name string) CallModel {
	h.t.Helper()
	for _, id := range h.order {
		if c, ok := h.calls[id]; ok && c.AgentName == name {
			return c
		}
	}
	h.t.Fatalf("no model call in flight for %s", name)
	return CallModel{}
}

func (h *harness) answer(name string, blocks ...chat.Block) {
	h.t.Helper()
	c := h.pending(name)
	delete(h.calls, c.Call)
	h.step(ModelResponded{Agent: c.Agent, Call: c.Call, Response: chat.Response{Content: blocks, StopReason: chat.StopEndTurn}})
}

func use(id, name string, input any) chat.Block {
	b, _ := json.Marshal(input)
	return chat.Block{Type: chat.BlockToolUse, ID: id, Name: name, Input: b}
}

func lastUser(c CallModel) string {
	var b strings.Builder
	m := c.Messages[len(c.Messages)-1]
	for _, bl := range m.Content {
		b.WriteString(bl.Text)
		b.WriteString(bl.Content)
	}
	return b.String()
}

func TestBackgroundAgentNotifiesOwner(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "start a worker"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting for w1"))
	if a := h.s.Agent("main"); a.Run != nil {
		t.Fatalf("main should be idle, has run %d", a.Run.Seq)
	}
	h.answer("w1", chat.Text("w1 result"))
	c := h.pending("main")
	if !strings.Contains(lastUser(c), "<result>w1 result</result>") {
		t.Fatalf("main did not get the notification: %q", lastUser(c))
	}
	// In flight until the model's answer to that round is accepted.
	if n := h.s.Note(NoteKey{Task: "t1", Run: 1}); n == nil || n.DeliveredRun != 0 {
		t.Fatalf("note t1#1 counted delivered before the model saw it: %+v", n)
	}
	h.answer("main", chat.Text("w1 is done"))
	if n := h.s.Note(NoteKey{Task: "t1", Run: 1}); n.DeliveredRun != 2 {
		t.Fatalf("note t1#1 not delivered to main run 2: %+v", n)
	}
}

// The 000 sequence: a message sent to a worker while its final round is in
// flight. The worker's run ends, its notification is written, then run 2
// answers the message and notifies again.
func TestMessageDuringFinalRound(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting"))
	// The worker's final round is in flight; main is woken by the user and
	// sends DONE.
	h.step(UserPrompt{Text: "send DONE to w1"})
	h.answer("main", use("u2", "SendMessage", map[string]any{"to": "w1", "message": "DONE"}))
	m := h.s.Msgs["m1"]
	if m.Outcome != OutcomePending {
		t.Fatalf("outcome while the target's round is in flight = %s, want pending", m.Outcome)
	}
	// The sender does not wait for w1's model (DESIGN rule 11): its call
	// is answered in this step, with both runs the promise names, and its
	// next round is in flight.
	tc := h.s.Agent("main").Run
	if tc == nil || tc.Call == nil || tc.Round != 2 {
		t.Fatalf("main is not in its next round: %+v", tc)
	}
	sent := lastUser(h.pending("main"))
	for _, want := range []string{`"outcome":"pending"`, "joins run 1", "run 2 answers", "t1#1 or t1#2", "lists m1"} {
		if !strings.Contains(sent, want) {
			t.Errorf("SendMessage result lacks %q: %s", want, sent)
		}
	}
	h.answer("w1", chat.Text("work finished"))
	if m.Outcome != OutcomeQueuedBehindStop || m.Run != 1 {
		t.Fatalf("outcome = %s run %d, want queued-behind-stop 1", m.Outcome, m.Run)
	}
	if h.s.Note(NoteKey{Task: "t1", Run: 1}) == nil {
		t.Fatal("run 1 notification missing")
	}
	w := h.s.Agent("w1")
	if w.Run == nil || w.Run.Seq != 2 {
		t.Fatal("follow-on run 2 did not start")
	}
	h.answer("w1", chat.Text("DONE acknowledged"))
	n2 := h.s.Note(NoteKey{Task: "t1", Run: 2})
	if n2 == nil || n2.Reply != "DONE acknowledged" || len(n2.Answered) != 1 || n2.Answered[0] != "m1" {
		t.Fatalf("run 2 notification wrong: %+v", n2)
	}
}

func TestHoldHoldsOnlyUserPrompts(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting"))
	h.step(HoldQueue{By: "alice"})
	h.step(UserPrompt{Text: "held prompt"})
	h.answer("w1", chat.Text("done"))
	c := h.pending("main")
	if strings.Contains(lastUser(c), "held prompt") {
		t.Fatal("held prompt reached the model")
	}
	h.answer("main", chat.Text("ok"))
	st := Status(h.s)
	if len(st) != 1 || st[0].Held != 1 || st[0].ClearsOn == "" {
		t.Fatalf("status = %+v", st)
	}
	h.step(ResumeQueue{})
	if !strings.Contains(lastUser(h.pending("main")), "held prompt") {
		t.Fatal("prompt not delivered after resume")
	}
}

func TestForegroundAgentReturnsReply(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "compute", "name": "fg"}))
	h.answer("fg", chat.Text("42"))
	c := h.pending("main")
	if !strings.Contains(lastUser(c), "<result>42</result>") {
		t.Fatalf("tool result = %q", lastUser(c))
	}
	if n := h.s.Note(NoteKey{Task: "t1", Run: 1}); n.Delivery != DeliverToolResult {
		t.Fatalf("delivery = %s", n.Delivery)
	}
	if len(h.s.Agent("main").Inbox) != 0 {
		t.Fatal("foreground reply was also queued")
	}
}

func TestBackgroundShellNotifies(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Bash", map[string]any{"command": "sleep 1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting"))
	if len(h.shells) != 1 {
		t.Fatalf("shells = %v", h.shells)
	}
	h.step(ProcessExited{Task: h.shells[0].Task, ExitCode: 3, Tail: "boom"})
	if got := lastUser(h.pending("main")); !strings.Contains(got, "<exit-code>3</exit-code>") || !strings.Contains(got, "failed") {
		t.Fatalf("notification = %q", got)
	}
}

func TestRecoverInterruptsShellAndReissuesCall(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Bash", map[string]any{"command": "sleep 100", "run_in_background": true}),
		use("u2", "Agent", map[string]any{"prompt": "w", "name": "w1", "run_in_background": true}))
	call := h.pending("w1").Call
	// Crash: a new incarnation replays the events.
	h.s = Replay(h.events)
	h.calls = map[CallID]CallModel{}
	h.order = nil
	h.step(Recover{Incarnation: 2})
	if t1 := h.s.Tasks["t1"]; t1.Status != TaskInterrupted {
		t.Fatalf("shell task = %s", t1.Status)
	}
	if got := h.pending("w1").Call; got != call {
		t.Fatalf("re-issued call %s, want %s", got, call)
	}
	// main's round was in flight too and is re-issued; the interrupted
	// shell's notification waits in main's inbox and joins its next round.
	h.answer("main", chat.Text("ok"))
	if !strings.Contains(lastUser(h.pending("main")), "interrupted") {
		t.Fatal("interrupted shell not announced")
	}
}

func TestNowInterruptsRound(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	first := h.pending("main").Call
	h.step(UserPrompt{Text: "urgent", Priority: PriorityNow})
	c := h.pending("main")
	if c.Call == first || !strings.Contains(lastUser(c), "urgent") {
		t.Fatalf("now item did not interrupt: call %s last %q", c.Call, lastUser(c))
	}
	// A late answer to the interrupted call is dropped loudly.
	h.step(ModelResponded{Agent: MainAgent, Call: first, Response: chat.Response{Content: []chat.Block{chat.Text("late")}}})
	if h.s.Drops["stale-model-response"] != 1 {
		t.Fatalf("drops = %v", h.s.Drops)
	}
}

func TestSendMessageOutcomes(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "w", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("idle now"))
	// w1's round in flight: a tool-using answer means joined.
	out := h.step(UserMessage{To: "w1", Text: "hello"})
	if out.Msg.Outcome != OutcomePending {
		t.Fatalf("got %s", out.Msg.Outcome)
	}
	h.answer("w1", use("x1", "ListAgents", map[string]any{}))
	if m := h.s.Msgs[out.Msg.ID]; m.Outcome != OutcomeJoined {
		t.Fatalf("got %s", m.Outcome)
	}
	if !strings.Contains(lastUser(h.pending("w1")), "hello") {
		t.Fatal("joined message not in next round")
	}
	h.answer("w1", chat.Text("bye"))
	out = h.step(UserMessage{To: "w1", Text: "again"})
	if out.Msg.Outcome != OutcomeResumed || out.Msg.Run != 2 {
		t.Fatalf("got %s %d", out.Msg.Outcome, out.Msg.Run)
	}
	out = h.step(UserMessage{To: "nobody", Text: "x"})
	if out.Msg.Outcome != OutcomeRejected || out.Msg.Reason == "" {
		t.Fatalf("got %+v", out.Msg)
	}
	out = h.step(UserMessage{To: "w1", Text: "later", Priority: PriorityLater})
	if out.Msg.Outcome != OutcomeQueuedBehindStop {
		t.Fatalf("got %s", out.Msg.Outcome)
	}
	_ = fmt.Sprint()
}
