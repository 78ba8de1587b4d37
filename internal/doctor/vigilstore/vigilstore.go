// Package vigilstore runs doctor's four checks on vigil's own store: the
// event log that every backend keeps (store.Store's EventListAll), read
// record by record and decoded with core's event types.
//
// The checks are the ones doctor runs on Claude Code's and T3 Code's files,
// stated in vigil's terms:
//
//   - stranded-reply: a subagent's run took a message in (run.started or
//     items.joined with an item that carries it), the run ended, and no
//     notification.written keyed by that run (task#run) lists the message
//     among its answered ones;
//   - missed-wake: a notification item was enqueued for an agent with no run
//     in progress, and the run that took it started more than the stall
//     threshold later (or none did before the log ends), with no user
//     prompt or user message enqueued for that agent between and no block
//     or backoff of the agent (agent.blocked, agent.retry: a stated reason,
//     which status shows) in force while it waited;
//   - held-continuation: a continuation item was passed over by later runs
//     of its agent and never taken, or a pending-continuation gate was
//     never released although its agent ran again;
//   - stuck-subagent: a task still reads running (or stopping) at the end of
//     the log although the session was closed, or although its process died
//     with the vigil that started it (a recovered event came after the
//     process was recorded and nothing ended the task), or although its
//     agent's last run ended.
//
// A healthy vigil session must give none of them; the tests run real
// sessions to show it, and edit their logs to show that each check fires
// when the failure is put back.
//
// Reading never writes: the sources vigil doctor gives it are the stores'
// readers, store/sqlite.OpenReader (the file opened read-only: SQLite's
// mode=ro, and immutable=1 when no write-ahead log exists) and
// store/postgres.OpenReader (read-only transactions). Neither takes a
// lease nor runs a migration, unlike store/sqlite.Open and
// store/postgres.Open, which do both.
package vigilstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/doctor"
	"github.com/vigilrun/vigil/store"
)

// Source is what the checks read: a store's whole event log in global
// order. Every store.Store is one; so are store/sqlite.Reader and
// store/postgres.Reader.
type Source interface {
	EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error)
}

// Options tunes a scan; zero fields mean the defaults.
type Options struct {
	// Stall is how long a notification may wait for its idle agent before
	// it is a missed wake. Default 60s.
	Stall time.Duration
	// Name is how the report names the store (a file path or a redacted
	// URL); default "vigil store".
	Name string
	// PageSize is how many records one EventListAll call reads. Default
	// 5000.
	PageSize int
}

// Scan reads every session of src and reports what the four checks find.
func Scan(ctx context.Context, src Source, opts Options) (doctor.Report, error) {
	if opts.Stall <= 0 {
		opts.Stall = 60 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "vigil store"
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 5000
	}
	rep := doctor.Report{Read: []string{opts.Name}}
	bySession := map[string][]store.Record{}
	var order []string
	var after int64
	for {
		recs, err := src.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: after, Limit: opts.PageSize})
		if err != nil {
			return rep, fmt.Errorf("read the event log of %s after record %d: %w", opts.Name, after, err)
		}
		for _, r := range recs {
			if _, ok := bySession[r.Session]; !ok {
				order = append(order, r.Session)
			}
			bySession[r.Session] = append(bySession[r.Session], r)
			after = r.Global
		}
		if len(recs) < opts.PageSize {
			break
		}
	}
	for _, id := range order {
		recs := bySession[id]
		slices.SortStableFunc(recs, func(a, b store.Record) int { return cmp.Compare(a.Seq, b.Seq) })
		c := newChecker(id, opts)
		for _, r := range recs {
			body, err := core.DecodeBody(r.Type, r.Data)
			if err != nil {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: session %s event %d: %v", opts.Name, id, r.Seq, err))
				continue
			}
			c.step(r, body)
		}
		rep.Findings = append(rep.Findings, c.finish()...)
		rep.Sessions++
	}
	rep.Sort()
	return rep, nil
}

// seen is one record as evidence.
type seen struct {
	rec store.Record
}

func (s seen) evidence(name, why string) doctor.Evidence {
	return doctor.Evidence{
		File: name,
		Row:  fmt.Sprintf("session %s event %d (%s)", s.rec.Session, s.rec.Seq, s.rec.Type),
		At:   s.rec.At,
		Text: shorten(string(s.rec.Data), 240),
		Why:  why,
	}
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

type runInfo struct {
	agent   core.AgentID
	seq     int
	kind    core.RunKind
	start   seen
	msgs    []core.MsgID
	ended   *seen
	reply   string
	prompts bool // the run took a user prompt or a user message
}

type itemInfo struct {
	item     core.Item
	enq      seen
	idle     bool // its agent had no run in progress when it was enqueued
	taken    *seen
	removed  bool
	passedBy []seen // runs of its agent that started while it waited, without it
	userBy   *seen  // the first user input for its agent while it waited
	// blockedBy is a block or backoff of its agent (agent.blocked,
	// agent.retry) in force while it waited: a stated reason not to run.
	blockedBy *seen
}

type msgInfo struct {
	msg  core.Msg
	sent seen
	run  *runInfo // the run that took it in
}

type noteInfo struct {
	note    core.Note
	written seen
}

type taskInfo struct {
	task    core.Task
	started seen
	status  core.TaskStatus
	last    seen // the last record that changed its status
	process *seen
	ended   bool
}

type gateInfo struct {
	agent    core.AgentID
	gate     core.Gate
	opened   seen
	released bool
	ranAfter []seen
}

// checker folds one session's log.
type checker struct {
	session string
	opts    Options

	agents  map[core.AgentID]core.Agent
	running map[core.AgentID]*runInfo
	runs    []*runInfo
	items   map[core.ItemID]*itemInfo
	itemSeq []core.ItemID
	msgs    map[core.MsgID]*msgInfo
	notes   map[core.NoteKey]*noteInfo
	tasks   map[core.TaskID]*taskInfo
	taskSeq []core.TaskID
	gates   []*gateInfo
	hold    *seen
	holdAt  map[core.ItemID]seen   // the hold in force when a continuation was enqueued
	blocked map[core.AgentID]*seen // agents blocked or backing off, and since when
	closed  *seen
	recov   []seen
	last    seen
}

func newChecker(session string, opts Options) *checker {
	return &checker{
		session: session, opts: opts,
		agents: map[core.AgentID]core.Agent{}, running: map[core.AgentID]*runInfo{},
		items: map[core.ItemID]*itemInfo{}, msgs: map[core.MsgID]*msgInfo{},
		notes: map[core.NoteKey]*noteInfo{}, tasks: map[core.TaskID]*taskInfo{},
		holdAt: map[core.ItemID]seen{}, blocked: map[core.AgentID]*seen{},
	}
}

func (c *checker) setTask(id core.TaskID, st core.TaskStatus, s seen) {
	if t := c.tasks[id]; t != nil && !t.ended {
		t.status, t.last = st, s
	}
}

func (c *checker) take(r *runInfo, ids []core.ItemID, s seen) {
	for _, id := range ids {
		it := c.items[id]
		if it == nil || it.taken != nil {
			continue
		}
		it.taken = &s
		if it.item.Msg != "" {
			if m := c.msgs[it.item.Msg]; m != nil && m.run == nil {
				m.run = r
				r.msgs = append(r.msgs, it.item.Msg)
			}
		}
		if isUserInput(it.item) {
			r.prompts = true
		}
	}
}

func isUserInput(it core.Item) bool {
	return it.Kind == core.KindPrompt || (it.Kind == core.KindMessage && it.From == "user")
}

func (c *checker) step(rec store.Record, body core.Body) {
	s := seen{rec: rec}
	c.last = s
	switch e := body.(type) {
	case *core.SessionCreated:
		c.agents[core.MainAgent] = e.Main
	case *core.SessionClosed:
		c.closed = &s
	case *core.AgentCreated:
		c.agents[e.Agent.ID] = e.Agent
	case *core.AgentRetired:
		if a, ok := c.agents[e.Agent]; ok && a.Task != "" {
			if t := c.tasks[a.Task]; t != nil {
				t.status, t.last, t.ended = core.TaskClosed, s, true
			}
		}
	case *core.HoldSet:
		c.hold = &s
	case *core.HoldReleased:
		c.hold = nil
	case *core.TaskStarted:
		t := &taskInfo{task: e.Task, started: s, status: e.Task.Status, last: s}
		if t.status == "" {
			t.status = core.TaskRunning
		}
		c.tasks[e.Task.ID] = t
		c.taskSeq = append(c.taskSeq, e.Task.ID)
	case *core.TaskUpdated:
		if t := c.tasks[e.Task]; t != nil {
			t.status, t.last = e.Status, s
			if e.Ended || !e.Status.Live() && e.Status != core.TaskIdle {
				t.ended = true
			}
		}
	case *core.TaskProcess:
		if t := c.tasks[e.Task]; t != nil {
			t.process = &s
		}
	case *core.Recovered:
		c.recov = append(c.recov, s)
	case *core.RetryScheduled:
		c.block(e.Agent, s)
	case *core.AgentBlocked:
		c.block(e.Agent, s)
	case *core.AgentReleased:
		delete(c.blocked, e.Agent)
	case *core.ItemEnqueued:
		it := &itemInfo{item: e.Item, enq: s, idle: c.running[e.Item.Agent] == nil, blockedBy: c.blocked[e.Item.Agent]}
		c.items[e.Item.ID] = it
		c.itemSeq = append(c.itemSeq, e.Item.ID)
		if isUserInput(e.Item) {
			for _, id := range c.itemSeq {
				w := c.items[id]
				if w != it && w.item.Agent == e.Item.Agent && w.taken == nil && !w.removed && w.userBy == nil {
					w.userBy = &s
				}
			}
		}
		if e.Item.Kind == core.KindContinuation && c.hold != nil {
			c.holdAt[e.Item.ID] = *c.hold
		}
	case *core.ItemRemoved:
		if it := c.items[e.Item]; it != nil {
			it.removed = true
		}
	case *core.MessageSent:
		c.msgs[e.Msg.ID] = &msgInfo{msg: e.Msg, sent: s}
	case *core.RunStarted:
		delete(c.blocked, e.Agent)
		r := &runInfo{agent: e.Agent, seq: e.Seq, kind: e.Kind, start: s}
		for _, id := range c.itemSeq {
			it := c.items[id]
			if it.item.Agent == e.Agent && it.taken == nil && !it.removed && !slices.Contains(e.Items, id) {
				it.passedBy = append(it.passedBy, s)
			}
		}
		c.take(r, e.Items, s)
		c.running[e.Agent] = r
		c.runs = append(c.runs, r)
		for _, g := range c.gates {
			if g.agent == e.Agent && !g.released && !slices.Contains(e.Items, g.gate.Item) {
				g.ranAfter = append(g.ranAfter, s)
			}
		}
		if a, ok := c.agents[e.Agent]; ok && a.Task != "" {
			c.setTask(a.Task, core.TaskRunning, s)
		}
	case *core.ItemsJoined:
		if r := c.running[e.Agent]; r != nil {
			c.take(r, e.Items, s)
		}
	case *core.RunEnded:
		if r := c.running[e.Agent]; r != nil && r.seq == e.Seq {
			r.ended, r.reply = &s, e.Reply
			delete(c.running, e.Agent)
		}
		if a, ok := c.agents[e.Agent]; ok && a.Task != "" {
			if t := c.tasks[a.Task]; t != nil && t.status == core.TaskRunning {
				c.setTask(a.Task, core.TaskIdle, s)
			}
		}
	case *core.NotificationWritten:
		c.notes[e.Note.Key] = &noteInfo{note: e.Note, written: s}
	case *core.NotificationDropped:
		for _, id := range c.itemSeq {
			if it := c.items[id]; it.item.Note != nil && *it.item.Note == e.Key {
				it.removed = true
			}
		}
	case *core.GateOpened:
		c.gates = append(c.gates, &gateInfo{agent: e.Agent, gate: e.Gate, opened: s})
	case *core.GateReleased:
		for _, g := range c.gates {
			if g.agent == e.Agent && g.gate.Gen == e.Gen {
				g.released = true
			}
		}
	}
}

// block records that an agent stated a reason not to run (a block or a
// backoff): the items waiting for it, and those queued until it runs
// again, wait for that reason.
func (c *checker) block(a core.AgentID, s seen) {
	c.blocked[a] = &s
	for _, id := range c.itemSeq {
		if it := c.items[id]; it.item.Agent == a && it.taken == nil && !it.removed && it.blockedBy == nil {
			it.blockedBy = &s
		}
	}
}

func (c *checker) finding(k doctor.Kind, start time.Time) doctor.Finding {
	return doctor.Finding{Kind: k, Source: "vigil", Session: c.session, File: c.opts.Name, Start: start}
}

func (c *checker) finish() []doctor.Finding {
	var out []doctor.Finding
	out = append(out, c.stranded()...)
	out = append(out, c.missedWakes()...)
	out = append(out, c.held()...)
	out = append(out, c.stuck()...)
	return out
}

// stranded finds answered messages whose answering run ended with no
// notification listing them.
func (c *checker) stranded() []doctor.Finding {
	var out []doctor.Finding
	for _, r := range c.runs {
		if r.ended == nil || len(r.msgs) == 0 {
			continue
		}
		a, ok := c.agents[r.agent]
		if !ok || a.Task == "" {
			continue // the main agent is nobody's task: no notification is owed
		}
		key := core.NoteKey{Task: a.Task, Run: r.seq}
		n := c.notes[key]
		for _, id := range r.msgs {
			if n != nil && slices.Contains(n.note.Answered, id) {
				continue
			}
			m := c.msgs[id]
			f := c.finding(doctor.StrandedReply, r.ended.rec.At)
			f.Summary = fmt.Sprintf("run %d of %s answered message %s from %s, and no notification %s carrying that answer was written for %s", r.seq, r.agent, id, m.msg.From, key, a.Owner)
			f.Evidence = []doctor.Evidence{
				m.sent.evidence(c.opts.Name, fmt.Sprintf("%s sent message %s to %s (told %s)", m.msg.From, id, m.msg.To, m.msg.Outcome)),
				r.start.evidence(c.opts.Name, fmt.Sprintf("run %d of %s started and took the message in", r.seq, r.agent)),
				r.ended.evidence(c.opts.Name, fmt.Sprintf("run %d of %s ended with its answer", r.seq, r.agent)),
			}
			if n != nil {
				f.Evidence = append(f.Evidence, n.written.evidence(c.opts.Name, fmt.Sprintf("notification %s was written but does not list %s among the messages it answers", key, id)))
			}
			f.Recovered = r.reply
			f.Action = fmt.Sprintf("give %s the recovered reply (vigil message %s %s \"...\"), or read run %d's reply with vigil logs %s", a.Owner, c.session, a.Owner, r.seq, c.session)
			out = append(out, f)
		}
	}
	return out
}

// missedWakes finds notifications that waited for an idle agent past the
// threshold.
func (c *checker) missedWakes() []doctor.Finding {
	var out []doctor.Finding
	for _, id := range c.itemSeq {
		it := c.items[id]
		if it.item.Kind != core.KindNotification || !it.idle || it.removed || it.userBy != nil || it.blockedBy != nil {
			continue
		}
		end := c.last.rec.At
		if it.taken != nil {
			end = it.taken.rec.At
		}
		stall := end.Sub(it.enq.rec.At)
		if stall <= c.opts.Stall {
			continue
		}
		note := ""
		if it.item.Note != nil {
			note = it.item.Note.String()
		}
		f := c.finding(doctor.MissedWake, it.enq.rec.At)
		f.Stall = stall
		f.Evidence = []doctor.Evidence{it.enq.evidence(c.opts.Name, fmt.Sprintf("notification %s was queued for %s, which had no run in progress", note, it.item.Agent))}
		if it.taken != nil {
			f.End = end
			f.Summary = fmt.Sprintf("notification %s waited %s for idle %s before a run took it, with no user input between", note, stall.Round(time.Millisecond), it.item.Agent)
			f.Evidence = append(f.Evidence, it.taken.evidence(c.opts.Name, fmt.Sprintf("the run that took it started %s later", stall.Round(time.Millisecond))))
			f.Action = "nothing is left to do for this notification; the stall shows the session's wake was late"
		} else {
			f.Summary = fmt.Sprintf("notification %s has waited %s for idle %s and no run took it", note, stall.Round(time.Millisecond), it.item.Agent)
			f.Evidence = append(f.Evidence, c.last.evidence(c.opts.Name, "the session's last event; the notification was still queued"))
			f.Action = fmt.Sprintf("see why %s does not drain (vigil status %s), then vigil retry %s %s", it.item.Agent, c.session, c.session, it.item.Agent)
			f.Item = string(id)
		}
		out = append(out, f)
	}
	return out
}

// held finds continuations passed over and never taken, and gates never
// released though their agent ran again.
func (c *checker) held() []doctor.Finding {
	var out []doctor.Finding
	gateOf := map[core.ItemID]*gateInfo{}
	for _, g := range c.gates {
		if g.gate.Item != "" {
			gateOf[g.gate.Item] = g
		}
	}
	reported := map[*gateInfo]bool{}
	for _, id := range c.itemSeq {
		it := c.items[id]
		if it.item.Kind != core.KindContinuation || it.taken != nil || it.removed || len(it.passedBy) == 0 {
			continue
		}
		f := c.finding(doctor.HeldContinuation, it.enq.rec.At)
		f.Stall = c.last.rec.At.Sub(it.enq.rec.At)
		f.Item = string(id)
		f.Summary = fmt.Sprintf("continuation %s of %s was passed over by %d later run(s) of %s and never taken", id, it.item.Agent, len(it.passedBy), it.item.Agent)
		if h, ok := c.holdAt[id]; ok {
			f.Evidence = append(f.Evidence, h.evidence(c.opts.Name, "a hold on the session's queue was in force"))
		}
		f.Evidence = append(f.Evidence, it.enq.evidence(c.opts.Name, fmt.Sprintf("continuation %s was queued for %s", id, it.item.Agent)))
		if g := gateOf[id]; g != nil {
			reported[g] = true
			if !g.released {
				f.Evidence = append(f.Evidence, g.opened.evidence(c.opts.Name, fmt.Sprintf("its gate (generation %d) opened and was never released", g.gate.Gen)))
			}
		}
		for _, p := range it.passedBy {
			f.Evidence = append(f.Evidence, p.evidence(c.opts.Name, "a later run started without it"))
		}
		f.Action = fmt.Sprintf("drop the continuation (vigil show %s lists the inbox item %s); a continuation needs no person to release it", c.session, id)
		out = append(out, f)
	}
	for _, g := range c.gates {
		if g.released || reported[g] || len(g.ranAfter) == 0 {
			continue
		}
		f := c.finding(doctor.HeldContinuation, g.opened.rec.At)
		f.Stall = c.last.rec.At.Sub(g.opened.rec.At)
		f.Item = string(g.gate.Item)
		f.Summary = fmt.Sprintf("the pending-continuation gate of %s (generation %d) was never released, though %d later run(s) of it started; wakes it guards cannot be offered again", g.agent, g.gate.Gen, len(g.ranAfter))
		f.Evidence = append(f.Evidence, g.opened.evidence(c.opts.Name, "the gate opened"))
		for _, p := range g.ranAfter {
			f.Evidence = append(f.Evidence, p.evidence(c.opts.Name, "a later run started without the continuation the gate guards"))
		}
		f.Action = "release the gate: vigil retry the agent, or end the provider process that holds it"
		out = append(out, f)
	}
	return out
}

// stuck finds tasks that read running after what could end them is gone.
func (c *checker) stuck() []doctor.Finding {
	var out []doctor.Finding
	for _, id := range c.taskSeq {
		t := c.tasks[id]
		if t.ended || !t.status.Live() {
			continue
		}
		var why string
		var ev []doctor.Evidence
		switch {
		case c.closed != nil:
			why = "the session was closed"
			ev = append(ev, c.closed.evidence(c.opts.Name, "the session closed with the task still running"))
		case t.process != nil && c.recoveredAfter(t.process.rec.At, t.last.rec.At) != nil:
			r := c.recoveredAfter(t.process.rec.At, t.last.rec.At)
			why = "its process died with the vigil that started it"
			ev = append(ev, t.process.evidence(c.opts.Name, "the task's process was recorded"), r.evidence(c.opts.Name, "a new vigil took the session over; nothing ended the task after it"))
		case t.task.Kind == core.TaskAgent && c.running[t.task.Agent] == nil && c.agentRan(t.task.Agent):
			why = fmt.Sprintf("its agent %s has no run in progress", t.task.Agent)
			ev = append(ev, t.last.evidence(c.opts.Name, "the last record that set the task's status"))
		default:
			continue
		}
		f := c.finding(doctor.StuckSubagent, t.last.rec.At)
		f.Stall = c.last.rec.At.Sub(t.last.rec.At)
		f.Item = string(id)
		f.Summary = fmt.Sprintf("%s task %s (%s) still reads %s, but %s", t.task.Kind, id, describe(t.task), t.status, why)
		f.Evidence = append([]doctor.Evidence{t.started.evidence(c.opts.Name, "the task started")}, ev...)
		f.Action = fmt.Sprintf("stop it so its owner is notified: vigil stop %s/%s", c.session, id)
		out = append(out, f)
	}
	return out
}

func describe(t core.Task) string {
	switch {
	case t.Description != "":
		return t.Description
	case t.Command != "":
		return shorten(t.Command, 60)
	}
	return string(t.Agent)
}

func (c *checker) recoveredAfter(process, last time.Time) *seen {
	for i := range c.recov {
		r := &c.recov[i]
		if !r.rec.At.Before(process) && !r.rec.At.Before(last) {
			return r
		}
	}
	return nil
}

func (c *checker) agentRan(a core.AgentID) bool {
	for _, r := range c.runs {
		if r.agent == a && r.ended != nil {
			return true
		}
	}
	return false
}
