package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil/internal/text"
)

// What an agent is doing or waiting on, in one place. WhyOf answers it from
// the state alone; Status (why an inbox is not draining), RunProgress (what
// a run waits on) and every edge (the API's Agent.Why, the CLI, the web UI,
// MCP) read that one answer, so no two of them can disagree. Blockers come
// first: when states overlap (an approval pending while the user queue is
// held, notifications queued behind it) the blocker is the answer and the
// rest is said after it.

// The kinds of a Why, blockers first.
const (
	WhyClosed   = "closed"   // the agent or its session is closed
	WhyApproval = "approval" // a permission request waits for a person
	WhyBudget   = "budget"   // a budget is spent: a person must raise it
	WhyBlocked  = "blocked"  // failed runs: a person must retry or write
	WhyBackoff  = "backoff"  // backing off before a retry (agent or model call)
	WhyHeld     = "held"     // only user prompts queued, and they are held
	WhyCaller   = "caller"   // an outside caller reads its inbox
	WhyProvider = "provider" // a provider process runs its turn
	WhySlot     = "slot"     // its model call waits for a free slot
	WhyModel    = "model"    // a model call is in flight
	WhySubagent = "subagent" // a foreground subagent's run
	WhyTask     = "task"     // a blocking read of a task's output
	WhyTool     = "tool"     // tool calls run
	WhyTasks    = "tasks"    // no run: its background tasks are live
	WhyTimer    = "timer"    // no run: a wakeup it scheduled is pending
	WhyReady    = "ready"    // no run, no blocker, items it may take
	WhyIdle     = "idle"     // nothing to do
)

// Why says what an agent is doing or waiting on.
type Why struct {
	// Kind is one of the Why kinds above.
	Kind string `json:"kind"`
	// Text is the one line a person reads: "model call in flight",
	// "waiting for approval p2 (Bash: rm -rf build)".
	Text string `json:"text"`
	// On names what it waits on, in a few words: "model call c12",
	// "approval p2", "tool Bash (u3)"; empty when it waits on nothing.
	On string `json:"on,omitempty"`
	// Since is when the state began; Until its deadline, if it has one (a
	// retry's time, an approval's deadline).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// ClearsOn says what ends the state.
	ClearsOn string `json:"clears_on,omitempty"`
	// NeedsYou is set when only a person can end it: an approval, a spent
	// budget, a block after failures.
	NeedsYou bool `json:"needs_you,omitempty"`
	// HoldsUp lists the queued items that wait on it, in inbox order.
	// User prompts a hold keeps are among them only when the hold is the
	// answer (Kind held); otherwise Text names the hold after the answer.
	HoldsUp []ItemID `json:"holds_up,omitempty"`
}

// Blocks reports whether the Why keeps the agent's items from draining
// until something other than the agent's own work happens.
func (w Why) Blocks() bool {
	switch w.Kind {
	case WhyClosed, WhyApproval, WhyBudget, WhyBlocked, WhyBackoff, WhyHeld, WhyCaller:
		return true
	}
	return false
}

// WhyOf says what agent a of s is doing or waiting on. It is pure: the
// same state gives the same answer.
func WhyOf(s *State, a *Agent) Why { return whyOf(s, a, true) }

// Why is WhyOf as this core answers it: in a seedbugs build with the
// why-overlap bug put back, a run's own state hides its pending approval
// (the simulator's "why" check must catch that).
func (c *Core) Why(s *State, a *Agent) Why { return whyOf(s, a, !c.seedWhyOverlap()) }

// whyOf is WhyOf; approvalFirst says whether a pending approval comes
// before what the agent's run is doing.
func whyOf(s *State, a *Agent, approvalFirst bool) Why {
	var held, free []*Item
	for _, it := range a.Inbox {
		if s.Hold != nil && it.Holdable() {
			held = append(held, it)
		} else {
			free = append(free, it)
		}
	}
	w := Why{HoldsUp: itemIDList(free)}
	// after is what Text says after the answer: the items it holds up and
	// the user prompts a hold keeps.
	after := func(one, many, tail string) {
		if len(free) > 0 {
			w.Text += "; " + queued(free, one, many, tail)
		}
		if len(held) > 0 {
			w.Text += "; " + holdWords(s, held)
		}
	}
	if s.Session.Closed || a.State == AgentClosed {
		w.Kind, w.Text, w.HoldsUp = WhyClosed, "closed", nil
		if s.Session.Closed && s.Session.CloseReason != "" {
			w.Text += ": " + s.Session.CloseReason
		}
		return w
	}
	if len(s.Approvals) > 0 && (approvalFirst || a.Run == nil) {
		if ps := approvalsOf(s, a.ID); len(ps) > 0 {
			p := ps[0]
			w.Kind, w.NeedsYou, w.On = WhyApproval, true, "approval "+string(p.ID)
			w.Text = fmt.Sprintf("waiting for approval %s (%s)", p.ID, toolLine(p.Tool, p.Input))
			if len(ps) > 1 {
				w.Text += fmt.Sprintf(" and %d more", len(ps)-1)
			}
			if !p.Deadline.IsZero() {
				w.Text += ", denied at " + p.Deadline.UTC().Format(time.TimeOnly) + " if unanswered"
			}
			w.Since, w.Until = p.Asked, p.Deadline
			w.ClearsOn = "an answer to the request, or its deadline (then denied)"
			after("waits", "wait", "behind it")
			return w
		}
	}
	if b := a.Blocked; b != nil {
		w.NeedsYou, w.Since = true, b.Since
		if b.Kind == FailBudget {
			w.Kind = WhyBudget
			w.Text = "budget spent: " + strings.TrimPrefix(b.Reason, "budget exceeded: ")
			w.ClearsOn = "a raised budget (vigil budget SESSION ..., or POST /api/sessions/{id}/budget)"
		} else {
			w.Kind = WhyBlocked
			w.Text = fmt.Sprintf("blocked after run %d failed: %s", b.Run, b.Reason)
			w.ClearsOn = "a message from the user, or a retry (vigil retry SESSION " + a.Name + ")"
			if a.ID == MainAgent {
				w.ClearsOn = "a new prompt or message from the user, or a retry (vigil retry SESSION " + a.Name + ")"
			}
		}
		after("", "", "not yet seen by the model")
		return w
	}
	if r := a.Retry; a.Run == nil && r != nil {
		w.Kind, w.Until, w.On = WhyBackoff, r.At, "the retry"
		w.Text = fmt.Sprintf("backing off after a failed run, retry at %s (retry %d of %d; run %d failed: %s)",
			r.At.UTC().Format(time.TimeOnly), r.Attempt, r.Max, r.Run, r.Reason)
		if n := len(a.Runs); n > 0 {
			w.Since = a.Runs[n-1].Ended
		}
		w.ClearsOn = "the retry, a new prompt or message from a person, or vigil retry"
		after("", "", "not yet seen by the model")
		return w
	}
	if r := a.Run; r != nil {
		runWhy(s, a, r, &w)
		var next, later []*Item
		for _, it := range free {
			if it.Priority == PriorityLater || a.Driver == DriverExternal {
				// A provider process takes items only between its turns.
				later = append(later, it)
			} else {
				next = append(next, it)
			}
		}
		if len(next) > 0 {
			w.Text += "; " + queued(next, "joins", "join", "run "+strconv.Itoa(r.Seq)+" at its next model round")
		}
		if len(later) > 0 {
			w.Text += "; " + queued(later, "waits", "wait", "for run "+strconv.Itoa(r.Seq)+" to end")
		}
		if len(held) > 0 {
			w.Text += "; " + holdWords(s, held)
		}
		return w
	}
	switch {
	case len(held) > 0 && len(free) == 0:
		w.Kind, w.Since, w.HoldsUp = WhyHeld, s.Hold.Since, itemIDList(held)
		w.Text = holdWords(s, held)
		if s.Hold.Reason != "" {
			w.Text += " (" + text.OneLine(s.Hold.Reason, 80) + ")"
		}
		w.ClearsOn = "resume of the user queue"
		return w
	case a.Driver == DriverCaller && len(free) > 0:
		w.Kind, w.Since = WhyCaller, free[0].Enqueued
		w.Text = "waiting for the outside caller to read " + itemWords(free) + " (" + itemNames(free) + ")"
		w.ClearsOn = "the caller's wait and acknowledgement"
		if len(held) > 0 {
			w.Text += "; " + holdWords(s, held)
		}
		return w
	case len(free) > 0:
		// The scheduler starts a run in the step that leaves one of these:
		// this answer is a missed wake (DESIGN rule 4), said as such.
		w.Kind, w.Since = WhyReady, free[0].Enqueued
		w.Text = "ready to run for " + itemWords(free) + " (" + itemNames(free) + "), no run started (a missed wake)"
		w.ClearsOn = "the scheduler starts a run"
		if len(held) > 0 {
			w.Text += "; " + holdWords(s, held)
		}
		return w
	}
	w.Since = a.LastActive
	if live := s.LiveTasks(a.ID); len(live) > 0 {
		w.Kind, w.On = WhyTasks, "tasks"
		w.Text = "waiting for its " + taskWords(s, live)
		w.ClearsOn = "a task ends (its notification wakes the agent)"
		return w
	}
	if t := firstTimer(s, a.ID); t != nil {
		w.Kind, w.On, w.Until = WhyTimer, "timer "+string(t.ID), t.At
		w.Text = fmt.Sprintf("waiting for its wakeup %s at %s", t.ID, t.At.UTC().Format(time.TimeOnly))
		w.ClearsOn = "the wakeup"
		return w
	}
	w.Kind, w.Text = WhyIdle, "idle"
	return w
}

// runWhy fills w with what run r of a is doing.
func runWhy(s *State, a *Agent, r *Run, w *Why) {
	w.Since = r.Started
	switch c := r.Call; {
	case a.Driver == DriverExternal:
		w.Kind, w.On = WhyProvider, "the provider process"
		w.Text = fmt.Sprintf("its provider process runs turn %d", r.Seq)
		w.ClearsOn = "the provider process ends its turn"
		if !r.Cancelling.IsZero() {
			w.Text = fmt.Sprintf("cancelling turn %d, ended by %s at the latest", r.Seq, r.Cancelling.UTC().Format(time.TimeOnly))
			w.Until = r.Cancelling
		}
		if a.LastActive.After(w.Since) {
			w.Since = a.LastActive
		}
	case c != nil && c.State == CallWaitingSlot:
		w.Kind, w.On, w.Since = WhySlot, "a model-call slot", c.Started
		w.Text = "waiting for a model-call slot (the session's cap is reached)"
		w.ClearsOn = "another model call of the session ends"
	case c != nil && c.State == CallBackoff:
		w.Kind, w.On, w.Since, w.Until = WhyBackoff, "model call "+string(c.ID), c.Started, c.RetryUntil
		w.Text = fmt.Sprintf("model call backs off after %s, retry at %s (attempt %d)", c.RetryReason, c.RetryUntil.UTC().Format(time.TimeOnly), c.Attempt)
		w.ClearsOn = "the retry"
	case c != nil:
		w.Kind, w.On, w.Since = WhyModel, "model call "+string(c.ID), c.Started
		w.Text = "model call in flight"
		if c.Purpose == PurposeCompact {
			w.On += " (compaction)"
			w.Text = "compaction model call in flight"
		}
		w.ClearsOn = "the model answers"
	default:
		var names []string
		for _, tc := range r.Tools {
			if tc.Done {
				continue
			}
			if tc.Started.After(w.Since) || w.Kind == "" {
				w.Since = tc.Started
			}
			switch tc.Wait {
			case WaitApproval:
				if w.Kind == "" {
					// Reached only when the approval does not come first (the
					// why-overlap seed bug): the tool call is all it says.
					w.Kind, w.On = WhyTool, fmt.Sprintf("tool %s (%s)", tc.Name, tc.UseID)
				}
			case WaitChild:
				if w.Kind == "" || w.Kind == WhyTool {
					name := string(tc.Child)
					if ch := s.Agents[tc.Child]; ch != nil {
						name = ch.Name + " (" + string(ch.ID) + ")"
					}
					w.Kind, w.On = WhySubagent, "subagent "+string(tc.Child)
					w.Text = "waiting for its subagent " + name + " to answer"
				}
			case WaitTask:
				if w.Kind == "" || w.Kind == WhyTool {
					w.Kind, w.On = WhyTask, "task "+string(tc.WaitFor)
					w.Text = fmt.Sprintf("waiting for task %s to end (%s)", tc.WaitFor, tc.Name)
				}
			default:
				if w.Kind == "" {
					w.Kind, w.On = WhyTool, fmt.Sprintf("tool %s (%s)", tc.Name, tc.UseID)
				}
			}
			names = append(names, tc.Name)
		}
		switch {
		case w.Kind == "":
			w.Kind, w.Text, w.On = WhyModel, "starting the next model round", "the next round"
			w.ClearsOn = "the next round"
		case w.Kind == WhyTool:
			w.Text = "tool " + strings.Join(names, ", ") + " running"
			if len(names) > 1 {
				w.Text = "tools " + strings.Join(names, ", ") + " running"
			}
			w.ClearsOn = "the tool calls finish"
		default:
			w.ClearsOn = "the tool calls finish"
		}
	}
}

// approvalsOf lists the pending approvals of agent id, oldest first.
func approvalsOf(s *State, id AgentID) []*Approval {
	var out []*Approval
	for _, pid := range sortedApprovals(s) {
		if p := s.Approvals[pid]; p.Agent == id {
			out = append(out, p)
		}
	}
	return out
}

// firstTimer is agent id's soonest wakeup, or nil.
func firstTimer(s *State, id AgentID) *Timer {
	var first *Timer
	for _, t := range s.Timers {
		if t.Agent == id && (first == nil || t.At.Before(first.At) || (t.At.Equal(first.At) && t.ID < first.ID)) {
			first = t
		}
	}
	return first
}

func itemIDList(items []*Item) []ItemID {
	if len(items) == 0 {
		return nil
	}
	out := make([]ItemID, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// maxNamed is how many items a Why's text names before "…".
const maxNamed = 5

// queued says what items do, with verb (its singular and plural form)
// and then tail: "3 notifications wait behind it (t1#1, t2#1, t3#1)",
// "1 message and 1 prompt not yet seen by the model (m4, i9)".
func queued(items []*Item, one, many, tail string) string {
	w := itemWords(items) + " " + verbs(len(items), one, many)
	if tail != "" {
		w = strings.TrimSpace(w) + " " + tail
	}
	return w + " (" + itemNames(items) + ")"
}

// itemNames names items, at most maxNamed of them: "t1#1, m4, i9".
func itemNames(items []*Item) string {
	names := make([]string, 0, min(len(items), maxNamed))
	for _, it := range items[:min(len(items), maxNamed)] {
		names = append(names, itemName(it))
	}
	list := strings.Join(names, ", ")
	if len(items) > maxNamed {
		list += ", …"
	}
	return list
}

// itemWords counts items by kind: "2 notifications and 1 message".
func itemWords(items []*Item) string {
	type count struct {
		kind ItemKind
		n    int
	}
	var counts []count // a handful of kinds: a slice beats a map
	for _, it := range items {
		i := slices.IndexFunc(counts, func(c count) bool { return c.kind == it.Kind })
		if i < 0 {
			i = len(counts)
			counts = append(counts, count{kind: it.Kind})
		}
		counts[i].n++
	}
	var b strings.Builder
	for i, c := range counts {
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(strconv.Itoa(c.n))
		b.WriteByte(' ')
		b.WriteString(string(c.kind))
		if c.n != 1 {
			b.WriteByte('s')
		}
	}
	return b.String()
}

// itemName is how a Why names a queued item: a notification by its key, a
// message by its id, anything else by the item's id.
func itemName(it *Item) string {
	switch {
	case it.Note != nil:
		return it.Note.String()
	case it.Msg != "":
		return string(it.Msg)
	}
	return string(it.ID)
}

// holdWords says that held user prompts wait for the hold: "2 user
// prompts held by alice".
func holdWords(s *State, held []*Item) string {
	w := "user prompt"
	if len(held) != 1 {
		w += "s"
	}
	return fmt.Sprintf("%d %s held by %s", len(held), w, holdBy(s.Hold))
}

func verbs(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// taskWords names live tasks: "task t2 (worker)", "tasks t2 (worker), t3
// (make test)".
func taskWords(s *State, ids []TaskID) string {
	parts := make([]string, 0, len(ids))
	for _, id := range ids[:min(len(ids), maxNamed)] {
		t := s.Tasks[id]
		what := t.Description
		if t.Kind == TaskAgent {
			if ag := s.Agents[t.Agent]; ag != nil {
				what = ag.Name
			}
		} else if t.Command != "" {
			what = t.Command
		}
		part := string(id)
		if what != "" {
			part += " (" + text.OneLine(what, 40) + ")"
		}
		parts = append(parts, part)
	}
	list := strings.Join(parts, ", ")
	if len(ids) > maxNamed {
		list += ", …"
	}
	if len(ids) == 1 {
		return "task " + list
	}
	return "tasks " + list
}

// toolLine is a tool call in a few words: "Bash: rm -rf build", "Edit:
// main.go".
func toolLine(tool string, input json.RawMessage) string {
	var fields map[string]any
	if json.Unmarshal(input, &fields) == nil {
		for _, k := range []string{"command", "file_path", "path", "pattern", "url", "query", "description", "prompt"} {
			if v, ok := fields[k].(string); ok && strings.TrimSpace(v) != "" {
				return tool + ": " + text.OneLine(v, 60)
			}
		}
	}
	if in := strings.TrimSpace(string(input)); in != "" && in != "{}" && in != "null" {
		return tool + ": " + text.OneLine(in, 60)
	}
	return tool
}

// NoteSummary is a notification in one line, as an inbox preview reads
// it: "worker run 2 completed: the tests pass", "task t3 exited 1: make:
// *** [test] Error 1".
func NoteSummary(n *Note) string {
	var b strings.Builder
	if n.Kind == TaskAgent {
		name := n.AgentName
		if name == "" {
			name = string(n.Agent)
		}
		fmt.Fprintf(&b, "%s run %d %s", name, n.Key.Run, n.Status)
	} else {
		fmt.Fprintf(&b, "task %s %s", n.Key.Task, n.Status)
		if n.ExitCode != nil {
			fmt.Fprintf(&b, " (exit %d)", *n.ExitCode)
		}
	}
	detail := n.Reply
	if n.Error != "" {
		detail = n.Error
	}
	if detail == "" && n.Kind == TaskShell {
		detail = lastLine(n.Output)
	}
	if detail = text.OneLine(detail, 160); detail != "" {
		b.WriteString(": " + detail)
	}
	return b.String()
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
