package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// Event is one committed change to a session: its sequence number within
// the session, when it happened, and what happened.
type Event struct {
	Seq  int64
	At   time.Time
	Body Body
}

// Body is the content of an event. Applying it is the only way state
// changes.
type Body interface {
	// Type names the event in storage and on the wire.
	Type() string
	apply(s *State, at time.Time)
}

// Apply applies one event to the state. Replaying a session's events in
// order from NewState rebuilds it.
func Apply(s *State, e Event) {
	e.Body.apply(s, e.At)
	s.Seq = e.Seq
}

// Replay rebuilds a state from events.
func Replay(events []Event) *State {
	s := NewState()
	for _, e := range events {
		Apply(s, e)
	}
	return s
}

type envelope struct {
	Seq  int64           `json:"seq"`
	At   time.Time       `json:"at"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// MarshalJSON encodes the event as {"seq","at","type","data"}.
func (e Event) MarshalJSON() ([]byte, error) {
	data, err := json.Marshal(e.Body)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.Body.Type(), err)
	}
	return json.Marshal(envelope{Seq: e.Seq, At: e.At, Type: e.Body.Type(), Data: data})
}

// UnmarshalJSON decodes an event encoded by MarshalJSON.
func (e *Event) UnmarshalJSON(b []byte) error {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return err
	}
	body, err := DecodeBody(env.Type, env.Data)
	if err != nil {
		return err
	}
	*e = Event{Seq: env.Seq, At: env.At, Body: body}
	return nil
}

// DecodeBody decodes the data of an event of type typ.
func DecodeBody(typ string, data []byte) (Body, error) {
	mk, ok := bodies[typ]
	if !ok {
		return nil, fmt.Errorf("unknown event type %q", typ)
	}
	b := mk()
	if err := json.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	return b, nil
}

var bodies = map[string]func() Body{}

func register(mk func() Body) { bodies[mk().Type()] = mk }

func init() {
	for _, mk := range []func() Body{
		func() Body { return &SessionCreated{} },
		func() Body { return &SessionClosed{} },
		func() Body { return &HoldSet{} },
		func() Body { return &HoldReleased{} },
		func() Body { return &AgentCreated{} },
		func() Body { return &AgentRetired{} },
		func() Body { return &TaskStarted{} },
		func() Body { return &TaskUpdated{} },
		func() Body { return &TaskProcess{} },
		func() Body { return &ItemEnqueued{} },
		func() Body { return &ItemRemoved{} },
		func() Body { return &ItemMoved{} },
		func() Body { return &RunStarted{} },
		func() Body { return &ItemsJoined{} },
		func() Body { return &TranscriptAppended{} },
		func() Body { return &ModelCallStarted{} },
		func() Body { return &ModelCallDispatched{} },
		func() Body { return &ModelCallRetrying{} },
		func() Body { return &ModelCallEnded{} },
		func() Body { return &ToolCallStarted{} },
		func() Body { return &ToolCallWaiting{} },
		func() Body { return &ToolCallFinished{} },
		func() Body { return &RunEnded{} },
		func() Body { return &NotificationWritten{} },
		func() Body { return &NotificationDropped{} },
		func() Body { return &MessageSent{} },
		func() Body { return &MessageResolved{} },
		func() Body { return &ContextCompacted{} },
		func() Body { return &BudgetSet{} },
		func() Body { return &PermissionRuleAdded{} },
		func() Body { return &PermissionModeSet{} },
		func() Body { return &TimerSet{} },
		func() Body { return &TimerFired{} },
		func() Body { return &TimerCancelled{} },
		func() Body { return &ApprovalRequested{} },
		func() Body { return &ApprovalResolved{} },
		func() Body { return &GateOpened{} },
		func() Body { return &GateReleased{} },
		func() Body { return &Dropped{} },
		func() Body { return &Recovered{} },
	} {
		register(mk)
	}
}

// SessionCreated starts a session and its main agent.
type SessionCreated struct {
	Session Session `json:"session"`
	Main    Agent   `json:"main"`
}

// Type implements Body: the name of the event.
func (*SessionCreated) Type() string { return "session.created" }
func (e *SessionCreated) apply(s *State, at time.Time) {
	s.Session = e.Session
	a := e.Main
	a.ID = MainAgent
	a.State = AgentIdle
	a.Created, a.LastActive = at, at
	s.Agents[a.ID] = &a
	s.Order = append(s.Order, a.ID)
}

// SessionClosed closes the session. Its agents were closed before.
type SessionClosed struct {
	Reason string `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*SessionClosed) Type() string { return "session.closed" }
func (e *SessionClosed) apply(s *State, _ time.Time) {
	s.Session.Closed = true
	s.Session.CloseReason = e.Reason
}

// HoldSet holds the session's queue of user prompts.
type HoldSet struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*HoldSet) Type() string { return "hold.set" }
func (e *HoldSet) apply(s *State, at time.Time) {
	s.Hold = &Hold{By: e.By, Reason: e.Reason, Since: at}
}

// HoldReleased releases the user hold.
type HoldReleased struct {
	By string `json:"by,omitempty"`
}

// Type implements Body: the name of the event.
func (*HoldReleased) Type() string                  { return "hold.released" }
func (e *HoldReleased) apply(s *State, _ time.Time) { s.Hold = nil }

// AgentCreated adds a subagent.
type AgentCreated struct {
	Agent Agent `json:"agent"`
}

// Type implements Body: the name of the event.
func (*AgentCreated) Type() string { return "agent.created" }
func (e *AgentCreated) apply(s *State, at time.Time) {
	a := e.Agent
	a.State = AgentIdle
	a.Created, a.LastActive = at, at
	s.Agents[a.ID] = &a
	s.Order = append(s.Order, a.ID)
	s.Counters.Agent++
}

// AgentRetired closes an agent for good. Its run, inbox, gate and timers
// were ended by earlier events of the same step.
type AgentRetired struct {
	Agent  AgentID `json:"agent"`
	Reason string  `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*AgentRetired) Type() string { return "agent.closed" }
func (e *AgentRetired) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	a.State = AgentClosed
	a.LastActive = at
	a.Retry, a.Blocked, a.Carried = nil, nil, nil
	if t := s.Tasks[a.Task]; t != nil {
		t.Status = TaskClosed
		t.Ended = at
	}
}

// TaskStarted records a new task.
type TaskStarted struct {
	Task Task `json:"task"`
}

// Type implements Body: the name of the event.
func (*TaskStarted) Type() string { return "task.started" }
func (e *TaskStarted) apply(s *State, at time.Time) {
	t := e.Task
	t.Started = at
	s.Tasks[t.ID] = &t
	s.TaskOrder = append(s.TaskOrder, t.ID)
	s.Counters.Task++
}

// TaskUpdated changes a task's status, and records its exit.
type TaskUpdated struct {
	Task       TaskID     `json:"task"`
	Status     TaskStatus `json:"status"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	OutputTail string     `json:"output_tail,omitempty"`
	OutputPath string     `json:"output_path,omitempty"`
	Ended      bool       `json:"ended,omitempty"`
}

// Type implements Body: the name of the event.
func (*TaskUpdated) Type() string { return "task.updated" }
func (e *TaskUpdated) apply(s *State, at time.Time) {
	t := s.Tasks[e.Task]
	t.Status = e.Status
	if e.ExitCode != nil {
		t.ExitCode = e.ExitCode
	}
	if e.OutputTail != "" {
		t.OutputTail = e.OutputTail
	}
	if e.OutputPath != "" {
		t.OutputPath = e.OutputPath
	}
	if e.Ended {
		t.Ended = at
	}
}

// TaskProcess records the process of a shell task.
type TaskProcess struct {
	Task       TaskID `json:"task"`
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
	Cgroup     string `json:"cgroup,omitempty"`
}

// Type implements Body: the name of the event.
func (*TaskProcess) Type() string { return "task.process" }
func (e *TaskProcess) apply(s *State, _ time.Time) {
	t := s.Tasks[e.Task]
	t.PID, t.StartTicks, t.Cgroup = e.PID, e.StartTicks, e.Cgroup
}

// ItemEnqueued puts an item in an agent's inbox.
type ItemEnqueued struct {
	Item Item `json:"item"`
}

// Type implements Body: the name of the event.
func (*ItemEnqueued) Type() string { return "item.enqueued" }
func (e *ItemEnqueued) apply(s *State, at time.Time) {
	it := e.Item
	it.Enqueued = at
	a := s.Agents[it.Agent]
	a.Inbox = append(a.Inbox, &it)
	s.Counters.Item++
	if it.Msg != "" {
		s.Msgs[it.Msg].Item = it.ID
	}
}

// ItemRemoved takes an item out of an inbox without delivering it.
type ItemRemoved struct {
	Agent  AgentID `json:"agent"`
	Item   ItemID  `json:"item"`
	Reason string  `json:"reason"`
	By     string  `json:"by,omitempty"`
}

// Type implements Body: the name of the event.
func (*ItemRemoved) Type() string { return "item.removed" }
func (e *ItemRemoved) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	a.Inbox = slices.DeleteFunc(a.Inbox, func(it *Item) bool { return it.ID == e.Item })
}

// ItemMoved moves a queued item to a new position in its inbox.
type ItemMoved struct {
	Agent AgentID `json:"agent"`
	Item  ItemID  `json:"item"`
	Index int     `json:"index"`
}

// Type implements Body: the name of the event.
func (*ItemMoved) Type() string { return "item.moved" }
func (e *ItemMoved) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	i := slices.IndexFunc(a.Inbox, func(it *Item) bool { return it.ID == e.Item })
	if i < 0 {
		return
	}
	it := a.Inbox[i]
	a.Inbox = slices.Delete(a.Inbox, i, i+1)
	a.Inbox = slices.Insert(a.Inbox, min(max(e.Index, 0), len(a.Inbox)), it)
}

// RunStarted starts run Seq of an agent with a batch of inbox items.
type RunStarted struct {
	Agent AgentID  `json:"agent"`
	Seq   int      `json:"seq"`
	Kind  RunKind  `json:"kind"`
	Items []ItemID `json:"items"`
	// Notes are the notifications among Items: taken, in flight until
	// a model round with them is accepted (ItemsSeen).
	Notes []NoteKey `json:"notes,omitempty"`
	// MaxRounds bounds the run's model rounds (its prompts' bound).
	MaxRounds int `json:"max_rounds,omitempty"`
}

// Type implements Body: the name of the event.
func (*RunStarted) Type() string { return "run.started" }
func (e *RunStarted) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	a.Run = &Run{Seq: e.Seq, Kind: e.Kind, Started: at, UnseenAt: TranscriptPos{Msg: len(a.Transcript)}, MaxRounds: e.MaxRounds}
	a.Retry = nil
	a.State = AgentRunning
	a.LastActive = at
	if t := s.Tasks[a.Task]; t != nil {
		t.Status = TaskRunning
	}
	takeItems(s, a, e.Items)
}

// ItemsJoined delivers items to the running run at a round boundary.
type ItemsJoined struct {
	Agent AgentID  `json:"agent"`
	Seq   int      `json:"seq"`
	Items []ItemID `json:"items"`
	// Notes are the notifications among Items: taken, in flight until
	// a model round with them is accepted (ItemsSeen).
	Notes []NoteKey `json:"notes,omitempty"`
}

// Type implements Body: the name of the event.
func (*ItemsJoined) Type() string { return "items.joined" }
func (e *ItemsJoined) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	a.LastActive = at
	if r := a.Run; r != nil {
		// Their text follows the round's tool results.
		markUnseen(r, len(a.Transcript), len(r.Tools))
	}
	takeItems(s, a, e.Items)
}

// takeItems moves items from the inbox into the current run.
func takeItems(s *State, a *Agent, ids []ItemID) {
	r := a.Run
	for _, id := range ids {
		i := slices.IndexFunc(a.Inbox, func(it *Item) bool { return it.ID == id })
		if i < 0 {
			continue
		}
		it := a.Inbox[i]
		a.Inbox = slices.Delete(a.Inbox, i, i+1)
		r.Items = append(r.Items, id)
		// In flight until a model round that includes it is accepted
		// (ItemsSeen), or given back (ItemsReturned).
		r.Unseen = append(r.Unseen, *it)
		if it.Msg != "" {
			r.Answered = append(r.Answered, it.Msg)
		}
		if it.Note != nil {
			r.Delivered = append(r.Delivered, *it.Note)
		}
	}
}

// TranscriptAppended adds a message to an agent's transcript.
type TranscriptAppended struct {
	Agent   AgentID      `json:"agent"`
	Message chat.Message `json:"message"`
}

// Type implements Body: the name of the event.
func (*TranscriptAppended) Type() string { return "transcript.appended" }
func (e *TranscriptAppended) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	a.Transcript = append(a.Transcript, e.Message)
	a.LastActive = at
}

// ModelCallStarted begins a model round of the current run. The tool calls
// of the previous round, all answered, are cleared.
type ModelCallStarted struct {
	Agent AgentID   `json:"agent"`
	Call  CallID    `json:"call"`
	Round int       `json:"round"`
	State CallState `json:"state"`
	// Purpose, Cut and Reason describe a compaction call.
	Purpose string `json:"purpose,omitempty"`
	Cut     int    `json:"cut,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*ModelCallStarted) Type() string { return "model.started" }
func (e *ModelCallStarted) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	r := a.Run
	r.Round = e.Round
	r.Tools = nil
	r.Calls++
	r.Call = &Call{ID: e.Call, Round: e.Round, State: e.State, Started: at, Purpose: e.Purpose, Cut: e.Cut, Reason: e.Reason}
	s.Counters.Call++
}

// ModelCallDispatched marks a call that waited for a slot as in flight.
type ModelCallDispatched struct {
	Agent AgentID `json:"agent"`
	Call  CallID  `json:"call"`
}

// Type implements Body: the name of the event.
func (*ModelCallDispatched) Type() string { return "model.dispatched" }
func (e *ModelCallDispatched) apply(s *State, at time.Time) {
	c := s.Agents[e.Agent].Run.Call
	c.State = CallInFlight
	c.Started = at
}

// ModelCallRetrying records that the provider backs off before retrying.
type ModelCallRetrying struct {
	Agent   AgentID   `json:"agent"`
	Call    CallID    `json:"call"`
	Attempt int       `json:"attempt"`
	Until   time.Time `json:"until"`
	Reason  string    `json:"reason"`
}

// Type implements Body: the name of the event.
func (*ModelCallRetrying) Type() string { return "model.retrying" }
func (e *ModelCallRetrying) apply(s *State, _ time.Time) {
	c := s.Agents[e.Agent].Run.Call
	c.State = CallBackoff
	c.Attempt = e.Attempt
	c.RetryUntil = e.Until
	c.RetryReason = e.Reason
}

// ModelCallEnded ends the current model call.
type ModelCallEnded struct {
	Agent      AgentID         `json:"agent"`
	Call       CallID          `json:"call"`
	Outcome    string          `json:"outcome"` // completed, failed, cancelled
	StopReason chat.StopReason `json:"stop_reason,omitempty"`
	Usage      chat.Usage      `json:"usage"`
	// Cost is the round's cost in micro-USD; Unpriced is set when its
	// model has no known price.
	Cost     int64  `json:"cost_micros,omitempty"`
	Unpriced bool   `json:"unpriced,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Type implements Body: the name of the event.
func (*ModelCallEnded) Type() string { return "model.ended" }
func (e *ModelCallEnded) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	r := a.Run
	if c := r.Call; c != nil && c.Purpose == "" && e.Outcome == "completed" && e.Usage != (chat.Usage{}) {
		// The provider counted the prompt of this round and its answer,
		// which is about to follow in the transcript.
		u := e.Usage
		a.Context = ContextSize{Reported: u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens + u.OutputTokens, At: len(a.Transcript) + 1}
	}
	if c := r.Call; c != nil && c.Purpose == "" && e.Outcome == "completed" {
		r.Turns++
	}
	r.Call = nil
	r.Usage = r.Usage.Add(e.Usage)
	a.Usage = a.Usage.Add(e.Usage)
	a.LastActive = at
	if e.Outcome != "completed" {
		return
	}
	r.Cost += e.Cost
	if e.Unpriced {
		r.Unpriced++
	}
	a.Spent.addRound(e.Usage, e.Cost, e.Unpriced)
	for x := a; x != nil; x = s.Agents[x.Owner] {
		x.Tree.addRound(e.Usage, e.Cost, e.Unpriced)
		if x.Owner == "" {
			break
		}
	}
}

// ToolCallStarted records a tool call of the current round.
type ToolCallStarted struct {
	Agent AgentID  `json:"agent"`
	Call  ToolCall `json:"call"`
}

// Type implements Body: the name of the event.
func (*ToolCallStarted) Type() string { return "tool.started" }
func (e *ToolCallStarted) apply(s *State, at time.Time) {
	c := e.Call
	c.Started = at
	r := s.Agents[e.Agent].Run
	r.Tools = append(r.Tools, &c)
}

// ToolCallWaiting changes what a pending tool call waits for.
type ToolCallWaiting struct {
	Agent    AgentID   `json:"agent"`
	UseID    string    `json:"use_id"`
	Wait     WaitKind  `json:"wait"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// Type implements Body: the name of the event.
func (*ToolCallWaiting) Type() string { return "tool.waiting" }
func (e *ToolCallWaiting) apply(s *State, _ time.Time) {
	if c := s.Agents[e.Agent].Run.tool(e.UseID); c != nil {
		c.Wait = e.Wait
		c.Deadline = e.Deadline
	}
}

// ToolCallFinished records a tool call's result.
type ToolCallFinished struct {
	Agent   AgentID `json:"agent"`
	UseID   string  `json:"use_id"`
	Result  string  `json:"result"`
	IsError bool    `json:"is_error,omitempty"`
}

// Type implements Body: the name of the event.
func (*ToolCallFinished) Type() string { return "tool.finished" }
func (e *ToolCallFinished) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	if c := a.Run.tool(e.UseID); c != nil {
		c.Done = true
		c.Wait = WaitNone
		c.Result = e.Result
		c.IsError = e.IsError
	}
	a.LastActive = at
}

func (r *Run) tool(useID string) *ToolCall {
	if r == nil {
		return nil
	}
	for _, c := range r.Tools {
		if c.UseID == useID {
			return c
		}
	}
	return nil
}

// RunEnded ends the current run of an agent.
type RunEnded struct {
	Agent  AgentID   `json:"agent"`
	Seq    int       `json:"seq"`
	Status RunStatus `json:"status"`
	Reply  string    `json:"reply,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// Type implements Body: the name of the event.
func (*RunEnded) Type() string { return "run.ended" }
func (e *RunEnded) apply(s *State, at time.Time) {
	a := s.Agents[e.Agent]
	r := a.Run
	a.Runs = append(a.Runs, RunSummary{
		Seq: r.Seq, Kind: r.Kind, Status: e.Status, Started: r.Started, Ended: at,
		Reply: e.Reply, Error: e.Error, Items: r.Items, Answered: r.Answered, Returned: r.Returned,
		Usage: r.Usage, Calls: r.Calls, Cost: r.Cost, Unpriced: r.Unpriced,
	})
	d := at.Sub(r.Started)
	a.Spent.Wall += d
	for x := a; x != nil; x = s.Agents[x.Owner] {
		x.Tree.Wall += d
		if x.Owner == "" {
			break
		}
	}
	a.Run = nil
	a.State = AgentIdle
	a.LastActive = at
	if t := s.Tasks[a.Task]; t != nil && t.Status == TaskRunning {
		t.Status = TaskIdle
	}
}

// NotificationWritten records a notification under its unique key.
type NotificationWritten struct {
	Note Note `json:"note"`
}

// Type implements Body: the name of the event.
func (*NotificationWritten) Type() string { return "notification.written" }
func (e *NotificationWritten) apply(s *State, at time.Time) {
	n := e.Note
	n.Written = at
	s.Notes[n.Key] = &n
	s.NoteOrder = append(s.NoteOrder, n.Key)
}

// NotificationDropped records that a notification cannot be delivered.
type NotificationDropped struct {
	Key    NoteKey `json:"key"`
	Reason string  `json:"reason"`
}

// Type implements Body: the name of the event.
func (*NotificationDropped) Type() string { return "notification.dropped" }
func (e *NotificationDropped) apply(s *State, _ time.Time) {
	if n := s.Note(e.Key); n != nil {
		n.Dropped = e.Reason
	}
}

// MessageSent records a message and what its sender was told.
type MessageSent struct {
	Msg Msg `json:"msg"`
}

// Type implements Body: the name of the event.
func (*MessageSent) Type() string { return "message.sent" }
func (e *MessageSent) apply(s *State, at time.Time) {
	m := e.Msg
	m.Sent = at
	s.Msgs[m.ID] = &m
	s.Counters.Msg++
	if m.Outcome == OutcomePending {
		if r := s.Agents[m.To].Run; r != nil {
			r.PendingSends = append(r.PendingSends, m.ID)
		}
	}
}

// MessageResolved settles the outcome of a pending message.
type MessageResolved struct {
	Msg     MsgID      `json:"msg"`
	Outcome MsgOutcome `json:"outcome"`
	Run     int        `json:"run"`
	Reason  string     `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*MessageResolved) Type() string { return "message.resolved" }
func (e *MessageResolved) apply(s *State, _ time.Time) {
	m := s.Msgs[e.Msg]
	m.Outcome = e.Outcome
	m.Run = e.Run
	if e.Reason != "" {
		m.Reason = e.Reason
	}
	if r := s.Agents[m.To].Run; r != nil {
		r.PendingSends = slices.DeleteFunc(r.PendingSends, func(id MsgID) bool { return id == e.Msg })
	}
}

// TimerSet schedules a wakeup.
type TimerSet struct {
	Timer Timer `json:"timer"`
}

// Type implements Body: the name of the event.
func (*TimerSet) Type() string { return "timer.set" }
func (e *TimerSet) apply(s *State, _ time.Time) {
	t := e.Timer
	s.Timers[t.ID] = &t
	s.Counters.Timer++
}

// TimerFired removes a timer whose item was enqueued.
type TimerFired struct {
	Timer TimerID `json:"timer"`
}

// Type implements Body: the name of the event.
func (*TimerFired) Type() string                  { return "timer.fired" }
func (e *TimerFired) apply(s *State, _ time.Time) { delete(s.Timers, e.Timer) }

// TimerCancelled removes a timer that will not fire.
type TimerCancelled struct {
	Timer  TimerID `json:"timer"`
	Reason string  `json:"reason"`
}

// Type implements Body: the name of the event.
func (*TimerCancelled) Type() string                  { return "timer.cancelled" }
func (e *TimerCancelled) apply(s *State, _ time.Time) { delete(s.Timers, e.Timer) }

// ApprovalRequested asks a person whether a tool call may run.
type ApprovalRequested struct {
	Approval Approval `json:"approval"`
}

// Type implements Body: the name of the event.
func (*ApprovalRequested) Type() string { return "approval.requested" }
func (e *ApprovalRequested) apply(s *State, at time.Time) {
	p := e.Approval
	p.Asked = at
	s.Approvals[p.ID] = &p
	s.Counters.Approval++
	if a := s.Agents[p.Agent]; a.Run != nil {
		a.State = AgentWaiting
	}
}

// ApprovalResolved answers or withdraws a permission request.
type ApprovalResolved struct {
	Approval ApprovalID `json:"approval"`
	Allow    bool       `json:"allow"`
	By       string     `json:"by,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	// Input is the input the allowed call runs with, when the answer
	// changed the model's.
	Input json.RawMessage `json:"input,omitempty"`
}

// Type implements Body: the name of the event.
func (*ApprovalResolved) Type() string { return "approval.resolved" }
func (e *ApprovalResolved) apply(s *State, _ time.Time) {
	p := s.Approvals[e.Approval]
	delete(s.Approvals, e.Approval)
	a := s.Agents[p.Agent]
	if len(e.Input) > 0 && p.External == "" && a.Run != nil {
		if tc := a.Run.tool(p.UseID); tc != nil {
			tc.Input = e.Input
		}
	}
	if a.State != AgentWaiting {
		return
	}
	for _, q := range s.Approvals {
		if q.Agent == p.Agent {
			return
		}
	}
	a.State = AgentRunning
}

// GateOpened opens an agent's pending-continuation gate.
type GateOpened struct {
	Agent AgentID `json:"agent"`
	Gate  Gate    `json:"gate"`
}

// Type implements Body: the name of the event.
func (*GateOpened) Type() string { return "gate.opened" }
func (e *GateOpened) apply(s *State, at time.Time) {
	g := e.Gate
	g.Opened = at
	s.Agents[e.Agent].Gate = &g
	s.Counters.Gate++
}

// GateReleased releases a gate of the given generation.
type GateReleased struct {
	Agent   AgentID     `json:"agent"`
	Gen     int         `json:"gen"`
	Outcome GateOutcome `json:"outcome"`
}

// Type implements Body: the name of the event.
func (*GateReleased) Type() string { return "gate.released" }
func (e *GateReleased) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	if a.Gate != nil && a.Gate.Gen == e.Gen {
		a.Gate = nil
	}
}

// Dropped records that something was skipped, deduplicated or dropped, and
// why (DESIGN rule 9). The runtime logs every Dropped at warn.
type Dropped struct {
	What   string `json:"what"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Type implements Body: the name of the event.
func (*Dropped) Type() string { return "dropped" }
func (e *Dropped) apply(s *State, _ time.Time) {
	if s.Drops == nil {
		s.Drops = map[string]int{}
	}
	s.Drops[e.Reason]++
}

// Recovered marks a restart: a new runtime incarnation took the session
// over from one that is gone. Previous and Cause say from whom and how it
// let the session go, when the runtime knows (Recover).
type Recovered struct {
	Incarnation int64  `json:"incarnation"`
	Previous    string `json:"previous,omitempty"`
	Cause       string `json:"cause,omitempty"`
}

// Causes of a takeover (Recover.Cause): how the previous owner let the
// session go.
const (
	// TakeoverHandover: the owner stopped cleanly and released the
	// session's lease.
	TakeoverHandover = "handover"
	// TakeoverOwnerDied: the owner, a process of this host, is gone
	// without releasing the lease.
	TakeoverOwnerDied = "owner-died"
	// TakeoverLeaseExpired: the owner, on another host, stopped renewing
	// its lease (a crash, a partition or a long pause).
	TakeoverLeaseExpired = "lease-expired"
)

// Type implements Body: the name of the event.
func (*Recovered) Type() string                  { return "recovered" }
func (e *Recovered) apply(s *State, _ time.Time) { s.Incarnation = e.Incarnation }
