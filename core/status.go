package core

import (
	"fmt"
	"time"
)

// InboxStatus says, for one agent with a non-empty inbox, whether the
// inbox is draining and, if not, why, with the deadline or the event that
// clears the cause (DESIGN rule 4).
type InboxStatus struct {
	Agent    AgentID   `json:"agent"`
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Items    int       `json:"items"`
	Held     int       `json:"held"`
	Draining bool      `json:"draining"`
	Reason   string    `json:"reason"`
	Until    time.Time `json:"until,omitzero"`
	ClearsOn string    `json:"clears_on,omitempty"`
}

// Status lists every agent whose inbox is not empty, with why it is not
// draining. An idle agent with an item it may take and nothing blocking it
// is reported with Reason "no blocker" and Draining false: that would be a
// missed wake, which the level-triggered scheduler never leaves behind.
func Status(s *State) []InboxStatus {
	var out []InboxStatus
	for _, id := range s.Order {
		a := s.Agents[id]
		if len(a.Inbox) == 0 {
			continue
		}
		out = append(out, agentStatus(s, a))
	}
	return out
}

func agentStatus(s *State, a *Agent) InboxStatus {
	st := InboxStatus{Agent: a.ID, Name: a.Name, State: string(a.State), Items: len(a.Inbox)}
	takeable, later := 0, 0
	for _, it := range a.Inbox {
		if s.Hold != nil && it.Holdable() {
			st.Held++
			continue
		}
		takeable++
		if it.Priority == PriorityLater {
			later++
		}
	}
	holdNote := ""
	if st.Held > 0 {
		holdNote = fmt.Sprintf("; %d user prompt(s) held by %s", st.Held, holdBy(s.Hold))
	}
	switch {
	case s.Session.Closed || a.State == AgentClosed:
		st.Reason = "closed"
		return st
	case takeable == 0:
		st.Reason = fmt.Sprintf("user prompts held by %s since %s", holdBy(s.Hold), s.Hold.Since.UTC().Format(time.RFC3339))
		st.ClearsOn = "resume of the user queue"
		return st
	case a.Driver == DriverCaller:
		st.Reason = "waiting for the outside caller to read them (MCP wait)"
		st.ClearsOn = "the caller's wait and acknowledgement"
		return st
	case a.Blocked != nil:
		b := a.Blocked
		st.Reason = fmt.Sprintf("blocked: %s; run %d ended: %s", unseenLine(a), b.Run, b.Reason) + holdNote
		if b.Kind == FailBudget {
			st.ClearsOn = "a raised budget (vigil budget SESSION ..., or POST /api/sessions/{id}/budget)"
			return st
		}
		st.ClearsOn = "a message from the user, or a retry (vigil retry SESSION " + a.Name + ")"
		if a.ID == MainAgent {
			st.ClearsOn = "a new prompt or message from the user, or a retry (vigil retry SESSION " + a.Name + ")"
		}
		return st
	case a.Run == nil && a.Retry != nil:
		r := a.Retry
		st.Reason = fmt.Sprintf("%s; run %d failed: %s; retry %d of %d at %s", unseenLine(a), r.Run, r.Reason, r.Attempt, r.Max, r.At.UTC().Format(time.TimeOnly)) + holdNote
		st.Until = r.At
		st.ClearsOn = "the retry, a new prompt or message from a person, or vigil retry"
		return st
	case a.Run == nil:
		st.Reason = "no blocker: an idle agent with items it may take (a missed wake)"
		return st
	}
	r := a.Run
	st.Draining = true
	var why string
	switch {
	case a.Driver == DriverExternal:
		why = fmt.Sprintf("items wait for the provider process to end run %d's turn", r.Seq)
		st.ClearsOn = "the provider process ends its turn"
	case r.Call != nil && r.Call.State == CallWaitingSlot:
		why = fmt.Sprintf("run %d waits for a model-call slot (session cap reached)", r.Seq)
		st.ClearsOn = "another model call of the session ends"
	case r.Call != nil && r.Call.State == CallBackoff:
		why = fmt.Sprintf("run %d's model call backs off after %s (attempt %d)", r.Seq, r.Call.RetryReason, r.Call.Attempt)
		st.Until = r.Call.RetryUntil
		st.ClearsOn = "the retry"
	case r.Call != nil:
		why = fmt.Sprintf("items join run %d at its next model round; model call %s in flight", r.Seq, r.Call.ID)
		st.ClearsOn = "the model answers"
	case a.State == AgentWaiting:
		for _, id := range sortedApprovals(s) {
			if p := s.Approvals[id]; p.Agent == a.ID {
				why = fmt.Sprintf("run %d waits for permission request %s (%s)", r.Seq, p.ID, p.Tool)
				st.Until = p.Deadline
				st.ClearsOn = "an answer to the request, or its deadline (then denied)"
				break
			}
		}
	default:
		pending := 0
		for _, tc := range r.Tools {
			if !tc.Done {
				pending++
				if tc.Wait == WaitChild {
					why = fmt.Sprintf("run %d waits for foreground subagent %s", r.Seq, tc.Child)
				}
			}
		}
		if why == "" {
			why = fmt.Sprintf("items join run %d when its %d running tool call(s) finish", r.Seq, pending)
		}
		st.ClearsOn = "the tool calls finish"
	}
	if later > 0 {
		why += fmt.Sprintf("; %d later item(s) wait for run %d to end", later, r.Seq)
	}
	st.Reason = why + holdNote
	return st
}

func holdBy(h *Hold) string {
	if h == nil {
		return "nobody"
	}
	if h.By == "" {
		return "the user"
	}
	return h.By
}

// unseenLine says what a's inbox holds that its model has not seen: "2
// notifications not yet seen by the model".
func unseenLine(a *Agent) string {
	return unseenWords(a.Inbox) + " not yet seen by the model"
}

// Progress says, for a run in progress, what it waits on and since when.
type Progress struct {
	Agent AgentID `json:"agent"`
	Name  string  `json:"name"`
	Run   int     `json:"run"`
	// Waiting names what the run waits on: "model call c12", "tool Bash
	// (u3)", "task t4", "approval p2", "subagent a3", "the provider
	// process", "a model-call slot".
	Waiting string    `json:"waiting"`
	Since   time.Time `json:"since"`
	// Stalled is set when nothing happened for longer than the bound the
	// caller gave: the line to show a person.
	Stalled string `json:"stalled,omitempty"`
}

// RunProgress lists every run in progress with what it waits on and the
// time of its last progress; runs with no progress for longer than stall
// get a Stalled line ("no progress for 7m (waiting on tool Bash (u3))").
func RunProgress(s *State, now time.Time, stall time.Duration) []Progress {
	var out []Progress
	for _, id := range s.Order {
		a := s.Agents[id]
		r := a.Run
		if r == nil {
			continue
		}
		p := Progress{Agent: a.ID, Name: a.Name, Run: r.Seq, Since: a.LastActive}
		if c := r.Call; c != nil && c.Started.After(p.Since) {
			p.Since = c.Started
		}
		for _, tc := range r.Tools {
			if tc.Started.After(p.Since) {
				p.Since = tc.Started
			}
		}
		switch {
		case a.Driver == DriverExternal:
			p.Waiting = "the provider process"
		case r.Call != nil && r.Call.State == CallWaitingSlot:
			p.Waiting = "a model-call slot"
		case r.Call != nil:
			p.Waiting = "model call " + string(r.Call.ID)
			if r.Call.Purpose == PurposeCompact {
				p.Waiting += " (compaction)"
			}
		default:
			for _, tc := range r.Tools {
				if tc.Done {
					continue
				}
				switch tc.Wait {
				case WaitApproval:
					p.Waiting = "approval " + string(tc.Approval)
				case WaitChild:
					p.Waiting = "subagent " + string(tc.Child)
				case WaitTask:
					p.Waiting = "task " + string(tc.WaitFor)
				default:
					p.Waiting = fmt.Sprintf("tool %s (%s)", tc.Name, tc.UseID)
				}
				break
			}
		}
		if p.Waiting == "" {
			p.Waiting = "the next round"
		}
		if idle := now.Sub(p.Since); stall > 0 && idle >= stall {
			p.Stalled = fmt.Sprintf("no progress for %s (waiting on %s)", idle.Round(time.Second), p.Waiting)
		}
		out = append(out, p)
	}
	return out
}
