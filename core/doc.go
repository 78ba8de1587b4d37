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
package core
