package core

import (
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
)

// A prompt's round bound: the run has that many model rounds, their tool
// calls run, and when the model asks for one more the run ends
// round_limit; what waits in the inbox starts the next run, unbounded.
func TestPromptMaxRounds(t *testing.T) {
	h := newHarness(t, Config{})
	if out := h.c.Step(h.s, h.now, UserPrompt{Text: "x", MaxRounds: -1}); ErrorCodeOf(out.Err) != CodeInvalid {
		t.Fatalf("a negative bound: %v", out.Err)
	}
	h.step(UserPrompt{Text: "read twice", MaxRounds: 2})
	main := h.s.Agents[MainAgent]
	if main.Run == nil || main.Run.MaxRounds != 2 {
		t.Fatalf("run %+v", main.Run)
	}
	for i, id := range []string{"u1", "u2"} {
		h.answer("main", use(id, "Read", map[string]any{"file_path": "f"}))
		if i == 1 {
			h.step(UserPrompt{Text: "then this"}) // waits: it would join the next round
		}
		h.step(ToolDone{Agent: MainAgent, UseID: id, Result: "contents"})
	}
	sum := main.Runs[0]
	if sum.Status != RunRoundLimit || !strings.Contains(sum.Error, "most model rounds its prompt allows (2)") {
		t.Fatalf("first run %+v", sum)
	}
	// The last round's results closed its tool calls in the transcript.
	var last chat.Message
	for _, m := range main.Transcript {
		if m.Role == chat.RoleUser && len(m.Content) > 0 && m.Content[0].Type == chat.BlockToolResult {
			last = m
		}
	}
	if last.Content[0].ToolUseID != "u2" {
		t.Fatalf("the last tool result is %+v", last)
	}
	// The waiting prompt is the next run's, with no bound.
	if main.Run == nil || main.Run.Seq != 2 || main.Run.MaxRounds != 0 || !strings.Contains(lastUser(h.pending("main")), "then this") {
		t.Fatalf("second run %+v", main.Run)
	}
	h.answer("main", use("u3", "Read", map[string]any{"file_path": "f"}))
	h.step(ToolDone{Agent: MainAgent, UseID: "u3", Result: "contents"})
	h.answer("main", chat.Text("done"))
	if s := main.Runs[1].Status; s != RunCompleted {
		t.Fatalf("second run ended %s", s)
	}
}
