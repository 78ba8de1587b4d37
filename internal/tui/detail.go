package tui

import (
	"encoding/json"
	"fmt"

	"github.com/vigilrun/vigil"
)

// detail is a session's view as GET /api/sessions/{id} answers it, with
// what each agent waits on (the agent's "why").
type detail struct {
	vigil.SessionDetail
	// why is each agent's one line on what it does or waits on, by id.
	why map[vigil.AgentID]agentWhy
}

// agentWhy is the part of an agent's "why" the client shows.
type agentWhy struct {
	Kind     string `json:"kind"`
	Text     string `json:"text"`
	NeedsYou bool   `json:"needs_you"`
}

func decodeDetail(b []byte) (*detail, error) {
	var d detail
	if err := json.Unmarshal(b, &d.SessionDetail); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	var extra struct {
		Agents []struct {
			ID  vigil.AgentID `json:"id"`
			Why agentWhy      `json:"why"`
		} `json:"agents"`
	}
	d.why = map[vigil.AgentID]agentWhy{}
	if json.Unmarshal(b, &extra) == nil {
		for _, a := range extra.Agents {
			d.why[a.ID] = a.Why
		}
	}
	return &d, nil
}

// agentName is the name of agent id, or the id when it is not known.
func (d *detail) agentName(id vigil.AgentID) string {
	if d != nil {
		for _, a := range d.Agents {
			if a.ID == id {
				return a.Name
			}
		}
	}
	if id == vigil.MainAgent {
		return "main"
	}
	return string(id)
}

// mainAgent is the session's main agent, nil before the session is read.
func (d *detail) mainAgent() *vigil.Agent {
	for i := range d.Agents {
		if d.Agents[i].ID == vigil.MainAgent {
			return &d.Agents[i]
		}
	}
	return nil
}

// whyOf says what an agent does or waits on: the server's line when it
// gives one, else a line made from the agent's run.
func (d *detail) whyOf(a vigil.Agent) string {
	if w, ok := d.why[a.ID]; ok && w.Text != "" {
		return w.Text
	}
	switch {
	case a.Blocked != nil:
		return "blocked: " + a.Blocked.Reason
	case a.Retry != nil:
		return fmt.Sprintf("backing off, retry %d of %d at %s", a.Retry.Attempt, a.Retry.Max, a.Retry.At.Local().Format("15:04:05"))
	case a.Run == nil:
		if len(a.Inbox) > 0 {
			return fmt.Sprintf("%d item(s) queued", len(a.Inbox))
		}
		return "idle"
	case a.Run.Call != nil:
		return "model call " + a.Run.Call.State
	}
	for _, t := range a.Run.Tools {
		if !t.Done {
			if t.Approval != "" {
				return fmt.Sprintf("waiting for approval %s (%s)", t.Approval, t.Name)
			}
			if t.Wait != "" {
				return t.Name + ": waiting on " + t.Wait
			}
			return "running " + t.Name
		}
	}
	return fmt.Sprintf("run %d", a.Run.Seq)
}
