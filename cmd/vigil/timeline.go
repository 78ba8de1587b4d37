package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/vigilrun/vigil"
)

// timeline prints a session's events as they commit: time, agent, what
// happened (vigil.Timeline's lines), or with stream-json every event.
//
// On a terminal it also shows the models' text as it streams (live
// events), on one line under the timeline that each new line of the
// timeline erases and redraws: the live text is never left in the
// output, so a round's text prints once, as its committed event tells it.
// Elsewhere (a file, a pipe) the text format prints committed events only,
// and stream-json prints live events too, marked "live".
type timeline struct {
	w      io.Writer
	start  time.Time
	format string
	tl     *vigil.Timeline
	last   int64
	// live shows live text; nil when w is not a terminal.
	live *liveLine
}

// newTimeline prints in format text, stream-json or raw (nothing);
// agents are the session's agents before the first event it is given.
func newTimeline(w io.Writer, start time.Time, format string, agents ...vigil.Agent) *timeline {
	t := &timeline{w: w, start: start, format: format, tl: vigil.NewTimeline(agents...)}
	if f, ok := w.(*os.File); ok && format == "text" && term.IsTerminal(int(f.Fd())) {
		width := 80
		if c, _, err := term.GetSize(int(f.Fd())); err == nil && c > 20 {
			width = c
		}
		t.live = newLiveLine(width)
	}
	return t
}

// eventAgent is the agent an event names, as the documented event format
// has it.
type eventAgent struct {
	Agent string `json:"agent"`
}

func (t *timeline) record(e vigil.Event) {
	if e.Live {
		t.recordLive(e)
		return
	}
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
		t.print(fmt.Sprintf("?? %v", err))
		return
	}
	if t.live != nil {
		t.live.committed(e)
	}
	if ok {
		t.print(line.Format(t.start))
	} else if t.live != nil {
		t.live.redraw(t.w, t.start)
	}
}

// print prints a line of the timeline, under which the live text goes on.
func (t *timeline) print(s string) {
	if t.live == nil {
		fmt.Fprintln(t.w, s)
		return
	}
	t.live.erase(t.w)
	fmt.Fprintln(t.w, s)
	t.live.redraw(t.w, t.start)
}

// recordLive prints a live event: with stream-json as a line marked
// "live", on a terminal as the live line; else not at all.
func (t *timeline) recordLive(e vigil.Event) {
	switch {
	case t.format == "stream-json":
		_ = writeJSON(t.w, map[string]any{"type": "event", "live": true, "at": e.At, "event": e.Type, "data": e.Data})
	case t.live != nil && e.Type == vigil.LiveTextType:
		var d vigil.TextDelta
		if json.Unmarshal(e.Data, &d) != nil {
			return
		}
		t.live.delta(d, e.At)
		t.live.redraw(t.w, t.start)
	}
}

func (t *timeline) result(r result, memory bool) error {
	if t.live != nil {
		t.live.erase(t.w)
		t.live = nil
	}
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

// maxLiveText bounds the live text kept per agent: the line shows its
// end.
const maxLiveText = 4 << 10

// liveLine is the terminal line that shows the text a model streams: the
// agent that spoke last, and the end of its call's text so far. The
// committed end of the call (model.ended) or of the agent's run ends it.
type liveLine struct {
	width  int
	agents map[string]*liveAgent
	cur    string // the agent shown, "" for none
	shown  bool   // the line is on the screen
}

// liveAgent is one agent's live text.
type liveAgent struct {
	name, call string
	text       string
	dropped    bool // some of it was dropped: the line says so
	at         time.Time
}

func newLiveLine(width int) *liveLine {
	return &liveLine{width: width, agents: map[string]*liveAgent{}}
}

// delta adds a live event's text.
func (l *liveLine) delta(d vigil.TextDelta, at time.Time) {
	k := string(d.Agent)
	a := l.agents[k]
	if a == nil || a.call != d.Call {
		a = &liveAgent{name: d.Name, call: d.Call}
		l.agents[k] = a
	}
	a.at = at
	switch {
	case d.Reset:
		a.text, a.dropped = "", false
	case d.Dropped:
		a.dropped = true
	default:
		a.text += d.Text
		if len(a.text) > maxLiveText {
			cut := len(a.text) - maxLiveText
			for cut < len(a.text) && !utf8.RuneStart(a.text[cut]) {
				cut++
			}
			a.text, a.dropped = a.text[cut:], true
		}
	}
	l.cur = k
}

// committed ends the live text that e replaces: a model call's end, or
// the end of the agent's run or of the session.
func (l *liveLine) committed(e vigil.Event) {
	switch e.Type {
	case "model.ended", "run.ended":
		var b eventAgent
		if json.Unmarshal(e.Data, &b) != nil {
			return
		}
		delete(l.agents, b.Agent)
	case "session.closed":
		clear(l.agents)
	default:
		return
	}
	if l.agents[l.cur] == nil {
		l.cur = ""
		var at time.Time
		for k, a := range l.agents {
			if a.at.After(at) {
				l.cur, at = k, a.at
			}
		}
	}
}

// erase takes the line off the screen.
func (l *liveLine) erase(w io.Writer) {
	if l.shown {
		io.WriteString(w, "\r\x1b[K")
		l.shown = false
	}
}

// redraw draws the line again, or erases it when no text streams.
func (l *liveLine) redraw(w io.Writer, start time.Time) {
	a := l.agents[l.cur]
	if a == nil || a.text == "" && !a.dropped {
		l.erase(w)
		return
	}
	s := l.render(a, start)
	io.WriteString(w, "\r\x1b[K"+s)
	l.shown = true
}

// render is the line for a: the timeline's columns, then the end of the
// text on one line, fitting the terminal's width.
func (l *liveLine) render(a *liveAgent, start time.Time) string {
	prefix := fmt.Sprintf("%8s  %-6s » ", fmt.Sprintf("%.3fs", max(a.at.Sub(start), 0).Seconds()), a.name)
	room := l.width - 1 - utf8.RuneCountInString(prefix)
	// One line, and no control character a model could move the cursor
	// or change the terminal with.
	body := strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return ' '
		}
		return r
	}, a.text)), " ")
	if a.text != "" && strings.TrimRight(a.text, " \t\r\n") != a.text {
		body += " "
	}
	if a.dropped {
		body = "… " + body
	}
	if room <= 1 {
		return prefix
	}
	if n := utf8.RuneCountInString(body); n > room {
		r := []rune(body)
		body = "…" + string(r[n-room+1:])
	}
	return prefix + body
}
