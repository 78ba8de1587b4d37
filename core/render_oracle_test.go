package core

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vigilrun/vigil/chat"
)

// The renderers as they were first written, kept as the oracles of
// render_test.go: the faster ones must give the same text, byte for byte,
// or the event streams would change.

// oldRenderItem is RenderItem as it was written first, with fmt: the
// oracle the faster one is checked against. It renders one inbox item as the model sees it.
func oldRenderItem(s *State, it *Item) string {
	switch it.Kind {
	case KindMessage:
		from := it.From
		if a := s.Agents[AgentID(from)]; a != nil {
			from = a.Name + " (" + string(a.ID) + ")"
		}
		frame := NotUserInput
		if it.From == "user" {
			frame = "" // the user wrote it
		}
		return fmt.Sprintf("<agent-message id=%q from=%q priority=%q>\n%s%s\n</agent-message>", it.Msg, from, it.Priority, frame, it.Text)
	case KindNotification:
		if it.Note != nil {
			if n := s.Note(*it.Note); n != nil {
				return oldRenderNote(n)
			}
		}
		return "<task-notification/>"
	case KindTimer:
		return fmt.Sprintf("<scheduled-wakeup id=%q>\n%s%s\n</scheduled-wakeup>", it.Timer, NotUserInput, it.Text)
	case KindContinuation:
		return fmt.Sprintf("<continuation from=%q>\n%s%s\n</continuation>", it.From, NotUserInput, it.Text)
	default:
		return it.Text
	}
}

// oldRenderNote is renderNote as it was written first. It renders a notification as the model sees it.
func oldRenderNote(n *Note) string {
	var b strings.Builder
	b.WriteString("<task-notification>\n")
	b.WriteString(NotUserInput)
	fmt.Fprintf(&b, "<task-id>%s</task-id>\n", n.Key.Task)
	if n.Kind == TaskAgent {
		fmt.Fprintf(&b, "<agent>%s (%s)</agent>\n<run>%d</run>\n", n.AgentName, n.Agent, n.Key.Run)
	} else {
		b.WriteString("<kind>shell</kind>\n")
	}
	fmt.Fprintf(&b, "<key>%s</key>\n<status>%s</status>\n", n.Key, n.Status)
	if len(n.Answered) > 0 {
		ids := make([]string, len(n.Answered))
		for i, m := range n.Answered {
			ids[i] = string(m)
		}
		fmt.Fprintf(&b, "<answered-messages>%s</answered-messages>\n", strings.Join(ids, " "))
	}
	if len(n.LiveTasks) > 0 {
		ids := make([]string, len(n.LiveTasks))
		for i, t := range n.LiveTasks {
			ids[i] = string(t)
		}
		fmt.Fprintf(&b, "<live-tasks>%s</live-tasks>\n<note>This agent still has live tasks of its own; when they finish it wakes and notifies again.</note>\n", strings.Join(ids, " "))
	}
	if n.ExitCode != nil {
		fmt.Fprintf(&b, "<exit-code>%d</exit-code>\n", *n.ExitCode)
	}
	switch {
	case filepath.IsAbs(n.OutputPath):
		fmt.Fprintf(&b, "<output-file>%s</output-file>\n", n.OutputPath)
	case n.OutputPath != "":
		// Kept in vigil's data directory, which file tools cannot open.
		fmt.Fprintf(&b, "<full-output>TaskOutput {\"task_id\": %q}</full-output>\n", n.Key.Task)
	}
	if n.Error != "" {
		fmt.Fprintf(&b, "<error>%s</error>\n", n.Error)
	}
	if n.Kind == TaskAgent {
		fmt.Fprintf(&b, "<result>%s</result>\n", n.Reply)
	} else if n.Output != "" {
		fmt.Fprintf(&b, "<output-tail>%s</output-tail>\n", n.Output)
	}
	fmt.Fprintf(&b, "<usage><tokens>%d</tokens>", n.Usage.Total())
	if u := n.Usage; u != (chat.Usage{}) {
		fmt.Fprintf(&b, "<input_tokens>%d</input_tokens><output_tokens>%d</output_tokens>", u.InputTokens, u.OutputTokens)
		if u.CacheReadTokens > 0 || u.CacheWriteTokens > 0 {
			fmt.Fprintf(&b, "<cache_read_tokens>%d</cache_read_tokens><cache_write_tokens>%d</cache_write_tokens>", u.CacheReadTokens, u.CacheWriteTokens)
		}
		if n.Priced {
			fmt.Fprintf(&b, "<cost_usd>%.4f</cost_usd>", float64(n.Cost)/1e6)
		}
	}
	fmt.Fprintf(&b, "<duration_ms>%d</duration_ms></usage>\n", n.Duration.Milliseconds())
	b.WriteString("</task-notification>")
	return b.String()
}

// oldRenderOutcome is renderOutcome as it was written first, with a map.
// It is the SendMessage result a sender reads.
func (st *stepper) oldRenderOutcome(m *Msg) string {
	res := map[string]any{"outcome": m.Outcome, "message_id": m.ID}
	target := st.s.Agents[m.To]
	if target != nil {
		res["agent"] = target.Name
		res["agent_id"] = target.ID
	}
	// The notifications of the target's runs go to its owner: promised
	// only to a sender that owns it (or to the user, who sees them all).
	note := func(run int) string {
		if target == nil || target.Task == "" || (m.From != "user" && m.From != string(target.Owner)) {
			return ""
		}
		return NoteKey{Task: target.Task, Run: run}.String()
	}
	var detail string
	switch m.Outcome {
	case OutcomeRejected:
		detail = "Not delivered: " + m.Reason
		res["reason"] = m.Reason
	case OutcomeJoined:
		res["run"] = m.Run
		detail = fmt.Sprintf("%s is in run %d, which will see the message at its next model round.", target.Name, m.Run)
		if k := note(m.Run); k != "" {
			res["notification"] = k
			detail += " Its reply comes in notification " + k + "."
		}
	case OutcomeQueuedBehindStop:
		res["stopping_run"] = m.Run
		res["answering_run"] = m.Run + 1
		why := m.Reason
		if why == "" {
			why = fmt.Sprintf("run %d was ending", m.Run)
		}
		detail = fmt.Sprintf("Queued behind the end of %s's run %d (%s); run %d will answer it.", target.Name, m.Run, why, m.Run+1)
		if k := note(m.Run); k != "" {
			res["notifications"] = []string{k, note(m.Run + 1)}
			detail += fmt.Sprintf(" You get two notifications: %s for the stopping run, then %s with the answer.", k, note(m.Run+1))
		}
	case OutcomePending:
		// The target's round is in flight; its answer settles the
		// outcome (DESIGN rule 11): either way the promise below holds.
		res["run"] = m.Run
		res["if_round_continues"] = map[string]any{"outcome": OutcomeJoined, "run": m.Run}
		res["if_round_was_last"] = map[string]any{"outcome": OutcomeQueuedBehindStop, "answering_run": m.Run + 1}
		round := 0
		if target.Run != nil && target.Run.Seq == m.Run {
			round = target.Run.Round
		}
		detail = fmt.Sprintf("Pending: %s's model round %d of run %d is in flight. If the run goes on, your message joins run %d; if that round was its last, run %d answers.", target.Name, round, m.Run, m.Run, m.Run+1)
		if k := note(m.Run); k != "" {
			res["notifications"] = []string{k, note(m.Run + 1)}
			detail += fmt.Sprintf(" Either way the notification that answers (%s or %s) lists %s in its answered messages; you need not wait or ask.", k, note(m.Run+1), m.ID)
		} else if target.Task == "" {
			detail += fmt.Sprintf(" %s's runs send no notification; its answer comes only if it writes to you.", target.Name)
		} else {
			detail += fmt.Sprintf(" %s's runs notify its owner, not you; its answer comes only if it writes to you.", target.Name)
		}
	case OutcomeResumed:
		res["run"] = m.Run
		detail = fmt.Sprintf("%s was idle; run %d started with the message.", target.Name, m.Run)
		if k := note(m.Run); k != "" {
			res["notification"] = k
			detail += " Its reply comes in notification " + k + "."
		}
	}
	res["detail"] = detail
	return jsonText(res)
}
