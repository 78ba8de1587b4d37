package core

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/tool/toolinfo"
)

// The core decides the orchestration tools itself, in every permission
// mode; every other tool goes through the session's permissions: in mode
// ask a read-only one runs, the others wait for a person.
func TestToolsFollowTheToolTable(t *testing.T) {
	for _, name := range toolinfo.Offered() {
		info := toolinfo.Of(name)
		h := &harness{t: t, c: New(Config{}), s: NewState(), calls: map[CallID]CallModel{}}
		h.step(CreateSession{Session: Session{ID: "s1", Permissions: Permissions{Mode: PermAsk}}})
		h.step(UserPrompt{Text: "go"})
		c := h.pending("main")
		delete(h.calls, c.Call)
		out := h.step(ModelResponded{Agent: c.Agent, Call: c.Call, Response: chat.Response{
			Content: []chat.Block{use("u1", name, map[string]any{})}, StopReason: chat.StopToolUse,
		}})
		asked, executed := false, false
		for _, e := range out.Events {
			if _, ok := e.Body.(*ApprovalRequested); ok {
				asked = true
			}
		}
		for _, ef := range out.Effects {
			if _, ok := ef.(ExecTool); ok {
				executed = true
			}
		}
		switch {
		case info.Orchestration && (asked || executed):
			t.Errorf("%s: the core should decide it, but it was asked %v, executed %v", name, asked, executed)
		case !info.Orchestration && info.ReadOnly && (asked || !executed):
			t.Errorf("%s: read-only, it should run without asking: asked %v, executed %v", name, asked, executed)
		case !info.Orchestration && !info.ReadOnly && !asked:
			t.Errorf("%s: mode ask should ask before it", name)
		}
	}
}

// What the core shortens for the model (descriptions, the ledger, the
// agent list) never splits a character.
func TestShortenedTextKeepsCharactersWhole(t *testing.T) {
	h := newHarness(t, Config{})
	prompt := strings.Repeat("日本語", 30) // 3 bytes each: a cut at 57 bytes falls inside one
	h.step(UserPrompt{Text: "start a worker"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": prompt, "name": "w1", "run_in_background": true}))
	w1 := h.s.Agent("w1")
	if !utf8.ValidString(w1.Description) || !strings.HasSuffix(w1.Description, "…") || len(w1.Description) > 60 {
		t.Fatalf("description %q", w1.Description)
	}
	h.answer("w1", chat.Text(strings.Repeat("é", 100)))
	h.answer("main", use("u2", "ListAgents", map[string]any{}))
	// JSON would turn a split character into \ufffd.
	if out := lastUser(h.pending("main")); !strings.Contains(out, "é…") || strings.Contains(out, `\ufffd`) || strings.ContainsRune(out, utf8.RuneError) {
		t.Fatalf("ListAgents split a character: %q", out)
	}
}
