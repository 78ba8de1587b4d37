package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// timeline prints a session's events as they commit: time, agent, what
// happened.
type timeline struct {
	w      io.Writer
	start  time.Time
	format string
	names  map[core.AgentID]string
	last   int64
}

func newTimeline(w io.Writer, start time.Time, format string) *timeline {
	return &timeline{w: w, start: start, format: format, names: map[core.AgentID]string{core.MainAgent: "main"}}
}

func (t *timeline) record(rec store.Record) {
	t.last = rec.Seq
	if t.format == "stream-json" {
		_ = writeJSON(t.w, map[string]any{"type": "event", "seq": rec.Seq, "at": rec.At, "event": rec.Type, "data": jsonRaw(rec.Data)})
		return
	}
	if t.format != "text" {
		return
	}
	e, err := vigil.DecodeEvent(rec)
	if err != nil {
		fmt.Fprintf(t.w, "?? %v\n", err)
		return
	}
	if line := t.describe(e); line != "" {
		fmt.Fprintf(t.w, "%8s  %-6s %s\n", fmtElapsed(rec.At.Sub(t.start)), t.who(e), line)
	}
}

type jsonRaw []byte

// MarshalJSON writes the raw JSON as is.
func (j jsonRaw) MarshalJSON() ([]byte, error) { return j, nil }

func fmtElapsed(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}

func (t *timeline) name(id core.AgentID) string {
	if n, ok := t.names[id]; ok {
		return n
	}
	return string(id)
}

func (t *timeline) who(e core.Event) string {
	switch b := e.Body.(type) {
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
	case *core.MessageResolved:
		return "·"
	case *core.ModelCallRetrying:
		return t.name(b.Agent)
	case *core.ApprovalRequested:
		return t.name(b.Approval.Agent)
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

func clip(s string, n int) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ⏎ ")
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}

func (t *timeline) describe(e core.Event) string {
	switch b := e.Body.(type) {
	case *core.SessionCreated:
		return "session " + string(b.Session.ID) + " created"
	case *core.AgentCreated:
		t.names[b.Agent.ID] = b.Agent.Name
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
		return fmt.Sprintf("budget of the %s set: %s", scope, budgetLine(b.Budget))
	case *core.RunEnded:
		s := fmt.Sprintf("run %d %s", b.Seq, b.Status)
		if b.Reply != "" {
			s += ": " + clip(b.Reply, 100)
		}
		if b.Error != "" {
			s += ": " + clip(b.Error, 100)
		}
		return s
	case *core.ToolCallStarted:
		return fmt.Sprintf("→ %s %s", b.Call.Name, clip(string(b.Call.Input), 90))
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
			s += ": " + clip(n.Reply, 80)
		}
		if n.ExitCode != nil {
			s += fmt.Sprintf(": exit %d", *n.ExitCode)
		}
		return s
	case *core.MessageSent:
		m := b.Msg
		s := fmt.Sprintf("message %s → %s: %s", m.ID, t.name(m.To), m.Outcome)
		if m.Outcome == core.OutcomePending {
			s += fmt.Sprintf(" (its model round is in flight: joins run %d, or run %d answers)", m.Run, m.Run+1)
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
			return fmt.Sprintf("shell task %s started: %s", b.Task.ID, clip(b.Task.Command, 80))
		}
	case *core.TaskUpdated:
		if b.Ended {
			return fmt.Sprintf("task %s %s", b.Task, b.Status)
		}
	case *core.ModelCallRetrying:
		return fmt.Sprintf("model call %s backs off until %s: %s", b.Call, b.Until.Format("15:04:05.000"), b.Reason)
	case *core.ApprovalRequested:
		return fmt.Sprintf("waits for permission %s: %s", b.Approval.ID, b.Approval.Tool)
	case *core.HoldSet:
		return "user queue held"
	case *core.HoldReleased:
		return "user queue resumed"
	case *core.Dropped:
		return fmt.Sprintf("DROPPED %s: %s", b.What, b.Reason)
	case *core.Recovered:
		return fmt.Sprintf("recovered after a restart (incarnation %d)", b.Incarnation)
	case *core.ItemsReturned:
		return fmt.Sprintf("run %d gave %d unseen item(s) back to the inbox", b.Seq, len(b.Items))
	case *core.RetryScheduled:
		r := b.Retry
		return fmt.Sprintf("retry %d of %d at %s, after run %d failed: %s", r.Attempt, r.Max, r.At.Format("15:04:05.000"), r.Run, clip(r.Reason, 80))
	case *core.AgentBlocked:
		return fmt.Sprintf("BLOCKED after run %d failed: %s (a new prompt or 'vigil retry' releases it)", b.Block.Run, clip(b.Block.Reason, 100))
	case *core.AgentReleased:
		return "released by " + b.By
	}
	return ""
}

func (t *timeline) result(r result, memory bool) error {
	switch t.format {
	case "json":
		return writeJSON(t.w, r)
	case "stream-json":
		return writeJSON(t.w, map[string]any{"type": "result", "result": r})
	}
	fmt.Fprintf(t.w, "\n%s after %.1fs: %d runs, %d notifications, %d messages, %d drops, %d+%d tokens",
		r.Status, float64(r.DurationMS)/1000, r.Runs, r.Notifications, r.Messages, r.Drops, r.InputTokens, r.OutputTokens)
	if u := r.Spent.Usage; u.CacheReadTokens+u.CacheWriteTokens > 0 {
		fmt.Fprintf(t.w, " (cache read %d, write %d)", u.CacheReadTokens, u.CacheWriteTokens)
	}
	if r.Spent.Unpriced == 0 && r.Spent.Rounds > 0 {
		fmt.Fprintf(t.w, ", %s", core.FormatUSD(r.Spent.Cost))
	}
	if r.Compactions > 0 {
		fmt.Fprintf(t.w, ", %d compactions", r.Compactions)
	}
	fmt.Fprintln(t.w)
	if len(r.Pending) > 0 {
		fmt.Fprintln(t.w, "still pending:")
		for _, p := range r.Pending {
			fmt.Fprintln(t.w, "  "+p)
		}
		switch {
		case memory:
			fmt.Fprintln(t.w, "the session was in memory only: this work is abandoned with the process")
		case r.Status == "blocked":
			fmt.Fprintf(t.w, "the session %s is kept open in the store: 'vigil run --resume %s \"…\"' goes on with a new prompt, or 'vigil retry %s AGENT' on a server that serves it\n", r.Session, r.Session, r.Session)
		default:
			fmt.Fprintf(t.w, "the session %s is kept in the store; 'vigil serve' on the same data takes it over and finishes it\n", r.Session)
		}
	}
	fmt.Fprintf(t.w, "\n%s\n", r.Reply)
	return nil
}
