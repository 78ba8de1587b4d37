//go:build seedbugs

package core

import (
	"fmt"
	"time"
)

// The seedbugs build: NewSeeded puts back one seed bug (see seed.go). Only
// the simulator and the tests use it; the default build has none of what
// follows.

// Bug names a seed bug, as vigil sim --inject takes it.
type Bug string

// Bugs lists the seed bugs NewSeeded takes.
var Bugs = []Bug{
	Bug(bugNotifiedFlag), Bug(bugOneshotDrain), Bug(bugHeldContinuation), Bug(bugProviderForever),
	Bug(bugConsumedByFailedRun), Bug(bugSenderWaits), Bug(bugBudgetIgnored), Bug(bugLedgerForgets),
	Bug(bugQuiescentOwed), Bug(bugWhyOverlap), Bug(bugRoundLimitIgnored),
}

// NewSeeded returns a core with the given configuration and seed bug put
// back; an empty bug is the correct core.
func NewSeeded(cfg Config, bug Bug) (*Core, error) {
	c := New(cfg)
	if bug == "" {
		return c, nil
	}
	for _, b := range Bugs {
		if b == bug {
			c.seed.bug = seedBug(bug)
			return c, nil
		}
	}
	return nil, fmt.Errorf("core: no seed bug %q", bug)
}

// seedCore is the bug a core puts back.
type seedCore struct{ bug seedBug }

// seedStep is a step's state for the oneshot-drain bug: the agents that
// got an item in this step, the only ones it looks at.
type seedStep struct{ enqueued []AgentID }

// seedAgent is an agent's state for the notified-flag bug: the boolean
// flag of the 000 report.
type seedAgent struct{ notified bool }

// seed reports whether the core puts back bug b.
func (st *stepper) seed(b seedBug) bool { return st.c != nil && st.c.seed.bug == b }

// seedQuiescentOwed reports whether the core puts back the quiescent-owed
// bug.
func (c *Core) seedQuiescentOwed() bool { return c.seed.bug == bugQuiescentOwed }

// seedWhyOverlap reports whether the core puts back the why-overlap bug.
func (c *Core) seedWhyOverlap() bool { return c.seed.bug == bugWhyOverlap }

// seedEnqueued records, for the oneshot-drain bug, that a got an item.
func (st *stepper) seedEnqueued(a *Agent) {
	if st.seed(bugOneshotDrain) {
		st.seedStep.enqueued = append(st.seedStep.enqueued, a.ID)
	}
}

// seedSchedule is the 003 bug's scheduler: only the agents that got an
// item this step are looked at, once, and only if they are idle at that
// moment.
func (st *stepper) seedSchedule() bool {
	if !st.seed(bugOneshotDrain) {
		return false
	}
	for _, id := range st.seedStep.enqueued {
		if a := st.s.Agents[id]; a.State == AgentIdle {
			st.tryStart(a)
		}
	}
	return true
}

// seedRunStarting is the 000 bug at a run's start: registering the
// follow-on clears the task's flag.
func (st *stepper) seedRunStarting(a *Agent) {
	if st.seed(bugNotifiedFlag) && a.Task != "" && a.seed.notified {
		st.emit(&NotifiedFlag{Agent: a.ID, Value: false})
	}
}

// seedRunNote is the 000 bug at a run's end: the stop notification is
// enqueued later, after the post-round awaits, not in the step that ends
// the run.
func (st *stepper) seedRunNote(a *Agent, sum RunSummary) bool {
	if !st.seed(bugNotifiedFlag) {
		return false
	}
	st.effect(Finalize{Agent: a.ID, Seq: sum.Seq})
	return true
}

// seedInput steps the inputs only a seed bug has.
func (st *stepper) seedInput(in Input) bool {
	f, ok := in.(FinalizeRun)
	if !ok {
		return false
	}
	st.finalizeRun(f)
	return true
}

// finalizeRun is the deferred half of a run's end in the notified-flag bug.
func (st *stepper) finalizeRun(in FinalizeRun) {
	a := st.s.Agents[in.Agent]
	if a == nil || in.Seq < 1 || in.Seq > len(a.Runs) {
		return
	}
	if a.seed.notified {
		// Skipped silently: in the report only a debug line records it.
		return
	}
	st.emit(&NotifiedFlag{Agent: a.ID, Value: true})
	st.writeRunNote(a, a.Runs[in.Seq-1])
}

// seedWake is the 002 bug's provider wake: a continuation queued like a
// user prompt behind a sticky gate, and swallowed while the gate is set.
func (st *stepper) seedWake(a *Agent, in ProviderWake) bool {
	if !st.seed(bugHeldContinuation) {
		return false
	}
	if a.Gate != nil {
		return true // swallowed while the sticky gate is set
	}
	gen := st.s.Counters.Gate + 1
	id := st.nextItemID()
	st.emit(&GateOpened{Agent: a.ID, Gate: Gate{Gen: gen, Item: id}})
	st.enqueue(a, Item{ID: id, Kind: KindPrompt, Priority: PriorityLater, From: "system", Text: in.Evidence, Gate: gen})
	return true
}

// seedSend is the sender-waits bug's SendMessage: the sender's call waits
// for the target's model round to decide the outcome.
func (st *stepper) seedSend(a *Agent, tc ToolCall, to, text string, p Priority) bool {
	if !st.seed(bugSenderWaits) {
		return false
	}
	tc.Wait = WaitSend
	tc.Msg = st.nextMsgID()
	st.startTool(a, tc)
	m := st.send(string(a.ID), to, text, p, tc.UseID)
	if m.Outcome != OutcomePending {
		st.finishTool(a, tc.UseID, st.renderOutcome(m), m.Outcome == OutcomeRejected)
	}
	return true
}

// NotifiedFlag sets or clears the boolean flag of the notified-flag bug.
// The correct core never emits it.
type NotifiedFlag struct {
	Agent AgentID `json:"agent"`
	Value bool    `json:"value"`
}

// Type implements Body: the name of the event.
func (*NotifiedFlag) Type() string                  { return "bug.notified-flag" }
func (e *NotifiedFlag) apply(s *State, _ time.Time) { s.Agents[e.Agent].seed.notified = e.Value }

// FinalizeRun is the notified-flag bug's deferred second half of a run's
// end.
type FinalizeRun struct {
	Agent AgentID
	Seq   int
}

func (FinalizeRun) inputName() string { return "finalize-run" }

// Finalize asks, for the notified-flag bug, for a FinalizeRun input later.
type Finalize struct {
	Agent AgentID
	Seq   int
}

func (Finalize) effectName() string { return "finalize" }

func init() { register(func() Body { return &NotifiedFlag{} }) }
