// Package core is vigil's pure state machine: sessions, agents, runs, tasks,
// inboxes, notifications, timers and gates, and the rules of DESIGN.md
// section 2.
//
// Everything happens in Step:
//
//	out := c.Step(state, now, input)
//
// Step reads the state and one input, decides what happens, and records
// every change as an Event that it applies to the state at once. It returns
// those events (to be committed before anything else happens) and the
// effects to run after the commit: model calls, tool executions, processes.
// Effects come back as inputs. Step does no I/O, starts no goroutine and
// reads no clock: time comes in with the input.
//
// Replaying a session's events through Apply from an empty State rebuilds
// the state exactly; that is how a session survives a crash. Effects that
// were in flight are derived from the state again by Recover.
//
// # Reading the code
//
// core.go steps one input (Step). run.go is the run lifecycle of DESIGN
// section 2, the same for every agent: inbox, scheduler, a run's start and
// end, its notification. driver.go is the seam to whoever does an agent's
// turns: loop.go (vigil's own loop of model calls and tool calls),
// external.go (a provider process such as the Claude Code CLI, and the
// subagents and commands of its own that vigil mirrors), caller.go (an
// outside caller). tools.go holds the tools vigil decides itself,
// permission.go the approvals, control.go the inputs that steer a session
// from outside its runs (cancels, stops, closes, wakes, deadlines,
// recovery); retry.go, budget.go and compact.go the rules of delivery,
// budgets and context; types.go and event.go the state and the events
// that change it; status.go what a person is shown. seed.go marks where a
// test build puts seed bugs back.
package core
