package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vigilrun/vigil/core"
)

// checker holds what the rules need to remember across steps, built only
// from committed events and the state — never from the core's own
// bookkeeping of the same facts.
type checker struct {
	w     *world
	notes map[string]int // notifications written, by key
	items map[core.ItemID]*itemInfo
	runs  map[string]*runInfo
	gates map[core.AgentID]int
	wakes []string
	woken map[string]core.AgentID // accepted wakes
	// cur is each agent's current run, from the events.
	cur map[core.AgentID]int
	// cancelled wakes: a person cancelled their continuation.
	cancelled map[string]bool
	idx       int
	msgSet    map[core.MsgID]bool
	// sent holds the items handed to the current provider process.
	sent map[core.ItemID]bool
	// promised holds the target run a pending message's sender was told
	// (DESIGN rule 11): it joins that run or the next one answers.
	promised map[core.MsgID]int
	// spent is what each agent's tree used, summed from the model calls'
	// events (rule 10).
	spent map[core.AgentID]*core.Spend
	// taskIdx is the event index at which each task started.
	taskIdx map[core.TaskID]int
}

// itemInfo is what the checker saw of an inbox item: a run holds it in
// flight from when it takes it until a model round with it is accepted
// (seen) or the run gives it back.
type itemInfo struct {
	item    core.Item
	held    int // the run holding it in flight, 0 when none, -1 carried after a cancel
	seen    int // accepted rounds that delivered it
	run     int // the run that delivered it
	removed bool
}

type runInfo struct {
	lastJoin, lastCall int
	// bound is the least round bound of the prompts the run took (0:
	// none); turns counts its completed model rounds, call is its model
	// call in flight when that is a turn, not a compaction.
	bound, turns int
	call         core.CallID
}

func newChecker(w *world) *checker {
	return &checker{
		w: w, notes: map[string]int{}, items: map[core.ItemID]*itemInfo{}, runs: map[string]*runInfo{},
		gates: map[core.AgentID]int{}, woken: map[string]core.AgentID{}, cancelled: map[string]bool{}, cur: map[core.AgentID]int{}, msgSet: map[core.MsgID]bool{},
		sent: map[core.ItemID]bool{}, promised: map[core.MsgID]int{}, spent: map[core.AgentID]*core.Spend{}, taskIdx: map[core.TaskID]int{},
	}
}

func (c *checker) violate(rule, detail string) { c.violateRun(rule, "", 0, detail) }

// violateRun is violate for a violation about run seq of agent: the report
// then names the step at which that run started and the steps that
// touched the agent.
func (c *checker) violateRun(rule string, agent core.AgentID, seq int, detail string) {
	w := c.w
	w.res.Violations++
	if w.res.First == nil {
		v := &Violation{Rule: rule, Step: w.steps, At: w.now.Sub(w.start), Detail: detail}
		if agent != "" {
			v.Agent, v.Run = agent, seq
			v.RunStep = w.runStep[runRef{agent, seq}]
			v.Steps = append([]int(nil), w.touched[agent]...)
			if a := w.state.Agents[agent]; a != nil {
				v.Name = a.Name
			}
		}
		w.res.First = v
		w.res.Trace = w.traceLines()
	}
}

func runKey(a core.AgentID, seq int) string { return fmt.Sprintf("%s#%d", a, seq) }

func (c *checker) take(ids []core.ItemID, a core.AgentID, seq int) {
	for _, id := range ids {
		info := c.items[id]
		if info == nil {
			c.violate("1", fmt.Sprintf("run %s took unknown item %s", runKey(a, seq), id))
			continue
		}
		if info.held != 0 || info.seen > 0 {
			c.violateRun("1", a, seq, fmt.Sprintf("run %s took item %s (%s), already held by run %d or delivered", runKey(a, seq), id, info.item.Kind, info.held))
		}
		info.held = seq
	}
}

// afterStep checks the rules after a committed step.
func (c *checker) afterStep(in core.Input, out core.Output) {
	s := c.w.state
	var ended []*core.RunEnded
	written := map[string]bool{}
	// What a provider process was handed dies with it.
	switch in.(type) {
	case core.ProviderExited, core.Recover:
		c.sent = map[core.ItemID]bool{}
	}
	defer func() {
		for _, ef := range out.Effects {
			if d, ok := ef.(core.Deliver); ok {
				if a := s.Agents[d.Agent]; a != nil && a.Run != nil {
					for _, it := range a.Run.Unseen {
						c.sent[it.ID] = true
					}
				}
			}
		}
	}()
	// Rule 11: a SendMessage call gets its result in the step that
	// started it; a pending result states its promise.
	sends := map[string]core.AgentID{}
	type compaction struct {
		agent  core.AgentID
		idx    int
		listed map[core.TaskID]bool
	}
	var compactions []compaction
	defer func() {
		// The ledger lists every task the agent has live (started before
		// the compaction); none of its live agent tasks runs a prompt
		// twice (rule: no double dispatch).
		for _, cp := range compactions {
			for _, id := range s.LiveTasks(cp.agent) {
				if !cp.listed[id] && c.taskIdx[id] < cp.idx {
					c.violateRun("ledger", cp.agent, 0, fmt.Sprintf("the task ledger of %s's compaction leaves out live task %s", cp.agent, id))
				}
			}
		}
		if len(compactions) > 0 || len(out.Events) > 0 {
			seen := map[string]core.TaskID{}
			for _, id := range s.TaskOrder {
				t := s.Tasks[id]
				if ag := s.Agents[t.Agent]; t.Kind == core.TaskAgent && t.Prompt != "" && ag != nil && ag.State != core.AgentClosed {
					k := string(t.Owner) + "\x00" + t.Prompt
					if prev, ok := seen[k]; ok {
						c.violate("ledger", fmt.Sprintf("tasks %s and %s of %s run the same prompt at once (dispatched twice)", prev, id, t.Owner))
					}
					seen[k] = id
				}
			}
		}
	}()
	defer func() {
		// In order, so that a seed reports the same violation every time.
		for _, use := range slices.Sorted(maps.Keys(sends)) {
			c.violate("11", fmt.Sprintf("SendMessage %s of %s is left waiting on another agent's model round", use, sends[use]))
		}
	}()
	for _, e := range out.Events {
		c.idx++
		switch b := e.Body.(type) {
		case *core.ModelCallEnded:
			if r := c.runs[runKey(b.Agent, c.cur[b.Agent])]; r != nil && r.call == b.Call {
				r.call = ""
				if b.Outcome == "completed" {
					r.turns++
				}
			}
			if b.Outcome == "completed" {
				for x := s.Agents[b.Agent]; x != nil; x = s.Agents[x.Owner] {
					sp := c.spent[x.ID]
					if sp == nil {
						sp = &core.Spend{}
						c.spent[x.ID] = sp
					}
					sp.Usage = sp.Usage.Add(b.Usage)
					sp.Rounds++
					sp.Cost += b.Cost
					if x.Owner == "" {
						break
					}
				}
			}
		case *core.TaskStarted:
			c.taskIdx[b.Task.ID] = c.idx
		case *core.ContextCompacted:
			cp := compaction{agent: b.Agent, idx: c.idx, listed: map[core.TaskID]bool{}}
			for _, lt := range b.Compaction.Ledger.Tasks {
				cp.listed[lt.Task] = true
			}
			compactions = append(compactions, cp)
		case *core.ToolCallStarted:
			if b.Call.Name == "SendMessage" {
				sends[b.Call.UseID] = b.Agent
			}
		case *core.ToolCallFinished:
			if _, ok := sends[b.UseID]; ok {
				delete(sends, b.UseID)
				c.checkPromise(b.Result)
			}
		case *core.NotificationWritten:
			k := b.Note.Key.String()
			c.notes[k]++
			written[k] = true
			if c.notes[k] > 1 {
				c.violate("1", fmt.Sprintf("notification %s written %d times", k, c.notes[k]))
			}
		case *core.RunStarted:
			ri := &runInfo{lastJoin: c.idx, lastCall: -1}
			if a := s.Agents[b.Agent]; a.Driver != core.DriverLoop {
				// A provider process or an outside caller gets the items
				// when the run starts; there is no model round of ours.
				ri.lastCall = c.idx
			}
			for _, id := range b.Items {
				if info := c.items[id]; info != nil && info.item.MaxRounds > 0 && (ri.bound == 0 || info.item.MaxRounds < ri.bound) {
					ri.bound = info.item.MaxRounds
				}
			}
			c.runs[runKey(b.Agent, b.Seq)] = ri
			c.cur[b.Agent] = b.Seq
			if a := s.Agents[b.Agent]; a.Task != "" && b.Seq > 1 {
				prev := core.NoteKey{Task: a.Task, Run: b.Seq - 1}.String()
				if c.notes[prev] == 0 {
					c.violate("2", fmt.Sprintf("follow-on run %s started before run %d's notification %s was written", runKey(b.Agent, b.Seq), b.Seq-1, prev))
				}
			}
			c.take(b.Items, b.Agent, b.Seq)
		case *core.ItemsJoined:
			if r := c.runs[runKey(b.Agent, b.Seq)]; r != nil {
				r.lastJoin = c.idx
			}
			c.take(b.Items, b.Agent, b.Seq)
		case *core.ItemsSeen:
			// Delivery means seen: only an accepted model round (a model's
			// answer, a provider process beginning the turn, an outside
			// caller's acknowledgement) delivers.
			switch in.(type) {
			case core.ModelResponded, core.ExternalTurnStarted, core.ExternalMessage, core.CallerAck:
			default:
				c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("run %s counted %v delivered on %T, which no model saw", runKey(b.Agent, b.Seq), b.Items, in))
			}
			switch in.(type) {
			case core.ExternalTurnStarted, core.ExternalMessage:
				// A provider process's turn sees only what was handed to
				// that process.
				for _, id := range b.Items {
					if !c.sent[id] {
						c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("run %s counted item %s seen, but no delivery to the current provider process carried it", runKey(b.Agent, b.Seq), id))
					}
				}
			}
			for _, id := range b.Items {
				info := c.items[id]
				if info == nil || (info.held != b.Seq && info.held != -1) {
					c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("run %s saw item %s it does not hold", runKey(b.Agent, b.Seq), id))
					continue
				}
				info.held, info.run = 0, b.Seq
				info.seen++
				if info.seen > 1 {
					c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("item %s (%s) delivered twice", id, info.item.Kind))
				}
			}
		case *core.ItemsReturned:
			if r := c.runs[runKey(b.Agent, b.Seq)]; r != nil && len(b.Items)+len(b.Dropped) > 0 && len(b.Carried) == 0 {
				// What joined went back unseen: it joins nothing.
				r.lastJoin = r.lastCall
			}
			for _, id := range b.Items {
				info := c.items[id]
				if info == nil || info.held != b.Seq {
					c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("run %s gave back item %s it does not hold", runKey(b.Agent, b.Seq), id))
					continue
				}
				info.held = 0
			}
			for _, id := range b.Dropped {
				// A person's prompt, cancelled before a provider process
				// began it: dropped, with its own drop event.
				if info := c.items[id]; info != nil && info.held == b.Seq && info.item.Kind == core.KindPrompt && info.item.From == "user" {
					info.held = 0
				} else {
					c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("run %s dropped item %s, which is not a prompt of the user it holds", runKey(b.Agent, b.Seq), id))
				}
			}
			for _, id := range b.Carried {
				if info := c.items[id]; info != nil && info.held == b.Seq {
					// Its text stays in the transcript: the agent's next
					// accepted round delivers it.
					info.held = -1
				}
			}
		case *core.ModelCallStarted:
			c.checkBudgets(b.Agent)
			if r := c.runs[runKey(b.Agent, c.cur[b.Agent])]; r != nil {
				r.lastCall = c.idx
				if b.Purpose == "" {
					r.call = b.Call
					if r.bound > 0 && r.turns >= r.bound {
						c.violateRun("10", b.Agent, c.cur[b.Agent], fmt.Sprintf("model round %d started past its prompt's bound of %d rounds", r.turns+1, r.bound))
					}
				}
			}
		case *core.RunEnded:
			ended = append(ended, b)
			if r := c.runs[runKey(b.Agent, b.Seq)]; r != nil && b.Status == core.RunRoundLimit && (r.bound == 0 || r.turns != r.bound) {
				c.violateRun("10", b.Agent, b.Seq, fmt.Sprintf("run ended round_limit after %d rounds, its prompts' bound being %d", r.turns, r.bound))
			}
			var lost []core.ItemID
			for id, info := range c.items {
				if info.held == b.Seq && info.item.Agent == b.Agent {
					lost = append(lost, id)
				}
			}
			slices.Sort(lost) // the same report every time
			for _, id := range lost {
				info := c.items[id]
				c.violateRun("1", b.Agent, b.Seq, fmt.Sprintf("run %s ended %s with item %s (%s) neither seen by its model, nor given back, nor carried", runKey(b.Agent, b.Seq), b.Status, id, info.item.Kind))
				info.held = 0
			}
			if r := c.runs[runKey(b.Agent, b.Seq)]; r != nil && r.lastCall < r.lastJoin {
				c.violate("2", fmt.Sprintf("run %s ended with items that joined after its last model round", runKey(b.Agent, b.Seq)))
			}
		case *core.ItemEnqueued:
			it := b.Item
			c.items[it.ID] = &itemInfo{item: it}
			if it.Kind == core.KindPrompt && it.From != "user" {
				c.violate("5", fmt.Sprintf("item %s from %s was queued as a user prompt (holdable)", it.ID, it.From))
			}
		case *core.ItemRemoved:
			if info := c.items[b.Item]; info != nil {
				info.removed = true
				if b.Reason == "cancelled" {
					// A person cancelled the continuation: its wakes end here.
					for _, tok := range c.wakes {
						if strings.Contains(info.item.Text, tok) {
							c.cancelled[tok] = true
						}
					}
				}
			}
			if b.Reason == "" {
				c.violate("9", "item "+string(b.Item)+" removed without a reason")
			}
		case *core.MessageSent:
			c.msgSet[b.Msg.ID] = true
			if b.Msg.Outcome == core.OutcomePending {
				c.promised[b.Msg.ID] = b.Msg.Run
			}
			if b.Msg.Outcome == "" {
				c.violate("3", "message "+string(b.Msg.ID)+" sent with no outcome")
			}
			if b.Msg.Outcome == core.OutcomeRejected && b.Msg.Reason == "" {
				c.violate("3", "message "+string(b.Msg.ID)+" rejected without a reason")
			}
		case *core.MessageResolved:
			// The first settlement keeps the pending promise; a later one
			// re-promises a message a failed run gave back (rule 3).
			if run, ok := c.promised[b.Msg]; ok {
				delete(c.promised, b.Msg)
				if b.Outcome != core.OutcomeRejected && b.Run != run {
					c.violate("11", fmt.Sprintf("message %s was promised run %d (joins it, or run %d answers), settled on run %d", b.Msg, run, run+1, b.Run))
				}
			}
			switch b.Outcome {
			case core.OutcomeJoined, core.OutcomeQueuedBehindStop:
			case core.OutcomeRejected:
				if b.Reason == "" {
					c.violate("3", fmt.Sprintf("message %s rejected late without a reason", b.Msg))
				}
			default:
				c.violate("3", fmt.Sprintf("message %s resolved to %s", b.Msg, b.Outcome))
			}
		case *core.Dropped:
			if b.Reason == "" || b.What == "" {
				c.violate("9", "a drop without what and why")
			}
		case *core.GateOpened:
			if g := c.gates[b.Agent]; g != 0 {
				c.violate("6", fmt.Sprintf("gate g%d of %s opened while g%d is still held", b.Gate.Gen, b.Agent, g))
			}
			c.gates[b.Agent] = b.Gate.Gen
			if b.Gate.Deadline.IsZero() {
				c.violate("6", fmt.Sprintf("gate g%d of %s has no deadline", b.Gate.Gen, b.Agent))
			}
		case *core.GateReleased:
			if c.gates[b.Agent] == b.Gen {
				delete(c.gates, b.Agent)
			}
		}
	}
	for _, b := range ended {
		a := s.Agents[b.Agent]
		if a.Task == "" {
			continue
		}
		k := core.NoteKey{Task: a.Task, Run: b.Seq}.String()
		if !written[k] {
			c.violate("1", fmt.Sprintf("run %s ended without its notification %s in the same step", runKey(b.Agent, b.Seq), k))
		}
	}
	if pw, ok := in.(core.ProviderWake); ok {
		c.woken[pw.Evidence] = pw.Agent
	}
	c.w.answerApprovals(out.Events)
	c.w.answerBlocks(out.Events)
}

// heldByUser is the checker's own reading of rule 5: only prompts a user
// sent may wait for a hold.
func heldByUser(s *core.State, it *core.Item) bool {
	return s.Hold != nil && it.Kind == core.KindPrompt && it.From == "user"
}

// stateRules checks the rules that are about the state after any step.
func (c *checker) stateRules() {
	s, now := c.w.state, c.w.now
	inflight, waiting := 0, 0
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.State == core.AgentClosed || s.Session.Closed {
			if len(a.Inbox) > 0 {
				c.violate("9", fmt.Sprintf("closed agent %s keeps %d queued item(s)", a.Name, len(a.Inbox)))
			}
			continue
		}
		// Rule 4: an idle agent with an item it may take starts a run.
		// An outside caller takes its items itself; a mirrored subagent is
		// run by its provider process and never has items.
		if a.Driver == core.DriverCaller || (a.Driver == core.DriverExternal && a.Owner != "") {
			if a.Owner != "" && len(a.Inbox) > 0 {
				c.violate("4", fmt.Sprintf("mirrored subagent %s has %d queued item(s) nobody takes", a.Name, len(a.Inbox)))
			}
		} else if a.Blocked != nil {
			if a.Blocked.Reason == "" {
				c.violate("4", fmt.Sprintf("agent %s is blocked without a reason", a.Name))
			}
		} else if a.Run == nil && a.Retry != nil && a.Retry.At.After(now) {
			// Backing off after a failed run, until a deadline.
		} else if a.Run == nil {
			for _, it := range a.Inbox {
				if !heldByUser(s, it) {
					if s.Hold != nil && it.Kind != core.KindPrompt {
						c.violate("5", fmt.Sprintf("%s item %s of %s waits while the user queue is held", it.Kind, it.ID, a.Name))
					}
					c.violate("4", fmt.Sprintf("agent %s is idle with deliverable %s item %s queued (missed wake)", a.Name, it.Kind, it.ID))
					break
				}
			}
		} else if call := a.Run.Call; call != nil {
			if call.State == core.CallWaitingSlot {
				waiting++
			} else {
				inflight++
			}
		}
		// Rule 6: a gate has an owner, a generation and a deadline, and is
		// released when its continuation reaches a terminal outcome.
		if g := a.Gate; g != nil {
			if g.Deadline.IsZero() {
				c.violate("6", fmt.Sprintf("gate g%d of %s has no deadline", g.Gen, a.Name))
			} else if g.Deadline.Before(now) {
				c.violate("6", fmt.Sprintf("gate g%d of %s held past its deadline", g.Gen, a.Name))
			}
			found := false
			for _, it := range a.Inbox {
				found = found || it.ID == g.Item
			}
			if !found {
				c.violate("6", fmt.Sprintf("gate g%d of %s still held after its continuation %s left the inbox", g.Gen, a.Name, g.Item))
			}
		}
	}
	// Rules 6 and 7: nothing is expected of a provider process without a
	// deadline — a run it runs, a notification it is to deliver.
	c.providerPromises()
	c.quiescence()
	c.whyRules()
	if limit := c.w.core.Config().MaxConcurrentCalls; limit > 0 && waiting > 0 && inflight < limit {
		c.violate("4", fmt.Sprintf("%d model call(s) wait for a slot while only %d of %d are in flight", waiting, inflight, limit))
	}
	// Rule 7: a live shell task has a live process.
	for _, id := range s.TaskOrder {
		t := s.Tasks[id]
		if t.External != "" {
			if t.Status.Live() && (c.w.proc == nil || !c.w.proc.alive) {
				c.violate("7", fmt.Sprintf("mirrored task %s is %s but its provider process is gone", id, t.Status))
			}
			continue
		}
		if t.Kind == core.TaskShell && t.Status.Live() {
			if p := c.w.procs[id]; p == nil || !p.alive {
				c.violate("7", fmt.Sprintf("task %s is %s but its process is gone", id, t.Status))
			}
		}
	}
}

// whyRules checks each agent's Why (the core's one answer to what it is
// doing or waiting on, which status and every edge show) against the
// checker's own reading of the state: a blocker comes first, a person is
// told they are needed exactly when they are, a model call in flight says
// so, an agent with queued items never reads idle, and every queued item
// is named by what holds it up.
func (c *checker) whyRules() {
	s := c.w.state
	for _, id := range s.Order {
		a := s.Agents[id]
		w := c.w.core.Why(s, a)
		bad := func(format string, args ...any) {
			detail := fmt.Sprintf("%s's why (%s) %q: ", a.Name, w.Kind, w.Text) + fmt.Sprintf(format, args...)
			if a.Run != nil {
				c.violateRun("why", a.ID, a.Run.Seq, detail)
			} else {
				c.violate("why", detail)
			}
		}
		if w.Kind == "" || w.Text == "" || strings.ContainsAny(w.Text, "\r\n") {
			bad("a why is a kind and one line of text")
			continue
		}
		closed := a.State == core.AgentClosed || s.Session.Closed
		approval := core.ApprovalID("")
		for _, p := range s.Approvals {
			if p.Agent == a.ID && (approval == "" || p.ID < approval) {
				approval = p.ID
			}
		}
		switch {
		case closed:
			if w.Kind != core.WhyClosed {
				bad("the agent is closed")
			}
			continue
		case approval != "":
			if w.Kind != core.WhyApproval {
				bad("permission request %s of the agent waits for a person", approval)
			}
		case a.Blocked != nil:
			if want := map[bool]string{true: core.WhyBudget, false: core.WhyBlocked}[a.Blocked.Kind == core.FailBudget]; w.Kind != want {
				bad("the agent is blocked (%s), want kind %s", a.Blocked.Reason, want)
			}
		case a.Run == nil && a.Retry != nil:
			if w.Kind != core.WhyBackoff || !w.Until.Equal(a.Retry.At) {
				bad("the agent backs off until %s", a.Retry.At.Format("15:04:05.000"))
			}
		case a.Run != nil && a.Driver == core.DriverLoop && a.Run.Call != nil && a.Run.Call.State == core.CallInFlight:
			if w.Kind != core.WhyModel {
				bad("model call %s is in flight", a.Run.Call.ID)
			}
		case a.Run == nil && len(a.Inbox) > 0:
			if w.Kind == core.WhyIdle {
				bad("%d item(s) are queued", len(a.Inbox))
			}
		}
		if needs := approval != "" || a.Blocked != nil; w.NeedsYou != needs {
			bad("needs_you is %v, but a person is needed: %v", w.NeedsYou, needs)
		}
		held := 0
		for _, it := range a.Inbox {
			if heldByUser(s, it) {
				held++
				continue
			}
			if !slices.Contains(w.HoldsUp, it.ID) {
				bad("queued %s item %s is not among the items it holds up %v", it.Kind, it.ID, w.HoldsUp)
			}
		}
		if held > 0 && !strings.Contains(w.Text, "held") {
			bad("%d user prompt(s) are held, and it does not say so", held)
		}
	}
	if len(s.Approvals) == 0 {
		return
	}
	for _, st := range core.Status(s) {
		if a := s.Agents[st.Agent]; st.Draining && a.State == core.AgentWaiting {
			c.violate("why", fmt.Sprintf("status says %s's inbox is draining while it waits for a permission answer", a.Name))
		}
	}
}

// providerPromises checks that whatever vigil waits for a provider
// process to do has a deadline that has not passed.
func (c *checker) providerPromises() {
	s, now := c.w.state, c.w.now
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Driver != core.DriverExternal || a.Run == nil || !a.Run.Cancelling.IsZero() {
			continue
		}
		switch e := a.Run.Expect; {
		case e.IsZero():
			c.violateRun("7", a.ID, a.Run.Seq, fmt.Sprintf("run %s#%d waits on its provider process with no deadline", a.Name, a.Run.Seq))
		case e.Before(now):
			c.violateRun("7", a.ID, a.Run.Seq, fmt.Sprintf("run %s#%d still waits on its provider process past its deadline", a.Name, a.Run.Seq))
		}
	}
	for _, k := range s.NoteOrder {
		n := s.Note(k)
		if n.Delivery != core.DeliverProvider || n.DeliveredRun != 0 || n.Dropped != "" {
			continue
		}
		if o := s.Agents[n.Owner]; o != nil && o.Run != nil && o.Run.Acked {
			continue // its owner's turn takes it in
		}
		switch {
		case n.DeliverBy.IsZero():
			c.violate("7", fmt.Sprintf("notification %s waits for its provider process to deliver it, with no deadline", k))
		case n.DeliverBy.Before(now):
			c.violate("7", fmt.Sprintf("notification %s still waits for its provider process past its deadline", k))
		}
	}
}

// quiescence checks that a session that reads quiescent waits for
// nothing: a caller that takes quiescence as "done" (vigil run, then a
// close) must not leave a notification owed. An agent's queued items and
// runs are the rule 4 checks above; this is what a provider process owes.
func (c *checker) quiescence() {
	s := c.w.state
	if !c.w.core.Quiescent(s) || s.Session.Closed {
		return
	}
	for _, k := range s.NoteOrder {
		n := s.Note(k)
		if n.Delivery != core.DeliverProvider || n.DeliveredRun != 0 || n.Dropped != "" {
			continue
		}
		if o := s.Agents[n.Owner]; o != nil && o.State != core.AgentClosed {
			c.violate("quiescent", fmt.Sprintf("the session reads quiescent while its provider process owes %s notification %s", o.Name, k))
			return
		}
	}
}

func (c *checker) onCrash() {
	// Gates are rebuilt from the log like everything else.
	c.gates = map[core.AgentID]int{}
	for _, id := range c.w.state.Order {
		if g := c.w.state.Agents[id].Gate; g != nil {
			c.gates[id] = g.Gen
		}
	}
}

// end checks what must hold once the world has nothing left to do.
func (c *checker) end() {
	s := c.w.state
	w := c.w
	if stateJSON(core.Replay(w.log)) != stateJSON(s) {
		c.violate("replay", "the state rebuilt from the log differs from the live state")
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		w.res.Runs += len(a.Runs)
		if a.Run != nil {
			c.violateRun("end", id, a.Run.Seq, fmt.Sprintf("run %s#%d never ended", a.Name, a.Run.Seq))
		}
		if b := a.Blocked; b != nil && b.Kind == core.FailBudget {
			// Its items wait for a person to raise the budget; the block
			// must be true (rule 10).
			if c.spentBudget(a) == "" {
				c.violate("10", fmt.Sprintf("%s is blocked by a budget that is not spent: %s", a.Name, b.Reason))
			}
			continue
		}
		for _, it := range a.Inbox {
			if !heldByUser(s, it) {
				c.violate("4", fmt.Sprintf("%s item %s left undrained in %s's inbox", it.Kind, it.ID, a.Name))
			}
		}
		if a.Task != "" {
			for _, r := range a.Runs {
				k := core.NoteKey{Task: a.Task, Run: r.Seq}.String()
				if c.notes[k] != 1 {
					c.violate("1", fmt.Sprintf("run %s#%d (%s) has %d notifications, want exactly 1", a.Name, r.Seq, r.Status, c.notes[k]))
				}
			}
		}
	}
	for _, id := range s.TaskOrder {
		t := s.Tasks[id]
		if t.Kind != core.TaskShell {
			continue
		}
		if t.Status.Live() {
			c.violate("7", fmt.Sprintf("shell task %s still %s at the end", id, t.Status))
			continue
		}
		if k := (core.NoteKey{Task: id}).String(); c.notes[k] != 1 {
			c.violate("1", fmt.Sprintf("shell task %s has %d exit notifications, want exactly 1", id, c.notes[k]))
		}
	}
	for _, k := range s.NoteOrder {
		n := s.Note(k)
		w.res.Notes++
		if n.Dropped != "" {
			continue
		}
		delivered := n.Delivery == core.DeliverToolResult || (n.Delivery == core.DeliverProvider && n.DeliveredRun > 0)
		if n.Item != "" {
			if info := c.items[n.Item]; info != nil && (info.seen == 1 || (info.held == -1 && s.Agents[n.Owner].Driver == core.DriverLoop)) {
				// A cancelled run carried it: its text is in the
				// transcript, and no later round of the agent was accepted
				// (one would have delivered it).
				delivered = true
			}
		}
		if !delivered && waitsOnBudget(s.Agents[n.Owner], n.Item) {
			continue // it waits in the inbox of an owner a spent budget blocks (checked above)
		}
		if !delivered {
			c.violate("1", fmt.Sprintf("notification %s was never delivered to %s", k, n.Owner))
		}
	}
	for id := range c.msgSet {
		m := s.Msgs[id]
		w.res.Messages++
		c.checkMsg(m)
	}
	for _, tok := range c.wakes {
		agent, ok := c.woken[tok]
		if !ok || c.cancelled[tok] {
			continue // lost in a crash before it committed, or cancelled by a person
		}
		a := s.Agents[agent]
		if a == nil || a.State == core.AgentClosed {
			continue
		}
		waiting := a.Blocked != nil && a.Blocked.Kind == core.FailBudget && slices.ContainsFunc(a.Inbox, func(it *core.Item) bool { return strings.Contains(it.Text, tok) })
		if !transcriptHas(a, tok) && !waiting {
			c.violate("6", fmt.Sprintf("provider wake %s for %s never reached the model (swallowed)", tok, a.Name))
		}
	}
}

func (c *checker) checkMsg(m *core.Msg) {
	s := c.w.state
	target := s.Agents[m.To]
	switch m.Outcome {
	case core.OutcomeRejected:
		if info := c.items[m.Item]; m.Item != "" && (info == nil || info.seen > 0) {
			c.violate("3", fmt.Sprintf("rejected message %s was delivered", m.ID))
		}
		return
	case core.OutcomePending:
		c.violate("3", fmt.Sprintf("message %s to %s never got an outcome", m.ID, m.To))
		return
	}
	info := c.items[m.Item]
	if info == nil {
		c.violate("3", fmt.Sprintf("message %s (%s) has no inbox item", m.ID, m.Outcome))
		return
	}
	if info.seen == 0 {
		if info.held == -1 {
			return // carried by a cancelled run to the agent's next round, which never came
		}
		if info.removed && target.State == core.AgentClosed {
			return // dropped loudly when its target closed
		}
		if waitsOnBudget(target, m.Item) {
			return // its target is blocked by a spent budget (checked at the end)
		}
		c.violate("3", fmt.Sprintf("message %s (%s) to %s was never answered", m.ID, m.Outcome, target.Name))
		return
	}
	if target.Driver == core.DriverCaller {
		return // taken by the caller's acknowledgement: nothing more to promise
	}
	if m.AnsweredBy != info.run {
		c.violate("3", fmt.Sprintf("message %s: state says run %d answered, events say %d", m.ID, m.AnsweredBy, info.run))
	}
	switch m.Outcome {
	case core.OutcomeResumed:
		if info.run != m.Run {
			c.violate("3", fmt.Sprintf("message %s: told resumed run %d, answered by run %d", m.ID, m.Run, info.run))
		}
	case core.OutcomeQueuedBehindStop:
		if info.run != m.Run+1 {
			c.violate("3", fmt.Sprintf("message %s: told run %d would answer, answered by run %d", m.ID, m.Run+1, info.run))
		}
	case core.OutcomeJoined:
		if info.run != m.Run {
			ok := info.run > m.Run && m.Run-1 < len(target.Runs) && target.Runs[m.Run-1].Status != core.RunCompleted
			if !ok {
				c.violate("3", fmt.Sprintf("message %s: told it joined run %d, answered by run %d", m.ID, m.Run, info.run))
			}
		}
	}
}

// checkBudgets: no model round starts for an agent once the session's
// budget or that of its tree, or of a tree above it, is spent.
func (c *checker) checkBudgets(id core.AgentID) {
	if w := c.spentBudget(c.w.state.Agents[id]); w != "" {
		c.violateRun("10", id, 0, "a model round started over "+w)
	}
}

// spentBudget says which budget over a is spent, by the checker's own
// sums, or "".
func (c *checker) spentBudget(a *core.Agent) string {
	s := c.w.state
	over := func(b core.Budget, sp *core.Spend) string {
		if sp == nil {
			return ""
		}
		switch {
		case b.Rounds > 0 && sp.Rounds >= b.Rounds:
			return fmt.Sprintf("rounds %d of %d", sp.Rounds, b.Rounds)
		case b.Tokens > 0 && sp.Usage.Total() >= b.Tokens:
			return fmt.Sprintf("tokens %d of %d", sp.Usage.Total(), b.Tokens)
		case b.Cost > 0 && sp.Cost >= b.Cost:
			return fmt.Sprintf("cost %d of %d", sp.Cost, b.Cost)
		}
		return ""
	}
	if w := over(s.Session.Budget, c.spent[core.MainAgent]); w != "" {
		return "the session's budget: " + w
	}
	for x := a; x != nil; x = s.Agents[x.Owner] {
		if w := over(x.Budget, c.spent[x.ID]); w != "" {
			return fmt.Sprintf("the budget of %s's tree: %s", x.Name, w)
		}
		if x.Owner == "" {
			break
		}
	}
	return ""
}

// checkPromise reads a SendMessage result: a pending outcome must name
// both runs it promises.
func (c *checker) checkPromise(result string) {
	var res struct {
		Outcome core.MsgOutcome `json:"outcome"`
		Msg     core.MsgID      `json:"message_id"`
		Run     int             `json:"run"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal([]byte(result), &res) != nil || res.Outcome != core.OutcomePending {
		return
	}
	if run, ok := c.promised[res.Msg]; !ok || run != res.Run ||
		!strings.Contains(res.Detail, fmt.Sprintf("joins run %d", run)) || !strings.Contains(res.Detail, fmt.Sprintf("run %d answers", run+1)) {
		c.violate("11", fmt.Sprintf("pending message %s: the sender was told %q", res.Msg, res.Detail))
	}
}

// waitsOnBudget reports whether item waits in the inbox of agent a, which
// a spent budget blocks.
func waitsOnBudget(a *core.Agent, item core.ItemID) bool {
	return a != nil && a.Blocked != nil && a.Blocked.Kind == core.FailBudget &&
		slices.ContainsFunc(a.Inbox, func(it *core.Item) bool { return it.ID == item })
}

func transcriptHas(a *core.Agent, tok string) bool {
	for _, m := range a.Transcript {
		for _, b := range m.Content {
			if strings.Contains(b.Text, tok) || strings.Contains(b.Content, tok) {
				return true
			}
		}
	}
	return false
}
