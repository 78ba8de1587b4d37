package mcpserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/permission"
)

// PendingApprovalsInput is vigil_approvals' input.
type PendingApprovalsInput struct {
	Caller
}

// ApprovalInfo is one permission request of an agent of yours.
type ApprovalInfo struct {
	ID       string    `json:"id" jsonschema:"the request id, <session>/<request>: give it to approve"`
	Task     string    `json:"task" jsonschema:"the task of the agent that asks"`
	Agent    string    `json:"agent" jsonschema:"the agent that asks (its name)"`
	Tool     string    `json:"tool"`
	Call     string    `json:"call" jsonschema:"the call as a rule names it, e.g. Bash(go test ./...)"`
	Reason   string    `json:"reason,omitempty" jsonschema:"why it needs a person"`
	Asked    time.Time `json:"asked"`
	Deadline time.Time `json:"deadline" jsonschema:"denied at this time when nobody answers"`
	Grants   string    `json:"grants,omitempty" jsonschema:"what answering always would allow from now on, in plain words"`
}

// PendingApprovalsOutput is vigil_approvals' result.
type PendingApprovalsOutput struct {
	Approvals []ApprovalInfo `json:"approvals"`
}

// ApproveInput is vigil_approve's input.
type ApproveInput struct {
	Caller
	Approval string `json:"approval" jsonschema:"the request id from vigil_approvals, <session>/<request>"`
	Answer   string `json:"answer" jsonschema:"allow (this call once), always (this call and the same call again, as a session rule) or deny"`
	Reason   string `json:"reason,omitempty" jsonschema:"told to the agent with a denial"`
}

// ApproveOutput is vigil_approve's result.
type ApproveOutput struct {
	Approval string `json:"approval"`
	Answer   string `json:"answer"`
	Rule     string `json:"rule,omitempty" jsonschema:"the session rule an always answer added"`
	Grants   string `json:"grants,omitempty" jsonschema:"what that rule really grants, in plain words"`
}

// pendingApprovals lists the permission requests of the caller's agents.
func (s *Server) pendingApprovals(ctx context.Context, owner string, _ PendingApprovalsInput) (PendingApprovalsOutput, error) {
	rows, err := s.sessions(ctx, owner, false)
	if err != nil {
		return PendingApprovalsOutput{}, err
	}
	out := PendingApprovalsOutput{Approvals: []ApprovalInfo{}}
	for _, row := range rows {
		v, err := s.owned(ctx, owner, row.ID, string(row.ID), 0)
		if err != nil {
			continue // closed under us, or unreadable: the others still answer
		}
		for _, p := range v.Approvals {
			info := ApprovalInfo{
				ID: globalID(v.id, string(p.ID)), Tool: p.Tool, Call: permission.Describe(p.Tool, p.Input),
				Reason: p.Reason, Asked: p.Asked, Deadline: p.Deadline, Grants: p.Grants,
			}
			if a := v.agents[p.Agent]; a != nil {
				info.Agent = a.Name
				if a.Task != "" {
					info.Task = globalID(v.id, string(a.Task))
				}
			}
			out.Approvals = append(out.Approvals, info)
		}
	}
	return out, nil
}

// approve answers a permission request of one of the caller's agents.
func (s *Server) approve(ctx context.Context, owner string, in ApproveInput) (ApproveOutput, error) {
	sess, id, ok := strings.Cut(strings.TrimSpace(in.Approval), "/")
	if !ok || sess == "" || id == "" {
		return ApproveOutput{}, fmt.Errorf("bad request id %q: want <session>/<request> as vigil_approvals gives it", in.Approval)
	}
	sid := vigil.SessionID(sess)
	v, err := s.owned(ctx, owner, sid, in.Approval, 0)
	if err != nil {
		return ApproveOutput{}, err
	}
	i := slices.IndexFunc(v.Approvals, func(p vigil.Approval) bool { return p.ID == vigil.ApprovalID(id) })
	if i < 0 {
		return ApproveOutput{}, fmt.Errorf("no pending request %s: it was answered, withdrawn or past its deadline", in.Approval)
	}
	p := v.Approvals[i]
	out := ApproveOutput{Approval: in.Approval, Answer: in.Answer}
	ans := &vigil.AnswerApprovalParams{Approval: p.ID, By: "mcp:" + owner, Reason: in.Reason}
	switch in.Answer {
	case "allow":
		ans.Allow = true
	case "deny":
	case "always":
		ans.Allow, ans.Always, ans.Reason = true, true, ""
		out.Rule, out.Grants = p.AlwaysRule, p.Grants
	default:
		return ApproveOutput{}, fmt.Errorf("answer %q: want allow, always or deny", in.Answer)
	}
	if err := s.rt.AnswerApproval(ctx, sid, ans); err != nil {
		return ApproveOutput{}, toolErr(err)
	}
	return out, nil
}
