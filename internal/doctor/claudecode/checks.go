package claudecode

import (
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil/internal/doctor"
)

// check runs every check on one session.
func check(s *session, opts Options) []doctor.Finding {
	q := replayQueue(s.entries)
	var out []doctor.Finding
	out = append(out, missedWakes(s, q, opts)...)
	out = append(out, heldItems(s, q)...)
	out = append(out, unnotifiedRuns(s, opts)...)
	return out
}

// item is one enqueued item of the main agent's queue and what became of
// it.
type item struct {
	enq     entry
	note    notice
	isNote  bool
	busy    bool   // a turn was running when it was enqueued
	freeAt  *entry // the end of that turn, if it ended before the item was taken
	deq     *entry // the dequeue that took it
	removed *entry // the remove that absorbed it into a running turn
}

func (it *item) pending() bool { return it.deq == nil && it.removed == nil }

// queue is the replay of a main file's queue operations.
type queue struct {
	items     []*item
	dequeues  []entry // every dequeue, in file order
	takenBy   map[int]*item
	lastEntry *entry // the last line with a timestamp
}

// turnEnds reports whether an assistant entry ends the main agent's turn.
func turnEnds(e entry) bool {
	switch e.StopReason {
	case "end_turn", "stop_sequence", "max_tokens", "refusal":
		return true
	}
	return false
}

// sameItem reports whether a user entry's text is the queued item's.
func sameItem(it *item, text string) bool {
	text = strings.TrimSpace(text)
	if text == "" {
		return false
	}
	if strings.TrimSpace(it.enq.Content) == text {
		return true
	}
	if n, ok := parseNotice(text); ok && it.isNote {
		return n.Task == it.note.Task && n.ToolUse == it.note.ToolUse
	}
	return false
}

// replayQueue follows the main agent's queue through the file: which
// enqueued item each dequeue took (the one whose text the next user entry
// carries, else the oldest pending one), which a remove absorbed, and
// whether a turn was running at each enqueue.
func replayQueue(entries []entry) *queue {
	q := &queue{takenBy: map[int]*item{}}
	busy := false
	var open *entry // a dequeue not yet matched to its item
	take := func(it *item) {
		it.deq = open
		q.takenBy[open.line] = it
		open = nil
	}
	fifo := func() {
		if open == nil {
			return
		}
		for _, it := range q.items {
			if it.pending() && it.enq.line < open.line {
				take(it)
				return
			}
		}
		open = nil
	}
	for i := range entries {
		e := entries[i]
		if e.Sidechain {
			continue
		}
		if !e.At.IsZero() {
			q.lastEntry = &entries[i]
		}
		switch {
		case e.Type == "queue-operation" && e.Operation == "enqueue":
			n, ok := parseNotice(e.Content)
			q.items = append(q.items, &item{enq: e, note: n, isNote: ok, busy: busy})
		case e.Type == "queue-operation" && e.Operation == "dequeue":
			fifo()
			open = &entries[i]
			q.dequeues = append(q.dequeues, e)
			busy = true
		case e.Type == "queue-operation" && e.Operation == "remove":
			fifo()
			for _, it := range q.items {
				if it.pending() && sameItem(it, e.Content) {
					it.removed = &entries[i]
					break
				}
			}
		case e.Type == "user" && open != nil:
			for _, it := range q.items {
				if it.pending() && it.enq.line < open.line && sameItem(it, e.Text) {
					take(it)
					break
				}
			}
		case e.Type == "assistant":
			fifo()
			if turnEnds(e) {
				busy = false
				for _, it := range q.items {
					if it.pending() && it.busy && it.freeAt == nil {
						it.freeAt = &entries[i]
					}
				}
			}
		}
	}
	fifo()
	return q
}

// evidence makes an Evidence of a line of file.
func evidence(file string, e entry, why string) doctor.Evidence {
	return doctor.Evidence{File: file, Line: e.line, At: e.At, Text: e.text, Why: why}
}

// describe names a queued notification for a person.
func (n notice) describe() string {
	s := "task " + n.Task
	if n.ToolUse != "" {
		s += " (tool use " + n.ToolUse + ")"
	}
	if n.Summary != "" {
		s += ": " + shorten(n.Summary, 120)
	}
	return s
}

// missedWakes reports task notifications that became deliverable while
// the main agent was idle and waited longer than the threshold for the
// next dequeue.
func missedWakes(s *session, q *queue, opts Options) []doctor.Finding {
	var out []doctor.Finding
	for _, it := range q.items {
		if !it.isNote || it.enq.At.IsZero() {
			continue
		}
		free := it.enq
		if it.busy {
			if it.freeAt == nil || (it.deq != nil && it.deq.line < it.freeAt.line) {
				continue // taken by the turn that was running
			}
			free = *it.freeAt
		}
		if it.removed != nil && it.removed.line < free.line {
			continue
		}
		var next *entry
		for i := range q.dequeues {
			if d := q.dequeues[i]; d.line > free.line && d.line > it.enq.line {
				next = &q.dequeues[i]
				break
			}
		}
		f := doctor.Finding{
			Kind: doctor.MissedWake, Source: Source, Session: s.id, File: s.file,
			Start: free.At, Item: it.note.describe(), Recovered: it.note.Result,
		}
		why := "the task notification is queued while the session is idle"
		if it.busy {
			why = "the task notification is queued while a turn runs"
		}
		f.Evidence = append(f.Evidence, evidence(s.file, it.enq, why))
		if it.busy {
			f.Evidence = append(f.Evidence, evidence(s.file, free, "the turn ends without taking it: from here it is deliverable"))
		}
		if next != nil {
			f.End = next.At
			f.Stall = next.At.Sub(free.At)
			if f.Stall <= opts.MissedWakeAfter {
				continue
			}
			by := "the session's next dequeue"
			if taken := q.takenBy[next.line]; taken != nil && !taken.isNote {
				by += ": it takes a user prompt, so the user's typing ended the stall"
			}
			f.Evidence = append(f.Evidence, evidence(s.file, *next, fmt.Sprintf("%s, %s after it became deliverable", by, f.Stall.Round(time.Millisecond))))
			f.Summary = fmt.Sprintf("the notification for %s waited %s for a wake while the session was idle", it.note.describe(), f.Stall.Round(time.Millisecond))
			f.Action = "nothing is lost: the notification was delivered at the end of the stall; if the session still waits on background work, type anything to wake it"
			f.Item, f.Recovered = "", ""
		} else {
			f.Stall = opts.Now().Sub(free.At)
			if f.Stall <= opts.MissedWakeAfter || !it.pending() {
				continue
			}
			if q.lastEntry != nil && q.lastEntry.line != it.enq.line && q.lastEntry.line != free.line {
				f.Evidence = append(f.Evidence, evidence(s.file, *q.lastEntry, "the last record of the session: no dequeue came after the notification"))
			}
			f.Summary = fmt.Sprintf("the notification for %s was never dequeued: the session never woke for it (%s so far)", it.note.describe(), f.Stall.Round(time.Second))
			f.Action = "the notification never reached the model: type anything in the session to wake it, or give it the task's result yourself (shown with this finding when the notification carries one)"
		}
		out = append(out, f)
	}
	return out
}

// heldItems reports queued items that were never taken while later items
// were.
func heldItems(s *session, q *queue) []doctor.Finding {
	var out []doctor.Finding
	for _, it := range q.items {
		if !it.pending() {
			continue
		}
		var passed *item
		for _, later := range q.items {
			if later.enq.line > it.enq.line && later.deq != nil {
				passed = later
				break
			}
		}
		if passed == nil {
			continue
		}
		what, name := "the queued prompt "+fmt.Sprintf("%q", shorten(it.enq.Content, 80)), shorten(it.enq.Content, 200)
		if it.isNote {
			what, name = "the notification for "+it.note.describe(), it.note.describe()
		}
		f := doctor.Finding{
			Kind: doctor.HeldContinuation, Source: Source, Session: s.id, File: s.file,
			Start: it.enq.At, Item: name, Recovered: it.note.Result,
			Summary: what + " was queued and never dequeued, while items queued after it were",
			Evidence: []doctor.Evidence{
				evidence(s.file, it.enq, "queued here; no dequeue or remove ever takes it"),
				evidence(s.file, passed.enq, "a later item is queued"),
				evidence(s.file, *passed.deq, "and dequeued: the queue moved on past the held item"),
			},
			Action: "cancel the held item and resend it: it never reached the model, and the copy in the queue lives only in the running CLI's memory; its content (and the task's result, when it carries one) is given here",
		}
		if q.lastEntry != nil && !it.enq.At.IsZero() {
			f.Stall = q.lastEntry.At.Sub(it.enq.At)
			if q.lastEntry.line > passed.deq.line {
				f.Evidence = append(f.Evidence, evidence(s.file, *q.lastEntry, "the last record of the session: the item is still held"))
			}
		}
		out = append(out, f)
	}
	return out
}

// run is one activation of a subagent in its transcript.
type run struct {
	n     int    // 0 for the first run, then the follow-ons
	start entry  // its first line
	reply *entry // its final assistant line; nil while it has not ended
}

// subagentRuns splits a subagent's transcript into runs: a follow-on
// starts at each user entry with origin.kind "coordinator".
func subagentRuns(entries []entry) []run {
	var runs []run
	for i := range entries {
		e := entries[i]
		if len(runs) == 0 || (e.Type == "user" && e.Origin == "coordinator") {
			runs = append(runs, run{n: len(runs), start: e})
		}
		r := &runs[len(runs)-1]
		if e.Type == "assistant" && turnEnds(e) && len(e.ToolUses) == 0 {
			r.reply = &entries[i]
		}
	}
	return runs
}

// unnotifiedRuns reports subagent runs that ended with a reply for which
// no task notification was ever enqueued in the main file: a follow-on's
// is a stranded reply, a background first run's a stuck subagent.
func unnotifiedRuns(s *session, opts Options) []doctor.Finding {
	hasQueue := false
	for _, e := range s.entries {
		if e.Type == "queue-operation" {
			hasQueue = true
			break
		}
	}
	type note struct {
		e entry
		n notice
	}
	var out []doctor.Finding
	for _, sub := range s.subs {
		var notes []note
		var launch *entry
		var last *entry
		for i := range s.entries {
			e := s.entries[i]
			if e.Sidechain {
				continue
			}
			if !e.At.IsZero() {
				last = &s.entries[i]
			}
			if e.Launched == sub.id && launch == nil {
				launch = &s.entries[i]
			}
			text := ""
			switch {
			case hasQueue && e.Type == "queue-operation" && e.Operation == "enqueue":
				text = e.Content
			case !hasQueue && e.Type == "user" && e.Origin == "task-notification":
				text = e.Text
			case !hasQueue && e.Attachment == "queued_command":
				text = e.Prompt
			}
			if n, ok := parseNotice(text); ok && n.Task == sub.id {
				notes = append(notes, note{e, n})
			}
		}
		background := launch != nil || (sub.meta != nil && sub.meta.RequestShape == "background")
		runs := subagentRuns(sub.entries)
		claimed := make([]bool, len(notes))
		matched := make([]bool, len(runs))
		expects := func(r run) bool {
			return r.reply != nil && (r.n > 0 || background) && opts.Now().Sub(r.reply.At) > opts.MissedWakeAfter
		}
		// A notification is a run's when it carries the run's reply; else
		// when it names the tool use that started the run (the Agent call
		// for the first run, the SendMessage for a follow-on); else, latest
		// run first, the first one queued after the run started.
		for ri, r := range runs {
			if !expects(r) {
				continue
			}
			want := strings.TrimSpace(r.reply.Text)
			for ni, n := range notes {
				if !claimed[ni] && want != "" && n.n.Result == want {
					claimed[ni], matched[ri] = true, true
					break
				}
			}
		}
		for ri, r := range runs {
			if !expects(r) || matched[ri] {
				continue
			}
			id := startedBy(s, sub, r, launch)
			for ni, n := range notes {
				if !claimed[ni] && id != "" && n.n.ToolUse == id {
					claimed[ni], matched[ri] = true, true
					break
				}
			}
		}
		for ri := len(runs) - 1; ri >= 0; ri-- {
			r := runs[ri]
			if !expects(r) || matched[ri] {
				continue
			}
			for ni, n := range notes {
				if !claimed[ni] && (n.e.At.IsZero() || !n.e.At.Before(r.start.At)) {
					claimed[ni], matched[ri] = true, true
					break
				}
			}
		}
		for ri, r := range runs {
			if !expects(r) || matched[ri] {
				continue
			}
			out = append(out, unnotified(s, sub, r, launch, last))
		}
	}
	return out
}

// unnotified builds the finding for a subagent run that was never
// notified.
func unnotified(s *session, sub *subagent, r run, launch, last *entry) doctor.Finding {
	f := doctor.Finding{
		Source: Source, Session: s.id, File: s.file, Start: r.reply.At,
		Recovered: strings.TrimSpace(r.reply.Text),
	}
	if last != nil && last.At.After(r.reply.At) {
		f.Stall = last.At.Sub(r.reply.At)
	}
	name := "subagent " + sub.id
	if sub.meta != nil && sub.meta.Description != "" {
		name += fmt.Sprintf(" (%q)", sub.meta.Description)
	}
	if r.n == 0 {
		f.Kind = doctor.StuckSubagent
		if launch != nil {
			f.Evidence = append(f.Evidence, evidence(s.file, *launch, "the subagent is started in the background: its end must be notified"))
		}
		f.Evidence = append(f.Evidence, evidence(sub.file, *r.reply, "its run ends with this reply"))
		if sub.meta != nil && sub.meta.Finished != nil && *sub.meta.Finished {
			f.Evidence = append(f.Evidence, doctor.Evidence{File: sub.metaFile, Row: "finished: true", Text: `"finished":true`, Why: "Claude Code recorded the subagent as finished"})
		}
		f.Summary = name + " finished, but no task notification for it was ever queued: the main agent still sees it running"
		f.Action = "give the main agent the subagent's reply (recovered from its transcript, shown with this finding), or tell it the subagent is done, instead of waiting for a notification that will not come"
	} else {
		f.Kind = doctor.StrandedReply
		if send, res, _ := findSend(s, sub.id, r.start); send != nil {
			f.Evidence = append(f.Evidence, evidence(s.file, *send, "the main agent sends the subagent a message (SendMessage)"))
			if res != nil {
				f.Evidence = append(f.Evidence, evidence(s.file, *res, "the send succeeds"))
			}
		}
		f.Evidence = append(f.Evidence,
			evidence(sub.file, r.start, fmt.Sprintf("a follow-on run (%d) starts to answer it", r.n)),
			evidence(sub.file, *r.reply, "the follow-on ends with this reply"))
		f.Summary = fmt.Sprintf("%s answered a message in follow-on run %d, but no task notification carrying the answer was ever queued for the main agent", name, r.n)
		f.Action = "paste the stranded reply (recovered from the subagent's transcript, shown with this finding) into the session: the main agent never saw it, and no notification will bring it"
	}
	if last != nil {
		f.Evidence = append(f.Evidence, evidence(s.file, *last, "the last record of the main session: no notification for this run was queued before it"))
	}
	return f
}

// startedBy returns the id of the tool use that started a run: the Agent
// call for the first run, the SendMessage for a follow-on.
func startedBy(s *session, sub *subagent, r run, launch *entry) string {
	if r.n > 0 {
		_, _, id := findSend(s, sub.id, r.start)
		return id
	}
	if sub.meta != nil && sub.meta.ToolUseID != "" {
		return sub.meta.ToolUseID
	}
	if launch != nil && len(launch.Results) > 0 {
		return launch.Results[0].ToolUseID
	}
	return ""
}

// findSend returns the last SendMessage to agent before the follow-on
// started, its tool result, and its tool use id.
func findSend(s *session, agent string, start entry) (send, res *entry, id string) {
	for i := range s.entries {
		e := s.entries[i]
		if e.Sidechain {
			continue
		}
		if start.At.IsZero() || !e.At.After(start.At) {
			for _, u := range e.ToolUses {
				if to, _ := u.Input["to"].(string); u.Name == "SendMessage" && to == agent {
					send, res, id = &s.entries[i], nil, u.ID
				}
			}
		}
		for _, r := range e.Results {
			if id != "" && r.ToolUseID == id && res == nil {
				res = &s.entries[i]
			}
		}
	}
	return send, res, id
}
