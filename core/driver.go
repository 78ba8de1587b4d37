package core

// driver is the seam between the run lifecycle (run.go), which is the same
// for every agent, and whoever does an agent's turns, chosen by its Driver:
//
//   - DriverLoop (loop.go): vigil's own loop of model calls and tool calls;
//   - DriverExternal (external.go): a provider process that runs its own
//     turns, subagents and background commands (the Claude Code CLI, and
//     any agent CLI driven the same way), which vigil mirrors;
//   - DriverCaller (caller.go): an outside caller that reads its inbox.
//
// The lifecycle asks the driver only what differs between them. A driver
// holds no state: everything is in the State, changed by events.
type driver interface {
	// schedules reports whether the scheduler starts a's runs for the
	// items in its inbox; an agent whose driver does not takes them
	// itself.
	schedules(a *Agent) bool
	// begin does the turn of a's new run, which took items.
	begin(st *stepper, a *Agent, items []*Item)
	// interrupt hands a now-priority item to the turn in progress at once.
	interrupt(st *stepper, a *Agent)
	// tell decides what the sender of m, with priority p, to a is told
	// (DESIGN rule 3), once the rules common to every agent took it.
	tell(st *stepper, a *Agent, m *Msg, p Priority)
	// cancel asks a's run to end; it ends now, or when the turn does.
	cancel(st *stepper, a *Agent, by, why string) error
	// endTurn releases what the turn of a's ending run still waits for.
	endTurn(st *stepper, a *Agent, why string)
	// carriesUnseen reports whether the items a cancelled run took that
	// no model saw stay in a's transcript, for its next accepted round to
	// see; if not, they go back to the inbox.
	carriesUnseen() bool
	// close ends a's run, and whatever runs a's turns, as a closes.
	close(st *stepper, a *Agent, reason string)
	// due handles the deadlines of a's run that have passed.
	due(st *stepper, a *Agent)
	// orphaned ends, at a recovery, what of a depended on a process of
	// the previous vigil process (DESIGN rule 7).
	orphaned(st *stepper, a *Agent)
	// reissue issues again, at a recovery, the effects a's run waits for.
	reissue(st *stepper, a *Agent)
	// inFlight lists the effects a's run waits for (see InFlight).
	inFlight(st *stepper, a *Agent) []Effect
}

// driver returns the driver of a's turns.
func (st *stepper) driver(a *Agent) driver {
	switch a.Driver {
	case DriverExternal:
		return externalDriver{}
	case DriverCaller:
		return callerDriver{}
	}
	return loopDriver{}
}
