package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/vigilrun/vigil"
)

// sideView draws the side pane: the agent tree with what each agent
// waits on, background tasks with their elapsed time and the tail of
// their output, the latest notifications, and the inboxes with the
// priorities of their items and why they do not drain.
func (m *model) sideView(w, h int) string {
	lines := sideLines(m.d, m.notes, w, time.Now())
	if len(lines) > h {
		lines = lines[:h]
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	return lipgloss.NewStyle().Width(w).MaxWidth(w).Render(strings.Join(lines, "\n"))
}

// sideLines are the side pane's lines at width w.
func sideLines(d *detail, notes []string, w int, now time.Time) []string {
	var out []string
	add := func(st lipgloss.Style, s string) { out = append(out, st.Render(truncate(s, w))) }
	if d == nil {
		add(styleDim, "no session yet")
		return out
	}
	add(styleHead, "AGENTS")
	for _, a := range d.Agents {
		state := string(a.State)
		why := d.whyOf(a)
		st := lipgloss.NewStyle()
		if w, ok := d.why[a.ID]; ok && w.NeedsYou {
			st = styleWarn
		}
		line := fmt.Sprintf("%s%s %s", strings.Repeat("  ", a.Depth), a.Name, state)
		if why != "" && why != state {
			line += " · " + why
		}
		add(st, line)
	}
	var live []vigil.Task
	for _, t := range d.Tasks {
		// Running ones, and those that ended a moment ago. A subagent
		// between runs (idle) is in the tree above, with what it waits on.
		if t.Live() || !t.Ended.IsZero() && now.Sub(t.Ended) < time.Minute {
			live = append(live, t)
		}
	}
	if len(live) > 0 {
		add(styleHead, "TASKS")
		for _, t := range live {
			end := now
			if !t.Ended.IsZero() {
				end = t.Ended
			}
			what := t.Description
			if t.Command != "" {
				what = t.Command
			}
			add(lipgloss.NewStyle(), fmt.Sprintf("%s %s %s %s", t.ID, t.Status, elapsed(end.Sub(t.Started)), oneLine(what)))
			if tail := strings.TrimRight(t.OutputTail, "\n"); tail != "" {
				ls := strings.Split(tail, "\n")
				for _, l := range ls[max(len(ls)-2, 0):] {
					add(styleDim, "  │ "+l)
				}
			}
		}
	}
	if len(notes) > 0 {
		add(styleHead, "NOTIFICATIONS")
		for _, n := range notes[max(len(notes)-5, 0):] {
			add(styleDim, strings.TrimPrefix(n, "← notification "))
		}
	}
	var inbox []string
	for _, a := range d.Agents {
		for _, it := range a.Inbox {
			what := it.Text
			if what == "" {
				what = string(it.Kind)
				if it.Note != nil {
					what = fmt.Sprintf("notification %s#%d", it.Note.Task, it.Note.Run)
				}
			}
			inbox = append(inbox, fmt.Sprintf("%s %s %s: %s", a.Name, it.Priority, it.Kind, oneLine(what)))
		}
	}
	if len(inbox) > 0 || len(d.Status) > 0 {
		add(styleHead, "INBOX")
		for _, l := range inbox {
			add(lipgloss.NewStyle(), l)
		}
		for _, st := range d.Status {
			if st.Draining {
				continue
			}
			add(styleWarn, fmt.Sprintf("%s not draining: %s", st.Name, st.Reason))
		}
	}
	if d.Hold != nil {
		add(styleWarn, "user prompts held"+reason(d.Hold.Reason))
	}
	return out
}

func reason(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// elapsed formats a duration as 4s, 2m05s or 1h02m.
func elapsed(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
