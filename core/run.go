package core

// The run lifecycle (DESIGN section 2), the same for every agent: an item
// arrives in an agent's inbox (enqueue); after every step the scheduler
// starts a run for each idle agent with an item it may take (schedule:
// level-triggered, rule 4); the run's driver does the turn (driver.go:
// vigil's loop of model calls and tool calls in loop.go, a provider
// process in external.go, an outside caller in caller.go); the run ends
// with a status and a reply (endRun), and in that same step its
// notification is written under (task, run) and delivered to the owner
// (writeRunNote: rule 1); a message that arrived during its last round
// learns that run N+1 answers it (rule 2).

import (
	"fmt"
	"slices"

	"github.com/vigilrun/vigil/chat"
)

// enqueue puts an item in an agent's inbox. A now-priority item interrupts
// the turn in progress.
func (st *stepper) enqueue(a *Agent, it Item) {
	it.Agent = a.ID
	if it.ID == "" {
		it.ID = st.nextItemID()
	}
	if it.Priority == "" {
		it.Priority = PriorityNext
	}
	st.emit(&ItemEnqueued{Item: it})
	st.seedEnqueued(a)
	if it.Priority == PriorityNow && a.Run != nil && !st.held(&it) && !st.isEnding(a.ID) {
		st.driver(a).interrupt(st, a)
	}
}

// held reports whether a user hold keeps the item from being taken.
func (st *stepper) held(it *Item) bool {
	return st.s.Hold != nil && it.Holdable()
}

// takeable returns the items a new run may take: all but held ones.
func (st *stepper) takeable(a *Agent) []*Item {
	var out []*Item
	for _, it := range a.Inbox {
		if !st.held(it) {
			out = append(out, it)
		}
	}
	return out
}

// joinable returns the items that join a running turn at its next round.
func (st *stepper) joinable(a *Agent) []*Item {
	var out []*Item
	for _, it := range st.takeable(a) {
		if it.Priority != PriorityLater {
			out = append(out, it)
		}
	}
	return out
}

// schedule is the level-triggered wake (DESIGN rule 4): after every step it
// looks at every agent and starts a run for each idle one whose inbox holds
// an item it may take; then it grants free model-call slots.
func (st *stepper) schedule() {
	if !st.seedSchedule() {
		// A run that a budget ends as it starts notifies its owner, which
		// may come earlier in the order: pass again until no run ended so.
		for again := true; again; {
			st.stopped = false
			for _, id := range st.s.Order {
				if a := st.s.Agents[id]; a.State == AgentIdle {
					st.tryStart(a)
				}
			}
			again = st.stopped
		}
	}
	st.grantSlots()
}

// tryStart starts a run of a when a is idle, vigil schedules its runs,
// nothing blocks it and its inbox holds an item it may take.
func (st *stepper) tryStart(a *Agent) {
	if st.s.Session.Closed || a.Run != nil || a.State != AgentIdle {
		return
	}
	if !st.driver(a).schedules(a) {
		return // a mirrored subagent's process, an outside caller take their items
	}
	if a.Blocked != nil || (a.Retry != nil && a.Retry.At.After(st.now)) {
		return // blocked until released; backing off until the retry
	}
	if items := st.takeable(a); len(items) > 0 {
		st.startRun(a, items)
	}
}

// startRun starts a run of a that takes items: it records the run and the
// items' text in the transcript, then its driver does the turn.
func (st *stepper) startRun(a *Agent, items []*Item) {
	ids, notes := itemIDs(items)
	kind := RunKind(items[0].Kind)
	if items[0].Kind == KindContinuation {
		kind = RunProviderWake
	}
	st.seedRunStarting(a)
	content := st.renderItems(items)
	maxRounds := 0
	for _, it := range items {
		if it.MaxRounds > 0 && (maxRounds == 0 || it.MaxRounds < maxRounds) {
			maxRounds = it.MaxRounds
		}
	}
	st.emit(&RunStarted{Agent: a.ID, Seq: len(a.Runs) + 1, Kind: kind, Items: ids, Notes: notes, MaxRounds: maxRounds})
	st.releaseGatesOf(a, items)
	st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
	if st.seed(bugConsumedByFailedRun) {
		st.seen(a) // the bug: taken counts as delivered
	}
	st.driver(a).begin(st, a, items)
}

// itemIDs returns the ids of items and the keys of the notifications
// among them.
func itemIDs(items []*Item) ([]ItemID, []NoteKey) {
	ids := make([]ItemID, len(items))
	var notes []NoteKey
	for i, it := range items {
		ids[i] = it.ID
		if it.Note != nil {
			notes = append(notes, *it.Note)
		}
	}
	return ids, notes
}

// releaseGatesOf releases the gate of any continuation among items that
// were just taken by a run.
func (st *stepper) releaseGatesOf(a *Agent, items []*Item) {
	for _, it := range items {
		if it.Gate != 0 && a.Gate != nil && a.Gate.Gen == it.Gate {
			st.emit(&GateReleased{Agent: a.ID, Gen: it.Gate, Outcome: GateStarted})
		}
	}
}

// endRun ends a's current run with the given status. Everything the run
// was waiting for is released; its notification is written in this same
// step (DESIGN rule 1); messages whose outcome waited on its last round
// learn that run N+1 will answer them (rule 2).
func (st *stepper) endRun(a *Agent, status RunStatus, reply, errText string) {
	st.endRunFailed(a, status, reply, errText, FailTransient)
}

// endRunFailed is endRun with the kind of failure that ended the run: the
// unseen items it took go back to the inbox, and a failed or interrupted
// run's agent retries them or is blocked by kind.
func (st *stepper) endRunFailed(a *Agent, status RunStatus, reply, errText string, kind FailureKind) {
	r := a.Run
	if r == nil || st.isEnding(a.ID) {
		return
	}
	st.ending = append(st.ending, a.ID)
	defer st.ended(a.ID)
	why := errText
	if why == "" {
		why = string(status)
	}
	// What the turn still waits for is released: a model call, tool
	// calls, a provider process's requests.
	st.driver(a).endTurn(st, a, why)
	pending := slices.Clone(r.PendingSends)
	task := a.Task
	if n := st.giveBack(a, status); n > 0 {
		words := fmt.Sprintf("its model had not seen %d item(s); they went back to %s's inbox", n, a.Name)
		if status != RunCancelled && a.State != AgentClosed && !st.s.Session.Closed {
			words += ": " + st.afterFailure(a, r.Seq, kind, why)
		}
		if errText == "" {
			errText = string(status)
		}
		errText += "; " + words
	}
	// A message told it joins this run that is still in the inbox did not
	// join it (the run ended before its next round): the next run answers.
	for _, it := range a.Inbox {
		if m := st.s.Msgs[it.Msg]; m != nil && m.Outcome == OutcomeJoined && m.Run == r.Seq && m.AnsweredBy == 0 {
			st.emit(&MessageResolved{Msg: m.ID, Outcome: OutcomeQueuedBehindStop, Run: r.Seq,
				Reason: fmt.Sprintf("run %d ended %s before its next model round; run %d answers it", r.Seq, status, r.Seq+1)})
		}
	}
	st.emit(&RunEnded{Agent: a.ID, Seq: r.Seq, Status: status, Reply: reply, Error: errText})
	sum := a.Runs[len(a.Runs)-1]
	if task != "" && !st.seedRunNote(a, sum) {
		st.writeRunNote(a, sum)
	}
	for _, id := range pending {
		if b := a.Blocked; b != nil {
			st.resolveMsgAs(st.s.Msgs[id], OutcomeQueuedBehindStop, sum.Seq, fmt.Sprintf("run %d answers once a person releases %s, blocked since run %d failed: %s", sum.Seq+1, a.Name, b.Run, b.Reason))
			continue
		}
		why := fmt.Sprintf("run %d's model round in flight when it arrived was its last", sum.Seq)
		if status != RunCompleted {
			why = fmt.Sprintf("run %d ended %s while its model round was in flight", sum.Seq, status)
		}
		st.resolveMsgAs(st.s.Msgs[id], OutcomeQueuedBehindStop, sum.Seq, why)
	}
	st.resolveTaskWaiters(task)
}

// writeRunNote writes the notification of one ended run of an agent task,
// and delivers it: as the result of the owner's foreground Agent call that
// waits for it, or as an item in the owner's inbox.
func (st *stepper) writeRunNote(a *Agent, sum RunSummary) {
	key := NoteKey{Task: a.Task, Run: sum.Seq}
	if st.s.Note(key) != nil {
		st.drop("notification "+key.String(), "duplicate-notification", "a notification with this key exists; the write is a no-op")
		return
	}
	n := Note{
		Key: key, Owner: a.Owner, Agent: a.ID, AgentName: a.Name, Kind: TaskAgent,
		Status: string(sum.Status), Reply: sum.Reply, Error: sum.Error, Answered: sum.Answered,
		LiveTasks: st.s.LiveTasks(a.ID), Usage: sum.Usage, Cost: sum.Cost, Priced: sum.Unpriced == 0 && st.cfg.Price != nil,
		Duration: sum.Ended.Sub(sum.Started),
		Delivery: DeliverInbox,
	}
	st.deliverNote(n)
}

// deliverNote records a notification and delivers it to its owner: as the
// result of the foreground Agent call that waits for it, or as an item in
// the owner's inbox; a closed owner's is dropped, loudly.
func (st *stepper) deliverNote(n Note) {
	owner := st.s.Agents[n.Owner]
	var wait *ToolCall
	if owner != nil && owner.Run != nil && n.Kind == TaskAgent {
		for _, tc := range owner.Run.Tools {
			if !tc.Done && tc.Wait == WaitChild && tc.Child == n.Agent {
				wait = tc
				break
			}
		}
	}
	if wait != nil {
		n.Delivery = DeliverToolResult
		n.DeliveredRun = owner.Run.Seq
		st.emit(&NotificationWritten{Note: n})
		st.emit(&ToolCallFinished{Agent: owner.ID, UseID: wait.UseID, Result: renderNote(&n), IsError: n.Status != string(RunCompleted)})
		st.maybeNextRound(owner)
		return
	}
	if owner == nil || owner.State == AgentClosed {
		st.emit(&NotificationWritten{Note: n})
		st.emit(&NotificationDropped{Key: n.Key, Reason: "owner closed"})
		st.drop("notification "+n.Key.String(), "owner-closed", "its owner "+string(n.Owner)+" is closed")
		return
	}
	n.Item = st.nextItemID()
	st.emit(&NotificationWritten{Note: n})
	key := n.Key
	st.enqueue(owner, Item{ID: n.Item, Kind: KindNotification, Priority: PriorityNext, From: string(n.Agent), Note: &key})
}

// resolveMsg settles a pending message and tells a waiting sender.
func (st *stepper) resolveMsg(m *Msg, outcome MsgOutcome, run int) {
	st.resolveMsgAs(m, outcome, run, "")
}

// resolveMsgAs settles a pending message with a reason.
func (st *stepper) resolveMsgAs(m *Msg, outcome MsgOutcome, run int, reason string) {
	if m == nil || m.Outcome != OutcomePending {
		return
	}
	st.emit(&MessageResolved{Msg: m.ID, Outcome: outcome, Run: run, Reason: reason})
	if m.SenderCall == "" {
		return
	}
	sender := st.s.Agents[AgentID(m.From)]
	if sender == nil || sender.Run == nil {
		return
	}
	if tc := sender.Run.tool(m.SenderCall); tc != nil && !tc.Done && tc.Wait == WaitSend {
		st.emit(&ToolCallFinished{Agent: sender.ID, UseID: tc.UseID, Result: st.renderOutcome(m)})
		st.maybeNextRound(sender)
	}
}
