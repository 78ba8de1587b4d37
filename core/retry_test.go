package core

import (
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

func (h *harness) fail(name, why string, kind FailureKind) {
	h.t.Helper()
	c := h.pending(name)
	delete(h.calls, c.Call)
	h.step(ModelFailed{Agent: c.Agent, Call: c.Call, Error: why, Kind: kind})
}

// backgroundNote gives main a finished background worker's notification
// while main is idle, and returns its key.
func backgroundNote(h *harness) NoteKey {
	h.t.Helper()
	h.step(UserPrompt{Text: "start a worker"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting for w1"))
	h.answer("w1", chat.Text("w1 result"))
	return NoteKey{Task: "t1", Run: 1}
}

// A run that fails before its model saw the notification it took gives it
// back, in the same step; the agent retries it after a backoff, and the
// notification is delivered by the run whose model round was accepted.
func TestFailedRunGivesItsItemsBack(t *testing.T) {
	h := newHarness(t, Config{RetryBase: time.Second, RetryAttempts: 3})
	key := backgroundNote(h)
	main := h.s.Agents[MainAgent]
	before := len(main.Transcript) - 1 // the run's notification message is the last
	h.fail("main", "anthropic: server (HTTP 500): boom after 4 attempts", FailTransient)
	if main.Run != nil {
		t.Fatal("main ran again at once instead of backing off")
	}
	if len(main.Inbox) != 1 || main.Inbox[0].Note == nil || *main.Inbox[0].Note != key || main.Inbox[0].Attempts != 1 {
		t.Fatalf("inbox after the failure: %+v", main.Inbox)
	}
	if len(main.Transcript) != before {
		t.Fatalf("the unseen notification's text stayed in the transcript (%d messages, want %d)", len(main.Transcript), before)
	}
	if n := h.s.Note(key); n.DeliveredRun != 0 {
		t.Fatalf("a notification no model saw counts delivered: %+v", n)
	}
	last := main.Runs[len(main.Runs)-1]
	if last.Status != RunFailed || len(last.Returned) != 1 || !strings.Contains(last.Error, "retry 2 of 3") {
		t.Fatalf("the failed run: %+v", last)
	}
	st := Status(h.s)
	if len(st) != 1 || !strings.Contains(st[0].Reason, "1 notification not yet seen by the model") ||
		!strings.Contains(st[0].Reason, "boom") || !strings.Contains(st[0].Reason, "retry 2 of 3") || st[0].Until.IsZero() {
		t.Fatalf("status while backing off: %+v", st)
	}
	if d := NextDeadline(h.s); !d.Equal(main.Retry.At) {
		t.Fatalf("next deadline %v, want the retry at %v", d, main.Retry.At)
	}
	h.now = main.Retry.At
	h.step(Tick{})
	if main.Run == nil || len(main.Run.Unseen) != 1 {
		t.Fatalf("the retry did not start: %+v", main.Run)
	}
	if !strings.Contains(lastUser(h.pending("main")), "<result>w1 result</result>") {
		t.Fatal("the retry's request does not carry the notification")
	}
	h.answer("main", chat.Text("w1 is done"))
	if n := h.s.Note(key); n.DeliveredRun != main.Runs[len(main.Runs)-1].Seq {
		t.Fatalf("the notification was not delivered by the accepted run: %+v", n)
	}
	// The request the model saw held the notification once.
	var count int
	for _, m := range main.Transcript {
		for _, b := range m.Content {
			count += strings.Count(b.Text, "<result>w1 result</result>")
		}
	}
	if count != 1 {
		t.Fatalf("the notification appears %d times in the transcript", count)
	}
}

// Transient failures are retried with a doubling backoff up to the limit;
// then the agent is blocked with the reason until a person releases it.
func TestRetriesThenBlocks(t *testing.T) {
	h := newHarness(t, Config{RetryBase: time.Second, RetryMaxDelay: 3 * time.Second, RetryAttempts: 3})
	backgroundNote(h)
	main := h.s.Agents[MainAgent]
	var delays []time.Duration
	for range 2 {
		h.fail("main", "529 overloaded", FailTransient)
		delays = append(delays, main.Retry.At.Sub(h.now))
		h.now = main.Retry.At
		h.step(Tick{})
	}
	if delays[0] != time.Second || delays[1] != 2*time.Second {
		t.Fatalf("backoff %v, want 1s then 2s", delays)
	}
	h.fail("main", "529 overloaded", FailTransient)
	if main.Blocked == nil || !strings.Contains(main.Blocked.Reason, "gave up after 3 attempts") || main.Retry != nil {
		t.Fatalf("not blocked after the last attempt: %+v %+v", main.Blocked, main.Retry)
	}
	st := Status(h.s)
	if len(st) != 1 || !strings.Contains(st[0].Reason, "blocked") || !strings.Contains(st[0].ClearsOn, "retry") {
		t.Fatalf("status while blocked: %+v", st)
	}
	// Nothing starts on its own; a message from another agent is refused.
	h.now = h.now.Add(time.Hour)
	h.step(Tick{})
	if main.Run != nil || len(main.Inbox) != 1 {
		t.Fatalf("a blocked agent ran: %+v", main.Run)
	}
	h.step(RetryAgent{Agent: "main", By: "test"})
	if main.Blocked != nil || main.Run == nil || len(main.Inbox) != 0 || main.Run.Unseen[0].Attempts != 0 {
		t.Fatalf("retry did not release the block: %+v run %+v", main.Blocked, main.Run)
	}
}

// An auth or invalid-request failure will repeat: the agent is blocked at
// once, and a new prompt releases it. (A context failure compacts first:
// TestContextRefusalCompactsAndRetries.)
func TestPermanentFailureBlocksAtOnce(t *testing.T) {
	for _, kind := range []FailureKind{FailAuth, FailInvalid} {
		t.Run(string(kind), func(t *testing.T) {
			h := newHarness(t, Config{})
			key := backgroundNote(h)
			main := h.s.Agents[MainAgent]
			h.fail("main", "anthropic 400 prompt is too long: 210000 tokens > 200000 maximum", kind)
			if main.Blocked == nil || main.Blocked.Kind != kind || main.Run != nil {
				t.Fatalf("not blocked at once: %+v", main.Blocked)
			}
			if err := h.c.Step(h.s, h.now, Tick{}).Err; err != nil {
				t.Fatal(err)
			}
			h.step(UserPrompt{Text: "try again"})
			if main.Blocked != nil || main.Run == nil || len(main.Run.Unseen) != 2 {
				t.Fatalf("a new prompt did not release the block: run %+v", main.Run)
			}
			if *main.Run.Unseen[0].Note != key {
				t.Fatalf("the notification is not first: %+v", main.Run.Unseen)
			}
		})
	}
}

// Items that joined a later round and were never seen go back with their
// text cut from the round's message; the tool results stay.
func TestJoinedItemsGoBackWithoutTheToolResults(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "work"})
	h.answer("main", use("u1", "Read", map[string]any{"file_path": "x"}))
	// A prompt arrives while the tool runs; it joins the next round.
	h.step(UserPrompt{Text: "and this"})
	tool := h.tools[len(h.tools)-1]
	h.step(ToolDone{Agent: tool.Agent, UseID: tool.UseID, Result: "contents"})
	main := h.s.Agents[MainAgent]
	if len(main.Run.Unseen) != 1 {
		t.Fatalf("unseen: %+v", main.Run.Unseen)
	}
	h.fail("main", "network", FailTransient)
	lastMsg := main.Transcript[len(main.Transcript)-1]
	if lastMsg.Role != chat.RoleUser || len(lastMsg.Content) != 1 || lastMsg.Content[0].Type != chat.BlockToolResult {
		t.Fatalf("the last message should hold only the tool result: %+v", lastMsg)
	}
	if len(main.Inbox) != 1 || main.Inbox[0].Text != "and this" {
		t.Fatalf("inbox: %+v", main.Inbox)
	}
}

// A message to a blocked agent from another agent is refused with the
// reason; one from the user releases it.
func TestMessagesToABlockedAgent(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "start"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("started"))
	h.fail("w1", "auth", FailAuth)
	w1 := h.s.Agent("w1")
	// w1's first run took only its prompt: it went back, and w1 is blocked.
	if w1.Blocked == nil || len(w1.Inbox) != 1 {
		t.Fatalf("w1: blocked %+v inbox %+v", w1.Blocked, w1.Inbox)
	}
	// main hears of the failed run, with the block in its words.
	n := h.s.Note(NoteKey{Task: "t1", Run: 1})
	if n == nil || !strings.Contains(n.Error, "blocked") {
		t.Fatalf("the owner was not told of the block: %+v", n)
	}
	h.answer("main", use("u2", "SendMessage", map[string]any{"to": "w1", "message": "hello"}))
	m := h.s.Msgs["m1"]
	if m.Outcome != OutcomeRejected || !strings.Contains(m.Reason, "blocked") {
		t.Fatalf("agent message to a blocked agent: %+v", m)
	}
	h.step(UserMessage{To: "w1", Text: "go on"})
	if w1.Blocked != nil || w1.Run == nil {
		t.Fatalf("a user message did not release w1: %+v", w1.Blocked)
	}
}
