package core

import (
	"encoding/json"
	"reflect"
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
	input := p.Input
	var updated json.RawMessage
	if len(in.Input) > 0 && in.Allow {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(in.Input, &obj); err != nil {
			st.fail(CodeInvalid, "the updated input of %s is not a JSON object: %v", p.Tool, err)
			return
		}
		if !jsonEqual(in.Input, p.Input) {
			updated, input = in.Input, in.Input
		}
	}
	if updated != nil {
		// What the person allowed is not what the model asked: the deny
		// rules still hold for it.
		perms := st.s.Session.Permissions
		if dec, reason := permission.DecideIn(st.s.Session.Roots(), string(perms.Mode), perms.Allow, perms.Deny, p.Tool, updated); dec == permission.Deny {
			st.resolveApproval(p, false, in.By, "the updated input is denied: "+reason, nil)
			return
		}
	}
	if !in.Always || !in.Allow {
		st.resolveApproval(p, in.Allow, in.By, in.Reason, updated)
		return
	}
	rule, err := permission.RuleFor(p.Tool, input)
	if err != nil {
		st.fail(CodeInvalid, "cannot allow %s always: %v; allow it once", p.Tool, err)
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	st.emit(&PermissionRuleAdded{Rule: rule, By: by, Approval: p.ID})
	st.resolveApproval(p, true, in.By, in.Reason, updated)
	// The rule answers every other request it allows, at once.
	st.redecideApprovals("allowed by the rule "+rule, by)
}

// redecideApprovals answers the pending requests that the session's
// permissions now decide (a rule was added, the mode changed); why says
// what changed, by who changed it.
func (st *stepper) redecideApprovals(why, by string) {
	perms := st.s.Session.Permissions
	for _, id := range sortedApprovals(st.s) {
		q := st.s.Approvals[id]
		switch dec, reason := permission.DecideIn(st.s.Session.Roots(), string(perms.Mode), perms.Allow, perms.Deny, q.Tool, q.Input); dec {
		case permission.Allow:
			st.resolveApproval(q, true, by, why, nil)
		case permission.Deny:
			st.resolveApproval(q, false, by, why+": "+reason, nil)
		}
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func (st *stepper) setPermissionMode(in SetPermissionMode) {
	if !permission.ValidMode(string(in.Mode)) {
		st.fail(CodeInvalid, "unknown permission mode %q (want ask, accept-edits, auto or bypass)", in.Mode)
		return
	}
	if st.s.Session.Closed {
		st.fail(CodeClosed, "session is closed")
		return
	}
	if st.s.Session.Permissions.Mode == in.Mode {
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	st.emit(&PermissionModeSet{Mode: in.Mode, By: by})
	st.redecideApprovals("permission mode "+string(in.Mode)+" set by "+by, by)
}

// PermissionModeSet changes the session's permission mode.
type PermissionModeSet struct {
	Mode PermissionMode `json:"mode"`
	By   string         `json:"by,omitempty"`
}

// Type implements Body: the name of the event.
func (*PermissionModeSet) Type() string { return "permission.mode_set" }

func (e *PermissionModeSet) apply(s *State, _ time.Time) { s.Session.Permissions.Mode = e.Mode }

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

// resolveApproval answers p; input, when allowed, replaces the call's
// input (nil keeps it).
func (st *stepper) resolveApproval(p *Approval, allow bool, by, reason string, input json.RawMessage) {
	a := st.s.Agents[p.Agent]
	if !allow {
		input = nil
	}
	st.emit(&ApprovalResolved{Approval: p.ID, Allow: allow, By: by, Reason: reason, Input: input})
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
		st.effect(AnswerPermission{Agent: a.ID, Request: p.External, Allow: allow, Reason: msg, Input: input})
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
			st.resolveApproval(p, false, "", why, nil)
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
