package core

import "time"

// Some bodies carry the time of their own event: the session's main agent
// and a new subagent were created then, a task started, an item was
// enqueued, a tool call started, a notification was written, a message
// sent, an approval asked and a gate opened at the event's time. The
// stepper stamps them as it emits them, so that the recorded body says
// what applying it makes of the state, and every reader of the event (the
// API, SSE, stream-json, the store's projections) sees the real time
// rather than the zero one.

// stamper is a body that carries the time of its own event.
type stamper interface {
	stamp(at time.Time)
}

// Stamp sets the times a body carries of its own event to at, the event's
// time, as applying it does to the state. The stepper stamps every body it
// emits; a reader of a body recorded before it did (an older log) may
// stamp it with the record's time to read the same.
func Stamp(b Body, at time.Time) {
	if s, ok := b.(stamper); ok {
		s.stamp(at)
	}
}

func (e *SessionCreated) stamp(at time.Time)      { e.Main.Created, e.Main.LastActive = at, at }
func (e *AgentCreated) stamp(at time.Time)        { e.Agent.Created, e.Agent.LastActive = at, at }
func (e *TaskStarted) stamp(at time.Time)         { e.Task.Started = at }
func (e *ItemEnqueued) stamp(at time.Time)        { e.Item.Enqueued = at }
func (e *ToolCallStarted) stamp(at time.Time)     { e.Call.Started = at }
func (e *NotificationWritten) stamp(at time.Time) { e.Note.Written = at }
func (e *MessageSent) stamp(at time.Time)         { e.Msg.Sent = at }
func (e *ApprovalRequested) stamp(at time.Time)   { e.Approval.Asked = at }
func (e *GateOpened) stamp(at time.Time)          { e.Gate.Opened = at }
