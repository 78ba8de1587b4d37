package main

import (
	"fmt"
	"io"
	"time"

	"github.com/vigilrun/vigil"
)

// timeline prints a session's events as they commit: time, agent, what
// happened (vigil.Timeline's lines), or with stream-json every event.
type timeline struct {
	w      io.Writer
	start  time.Time
	format string
	tl     *vigil.Timeline
	last   int64
}

// newTimeline prints in format text, stream-json or raw (nothing);
// agents are the session's agents before the first event it is given.
func newTimeline(w io.Writer, start time.Time, format string, agents ...vigil.Agent) *timeline {
	return &timeline{w: w, start: start, format: format, tl: vigil.NewTimeline(agents...)}
}

func (t *timeline) record(e vigil.Event) {
	t.last = e.Seq
	if t.format == "stream-json" {
		_ = writeJSON(t.w, map[string]any{"type": "event", "seq": e.Seq, "at": e.At, "event": e.Type, "data": e.Data})
		return
	}
	if t.format != "text" {
		return
	}
	line, ok, err := t.tl.Line(e)
	if err != nil {
		fmt.Fprintf(t.w, "?? %v\n", err)
		return
	}
	if ok {
		fmt.Fprintln(t.w, line.Format(t.start))
	}
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
		fmt.Fprintf(t.w, ", %s", vigil.USD(r.Spent.CostMicros))
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
