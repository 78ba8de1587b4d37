package core

// The inputs that steer a session from outside its runs: creating it,
// prompts and messages from the user, cancels, stops, the queue, closes,
// a provider's wake, deadlines and recovery.

import (
	"time"
)

func (st *stepper) createSession(in CreateSession) {
	if st.s.Session.ID != "" {
		st.fail(CodeConflict, "session %s exists", st.s.Session.ID)
		return
	}
	if in.Session.ID == "" {
		st.fail(CodeInvalid, "session id is empty")
		return
	}
	sess := in.Session
	if sess.Permissions.Mode == "" {
		sess.Permissions.Mode = PermAsk
	}
	if b := sess.Budget; b.Tokens < 0 || b.Rounds < 0 || b.Wall < 0 || b.Cost < 0 {
		st.fail(CodeInvalid, "a budget's bounds are positive, or zero for the default")
		return
	}
	sess.Budget = sess.Budget.withDefaults(st.cfg.Budget)
	sess.Created = st.now
	name := in.MainName
	if name == "" {
		name = "main"
	}
	driver := in.Driver
	if driver == "" {
		driver = DriverLoop
	}
	st.emit(&SessionCreated{Session: sess, Main: Agent{
		Name: name, Model: sess.Model, Provider: sess.Provider, Driver: driver,
	}})
	if in.Prompt != "" {
		st.userPrompt(UserPrompt{Text: in.Prompt, Priority: PriorityNext, MaxRounds: in.MaxRounds})
	}
}

func (st *stepper) userPrompt(in UserPrompt) {
	if st.s.Session.Closed {
		st.fail(CodeClosed, "session is closed")
		return
	}
	if in.Text == "" {
		st.fail(CodeInvalid, "prompt is empty")
		return
	}
	p, ok := ParsePriority(string(in.Priority))
	if !ok {
		st.fail(CodeInvalid, "unknown priority %q (want now, next or later)", in.Priority)
		return
	}
	if in.MaxRounds < 0 {
		st.fail(CodeInvalid, "max rounds %d: want a positive number, or 0 for no bound", in.MaxRounds)
		return
	}
	main := st.s.Agents[MainAgent]
	if len(main.Inbox) >= st.cfg.MaxInbox {
		st.fail(CodeConflict, "main agent's inbox is full (%d items)", st.cfg.MaxInbox)
		return
	}
	id := st.nextItemID()
	st.enqueue(main, Item{ID: id, Kind: KindPrompt, Priority: p, From: "user", Text: in.Text, MaxRounds: in.MaxRounds})
	st.out.Item = id
	// A person wrote: a blocked or backing-off main agent runs now.
	st.release(main, "a new prompt")
}

func (st *stepper) userMessage(in UserMessage) {
	p, ok := ParsePriority(string(in.Priority))
	if !ok {
		st.fail(CodeInvalid, "unknown priority %q (want now, next or later)", in.Priority)
		return
	}
	if in.Text == "" {
		st.fail(CodeInvalid, "message is empty")
		return
	}
	m := st.send("user", in.To, in.Text, p, "")
	cp := *m
	st.out.Msg = &cp
}

func (st *stepper) cancelRun(in CancelRun) {
	a := st.s.Agent(in.Agent)
	switch {
	case a == nil:
		st.fail(CodeNotFound, "no agent %q", in.Agent)
	case a.Run == nil:
		st.fail(CodeConflict, "agent %s has no run in progress", a.Name)
	default:
		why := "cancelled"
		if in.By != "" {
			why += " by " + in.By
		}
		if in.Reason != "" {
			why += ": " + in.Reason
		}
		if err := st.driver(a).cancel(st, a, in.By, why); err != nil {
			st.out.Err = err
		}
	}
}

func (st *stepper) stopTask(in StopTask) {
	t := st.s.Tasks[in.Task]
	if t == nil {
		st.fail(CodeNotFound, "no task %q", in.Task)
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	// Validate before emitting: a refused input must leave no events.
	if t.Kind == TaskShell && !t.Status.Live() {
		st.fail(CodeConflict, "task %s already ended (%s)", t.ID, t.Status)
		return
	}
	// A provider's subagent between runs can be stopped too: it may be
	// waiting on background work of its own, which the stop ends.
	idleMirror := t.External != "" && t.Status == TaskIdle
	if !st.taskBusy(t) && t.Kind == TaskAgent && !idleMirror {
		st.fail(CodeConflict, "task %s is not running (%s)", t.ID, t.Status)
		return
	}
	_ = st.stop(t, by)
}

func (st *stepper) findItem(id ItemID) (*Agent, *Item, int) {
	for _, aid := range st.s.Order {
		a := st.s.Agents[aid]
		for i, it := range a.Inbox {
			if it.ID == id {
				return a, it, i
			}
		}
	}
	return nil, nil, -1
}

func (st *stepper) cancelItem(in CancelItem) {
	a, it, _ := st.findItem(in.Item)
	switch {
	case it == nil:
		st.fail(CodeNotFound, "no queued item %q", in.Item)
		return
	case it.Kind != KindPrompt && it.Kind != KindContinuation:
		st.fail(CodeConflict, "item %s is a %s; only queued prompts and continuations can be cancelled (messages and notifications are always delivered)", it.ID, it.Kind)
		return
	}
	st.emit(&ItemRemoved{Agent: a.ID, Item: it.ID, Reason: "cancelled", By: in.By})
	if it.Gate != 0 && a.Gate != nil && a.Gate.Gen == it.Gate {
		st.emit(&GateReleased{Agent: a.ID, Gen: it.Gate, Outcome: GateCancelled})
	}
}

func (st *stepper) moveItem(in MoveItem) {
	a, it, _ := st.findItem(in.Item)
	if it == nil {
		st.fail(CodeNotFound, "no queued item %q", in.Item)
		return
	}
	if in.Index < 0 || in.Index >= len(a.Inbox) {
		st.fail(CodeInvalid, "index %d out of range (inbox holds %d items)", in.Index, len(a.Inbox))
		return
	}
	st.emit(&ItemMoved{Agent: a.ID, Item: it.ID, Index: in.Index})
}

// closeAgent closes an agent and, first, every agent it owns. Whatever was
// queued for it is dropped, loudly.
func (st *stepper) closeAgent(a *Agent, reason string) {
	if a.State == AgentClosed {
		return
	}
	for _, id := range st.s.Order {
		if b := st.s.Agents[id]; b.Owner == a.ID && b.State != AgentClosed {
			st.closeAgent(b, "its owner "+a.Name+" closed")
		}
	}
	// Its run ends, and whatever runs its turns.
	st.driver(a).close(st, a, reason)
	for _, id := range st.s.TaskOrder {
		if t := st.s.Tasks[id]; t.Owner == a.ID && t.Kind == TaskShell && t.Status.Live() && t.External == "" {
			_ = st.stop(t, "close of "+a.Name)
		}
	}
	for _, it := range a.Carried {
		if it.Note != nil {
			st.emit(&NotificationDropped{Key: *it.Note, Reason: "owner closed before its model saw it"})
		}
		if m := st.s.Msgs[it.Msg]; m != nil && m.Outcome != OutcomeRejected {
			st.emit(&MessageResolved{Msg: m.ID, Outcome: OutcomeRejected, Run: len(a.Runs), Reason: "agent " + a.Name + " was closed before a model saw the message"})
		}
		st.drop(string(it.Kind)+" "+string(it.ID)+" to "+a.Name, "agent-closed", reason+"; a cancelled run had taken it and no model saw it")
	}
	for _, it := range append([]*Item(nil), a.Inbox...) {
		st.emit(&ItemRemoved{Agent: a.ID, Item: it.ID, Reason: "agent closed"})
		if it.Note != nil {
			st.emit(&NotificationDropped{Key: *it.Note, Reason: "owner closed"})
		}
		st.drop(string(it.Kind)+" "+string(it.ID)+" to "+a.Name, "agent-closed", reason)
	}
	// Notifications a provider process was still to deliver to it.
	for _, k := range st.s.NoteOrder {
		if n := st.s.Note(k); n.Owner == a.ID && n.Delivery == DeliverProvider && n.DeliveredRun == 0 && n.Dropped == "" {
			st.emit(&NotificationDropped{Key: k, Reason: "owner closed"})
			st.drop("notification "+k.String(), "owner-closed", reason)
		}
	}
	if g := a.Gate; g != nil {
		st.emit(&GateReleased{Agent: a.ID, Gen: g.Gen, Outcome: GateDropped})
	}
	for _, id := range sortedTimers(st.s) {
		if t := st.s.Timers[id]; t.Agent == a.ID {
			st.emit(&TimerCancelled{Timer: id, Reason: "agent closed"})
		}
	}
	st.emit(&AgentRetired{Agent: a.ID, Reason: reason})
}

// closeRun ends the run of a closing agent: cancelled, with the messages
// whose outcome waited on it rejected.
func (st *stepper) closeRun(a *Agent, reason string) {
	if a.Run == nil {
		return
	}
	// Messages whose outcome waited on this run will not be answered.
	for _, id := range a.Run.PendingSends {
		st.resolveMsgAs(st.s.Msgs[id], OutcomeRejected, a.Run.Seq, "agent "+a.Name+" was closed before its model round answered")
	}
	st.endRun(a, RunCancelled, "", "agent closed: "+reason)
}

func (st *stepper) closeSession(reason string) {
	st.closeAgent(st.s.Agents[MainAgent], reason)
	for _, id := range st.s.Order {
		if a := st.s.Agents[id]; a.State != AgentClosed {
			st.closeAgent(a, reason)
		}
	}
	st.emit(&SessionClosed{Reason: reason})
}

// providerWake turns a provider's request for a turn into a continuation
// behind the agent's gate (DESIGN rules 5 and 6): never held, coalesced
// with a pending one by superseding it, released on every outcome.
func (st *stepper) providerWake(in ProviderWake) {
	a := st.s.Agents[in.Agent]
	if a == nil || a.State == AgentClosed || st.s.Session.Closed {
		st.drop("provider wake for "+string(in.Agent), "agent-closed", in.Evidence)
		return
	}
	if isMirror(a) {
		st.drop("provider wake for "+string(in.Agent), "mirrored-subagent", "a subagent inside a provider process is woken by its process, not by vigil")
		return
	}
	if st.seedWake(a, in) {
		return
	}
	evidence := in.Evidence
	if g := a.Gate; g != nil {
		st.emit(&GateReleased{Agent: a.ID, Gen: g.Gen, Outcome: GateSuperseded})
		for _, it := range a.Inbox {
			if it.ID == g.Item {
				evidence = it.Text + "\n" + evidence
				st.emit(&ItemRemoved{Agent: a.ID, Item: it.ID, Reason: "superseded by a newer wake that carries its evidence"})
				break
			}
		}
	}
	gen := st.s.Counters.Gate + 1
	id := st.nextItemID()
	st.emit(&GateOpened{Agent: a.ID, Gate: Gate{Gen: gen, Item: id, Deadline: st.now.Add(st.cfg.GateTTL)}})
	st.enqueue(a, Item{ID: id, Kind: KindContinuation, Priority: PriorityNext, From: "provider", Text: evidence, Gate: gen})
}

// tick handles every deadline that is due.
func (st *stepper) tick() {
	for _, aid := range st.s.Order {
		if a := st.s.Agents[aid]; a.Retry != nil && !a.Retry.At.After(st.now) {
			st.emit(&RetryDue{Agent: a.ID})
		}
	}
	for _, id := range sortedTimers(st.s) {
		t := st.s.Timers[id]
		if t.At.After(st.now) {
			continue
		}
		st.emit(&TimerFired{Timer: id})
		a := st.s.Agents[t.Agent]
		if a == nil || a.State == AgentClosed {
			st.drop("timer "+string(id), "agent-closed", "its agent is closed")
			continue
		}
		st.enqueue(a, Item{Kind: KindTimer, Priority: PriorityNext, From: "timer", Timer: id, Text: t.Prompt})
	}
	for _, aid := range st.s.Order {
		a := st.s.Agents[aid]
		if g := a.Gate; g != nil && !g.Deadline.IsZero() && !g.Deadline.After(st.now) {
			st.emit(&GateReleased{Agent: a.ID, Gen: g.Gen, Outcome: GateDeadline})
		}
		if a.Run != nil {
			st.driver(a).due(st, a)
		}
	}
	for _, id := range sortedApprovals(st.s) {
		p := st.s.Approvals[id]
		if !p.Deadline.After(st.now) {
			st.resolveApproval(p, false, "", "no answer before its deadline", nil)
		}
	}
	st.notesOverdue()
}

// recover takes a session over after a restart (DESIGN rule 7): shell
// processes died with the previous process, so their tasks end interrupted
// and notify; model calls in flight are issued again under the same ids;
// tool executions are re-issued where that is safe and reported
// interrupted where it is not.
func (st *stepper) recover(in Recover) {
	st.emit(&Recovered{Incarnation: in.Incarnation, Previous: in.Previous, Cause: in.Cause})
	for _, id := range st.s.TaskOrder {
		t := st.s.Tasks[id]
		if t.Kind != TaskShell || !t.Status.Live() || t.External != "" {
			continue // a provider's mirrored commands end with its process, below
		}
		status := TaskInterrupted
		if t.Status == TaskStopping {
			status = TaskStopped
		}
		st.endShell(t, status, nil, "", "the process ended with the previous vigil process")
	}
	for _, id := range st.s.Order {
		st.driver(st.s.Agents[id]).orphaned(st, st.s.Agents[id])
	}
	for _, id := range st.s.Order {
		if a := st.s.Agents[id]; a.Run != nil {
			st.driver(a).reissue(st, a)
		}
	}
}

// NextDeadline returns the earliest time at which a Tick has work to do, or
// the zero time when there is none.
func NextDeadline(s *State) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, t := range s.Timers {
		consider(t.At)
	}
	for _, p := range s.Approvals {
		consider(p.Deadline)
	}
	if hasProvider(s) {
		for _, k := range s.NoteOrder {
			if n := s.Note(k); undeliveredNote(n) {
				consider(n.DeliverBy)
			}
		}
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Gate != nil {
			consider(a.Gate.Deadline)
		}
		if a.Retry != nil {
			consider(a.Retry.At)
		}
		if a.Run != nil {
			consider(a.Run.Cancelling)
			if a.Run.Cancelling.IsZero() {
				consider(a.Run.Expect)
			}
			for _, tc := range a.Run.Tools {
				if !tc.Done {
					consider(tc.Deadline)
				}
			}
		}
	}
	return next
}
