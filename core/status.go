package core

import (
	"fmt"
	"time"
)

// InboxStatus says, for one agent with a non-empty inbox, whether the
// inbox is draining and, if not, why, with the deadline or the event that
// clears the cause (DESIGN rule 4).
type InboxStatus struct {
	Agent    AgentID `json:"agent"`
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Items    int     `json:"items"`
	Held     int     `json:"held"`
	Draining bool    `json:"draining"`
	// Kind is the kind of the agent's Why, whose text is Reason.
	Kind     string    `json:"kind"`
	Reason   string    `json:"reason"`
	Until    time.Time `json:"until,omitzero"`
	ClearsOn string    `json:"clears_on,omitempty"`
}

// Status lists every agent whose inbox is not empty, with why it is not
// draining: the agent's Why (WhyOf), so status and every other reader say
// the same. An idle agent with an item it may take and nothing blocking it
// reads Why kind ready and Draining false: that would be a missed wake,
// which the level-triggered scheduler never leaves behind.
func Status(s *State) []InboxStatus {
	var out []InboxStatus
	for _, id := range s.Order {
		a := s.Agents[id]
		if len(a.Inbox) == 0 {
			continue
		}
		out = append(out, inboxStatus(s, a, WhyOf(s, a)))
	}
	return out
}

// inboxStatus is a's inbox status, given its Why.
func inboxStatus(s *State, a *Agent, w Why) InboxStatus {
	st := InboxStatus{Agent: a.ID, Name: a.Name, State: string(a.State), Items: len(a.Inbox),
		Draining: a.Run != nil && !w.Blocks(), Kind: w.Kind, Reason: w.Text, Until: w.Until, ClearsOn: w.ClearsOn}
	for _, it := range a.Inbox {
		if s.Hold != nil && it.Holdable() {
			st.Held++
		}
	}
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

// RunProgress lists every run in progress with what it waits on (its
// agent's Why) and the time of its last progress; runs with no progress
// for longer than stall get a Stalled line ("no progress for 7m (waiting
// on tool Bash (u3))").
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
		p.Waiting = WhyOf(s, a).On
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
