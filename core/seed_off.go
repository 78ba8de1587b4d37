//go:build !seedbugs

package core

import "time"

// The default build: no seed bug can be put back. Every hook is a constant
// the compiler removes with what it guards (see seed.go; the tagged build
// is seed_on.go).

// seedCore, seedStep and seedAgent hold a seed bug's state of a core, a
// step and an agent: none in this build.
type (
	seedCore  struct{}
	seedStep  struct{}
	seedAgent struct{}
)

// seed reports whether the core puts back bug b: never in this build.
func (st *stepper) seed(seedBug) bool { return false }

// seedQuiescentOwed reports whether the core puts back the quiescent-owed
// bug: never in this build.
func (*Core) seedQuiescentOwed() bool { return false }

// seedWhyOverlap reports whether the core puts back the why-overlap bug:
// never in this build.
func (*Core) seedWhyOverlap() bool { return false }

// The hooks where a seed bug replaces a step; each reports whether it did.
func (st *stepper) seedEnqueued(*Agent)                                      {}
func (st *stepper) seedSchedule() bool                                       { return false }
func (st *stepper) seedRunStarting(*Agent)                                   {}
func (st *stepper) seedRunNote(*Agent, RunSummary) bool                      { return false }
func (st *stepper) seedInput(Input) bool                                     { return false }
func (st *stepper) seedWake(*Agent, ProviderWake) bool                       { return false }
func (st *stepper) seedSend(*Agent, ToolCall, string, string, Priority) bool { return false }

// legacySeedEvent decodes the event of the notified-flag seed bug
// ("bug.notified-flag"), which only a seedbugs build emits, as a no-op: a
// log written by one still replays here, and the flag it set does not
// exist in this build.
type legacySeedEvent struct {
	Agent AgentID `json:"agent"`
	Value bool    `json:"value"`
}

// Type implements Body: the name of the event.
func (*legacySeedEvent) Type() string            { return "bug.notified-flag" }
func (*legacySeedEvent) apply(*State, time.Time) {}

func init() { register(func() Body { return &legacySeedEvent{} }) }
