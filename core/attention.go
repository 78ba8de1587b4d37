package core

import "fmt"

// Attention returns the reasons a person must act on the session, one
// short line each, most pressing first: every pending approval ("approval
// p1: Bash (main)", in the order they were asked), then every agent a
// failure or a budget blocks until a person releases it ("run failed:
// worker", "budget spent: main"), then a main agent whose last run failed
// and that has done nothing since ("run failed: main"). A closed session
// needs nobody: nil. The lines read the state only, so any node computes
// the same ones.
func Attention(s *State) []string {
	if s == nil || s.Session.Closed {
		return nil
	}
	var out []string
	for _, id := range sortedApprovals(s) {
		p := s.Approvals[id]
		who := string(p.Agent)
		if a := s.Agents[p.Agent]; a != nil {
			who = a.Name
		}
		out = append(out, fmt.Sprintf("approval %s: %s (%s)", p.ID, p.Tool, who))
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		if a == nil || a.State == AgentClosed {
			continue
		}
		switch {
		case a.Blocked != nil && a.Blocked.Kind == FailBudget:
			out = append(out, "budget spent: "+a.Name)
		case a.Blocked != nil:
			out = append(out, "run failed: "+a.Name)
		case a.ID == MainAgent && a.Run == nil && a.Retry == nil && len(a.Runs) > 0 && a.Runs[len(a.Runs)-1].Status == RunFailed:
			// A subagent's failure is its owner's to handle (its
			// notification says so); the main agent's is the person's.
			out = append(out, "run failed: "+a.Name)
		}
	}
	return out
}
