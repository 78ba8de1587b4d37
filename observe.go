package vigil

import (
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/admit"
)

// Observer receives measurements from the runtime, for metrics.
// Implementations must be safe for concurrent use and fast, and must not
// block: they are called on the session's goroutine, and with the CPU
// gate on (Options.CPUSlots) while the step holds one of its slots.
type Observer interface {
	// RunStarted is called when a run starts, with what started it
	// (prompt, message, notification, …).
	RunStarted(session SessionID, kind string)
	// RunEnded is called when a run ends, with how.
	RunEnded(session SessionID, status string)
	// NotificationWritten is called when a task's run writes its
	// notification, with the run's status.
	NotificationWritten(session SessionID, status string)
	// NotificationDelivered is called when a notification reaches its
	// owner: how is DeliverInbox (a run took it in) or DeliverToolResult
	// (a waiting tool call got it); wait is how long after it was written
	// (the wake latency, 0 for a tool result).
	NotificationDelivered(session SessionID, how string, wait time.Duration)
	// MessageResolved is called when a message's outcome is known (DESIGN
	// rule 3).
	MessageResolved(session SessionID, outcome string)
	// Dropped is called for every drop, with what and why.
	Dropped(session SessionID, what, reason string)
	// ModelCall is called when a model call ends.
	ModelCall(provider string, d time.Duration, err error)
}

// observe tells o what a committed batch did; s is the state after it.
func observe(o Observer, id core.SessionID, s *core.State, events []core.Event) {
	session := SessionID(id)
	delivered := func(keys []core.NoteKey, at time.Time) {
		for _, k := range keys {
			var wait time.Duration
			if n := s.Note(k); n != nil && !n.Written.IsZero() {
				wait = max(at.Sub(n.Written), 0)
			}
			o.NotificationDelivered(session, string(core.DeliverInbox), wait)
		}
	}
	for _, e := range events {
		switch b := e.Body.(type) {
		case *core.RunStarted:
			o.RunStarted(session, string(b.Kind))
			delivered(b.Notes, e.At)
		case *core.ItemsJoined:
			delivered(b.Notes, e.At)
		case *core.RunEnded:
			o.RunEnded(session, string(b.Status))
			if ro, ok := o.(RunObserver); ok {
				if a := s.Agents[b.Agent]; a != nil && len(a.Runs) > 0 && a.Runs[len(a.Runs)-1].Seq == b.Seq {
					r := a.Runs[len(a.Runs)-1]
					ro.RunDuration(session, string(b.Status), max(r.Ended.Sub(r.Started), 0))
				}
			}
		case *core.NotificationWritten:
			o.NotificationWritten(session, b.Note.Status)
			if b.Note.Delivery == core.DeliverToolResult {
				o.NotificationDelivered(session, string(core.DeliverToolResult), 0)
			}
		case *core.MessageSent:
			if b.Msg.Outcome != core.OutcomePending {
				o.MessageResolved(session, string(b.Msg.Outcome))
			}
		case *core.MessageResolved:
			o.MessageResolved(session, string(b.Outcome))
		}
	}
}

// QueueObserver is an Observer that also hears of backpressure: each time
// a request (an API call, an effect's outcome, a timer) finds a session's
// queue full and waits for room. Nothing is dropped; the count says a
// session is busier than its callers.
type QueueObserver interface {
	// QueueFull is called when a request starts waiting for room in the
	// session's queue.
	QueueFull(session SessionID)
}

// CPUStats is what the runtime's CPU gate (Options.CPUSlots) did so far.
// A node whose steps often wait is saturated: steps go ahead of new
// background work, which starts later.
type CPUStats struct {
	// Slots is how many steps run at once; 0 when there is no gate.
	Slots int
	// WaitingSteps and WaitingStarts are how many steps, and background
	// agents' model calls, wait for a slot now.
	WaitingSteps, WaitingStarts int
	// WaitedSteps and WaitedStarts count the steps, and the background
	// agents' model calls, that had to wait for a slot.
	WaitedSteps, WaitedStarts uint64
	// AgedStarts counts the background calls that went ahead of newer
	// steps because they had waited 100 ms.
	AgedStarts uint64
}

// CPUStats reads the runtime's CPU gate.
func (r *Runtime) CPUStats() CPUStats {
	if r.gate == nil {
		return CPUStats{}
	}
	s := r.gate.Stats()
	return CPUStats{
		Slots:        r.gate.Slots(),
		WaitingSteps: s.Waiting[admit.Resume] + s.Waiting[admit.Step], WaitingStarts: s.Waiting[admit.Start],
		WaitedSteps: s.Waited[admit.Resume] + s.Waited[admit.Step], WaitedStarts: s.Waited[admit.Start],
		AgedStarts: s.Aged,
	}
}
