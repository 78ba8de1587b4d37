package core

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/vigilrun/vigil/internal/permission"
)

// Approvals. A tool call the session's permissions leave to a person
// (toolGuarded) waits for an approval, and so does a provider process's
// request (below); a person answers it, once or "allow always".

func (st *stepper) answerApproval(in AnswerApproval) {
	p := st.s.Approvals[in.Approval]
	if p == nil {
		st.fail(CodeNotFound, "no pending permission request %q", in.Approval)
		return
	}
	if !in.Always || !in.Allow {
		st.resolveApproval(p, in.Allow, in.By, in.Reason)
		return
	}
	rule, err := permission.RuleFor(p.Tool, p.Input)
	if err != nil {
		st.fail(CodeInvalid, "cannot allow %s always: %v; allow it once", p.Tool, err)
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	st.emit(&PermissionRuleAdded{Rule: rule, By: by, Approval: p.ID})
	st.resolveApproval(p, true, in.By, in.Reason)
	// The rule answers every other request it allows, at once.
	perms := st.s.Session.Permissions
	for _, id := range sortedApprovals(st.s) {
		q := st.s.Approvals[id]
		if dec, _ := permission.DecideIn(st.s.Session.Roots(), string(perms.Mode), perms.Allow, perms.Deny, q.Tool, q.Input); dec == permission.Allow {
			st.resolveApproval(q, true, by, "allowed by the rule "+rule)
		}
	}
}

// PermissionRuleAdded adds an allow rule to the session's permissions: a
// person answered a request "allow always".
type PermissionRuleAdded struct {
	Rule     string     `json:"rule"`
	By       string     `json:"by,omitempty"`
	Approval ApprovalID `json:"approval,omitempty"`
}

// Type implements Body: the name of the event.
func (*PermissionRuleAdded) Type() string { return "permission.rule_added" }

func (e *PermissionRuleAdded) apply(s *State, _ time.Time) {
	if !slices.Contains(s.Session.Permissions.Allow, e.Rule) {
		s.Session.Permissions.Allow = append(slices.Clone(s.Session.Permissions.Allow), e.Rule)
	}
}

func (st *stepper) resolveApproval(p *Approval, allow bool, by, reason string) {
	a := st.s.Agents[p.Agent]
	st.emit(&ApprovalResolved{Approval: p.ID, Allow: allow, By: by, Reason: reason})
	if p.External != "" {
		msg := reason
		if !allow {
			msg = "permission denied"
			if by != "" {
				msg += " by " + by
			}
			if reason != "" {
				msg += ": " + reason
			}
		}
		st.effect(AnswerPermission{Agent: a.ID, Request: p.External, Allow: allow, Reason: msg})
		return
	}
	tc := a.Run.tool(p.UseID)
	if tc == nil || tc.Done {
		return
	}
	if allow {
		st.runTool(a, tc)
	} else {
		msg := "permission denied"
		if by != "" {
			msg += " by " + by
		}
		if reason != "" {
			msg += ": " + reason
		}
		st.finishTool(a, tc.UseID, "Error: "+msg, true)
	}
	st.maybeNextRound(a)
}

// A provider process that runs its own tools (Claude Code) asks its host
// before a call its own rules do not allow. vigil answers from the
// session's permissions; what they leave to a person becomes an approval
// like any other, tagged with the agent, and the answer goes back to the
// process.

// ExternalPermission is a provider process's request to run a tool.
type ExternalPermission struct {
	Agent AgentID
	// Request is the process's id of the request.
	Request string
	Tool    string
	Input   json.RawMessage
	UseID   string
}

// ExternalPermissionWithdrawn says the process no longer waits for the
// answer (its turn was interrupted).
type ExternalPermissionWithdrawn struct {
	Agent   AgentID
	Request string
}

func (ExternalPermission) inputName() string { return "external-permission" }

func (ExternalPermissionWithdrawn) inputName() string { return "external-permission-withdrawn" }

func (st *stepper) externalPermission(in ExternalPermission) {
	a := st.s.Agents[in.Agent]
	if a == nil || a.Driver != DriverExternal || a.State == AgentClosed {
		st.drop("permission request "+in.Request, "not-external", "no provider process runs agent "+string(in.Agent))
		st.effect(AnswerPermission{Agent: in.Agent, Request: in.Request, Allow: false, Reason: "no such agent in vigil"})
		return
	}
	p := st.s.Session.Permissions
	dec, reason := permission.DecideIn(st.s.Session.Roots(), string(p.Mode), p.Allow, p.Deny, in.Tool, in.Input)
	switch dec {
	case permission.Allow:
		st.effect(AnswerPermission{Agent: a.ID, Request: in.Request, Allow: true, Reason: reason})
	case permission.Deny:
		st.effect(AnswerPermission{Agent: a.ID, Request: in.Request, Allow: false, Reason: "permission denied: " + reason})
	default:
		run := 0
		if a.Run != nil {
			run = a.Run.Seq
		}
		id := ApprovalID("p" + strconv.Itoa(st.s.Counters.Approval+1))
		st.emit(&ApprovalRequested{Approval: Approval{
			ID: id, Agent: a.ID, Run: run, UseID: in.UseID, Tool: in.Tool, Input: in.Input,
			Reason: reason, Deadline: st.now.Add(st.cfg.ApprovalTTL), External: in.Request,
		}})
	}
}

// withdrawExternal ends the external approvals of agent a that match
// (all of them when request is empty): the process no longer waits for
// their answer (it withdrew them, or it is gone).
func (st *stepper) withdrawExternal(a *Agent, request, why string) {
	for _, id := range sortedApprovals(st.s) {
		p := st.s.Approvals[id]
		if p.Agent == a.ID && p.External != "" && (request == "" || p.External == request) {
			st.emit(&ApprovalResolved{Approval: p.ID, Allow: false, Reason: why})
		}
	}
}

// denyExternalOfRun answers no to the external approvals a's run seq
// asked, when vigil ends that run: the process may still wait for them.
// Requests of the process's background subagents (asked between a's
// turns, run 0) stay for a person.
func (st *stepper) denyExternalOfRun(a *Agent, seq int, why string) {
	for _, id := range sortedApprovals(st.s) {
		if p := st.s.Approvals[id]; p.Agent == a.ID && p.External != "" && p.Run == seq {
			st.resolveApproval(p, false, "", why)
		}
	}
}

// awaitsPerson reports whether a waits for a person's answer to a request
// of its provider process.
func (st *stepper) awaitsPerson(a *Agent) bool {
	for _, p := range st.s.Approvals {
		if p.Agent == a.ID && p.External != "" {
			return true
		}
	}
	return false
}
