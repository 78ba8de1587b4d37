package core

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vigilrun/vigil/chat"
)

// drawText draws text that exercises quoting and escaping: quotes,
// backslashes, markup, line ends, non-ASCII and invalid UTF-8.
func drawText(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.Just(""),
		rapid.StringMatching(`[a-z0-9 #./-]{0,12}`),
		rapid.SampledFrom([]string{`a "quoted" \ word`, "<b>&amp;</b>\n\ttab", "héllo ✓ \u2028", "\xff\xfe bad", "\x00\x01"}),
		rapid.String(),
	).Draw(t, label)
}

func drawNote(t *rapid.T) *Note {
	n := &Note{
		Key:        NoteKey{Task: TaskID(drawText(t, "task")), Run: rapid.IntRange(0, 1<<20).Draw(t, "run")},
		Owner:      AgentID(drawText(t, "owner")),
		Agent:      AgentID(drawText(t, "agent")),
		AgentName:  drawText(t, "name"),
		Kind:       rapid.SampledFrom([]TaskKind{TaskAgent, TaskShell}).Draw(t, "kind"),
		Status:     drawText(t, "status"),
		Reply:      drawText(t, "reply"),
		Error:      drawText(t, "error"),
		Output:     drawText(t, "output"),
		OutputPath: rapid.SampledFrom([]string{"", "/abs/out.log", "tasks/t1.log", drawText(t, "path")}).Draw(t, "outpath"),
		Usage: chat.Usage{
			InputTokens:      rapid.Int64Range(-1, 1<<40).Draw(t, "in"),
			OutputTokens:     rapid.Int64Range(0, 1<<40).Draw(t, "out"),
			CacheReadTokens:  rapid.Int64Range(0, 3).Draw(t, "cr"),
			CacheWriteTokens: rapid.Int64Range(0, 3).Draw(t, "cw"),
		},
		Cost:     rapid.Int64Range(-5_000_000, 1<<50).Draw(t, "cost"),
		Priced:   rapid.Bool().Draw(t, "priced"),
		Duration: time.Duration(rapid.Int64Range(-1e12, 1e15).Draw(t, "dur")),
	}
	if rapid.Bool().Draw(t, "zeroUsage") {
		n.Usage = chat.Usage{}
	}
	if rapid.Bool().Draw(t, "exit") {
		c := rapid.IntRange(-255, 255).Draw(t, "code")
		n.ExitCode = &c
	}
	for range rapid.IntRange(0, 3).Draw(t, "answered") {
		n.Answered = append(n.Answered, MsgID(drawText(t, "msg")))
	}
	for range rapid.IntRange(0, 3).Draw(t, "live") {
		n.LiveTasks = append(n.LiveTasks, TaskID(drawText(t, "livetask")))
	}
	return n
}

// renderNote and RenderItem give the text the fmt-built renderers gave.
func TestRenderNoteMatchesFmt(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := drawNote(t)
		if got, want := renderNote(n), oldRenderNote(n); got != want {
			t.Fatalf("renderNote(%+v)\n got %q\nwant %q", n, got, want)
		}
	})
}

func TestRenderItemMatchesFmt(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewState()
		s.Agents["a1"] = &Agent{ID: "a1", Name: drawText(t, "agentName")}
		n := drawNote(t)
		s.Notes[n.Key] = n
		it := &Item{
			Kind:     rapid.SampledFrom([]ItemKind{KindMessage, KindNotification, KindTimer, KindContinuation, KindPrompt, KindSpawn}).Draw(t, "kind"),
			From:     rapid.SampledFrom([]string{"user", "a1", "a2", drawText(t, "from")}).Draw(t, "from"),
			Msg:      MsgID(drawText(t, "msg")),
			Timer:    TimerID(drawText(t, "timer")),
			Priority: Priority(drawText(t, "priority")),
			Text:     drawText(t, "text"),
		}
		switch rapid.IntRange(0, 2).Draw(t, "note") {
		case 1:
			k := n.Key
			it.Note = &k
		case 2:
			it.Note = &NoteKey{Task: "nosuch", Run: 1}
		}
		if got, want := RenderItem(s, it), oldRenderItem(s, it); got != want {
			t.Fatalf("RenderItem(%+v)\n got %q\nwant %q", it, got, want)
		}
	})
}

// renderOutcome gives the JSON the map-built renderer gave, keys in the
// same order.
func TestRenderOutcomeMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewState()
		target := &Agent{ID: AgentID(drawText(t, "id")), Name: drawText(t, "name"), Owner: "main",
			Task: TaskID(rapid.SampledFrom([]string{"", "t1", drawText(t, "task")}).Draw(t, "task"))}
		if rapid.Bool().Draw(t, "running") {
			target.Run = &Run{Seq: rapid.IntRange(0, 4).Draw(t, "seq"), Round: rapid.IntRange(0, 9).Draw(t, "round")}
		}
		s.Agents[target.ID] = target
		m := &Msg{
			ID:      MsgID(drawText(t, "msgid")),
			From:    rapid.SampledFrom([]string{"user", "main", "a9"}).Draw(t, "from"),
			To:      target.ID,
			Outcome: rapid.SampledFrom([]MsgOutcome{OutcomeRejected, OutcomeJoined, OutcomeQueuedBehindStop, OutcomePending, OutcomeResumed, ""}).Draw(t, "outcome"),
			Reason:  drawText(t, "reason"),
			Run:     rapid.IntRange(0, 4).Draw(t, "run"),
		}
		if m.Outcome == OutcomeRejected && rapid.Bool().Draw(t, "noTarget") {
			m.To = "nobody"
		}
		st := &stepper{s: s, cfg: &Config{}}
		if got, want := st.renderOutcome(m), st.oldRenderOutcome(m); got != want {
			t.Fatalf("renderOutcome(%+v)\n got %s\nwant %s", m, got, want)
		}
	})
}

// BenchmarkRenderNote renders a worker's notification, as every run that
// ends renders one for its owner's model.
func BenchmarkRenderNote(b *testing.B) {
	n := &Note{Key: NoteKey{Task: "t4", Run: 12}, Owner: "main", Agent: "a4", AgentName: "w3", Kind: TaskAgent,
		Status: "completed", Reply: "ok", Answered: []MsgID{"m40"}, Usage: chat.Usage{InputTokens: 1200, OutputTokens: 30},
		Duration: 1500 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		renderNote(n)
	}
}

// BenchmarkRenderOutcome renders the result of a SendMessage that resumes
// an idle worker, the result of every message in bench.Notifications.
func BenchmarkRenderOutcome(b *testing.B) {
	s := NewState()
	s.Agents["a4"] = &Agent{ID: "a4", Name: "w3", Owner: "main", Task: "t4"}
	st := &stepper{s: s, cfg: &Config{}}
	m := &Msg{ID: "m40", From: "main", To: "a4", Outcome: OutcomeResumed, Run: 13}
	b.ReportAllocs()
	for b.Loop() {
		st.renderOutcome(m)
	}
}
