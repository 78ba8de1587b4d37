package core

import (
	"fmt"
	"slices"
	"time"
)

// Delivery means seen. An inbox item a run takes is in flight until a
// model round that included it is accepted: the provider answered (even
// with the model's refusal), a provider process began a turn with it, or an
// outside caller acknowledged it. Only then is a notification delivered, a
// message answered. A run that ends failed or interrupted before that gives
// its unseen items back to the inbox, in their order and with their
// priority, in one event of the step that ends it, and takes their text out
// of the transcript (the next run renders them again); the agent then
// retries them after a backoff, or is blocked with the reason when retrying
// cannot help. A cancelled run is giveBack's business: see there.

// FailureKind says whether a failed model call is worth retrying.
type FailureKind string

// Failure kinds of a model call that failed after the provider's own
// retries.
const (
	// FailTransient: overloaded, rate limited, a 5xx, a network error, a
	// cut stream. Backed off and retried.
	FailTransient FailureKind = "transient"
	// FailContext: the request is over the model's context window.
	// Repeating it cannot help: the agent is blocked at once.
	FailContext FailureKind = "context"
	// FailAuth: the provider refused the key. Blocked at once.
	FailAuth FailureKind = "auth"
	// FailInvalid: the provider refused the request (a 400). Blocked at
	// once.
	FailInvalid FailureKind = "invalid"
)

// Retry is an agent's wait before it runs again for items a failed run
// gave back.
type Retry struct {
	// Attempt is the attempt the next run makes for those items (2 is the
	// first retry); Max is the last attempt allowed.
	Attempt int         `json:"attempt"`
	Max     int         `json:"max"`
	At      time.Time   `json:"at"`
	Run     int         `json:"run"`
	Reason  string      `json:"reason"`
	Kind    FailureKind `json:"kind"`
}

// Block says why an agent takes no item until a person releases it.
type Block struct {
	Run    int         `json:"run"`
	Reason string      `json:"reason"`
	Kind   FailureKind `json:"kind"`
	Since  time.Time   `json:"since"`
}

// RetryAgent releases an agent's block or backoff: it runs for its inbox
// now, and its items' attempts start again.
type RetryAgent struct {
	Agent string
	By    string
}

func (RetryAgent) inputName() string { return "retry-agent" }

// ItemsSeen records that a model round including the run's unseen items
// was accepted: they are delivered.
type ItemsSeen struct {
	Agent AgentID  `json:"agent"`
	Seq   int      `json:"seq"`
	Items []ItemID `json:"items"`
}

// Type implements Body: the name of the event.
func (*ItemsSeen) Type() string { return "items.seen" }
func (e *ItemsSeen) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	r := a.Run
	if r == nil || r.Seq != e.Seq {
		return
	}
	for _, it := range a.Carried {
		// Carried from a cancelled run: this run answers it.
		r.Items = append(r.Items, it.ID)
		if it.Msg != "" {
			r.Answered = append(r.Answered, it.Msg)
		}
		if it.Note != nil {
			r.Delivered = append(r.Delivered, *it.Note)
		}
	}
	for _, it := range append(a.Carried, r.Unseen...) {
		if it.Msg != "" {
			if m := s.Msgs[it.Msg]; m != nil {
				m.AnsweredBy = r.Seq
			}
		}
		if it.Note != nil {
			if n := s.Note(*it.Note); n != nil {
				n.DeliveredRun = r.Seq
			}
		}
	}
	r.Unseen, a.Carried = nil, nil
	r.UnseenAt = TranscriptPos{}
	a.Retry = nil
}

// TranscriptPos is a place in a transcript: a message and a block in it.
type TranscriptPos struct {
	Msg   int `json:"msg"`
	Block int `json:"block"`
}

// ItemsReturned gives a run's unseen items back to the inbox, in their
// order, before the run ends: the transcript is cut at Cut, where their
// text began, and each item's attempts count one more. Carried are the
// unseen items of a cancelled run: their text stays in the transcript, and
// the agent's next accepted model round delivers them. Dropped are the
// user's prompts of a cancelled run no provider process began: cut, and
// gone (each with a drop event).
type ItemsReturned struct {
	Agent   AgentID       `json:"agent"`
	Seq     int           `json:"seq"`
	Items   []ItemID      `json:"items,omitempty"`
	Carried []ItemID      `json:"carried,omitempty"`
	Dropped []ItemID      `json:"dropped,omitempty"`
	Cut     TranscriptPos `json:"cut"`
}

// Type implements Body: the name of the event.
func (*ItemsReturned) Type() string { return "items.returned" }
func (e *ItemsReturned) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	r := a.Run
	if r == nil || r.Seq != e.Seq {
		return
	}
	var back []*Item
	for i := range r.Unseen {
		it := r.Unseen[i]
		if !slices.Contains(e.Items, it.ID) {
			continue
		}
		it.Attempts++
		back = append(back, &it)
		r.Items = slices.DeleteFunc(r.Items, func(id ItemID) bool { return id == it.ID })
		if it.Msg != "" {
			r.Answered = slices.DeleteFunc(r.Answered, func(id MsgID) bool { return id == it.Msg })
		}
		if it.Note != nil {
			r.Delivered = slices.DeleteFunc(r.Delivered, func(k NoteKey) bool { return k == *it.Note })
		}
	}
	a.Inbox = append(back, a.Inbox...)
	r.Returned = append(r.Returned, e.Items...)
	for _, it := range r.Unseen {
		if slices.Contains(e.Carried, it.ID) {
			// The next run that sees it answers it, not this one.
			a.Carried = append(a.Carried, it)
			r.Items = slices.DeleteFunc(r.Items, func(id ItemID) bool { return id == it.ID })
			if it.Msg != "" {
				r.Answered = slices.DeleteFunc(r.Answered, func(id MsgID) bool { return id == it.Msg })
			}
			if it.Note != nil {
				r.Delivered = slices.DeleteFunc(r.Delivered, func(k NoteKey) bool { return k == *it.Note })
			}
		}
	}
	if c := e.Cut; len(e.Items) > 0 && c.Msg < len(a.Transcript) {
		// Fresh slices: calls issued before hold the old ones.
		if c.Block > 0 {
			m := a.Transcript[c.Msg]
			m.Content = slices.Clone(m.Content[:min(c.Block, len(m.Content))])
			a.Transcript = append(slices.Clone(a.Transcript[:c.Msg]), m)
		} else {
			a.Transcript = slices.Clone(a.Transcript[:c.Msg])
		}
	}
	r.Unseen = nil
}

// RetryScheduled records an agent's backoff before it runs again for the
// items a failed run gave back.
type RetryScheduled struct {
	Agent AgentID `json:"agent"`
	Retry Retry   `json:"retry"`
}

// Type implements Body: the name of the event.
func (*RetryScheduled) Type() string { return "agent.retry" }
func (e *RetryScheduled) apply(s *State, _ time.Time) {
	r := e.Retry
	s.Agents[e.Agent].Retry = &r
}

// AgentBlocked records that an agent takes no item until a person releases
// it: retrying its failed run cannot help, or its attempts ran out.
type AgentBlocked struct {
	Agent AgentID `json:"agent"`
	Block Block   `json:"block"`
}

// Type implements Body: the name of the event.
func (*AgentBlocked) Type() string { return "agent.blocked" }
func (e *AgentBlocked) apply(s *State, _ time.Time) {
	b := e.Block
	a := s.Agents[e.Agent]
	a.Blocked = &b
	a.Retry = nil
}

// AgentReleased ends an agent's block or backoff: by a new prompt or
// message, or a retry asked for. Its items' attempts start again.
type AgentReleased struct {
	Agent AgentID `json:"agent"`
	By    string  `json:"by,omitempty"`
}

// Type implements Body: the name of the event.
func (*AgentReleased) Type() string { return "agent.released" }
func (e *AgentReleased) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	a.Blocked, a.Retry = nil, nil
	for _, it := range a.Inbox {
		it.Attempts = 0
	}
}

func init() {
	register(func() Body { return &ItemsSeen{} })
	register(func() Body { return &ItemsReturned{} })
	register(func() Body { return &RetryScheduled{} })
	register(func() Body { return &AgentBlocked{} })
	register(func() Body { return &AgentReleased{} })
	register(func() Body { return &RetryDue{} })
}

// markUnseen records where the text of items about to be appended to a's
// transcript begins (block of the next message), when nothing the run
// took is unseen yet.
func markUnseen(r *Run, transcriptLen, block int) {
	if len(r.Unseen) == 0 {
		r.UnseenAt = TranscriptPos{Msg: transcriptLen, Block: block}
	}
}

// seen marks a's unseen items delivered: a model round that included them
// was accepted.
func (st *stepper) seen(a *Agent) {
	if r := a.Run; r != nil && len(r.Unseen)+len(a.Carried) > 0 {
		ids := make([]ItemID, 0, len(a.Carried)+len(r.Unseen))
		for _, it := range a.Carried {
			ids = append(ids, it.ID)
		}
		for _, it := range r.Unseen {
			ids = append(ids, it.ID)
		}
		st.emit(&ItemsSeen{Agent: a.ID, Seq: r.Seq, Items: ids})
	}
}

// giveBack ends the in-flight state of the unseen items of a's run, which
// ends with status. A failed or interrupted run gives them back to the
// inbox, for a retry, and cuts their text from the transcript; so does any
// run of a provider process that never began its turn (the text reached no
// provider session). A run vigil runs itself that was cancelled on purpose
// would start again if they went back: their text stays in the transcript
// and the agent carries them to its next accepted model round, which sees
// them. A message among them is promised anew: the next run answers it. It
// returns how many items went back to the inbox.
func (st *stepper) giveBack(a *Agent, status RunStatus) int {
	r := a.Run
	if r == nil || st.seed(bugConsumedByFailedRun) {
		return 0
	}
	// What an earlier cancelled run carried, this run did not see either:
	// the next run answers those messages.
	for _, it := range a.Carried {
		if m := st.s.Msgs[it.Msg]; m != nil && m.Outcome != OutcomeRejected {
			st.emit(&MessageResolved{Msg: m.ID, Outcome: OutcomeQueuedBehindStop, Run: r.Seq,
				Reason: fmt.Sprintf("run %d of %s ended %s before a model saw the message; run %d answers it", r.Seq, a.Name, status, r.Seq+1)})
		}
	}
	if len(r.Unseen) == 0 {
		return 0
	}
	back := status == RunFailed || status == RunInterrupted || status == RunBudgetExceeded || !st.driver(a).carriesUnseen()
	ev := &ItemsReturned{Agent: a.ID, Seq: r.Seq, Cut: r.UnseenAt}
	unseen, seq := slices.Clone(r.Unseen), r.Seq
	var dropped []Item
	for _, it := range unseen {
		switch {
		case back && status == RunCancelled && it.Kind == KindPrompt && it.From == "user":
			// The person cancelled what they asked before the process
			// began it.
			ev.Dropped = append(ev.Dropped, it.ID)
			dropped = append(dropped, it)
		case back:
			ev.Items = append(ev.Items, it.ID)
		default:
			ev.Carried = append(ev.Carried, it.ID)
		}
	}
	st.emit(ev)
	for _, it := range dropped {
		st.drop("prompt "+string(it.ID)+" to "+a.Name, "cancelled-unseen", fmt.Sprintf("run %d was cancelled before the provider process began it", seq))
	}
	for _, it := range unseen {
		if m := st.s.Msgs[it.Msg]; m != nil && m.Outcome != OutcomeRejected {
			st.emit(&MessageResolved{Msg: m.ID, Outcome: OutcomeQueuedBehindStop, Run: seq,
				Reason: fmt.Sprintf("run %d of %s ended %s before its model saw the message; run %d answers it", seq, a.Name, status, seq+1)})
		}
	}
	return len(ev.Items)
}

// afterFailure decides what an agent does about the items a failed run
// gave back: retry them after a backoff, or block with the reason. It
// returns the words the run's notification adds.
func (st *stepper) afterFailure(a *Agent, seq int, kind FailureKind, reason string) string {
	if kind == "" {
		kind = FailTransient
	}
	attempts := 0
	for _, it := range a.Inbox {
		attempts = max(attempts, it.Attempts)
	}
	limit := st.cfg.RetryAttempts
	switch {
	case kind == FailBudget:
		st.emit(&AgentBlocked{Agent: a.ID, Block: Block{Run: seq, Reason: reason, Kind: kind, Since: st.now}})
		return fmt.Sprintf("%s is blocked until a person raises the budget (vigil budget, or POST .../budget)", a.Name)
	case kind != FailTransient:
		why := blockWords(kind)
		st.emit(&AgentBlocked{Agent: a.ID, Block: Block{Run: seq, Reason: reason, Kind: kind, Since: st.now}})
		return fmt.Sprintf("%s is blocked (%s) until a new prompt or `vigil retry`", a.Name, why)
	case attempts >= limit:
		st.emit(&AgentBlocked{Agent: a.ID, Block: Block{Run: seq, Reason: fmt.Sprintf("%s (gave up after %d attempts)", reason, attempts), Kind: kind, Since: st.now}})
		return fmt.Sprintf("%s is blocked after %d attempts until a new prompt or `vigil retry`", a.Name, attempts)
	}
	delay := st.cfg.RetryBase << (attempts - 1)
	if delay > st.cfg.RetryMaxDelay || delay <= 0 {
		delay = st.cfg.RetryMaxDelay
	}
	r := Retry{Attempt: attempts + 1, Max: limit, At: st.now.Add(delay), Run: seq, Reason: reason, Kind: kind}
	st.emit(&RetryScheduled{Agent: a.ID, Retry: r})
	return fmt.Sprintf("retry %d of %d at %s", r.Attempt, r.Max, r.At.UTC().Format(time.TimeOnly))
}

func blockWords(k FailureKind) string {
	switch k {
	case FailContext:
		return "the conversation is over the model's context window"
	case FailAuth:
		return "the provider refused the API key"
	}
	return "the provider refused the request"
}

// release ends a's block or backoff (a new prompt or message for it, or a
// retry asked for).
func (st *stepper) release(a *Agent, by string) {
	if a.Blocked != nil || a.Retry != nil {
		st.emit(&AgentReleased{Agent: a.ID, By: by})
	}
}

func (st *stepper) retryAgent(in RetryAgent) {
	a := st.s.Agent(in.Agent)
	switch {
	case a == nil:
		st.fail(CodeNotFound, "no agent %q", in.Agent)
	case a.State == AgentClosed || st.s.Session.Closed:
		st.fail(CodeClosed, "agent %s is closed", a.Name)
	case a.Blocked == nil && a.Retry == nil:
		st.fail(CodeConflict, "agent %s is neither blocked nor backing off", a.Name)
	default:
		by := in.By
		if by == "" {
			by = "user"
		}
		st.release(a, by)
	}
}

// RetryDue ends an agent's backoff at its deadline: the scheduler runs it
// for its inbox.
type RetryDue struct {
	Agent AgentID `json:"agent"`
}

// Type implements Body: the name of the event.
func (*RetryDue) Type() string                  { return "agent.retry_due" }
func (e *RetryDue) apply(s *State, _ time.Time) { s.Agents[e.Agent].Retry = nil }
