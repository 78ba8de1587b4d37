package core

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/tool/toolinfo"
)

// vigil's own agent loop: its driver, and the rounds of a run.

// loopDriver is vigil's own agent loop (DriverLoop): each round calls the
// model, runs the tool calls of its answer, and calls the model again with
// their results and the items that joined, until the model ends its turn.
type loopDriver struct{}

// schedules: vigil starts every run of its own loop.
func (loopDriver) schedules(*Agent) bool { return true }

// begin starts the run's first model round.
func (loopDriver) begin(st *stepper, a *Agent, _ []*Item) { st.beginRound(a) }

// interrupt abandons the model round in flight for one that includes the
// item; between rounds the item joins the next one anyway.
func (loopDriver) interrupt(st *stepper, a *Agent) {
	if a.Run.Call != nil {
		st.interruptRound(a)
	}
}

// tell: a message joins the running turn at its next round, or waits for
// the answer of the round in flight (DESIGN rules 2, 3 and 11).
func (loopDriver) tell(st *stepper, a *Agent, m *Msg, p Priority) {
	r := a.Run
	switch {
	case r == nil && a.Retry != nil:
		m.Outcome, m.Run = OutcomeResumed, len(a.Runs)+1
		m.Reason = fmt.Sprintf("%s backs off after its run %d failed; run %d starts at %s", a.Name, a.Retry.Run, m.Run, a.Retry.At.UTC().Format(time.TimeOnly))
	case r == nil:
		m.Outcome, m.Run = OutcomeResumed, len(a.Runs)+1
	case p == PriorityLater:
		m.Outcome, m.Run = OutcomeQueuedBehindStop, r.Seq
		m.Reason = fmt.Sprintf("priority later waits for the end of run %d", r.Seq)
	case p == PriorityNow, r.Call == nil:
		m.Outcome, m.Run = OutcomeJoined, r.Seq
	default:
		// The target's model round is in flight: its answer decides. Tool
		// calls mean another round, which the message joins; an end of turn
		// means this was the last round and run N+1 answers.
		m.Outcome, m.Run = OutcomePending, r.Seq
	}
}

// cancel ends the run now.
func (loopDriver) cancel(st *stepper, a *Agent, _, why string) error {
	st.endRun(a, RunCancelled, "", why)
	return nil
}

// endTurn cancels the model call in flight and answers the tool calls of
// the last answer that have no result yet: what each waited for is
// released, and the transcript gets their results.
func (loopDriver) endTurn(st *stepper, a *Agent, why string) {
	r := a.Run
	if c := r.Call; c != nil {
		st.emit(&ModelCallEnded{Agent: a.ID, Call: c.ID, Outcome: "cancelled", Error: why})
		if c.State != CallWaitingSlot {
			st.effect(CancelCall{Agent: a.ID, Call: c.ID})
		}
	}
	if uses := st.unansweredUses(a); len(uses) > 0 {
		for _, tc := range slices.Clone(r.Tools) {
			if tc.Done {
				continue
			}
			switch tc.Wait {
			case WaitEffect:
				st.effect(CancelTool{Agent: a.ID, UseID: tc.UseID})
			case WaitChild:
				if child := st.s.Agents[tc.Child]; child != nil && child.Run != nil {
					st.endRun(child, RunCancelled, "", "its owner's run ended: "+why)
				}
			case WaitApproval:
				st.emit(&ApprovalResolved{Approval: tc.Approval, Allow: false, Reason: "run ended: " + why})
			}
			if c := r.tool(tc.UseID); c != nil && !c.Done {
				result := "cancelled: the run ended (" + why + ") before this tool finished"
				if tc.Wait == WaitSend {
					if m := st.s.Msgs[tc.Msg]; m != nil {
						result = fmt.Sprintf("message %s was delivered to %s; the run ended (%s) before its outcome was known. It is answered as sent: in %s's running turn or its next run.", m.ID, m.To, why, m.To)
					}
				}
				st.emit(&ToolCallFinished{Agent: a.ID, UseID: tc.UseID, Result: result, IsError: true})
			}
		}
		var results []chat.Block
		for _, u := range uses {
			if tc := r.tool(u.ID); tc != nil {
				results = append(results, chat.ToolResult(tc.UseID, tc.Result, tc.IsError))
			} else {
				results = append(results, chat.ToolResult(u.ID, "cancelled: the run ended ("+why+") before this tool call started", true))
			}
		}
		st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: results}})
	}
}

// carriesUnseen: a run cancelled on purpose would start again if its
// items went back; their text stays, and the next accepted round sees it.
func (loopDriver) carriesUnseen() bool { return true }

// close cancels the run; nothing else runs the agent's turns.
func (loopDriver) close(st *stepper, a *Agent, reason string) { st.closeRun(a, reason) }

// due answers the blocking TaskOutput calls whose deadline passed.
func (loopDriver) due(st *stepper, a *Agent) {
	for _, tc := range a.Run.Tools {
		if tc.Done || tc.Deadline.IsZero() || tc.Deadline.After(st.now) {
			continue
		}
		switch tc.Wait {
		case WaitTask:
			st.answerTaskOutput(a, tc, st.s.Tasks[tc.WaitFor])
			st.maybeNextRound(a)
		}
	}
}

// orphaned: vigil's loop depends on no process of its own; the shell tasks
// that did end at recovery (see recover).
func (loopDriver) orphaned(*stepper, *Agent) {}

// reissue issues the model call in flight again under its id, and the tool
// executions that are safe to repeat; the others are answered interrupted.
func (loopDriver) reissue(st *stepper, a *Agent) {
	if c := a.Run.Call; c != nil && c.State != CallWaitingSlot {
		if c.State == CallBackoff {
			st.emit(&ModelCallDispatched{Agent: a.ID, Call: c.ID})
		}
		st.effect(st.callModel(a))
	}
	for _, tc := range a.Run.Tools {
		if tc.Done || tc.Wait != WaitEffect {
			continue
		}
		if toolinfo.Of(tc.Name).Reissue {
			st.effect(ExecTool{Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Name: tc.Name, Input: tc.Input})
			continue
		}
		st.finishTool(a, tc.UseID, "Error: interrupted: vigil restarted while this tool ran; it may have partly completed. Check its effects before running it again.", true)
	}
	st.maybeNextRound(a)
}

// inFlight lists the model call and the tool executions a's run waits for.
func (loopDriver) inFlight(st *stepper, a *Agent) []Effect {
	var out []Effect
	if c := a.Run.Call; c != nil && c.State != CallWaitingSlot {
		out = append(out, st.callModel(a))
	}
	for _, tc := range a.Run.Tools {
		if !tc.Done && tc.Wait == WaitEffect {
			out = append(out, ExecTool{Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Name: tc.Name, Input: tc.Input})
		}
	}
	return out
}

// beginRound starts the next model call of a's run, unless a budget it
// is under is spent (DESIGN rule 10).
func (st *stepper) beginRound(a *Agent) {
	if why := st.overBudget(a); why != "" {
		st.budgetStop(a, why)
		return
	}
	if st.needsCompaction(a) {
		w := st.window(a)
		if st.beginCompaction(a, fmt.Sprintf("context at %d of %d tokens", st.s.contextTokens(a), w)) {
			return
		}
	}
	r := a.Run
	state := CallInFlight
	if st.cfg.MaxConcurrentCalls > 0 && st.inFlight() >= st.cfg.MaxConcurrentCalls {
		state = CallWaitingSlot
	}
	id := CallID("c" + strconv.Itoa(st.s.Counters.Call+1))
	st.emit(&ModelCallStarted{Agent: a.ID, Call: id, Round: r.Round + 1, State: state})
	if state == CallInFlight {
		st.effect(st.callModel(a))
	}
}

func (st *stepper) inFlight() int {
	n := 0
	for _, id := range st.s.Order {
		if r := st.s.Agents[id].Run; r != nil && r.Call != nil && r.Call.State != CallWaitingSlot {
			n++
		}
	}
	return n
}

// modelOf returns the provider and model a's rounds use: its own, else
// the session's.
func (st *stepper) modelOf(a *Agent) (prov, model string) {
	prov, model = a.Provider, a.Model
	if prov == "" {
		prov = st.s.Session.Provider
	}
	if model == "" {
		model = st.s.Session.Model
	}
	return prov, model
}

func (st *stepper) callModel(a *Agent) CallModel {
	r := a.Run
	prov, model := st.modelOf(a)
	msgs := sentMessages(a)
	if r.Call.Purpose == PurposeCompact {
		msgs = compactMessages(a, r.Call.Cut)
	}
	return CallModel{
		Call: r.Call.ID, Agent: a.ID, AgentName: a.Name, IsMain: a.ID == MainAgent, Background: st.background(a), Depth: a.Depth,
		Run: r.Seq, Round: r.Call.Round, Provider: prov, Model: model, Purpose: r.Call.Purpose,
		Messages: msgs,
	}
}

// background reports whether a's task runs in the background.
func (st *stepper) background(a *Agent) bool {
	t := st.s.Tasks[a.Task]
	return t != nil && t.Background
}

// grantSlots dispatches calls that wait for a slot while slots are free.
func (st *stepper) grantSlots() {
	if st.cfg.MaxConcurrentCalls <= 0 {
		return
	}
	for _, id := range st.s.Order {
		a := st.s.Agents[id]
		if a.Run == nil || a.Run.Call == nil || a.Run.Call.State != CallWaitingSlot {
			continue
		}
		if st.inFlight() >= st.cfg.MaxConcurrentCalls {
			return
		}
		st.emit(&ModelCallDispatched{Agent: a.ID, Call: a.Run.Call.ID})
		st.effect(st.callModel(a))
	}
}

// interruptRound abandons the model round in flight and starts a new one
// that includes the items waiting to join (a now-priority item arrived).
func (st *stepper) interruptRound(a *Agent) {
	c := a.Run.Call
	st.emit(&ModelCallEnded{Agent: a.ID, Call: c.ID, Outcome: "cancelled", Error: "interrupted by a now-priority item"})
	if c.State != CallWaitingSlot {
		st.effect(CancelCall{Agent: a.ID, Call: c.ID})
	}
	st.nextRound(a)
}

// maybeNextRound starts the next round once every tool call of the current
// round has its result.
func (st *stepper) maybeNextRound(a *Agent) {
	r := a.Run
	if r == nil || r.Call != nil || st.isEnding(a.ID) {
		return
	}
	for _, tc := range r.Tools {
		if !tc.Done {
			return
		}
	}
	st.nextRound(a)
}

// nextRound appends the tool results and the items that join, then calls
// the model again.
func (st *stepper) nextRound(a *Agent) {
	r := a.Run
	var content []chat.Block
	for _, tc := range r.Tools {
		content = append(content, chat.ToolResult(tc.UseID, tc.Result, tc.IsError))
	}
	if why := st.overBudget(a); why != "" {
		// No round follows: nothing joins, and the results close the
		// round's tool calls.
		if len(content) > 0 {
			st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
		}
		st.budgetStop(a, why)
		return
	}
	if r.MaxRounds > 0 && r.Turns >= r.MaxRounds && !st.seed(bugRoundLimitIgnored) {
		// The prompt's bound: the results close the round's tool calls,
		// nothing joins, and the next run takes what waits.
		if len(content) > 0 {
			st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
		}
		st.endRun(a, RunRoundLimit, "", fmt.Sprintf("reached the most model rounds its prompt allows (%d)", r.MaxRounds))
		return
	}
	if items := st.joinable(a); len(items) > 0 {
		ids, notes := itemIDs(items)
		content = append(content, st.renderItems(items)...)
		st.emit(&ItemsJoined{Agent: a.ID, Seq: r.Seq, Items: ids, Notes: notes})
		st.releaseGatesOf(a, items)
		if st.seed(bugConsumedByFailedRun) {
			st.seen(a)
		}
	}
	for _, id := range slices.Clone(r.PendingSends) {
		st.resolveMsg(st.s.Msgs[id], OutcomeJoined, r.Seq)
	}
	if len(content) > 0 {
		st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
	}
	st.beginRound(a)
}

func (st *stepper) agentRun(id AgentID, call CallID) (*Agent, bool) {
	a := st.s.Agents[id]
	if a == nil || a.Run == nil || a.Run.Call == nil || a.Run.Call.ID != call {
		return a, false
	}
	return a, true
}

func (st *stepper) modelResponded(in ModelResponded) {
	a, ok := st.agentRun(in.Agent, in.Call)
	if !ok {
		st.drop("model response "+string(in.Call), "stale-model-response", "the call was cancelled or superseded")
		return
	}
	resp := in.Response
	if c := a.Run.Call; c.Purpose == PurposeCompact {
		// A summary: the round it made room for starts now.
		cost, priced := st.roundCost(a, resp.Usage)
		st.emit(&ModelCallEnded{Agent: a.ID, Call: in.Call, Outcome: "completed", StopReason: resp.StopReason, Usage: resp.Usage, Cost: cost, Unpriced: !priced})
		st.compacted(a, c, resp)
		st.beginRound(a)
		return
	}
	// The provider answered: the model saw what this round carried.
	st.seen(a)
	cost, priced := st.roundCost(a, resp.Usage)
	st.emit(&ModelCallEnded{Agent: a.ID, Call: in.Call, Outcome: "completed", StopReason: resp.StopReason, Usage: resp.Usage, Cost: cost, Unpriced: !priced})
	// The answer's blocks, without empty texts.
	empty := func(b chat.Block) bool { return b.Type == chat.BlockText && b.Text == "" }
	var content []chat.Block
	if n := len(resp.Content) - countFunc(resp.Content, empty); n > 0 {
		content = make([]chat.Block, 0, n)
		for _, b := range resp.Content {
			if !empty(b) {
				content = append(content, b)
			}
		}
	}
	msg := chat.Message{Role: chat.RoleAssistant, Content: content}
	if len(content) > 0 {
		st.emit(&TranscriptAppended{Agent: a.ID, Message: msg})
	}
	uses := msg.ToolUses()
	if len(uses) == 0 {
		// The model ended its turn: this was the run's last round. Messages
		// that arrived during it cannot join (DESIGN rule 2).
		st.endRun(a, RunCompleted, msg.PlainText(), "")
		return
	}
	for _, id := range slices.Clone(a.Run.PendingSends) {
		st.resolveMsg(st.s.Msgs[id], OutcomeJoined, a.Run.Seq)
	}
	seq := a.Run.Seq
	for _, u := range uses {
		if a.Run == nil || a.Run.Seq != seq {
			// An earlier tool call of this answer ended the run (it stopped
			// a task whose run waited on this agent). The rest are answered
			// as cancelled by endRun.
			break
		}
		st.dispatchTool(a, u)
	}
	st.maybeNextRound(a)
}

// countFunc counts the elements of s for which f is true.
func countFunc[E any](s []E, f func(E) bool) int {
	n := 0
	for _, e := range s {
		if f(e) {
			n++
		}
	}
	return n
}

func (st *stepper) modelFailed(in ModelFailed) {
	a, ok := st.agentRun(in.Agent, in.Call)
	if !ok {
		st.drop("model failure "+string(in.Call), "stale-model-response", in.Error)
		return
	}
	call := a.Run.Call
	st.emit(&ModelCallEnded{Agent: a.ID, Call: in.Call, Outcome: "failed", Error: in.Error})
	if in.Kind == FailContext && call.Purpose == "" && !st.isEnding(a.ID) {
		// The prompt is over the model's window: compact, then retry the
		// round, rather than fail the run; a spent budget stops it first.
		if why := st.overBudget(a); why != "" {
			st.budgetStop(a, why)
			return
		}
		if st.beginCompaction(a, "the provider refused the prompt: "+in.Error) {
			return
		}
	}
	st.endRunFailed(a, RunFailed, "", in.Error, in.Kind)
}

func (st *stepper) modelRetrying(in ModelRetrying) {
	a, ok := st.agentRun(in.Agent, in.Call)
	if !ok {
		st.drop("model retry "+string(in.Call), "stale-model-response", in.Reason)
		return
	}
	st.emit(&ModelCallRetrying{Agent: a.ID, Call: in.Call, Attempt: in.Attempt, Until: in.Until, Reason: in.Reason})
}

// unansweredUses returns the tool calls of a's last answer when the
// transcript ends with that answer, i.e. their results are not in yet.
func (st *stepper) unansweredUses(a *Agent) []chat.Block {
	if n := len(a.Transcript); n > 0 && a.Transcript[n-1].Role == chat.RoleAssistant && a.Run.Call == nil {
		return a.Transcript[n-1].ToolUses()
	}
	return nil
}

func (st *stepper) toolDone(in ToolDone) {
	a := st.s.Agents[in.Agent]
	var tc *ToolCall
	if a != nil && a.Run != nil {
		tc = a.Run.tool(in.UseID)
	}
	if tc == nil || tc.Done || tc.Wait != WaitEffect {
		st.drop("tool result "+in.UseID, "stale-tool-result", "no tool call of the current round waits for it")
		return
	}
	st.emit(&ToolCallFinished{Agent: a.ID, UseID: in.UseID, Result: in.Result, IsError: in.IsError})
	st.maybeNextRound(a)
}

// InFlight returns the effects a state has in flight: model calls and tool
// executions it waits for. A runtime that reloaded a session's state after
// a commit whose outcome it could not know starts them again (their ids
// make that safe); processes it still runs are not among them.
func InFlight(s *State) []Effect {
	var out []Effect
	st := &stepper{s: s, cfg: &Config{}}
	for _, id := range s.Order {
		if a := s.Agents[id]; a.Run != nil {
			out = append(out, st.driver(a).inFlight(st, a)...)
		}
	}
	return out
}
