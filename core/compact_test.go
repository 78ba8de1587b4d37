package core

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// answerCompaction answers the compaction call in flight for name.
func (h *harness) answerCompaction(name, summary string) CallModel {
	h.t.Helper()
	c := h.pending(name)
	if c.Purpose != PurposeCompact {
		h.t.Fatalf("%s's call %s is not a compaction (purpose %q)", name, c.Call, c.Purpose)
	}
	h.answer(name, chat.Text(summary))
	return c
}

// A prompt the provider refuses as too long is compacted, then the round
// is retried: the run does not fail, and a second refusal with nothing
// left to cut blocks the agent with the reason.
func TestContextRefusalCompactsAndRetries(t *testing.T) {
	h := newHarness(t, Config{})
	key := backgroundNote(h)
	main := h.s.Agents[MainAgent]
	h.fail("main", "anthropic: bad_request (HTTP 400): prompt is too long: 210000 tokens > 200000 maximum", FailContext)
	if main.Run == nil || main.Blocked != nil {
		t.Fatalf("the run failed instead of compacting: blocked %+v", main.Blocked)
	}
	c := h.answerCompaction("main", "We started worker w1.")
	if last := c.Messages[len(c.Messages)-1].PlainText(); !strings.Contains(last, "CONTEXT COMPACTION - NOT USER INPUT") {
		t.Fatalf("compaction request: %q", last)
	}
	comp := main.Compacted
	if comp == nil || comp.Seq != 1 || comp.Summary != "We started worker w1." {
		t.Fatalf("compaction: %+v", comp)
	}
	// The retried round sends the header, then the kept turns: the
	// notification is still in them, unseen.
	r := h.pending("main")
	head := r.Messages[0].PlainText()
	for _, want := range []string{"NOT USER INPUT", "<context-summary>", "We started worker w1.", "<task-ledger>", `id="t1"`, "notifications-not-yet-seen>t1#1"} {
		if !strings.Contains(head, want) {
			t.Errorf("header lacks %q:\n%s", want, head)
		}
	}
	if r.Messages[1].Role != chat.RoleAssistant || !strings.Contains(lastUser(r), "<result>w1 result</result>") {
		t.Fatalf("kept turns: %+v", r.Messages[1:])
	}
	if len(main.Transcript) <= len(r.Messages) {
		t.Fatalf("the transcript lost turns: %d kept, %d sent", len(main.Transcript), len(r.Messages))
	}
	// Refused again, with nothing left to cut: blocked, items given back.
	h.fail("main", "prompt is too long: 205000 tokens > 200000 maximum", FailContext)
	if main.Blocked == nil || main.Blocked.Kind != FailContext || main.Run != nil || len(main.Inbox) != 1 || *main.Inbox[0].Note != key {
		t.Fatalf("not blocked after the second refusal: %+v inbox %+v", main.Blocked, main.Inbox)
	}
}

// Past the threshold of a known window, the next round starts with a
// compaction; the ledger lists every live task; an Agent or Bash call that
// repeats live work is refused, loudly.
func TestCompactionLedgerAndNoDoubleDispatch(t *testing.T) {
	h := newHarness(t, Config{ContextWindow: func(string, string) int { return 2000 }})
	main := h.s.Agents[MainAgent]
	h.step(UserPrompt{Text: "start five workers and a build"})
	var uses []chat.Block
	for i := 1; i <= 5; i++ {
		uses = append(uses, use(fmt.Sprintf("a%d", i), "Agent", map[string]any{"prompt": fmt.Sprintf("part %d", i), "name": fmt.Sprintf("w%d", i), "run_in_background": true}))
	}
	uses = append(uses, use("b1", "Bash", map[string]any{"command": "make build", "run_in_background": true}))
	h.answer("main", uses...)
	// Grow the context past 80% of the window with tool rounds.
	for i := 0; main.Compacted == nil && i < 40; i++ {
		c := h.pending("main")
		if c.Purpose == PurposeCompact {
			h.answerCompaction("main", "Five workers and a build were started.")
			break
		}
		h.answer("main", chat.Text(strings.Repeat("thinking about the parts. ", 20)), use(fmt.Sprintf("l%d", i), "ListAgents", map[string]any{}))
	}
	comp := main.Compacted
	if comp == nil {
		t.Fatal("no compaction past the threshold")
	}
	if comp.Before < 1600 || comp.After >= comp.Before {
		t.Errorf("compaction %d -> %d tokens", comp.Before, comp.After)
	}
	var listed []string
	for _, lt := range comp.Ledger.Tasks {
		listed = append(listed, string(lt.Task))
	}
	if got := strings.Join(listed, " "); got != "t1 t2 t3 t4 t5 t6" {
		t.Fatalf("ledger tasks = %q, want all six live tasks", got)
	}
	// The model starts the same work again: refused, with the task named.
	drops := h.s.Drops["duplicate-dispatch"]
	h.answer("main", use("again1", "Agent", map[string]any{"prompt": "part 3", "name": "w3b", "run_in_background": true}),
		use("again2", "Bash", map[string]any{"command": "make build", "run_in_background": true}))
	res := lastUser(h.pending("main"))
	for _, want := range []string{"already has this prompt as task t3", "already runs in the background as task t6"} {
		if !strings.Contains(res, want) {
			t.Errorf("results lack %q: %s", want, res)
		}
	}
	if len(h.s.Tasks) != 6 || h.s.Drops["duplicate-dispatch"] != drops+2 {
		t.Fatalf("tasks %d, duplicate drops %d", len(h.s.Tasks), h.s.Drops["duplicate-dispatch"])
	}
}

// A run's last progress is known: status says what it waits on, and past
// the bound, for how long nothing happened. A background command with no
// timeout of its own gets the session default.
func TestRunProgressAndBackgroundTimeout(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "go"})
	p := RunProgress(h.s, h.now.Add(8*time.Minute), time.Minute)
	if len(p) != 1 || p[0].Waiting != "model call c1" || p[0].Stalled != "no progress for 8m0s (waiting on model call c1)" {
		t.Fatalf("progress: %+v", p)
	}
	h.answer("main", use("b1", "Bash", map[string]any{"command": "make", "run_in_background": true}))
	if len(h.shells) != 1 || h.shells[0].Timeout != 4*time.Hour {
		t.Fatalf("background shell: %+v", h.shells)
	}
	if p := RunProgress(h.s, h.now, time.Minute); len(p) != 1 || p[0].Stalled != "" {
		t.Fatalf("progress right after a round: %+v", p)
	}
}
