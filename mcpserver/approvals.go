package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/permission"
)

// PendingApprovalsInput is pending_approvals' input.
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
}

// PendingApprovalsOutput is pending_approvals' result.
type PendingApprovalsOutput struct {
	Approvals []ApprovalInfo `json:"approvals"`
}

// ApproveInput is approve's input.
type ApproveInput struct {
	Caller
	Approval string `json:"approval" jsonschema:"the request id from pending_approvals, <session>/<request>"`
	Answer   string `json:"answer" jsonschema:"allow (this call once), always (this call and the same call again, as a session rule) or deny"`
	Reason   string `json:"reason,omitempty" jsonschema:"told to the agent with a denial"`
}

// ApproveOutput is approve's result.
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
		_ = s.owned(ctx, owner, row.ID, row.ID, func(st *core.State) error {
			for _, p := range st.Approvals {
				a := st.Agents[p.Agent]
				info := ApprovalInfo{
					ID: globalID(st.Session.ID, string(p.ID)), Agent: a.Name, Tool: p.Tool,
					Call: permission.Describe(p.Tool, p.Input), Reason: p.Reason, Asked: p.Asked, Deadline: p.Deadline,
				}
				if a.Task != "" {
					info.Task = globalID(st.Session.ID, string(a.Task))
				}
				out.Approvals = append(out.Approvals, info)
			}
			return nil
		})
	}
	return out, nil
}

// approve answers a permission request of one of the caller's agents.
func (s *Server) approve(ctx context.Context, owner string, in ApproveInput) (ApproveOutput, error) {
	sess, id, ok := strings.Cut(strings.TrimSpace(in.Approval), "/")
	if !ok || sess == "" || id == "" {
		return ApproveOutput{}, fmt.Errorf("bad request id %q: want <session>/<request> as pending_approvals gives it", in.Approval)
	}
	var p *core.Approval
	if err := s.owned(ctx, owner, sess, in.Approval, func(st *core.State) error {
		if q := st.Approvals[core.ApprovalID(id)]; q != nil {
			c := *q
			p = &c
		}
		return nil
	}); err != nil {
		return ApproveOutput{}, err
	}
	if p == nil {
		return ApproveOutput{}, fmt.Errorf("no pending request %s: it was answered, withdrawn or past its deadline", in.Approval)
	}
	out := ApproveOutput{Approval: in.Approval, Answer: in.Answer}
	var err error
	switch in.Answer {
	case "allow":
		err = s.rt.AnswerApproval(ctx, sess, id, true, "mcp:"+owner, in.Reason)
	case "deny":
		err = s.rt.AnswerApproval(ctx, sess, id, false, "mcp:"+owner, in.Reason)
	case "always":
		out.Rule, _ = permission.RuleFor(p.Tool, p.Input)
		out.Grants, _ = permission.Grants(out.Rule)
		err = s.rt.AnswerApprovalAlways(ctx, sess, id, "mcp:"+owner)
	default:
		return ApproveOutput{}, fmt.Errorf("answer %q: want allow, always or deny", in.Answer)
	}
	if err != nil {
		return ApproveOutput{}, s.actionErr(sess, err)
	}
	return out, nil
}
