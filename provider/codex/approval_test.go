package codex

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/providertest"
)

// In mode ask, Codex asks before a command (approvalPolicy untrusted) and
// vigil's permissions answer: a person allows one command and denies
// another, and an allow rule lets a third run without a person.
func TestApprovals(t *testing.T) {
	r := newRig(t)
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case answersTool(q):
			return say("MAIN: ran: " + last), true
		case strings.Contains(last, "first"):
			return call("call_a1", "exec_command", `{"cmd":"echo yes > approved.txt","yield_time_ms":5000}`), true
		case strings.Contains(last, "second"):
			return call("call_a2", "exec_command", `{"cmd":"echo no > denied.txt","yield_time_ms":5000}`), true
		case strings.Contains(last, "third"):
			return call("call_a3", "exec_command", `{"cmd":"touch ruled.txt","yield_time_ms":5000}`), true
		case strings.Contains(last, "fourth"):
			return call("call_a4", "exec_command", `{"cmd":"echo never > cancelled.txt","yield_time_ms":5000}`), true
		}
		return providertest.Reply{}, false
	})
	s, err := r.rt.CreateSession(r.ctx, &vigil.SessionParams{
		Prompt: "first", Provider: Name, Cwd: r.cwd,
		Permissions: vigil.Permissions{Mode: vigil.PermAsk, Allow: []string{"Bash(touch *)"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.sess = string(s.ID)
	asked := func(n int) core.Approval {
		var a core.ApprovalRequested
		r.waitEvent("permission request", func(typ string, data []byte) bool {
			a = core.ApprovalRequested{}
			return typ == "approval.requested" && json.Unmarshal(data, &a) == nil && a.Approval.ID == core.ApprovalID("p"+string(rune('0'+n)))
		})
		return a.Approval
	}
	p1 := asked(1)
	var in struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal(p1.Input, &in); err != nil || p1.Tool != "Bash" || in.Command != "echo yes > approved.txt" || p1.External == "" || p1.UseID != "call_a1" {
		t.Fatalf("request %+v (input %s)", p1, p1.Input)
	}
	if err := r.rt.AnswerApproval(r.ctx, r.id(), &vigil.AnswerApprovalParams{Approval: vigil.ApprovalID(p1.ID), Allow: true, By: "test"}); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "MAIN: ran:")
	if b, err := os.ReadFile(filepath.Join(r.cwd, "approved.txt")); err != nil || string(b) != "yes\n" {
		t.Fatalf("approved.txt: %q %v", b, err)
	}

	r.waitQuiet()
	if _, err := r.rt.Prompt(r.ctx, r.id(), &vigil.PromptParams{Text: "second"}); err != nil {
		t.Fatal(err)
	}
	p2 := asked(2)
	if err := r.rt.AnswerApproval(r.ctx, r.id(), &vigil.AnswerApprovalParams{Approval: vigil.ApprovalID(p2.ID), Allow: false, By: "test", Reason: "not that"}); err != nil {
		t.Fatal(err)
	}
	r.waitQuiet()
	if _, err := os.Stat(filepath.Join(r.cwd, "denied.txt")); err == nil {
		t.Fatal("the denied command ran")
	}

	if _, err := r.rt.Prompt(r.ctx, r.id(), &vigil.PromptParams{Text: "third"}); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "MAIN: ran:")
	st := r.waitQuiet()
	if _, err := os.Stat(filepath.Join(r.cwd, "ruled.txt")); err != nil {
		t.Fatalf("ruled.txt: %v (the rule did not allow it)", err)
	}
	if len(st.Approvals) != 0 || st.Counters.Approval != 2 {
		t.Fatalf("approvals %+v, %d asked: the rule's command waited for a person", st.Approvals, st.Counters.Approval)
	}
	if tr := transcript(st.Agents[core.MainAgent]); !strings.Contains(tr, "rejected by user") {
		t.Errorf("the model was not told the command was declined: %s", tr)
	}

	// A cancel while Codex waits for an answer: the request is answered
	// no, the turn ends, nothing waits.
	if _, err := r.rt.Prompt(r.ctx, r.id(), &vigil.PromptParams{Text: "fourth"}); err != nil {
		t.Fatal(err)
	}
	asked(3)
	if err := r.rt.CancelRun(r.ctx, r.id(), &vigil.AgentActionParams{Agent: string(core.MainAgent), By: "test"}); err != nil {
		t.Fatal(err)
	}
	st = r.waitQuiet()
	main := st.Agents[core.MainAgent]
	if len(st.Approvals) != 0 || main.Runs[len(main.Runs)-1].Status != core.RunCancelled {
		t.Fatalf("after the cancel: approvals %+v, runs %+v", st.Approvals, main.Runs)
	}
	if _, err := os.Stat(filepath.Join(r.cwd, "cancelled.txt")); err == nil {
		t.Fatal("the command of the cancelled turn ran")
	}
}

// In mode auto, commands run in Codex's workspace-write sandbox without
// asking: a write inside the working directory lands, one outside it (and
// outside the temporary directories workspace-write also opens) is
// refused by the sandbox.
func TestWorkspaceWrite(t *testing.T) {
	r := newRig(t)
	dir, err := os.MkdirTemp(os.Getenv("HOME"), "vigil-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	outside := filepath.Join(dir, "outside.txt")
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case answersTool(q):
			return say("MAIN: ran: " + last), true
		case strings.Contains(last, "write files"):
			return call("call_w1", "exec_command", `{"cmd":"echo in > inside.txt && echo ok-inside; echo out > `+outside+`","yield_time_ms":5000}`), true
		}
		return providertest.Reply{}, false
	})
	s, err := r.rt.CreateSession(r.ctx, &vigil.SessionParams{Prompt: "write files", Provider: Name, Cwd: r.cwd, Permissions: vigil.Permissions{Mode: vigil.PermAuto}})
	if err != nil {
		t.Fatal(err)
	}
	r.sess = string(s.ID)
	end := r.waitRunEnded(core.MainAgent, "MAIN: ran:")
	st := r.waitQuiet()
	if b, err := os.ReadFile(filepath.Join(r.cwd, "inside.txt")); err != nil || string(b) != "in\n" {
		t.Errorf("inside.txt: %q %v", b, err)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("a write outside the working directory landed: the sandbox is not workspace-write")
	}
	if !strings.Contains(end.Reply, "ok-inside") || !strings.Contains(end.Reply, "Read-only file system") {
		t.Errorf("the command's output: %q", end.Reply)
	}
	if st.Counters.Approval != 0 {
		t.Errorf("%d permission requests in mode auto", st.Counters.Approval)
	}
}

// id is the rig's session.
func (r *rig) id() vigil.SessionID { return vigil.SessionID(r.sess) }
