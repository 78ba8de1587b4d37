package vigil

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/text"
	"github.com/vigilrun/vigil/store"
)

// Timeline turns a session's events into lines for people: who did what,
// one line per event worth showing (a run started or ended, a tool call, a
// notification, a message and its outcome, a drop, a recovery…). It is
// what 'vigil run' and 'vigil logs' print; every edge that shows a session
// to people (the web UI's server, a terminal client) can share it, so all
// say the same things in the same words.
//
// A Timeline remembers the agents' names as their creation events go by,
// so it must see one session's events in order. It is not safe for
// concurrent use.
type Timeline struct {
	names map[AgentID]string
	// asked are the agents of the permission requests seen, by request:
	// the line of an answer names the agent that asked.
	asked map[core.ApprovalID]core.AgentID
}

// TimelineLine is one event told for people.
type TimelineLine struct {
	Seq int64
	At  time.Time
	// Who is the agent's name, "user", or "·" for the session itself.
	Who string
	// Text says what happened, on one line.
	Text string
}

// NewTimeline returns a timeline for one session. agents are those the
// session had before the first event it will be shown
// (SessionDetail.Agents), so that lines about them carry their names; a
// timeline that sees the session from its first event needs none.
func NewTimeline(agents ...Agent) *Timeline {
	t := &Timeline{names: map[AgentID]string{MainAgent: "main"}, asked: map[core.ApprovalID]core.AgentID{}}
	for _, a := range agents {
		t.names[a.ID] = a.Name
	}
	return t
}

// Line tells e for people. ok is false for an event not worth a line (most
// bookkeeping). err is set, and ok false, when e's body cannot be decoded:
// an event type this library does not know, or a damaged body.
func (t *Timeline) Line(e Event) (line TimelineLine, ok bool, err error) {
	ev, err := decodeEvent(store.Record{Session: string(e.Session), Seq: e.Seq, Global: e.Global, At: e.At, Type: e.Type, Data: e.Data})
	if err != nil {
		return TimelineLine{}, false, err
	}
	// describe learns the names of new agents, which who then uses.
	text := t.describe(ev.Body)
	if text == "" {
		return TimelineLine{}, false, nil
	}
	return TimelineLine{Seq: e.Seq, At: e.At, Who: t.who(ev.Body), Text: text}, true, nil
}

// Format writes the line as the CLI prints it: the time since start in
// seconds, who, and what happened.
//
//	0.004s  main   run 1 started (prompt)
func (l TimelineLine) Format(start time.Time) string {
	d := max(l.At.Sub(start), 0)
	return fmt.Sprintf("%8s  %-6s %s", fmt.Sprintf("%.3fs", d.Seconds()), l.Who, l.Text)
}

func (t *Timeline) name(id core.AgentID) string {
	if n, ok := t.names[AgentID(id)]; ok {
		return n
	}
	return string(id)
}

func (t *Timeline) who(body core.Body) string {
	switch b := body.(type) {
	case *core.RunStarted:
		return t.name(b.Agent)
	case *core.ContextCompacted:
		return t.name(b.Agent)
	case *core.BudgetSet:
		return "user"
	case *core.RunEnded:
		return t.name(b.Agent)
	case *core.ToolCallStarted:
		return t.name(b.Agent)
	case *core.NotificationWritten:
		return t.name(b.Note.Owner)
	case *core.MessageSent:
		if b.Msg.From == "user" {
			return "user"
		}
		return t.name(core.AgentID(b.Msg.From))
	case *core.ModelCallRetrying:
		return t.name(b.Agent)
	case *core.ApprovalRequested:
		return t.name(b.Approval.Agent)
	case *core.ApprovalResolved:
		if a, ok := t.asked[b.Approval]; ok {
			delete(t.asked, b.Approval)
			return t.name(a)
		}
	case *core.HoldSet, *core.HoldReleased, *core.PermissionRuleAdded, *core.PermissionModeSet:
		return "user"
	case *core.AgentCreated:
		return t.name(b.Agent.Owner)
	case *core.ItemsReturned:
		return t.name(b.Agent)
	case *core.RetryScheduled:
		return t.name(b.Agent)
	case *core.AgentBlocked:
		return t.name(b.Agent)
	case *core.AgentReleased:
		return t.name(b.Agent)
	}
	return "·"
}

func (t *Timeline) describe(body core.Body) string {
	switch b := body.(type) {
	case *core.SessionCreated:
		return "session " + string(b.Session.ID) + " created"
	case *core.AgentCreated:
		t.names[AgentID(b.Agent.ID)] = b.Agent.Name
		return fmt.Sprintf("started subagent %s (%s, task %s)", b.Agent.Name, b.Agent.ID, b.Agent.Task)
	case *core.RunStarted:
		return fmt.Sprintf("run %d started (%s)", b.Seq, b.Kind)
	case *core.ContextCompacted:
		c := b.Compaction
		return fmt.Sprintf("context compacted (%d): ~%d -> ~%d tokens; %d messages summarised, ledger of %d task(s)", c.Seq, c.Before, c.After, c.Upto, len(c.Ledger.Tasks))
	case *core.BudgetSet:
		scope := "session"
		if b.Agent != "" {
			scope = "tree of " + t.name(b.Agent)
		}
		return fmt.Sprintf("budget of the %s set: %s", scope, budgetOut(b.Budget).String())
	case *core.RunEnded:
		s := fmt.Sprintf("run %d %s", b.Seq, b.Status)
		if b.Reply != "" {
			s += ": " + text.OneLine(b.Reply, 100)
		}
		if b.Error != "" {
			s += ": " + text.OneLine(b.Error, 100)
		}
		return s
	case *core.ToolCallStarted:
		return fmt.Sprintf("→ %s %s", b.Call.Name, text.OneLine(string(b.Call.Input), 90))
	case *core.NotificationWritten:
		n := b.Note
		from := t.name(n.Agent)
		if n.Kind == core.TaskShell {
			from = "shell " + string(n.Key.Task)
		}
		s := fmt.Sprintf("← notification %s from %s (%s)", n.Key, from, n.Status)
		if n.Delivery == core.DeliverToolResult {
			s += " as the Agent tool's result"
		}
		if n.Reply != "" {
			s += ": " + text.OneLine(n.Reply, 80)
		}
		switch {
		case n.ExitCode != nil && *n.ExitCode < 0 && n.Error != "":
			s += ": " + text.OneLine(n.Error, 60) // the signal that ended it
		case n.ExitCode != nil:
			s += fmt.Sprintf(": exit %d", *n.ExitCode)
		}
		return s
	case *core.MessageSent:
		m := b.Msg
		s := fmt.Sprintf("message %s → %s: %s", m.ID, t.name(m.To), m.Outcome)
		switch m.Outcome {
		case core.OutcomePending:
			s += fmt.Sprintf(" (its model round is in flight: joins run %d, or run %d answers)", m.Run, m.Run+1)
		case core.OutcomeJoined:
			s += fmt.Sprintf(" (run %d sees it at its next model round)", m.Run)
		case core.OutcomeResumed:
			s += fmt.Sprintf(" (the agent was idle; run %d answers)", m.Run)
		case core.OutcomeQueuedBehindStop:
			s += fmt.Sprintf(" (run %d answers)", m.Run+1)
		}
		if m.Reason != "" {
			s += " (" + m.Reason + ")"
		}
		return s
	case *core.MessageResolved:
		if b.Outcome == core.OutcomeQueuedBehindStop {
			why := b.Reason
			if why == "" {
				why = fmt.Sprintf("run %d was ending", b.Run)
			}
			return fmt.Sprintf("message %s: queued-behind-stop (%s; run %d answers)", b.Msg, why, b.Run+1)
		}
		return fmt.Sprintf("message %s: %s run %d", b.Msg, b.Outcome, b.Run)
	case *core.TaskStarted:
		if b.Task.Kind == core.TaskShell {
			return fmt.Sprintf("shell task %s started: %s", b.Task.ID, text.OneLine(b.Task.Command, 80))
		}
	case *core.TaskUpdated:
		if b.Ended {
			return fmt.Sprintf("task %s %s", b.Task, b.Status)
		}
	case *core.ModelCallRetrying:
		return fmt.Sprintf("model call %s backs off until %s: %s", b.Call, b.Until.Format("15:04:05.000"), b.Reason)
	case *core.ApprovalRequested:
		p := b.Approval
		t.asked[p.ID] = p.Agent
		s := fmt.Sprintf("waits for permission %s: %s", p.ID, p.Tool)
		if in := toolInputBrief(p.Input); in != "" {
			s += " " + in
		}
		if p.Reason != "" {
			s += " (" + text.OneLine(p.Reason, 80) + ")"
		}
		return s
	case *core.ApprovalResolved:
		s := fmt.Sprintf("permission %s denied", b.Approval)
		if b.Allow {
			s = fmt.Sprintf("permission %s allowed", b.Approval)
		}
		if b.By != "" {
			s += " by " + b.By
		}
		if b.Reason != "" {
			s += ": " + text.OneLine(b.Reason, 80)
		}
		if len(b.Input) > 0 {
			s += ", with the input changed to " + text.OneLine(string(b.Input), 80)
		}
		return s
	case *core.PermissionModeSet:
		s := "permission mode set to " + string(b.Mode)
		if b.By != "" && b.By != "user" {
			s += " by " + b.By
		}
		return s
	case *core.PermissionRuleAdded:
		s := "allowed from now on: " + b.Rule
		if b.Approval != "" {
			s += fmt.Sprintf(" (answering %s always)", b.Approval)
		}
		return s
	case *core.HoldSet:
		s := "user queue held"
		if b.By != "" && b.By != "user" {
			s += " by " + b.By
		}
		if b.Reason != "" {
			s += ": " + text.OneLine(b.Reason, 80)
		}
		return s
	case *core.HoldReleased:
		if b.By != "" && b.By != "user" {
			return "user queue resumed by " + b.By
		}
		return "user queue resumed"
	case *core.Dropped:
		return fmt.Sprintf("DROPPED %s: %s", b.What, b.Reason)
	case *core.Recovered:
		// Readers' events leave the incarnation out (eventData): the
		// line does not show it.
		switch b.Cause {
		case core.TakeoverHandover:
			return "resumed after a clean stop: handed over by " + b.Previous
		case core.TakeoverOwnerDied:
			return "taken over after a crash: its owner " + b.Previous + " died"
		case core.TakeoverLeaseExpired:
			return "taken over: its owner " + b.Previous + " stopped renewing its lease"
		}
		return "recovered after a restart"
	case *core.ItemsReturned:
		if len(b.Items) == 0 {
			return "" // nothing went back: not worth a line
		}
		return fmt.Sprintf("run %d gave %d unseen item(s) back to the inbox", b.Seq, len(b.Items))
	case *core.RetryScheduled:
		r := b.Retry
		return fmt.Sprintf("retry %d of %d at %s, after run %d failed: %s", r.Attempt, r.Max, r.At.Format("15:04:05.000"), r.Run, text.OneLine(r.Reason, 80))
	case *core.AgentBlocked:
		return fmt.Sprintf("BLOCKED after run %d failed: %s (a new prompt or 'vigil retry' releases it)", b.Block.Run, text.OneLine(b.Block.Reason, 100))
	case *core.AgentReleased:
		return "released by " + b.By
	}
	return ""
}

// toolInputBrief is a tool call's input in a few words: its command or
// path when it has one, else its JSON.
func toolInputBrief(in json.RawMessage) string {
	var fields map[string]any
	if json.Unmarshal(in, &fields) != nil || len(fields) == 0 {
		return ""
	}
	for _, k := range []string{"command", "file_path", "path", "pattern", "url"} {
		if s, ok := fields[k].(string); ok && s != "" {
			return text.OneLine(s, 80)
		}
	}
	return text.OneLine(string(in), 80)
}
