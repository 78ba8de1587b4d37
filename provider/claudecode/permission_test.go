package claudecode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/providertest"
)

// toolResults counts the tool results a request carries.
func toolResults(r *providertest.Request) int {
	n := 0
	for _, m := range r.Messages {
		for _, b := range m.Content {
			if b.Type == chat.BlockToolResult {
				n++
			}
		}
	}
	return n
}

// In mode ask the CLI's own permission prompts reach vigil (through
// --permission-prompt-tool stdio) and become approvals a person answers:
// "allow always" runs the call and adds a session rule that answers the
// same call again without asking; a denial reaches the model.
func TestPermissionPromptsReachVigil(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		if isSub(r) {
			return providertest.Reply{}, false
		}
		switch toolResults(r) {
		case 0:
			return toolUse("Bash", `{"command":"touch made-1","description":"make a file"}`), true
		case 1:
			return toolUse("Bash", `{"command":"touch made-1","description":"make it again"}`), true
		case 2:
			return toolUse("Bash", `{"command":"touch made-2","description":"make another"}`), true
		}
		return text("MAIN: done"), true
	})
	s, err := h.rt.CreateSession(h.ctx, &vigil.SessionParams{
		Prompt: "make the files", Provider: Name, Cwd: h.cwd, Permissions: vigil.Permissions{Mode: vigil.PermAsk},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.sess = string(s.ID)
	approval := func(n int) core.Approval {
		t.Helper()
		seen := 0
		var p core.Approval
		h.waitEvent("a permission request", func(typ string, data []byte) bool {
			if typ != "approval.requested" {
				return false
			}
			seen++
			var e core.ApprovalRequested
			_ = json.Unmarshal(data, &e)
			p = e.Approval
			return seen == n
		})
		return p
	}
	p := approval(1)
	if p.Tool != "Bash" || p.External == "" || p.Agent != core.MainAgent || !strings.Contains(string(p.Input), "touch made-1") {
		t.Fatalf("approval: %+v", p)
	}
	if err := h.rt.AnswerApproval(h.ctx, vigil.SessionID(h.sess), &vigil.AnswerApprovalParams{Approval: vigil.ApprovalID(p.ID), Allow: true, Always: true, By: "test"}); err != nil {
		t.Fatal(err)
	}
	// The repeat is allowed by the new rule, unasked; made-2 is asked.
	p2 := approval(2)
	if !strings.Contains(string(p2.Input), "touch made-2") {
		t.Fatalf("second approval is not for made-2: %+v", p2)
	}
	if err := h.rt.AnswerApproval(h.ctx, vigil.SessionID(h.sess), &vigil.AnswerApprovalParams{Approval: vigil.ApprovalID(p2.ID), By: "test", Reason: "not that one"}); err != nil {
		t.Fatal(err)
	}
	h.waitRunEnded(core.MainAgent, "MAIN: done")
	st := h.waitQuiet()
	if _, err := os.Stat(filepath.Join(h.cwd, "made-1")); err != nil {
		t.Errorf("the allowed command did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.cwd, "made-2")); err == nil {
		t.Error("the denied command ran")
	}
	if got := st.Session.Permissions.Allow; len(got) != 1 || got[0] != "Bash(touch made-1)" {
		t.Errorf("session rules after allow always: %q", got)
	}
	if len(st.Approvals) != 0 {
		t.Errorf("approvals left pending: %+v", st.Approvals)
	}
	// The denial's message reached the model.
	var denied bool
	for _, r := range h.srv.Requests() {
		for _, m := range r.Messages {
			for _, b := range m.Content {
				if b.Type == chat.BlockToolResult && strings.Contains(b.Content, "not that one") {
					denied = true
				}
			}
		}
	}
	if !denied {
		t.Error("the model never saw the denial's reason")
	}
}
