package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// mode is how a seed's session is driven.
type mode int

const (
	// modeLoop: vigil runs the agent loop (most seeds).
	modeLoop mode = iota
	// modeExternal: a simulated provider process runs the main agent's
	// turns, its own subagents and background commands, and wakes itself.
	modeExternal
	// modeCaller: the main agent is an outside caller that spawns agents
	// and acknowledges its notifications.
	modeCaller
)

// extProcess is the simulated provider process of an external main agent.
// It runs one turn at a time, starts background tasks of its own, wakes
// itself when they finish, and sometimes dies.
type extProcess struct {
	alive  bool
	inc    int64
	busy   bool                     // a turn is in progress
	queue  []string                 // delivered texts waiting for their turn
	tasks  map[string]core.TaskKind // live tasks
	kinds  map[string]core.TaskKind // every task it started
	owners map[string]string        // a task's owning subagent, for nested tasks
	// stopped holds, for a task stopped by stop_task, the generation it was
	// stopped at: a stopped subagent is not woken for its commands.
	stopped map[string]int
	// gens counts each task id's (re)starts: a frame of an earlier run of
	// the task is void.
	gens    map[string]int
	pid     int
	pending []*wev // its future frames, cancelled when it dies
	wakes   int    // finished tasks whose wake turn has not run yet
	turn    int    // the number of the current (or last) turn
	// deaf is set while a hung turn ignores interrupts too: only the
	// process's end ends it.
	deaf bool
	// last is when the last turn frame was scheduled.
	last time.Time
}

func (w *world) ext() *extProcess {
	if w.proc == nil || !w.proc.alive || w.proc.inc != w.inc {
		w.pids++
		w.proc = &extProcess{alive: true, inc: w.inc, tasks: map[string]core.TaskKind{}, kinds: map[string]core.TaskKind{}, owners: map[string]string{}, stopped: map[string]int{}, gens: map[string]int{}, pid: 4000 + w.pids}
		p := w.proc
		w.frame(p, w.latency(1, 50), "provider started", func() core.Input {
			return core.ProviderStarted{Agent: core.MainAgent, PID: p.pid, StartTicks: uint64(w.inc)}
		})
	}
	return w.proc
}

// frame schedules one frame of a turn, after the turn frames scheduled
// before it: a process sends a turn's frames in order.
func (w *world) frame(p *extProcess, d time.Duration, name string, in func() core.Input) time.Time {
	at := w.at(d)
	if !at.After(p.last) {
		at = p.last.Add(time.Microsecond)
	}
	p.last = at
	return w.frameAt(p, at, name, in)
}

// frameAt schedules a frame at a time of its own (a background task's end).
func (w *world) frameAt(p *extProcess, at time.Time, name string, in func() core.Input) time.Time {
	e := w.schedule(at, p.inc, name, func() core.Input {
		if !p.alive {
			return nil
		}
		return in()
	})
	p.pending = append(p.pending, e)
	return at
}

// externalEffect handles the effects aimed at the provider process.
func (w *world) externalEffect(ef core.Effect) {
	switch ef := ef.(type) {
	case core.Deliver:
		p := w.ext()
		p.queue = append(p.queue, ef.Text)
		w.nextTurn(p)
	case core.Interrupt:
		if p := w.proc; p != nil && p.alive && p.busy && !p.deaf {
			// An interrupt ends the turn it was asked for; a turn that
			// ended meanwhile is not touched, nor the next one.
			turn := p.turn
			w.frame(p, w.latency(1, 100), "turn interrupted", func() core.Input {
				if p.turn != turn {
					return nil
				}
				return w.endTurn(p, "interrupted", false)
			})
		}
	case core.StopProvider:
		if p := w.proc; p != nil && p.alive {
			w.frame(p, w.latency(1, 200), "provider stopped", func() core.Input {
				p.alive = false
				for _, e := range p.pending {
					e.dead = true
				}
				return core.ProviderExited{Agent: core.MainAgent, PID: p.pid, Reason: "stopped: the agent was closed"}
			})
		}
	case core.StopExternal:
		if p := w.proc; p != nil && p.alive {
			if _, ok := p.kinds[ef.Task]; ok {
				w.stopTask(p, ef.Task)
			}
		}
	}
}

// stopTask is the process's answer to stop_task, as the CLI 2.1.328 gives
// it: a live task is killed and notifies "stopped"; a subagent between runs
// (waiting on its own commands) is reported killed with no notification;
// either way a subagent's own live commands are killed and notify, and the
// stopped subagent is not woken for them.
func (w *world) stopTask(p *extProcess, id string) {
	kind := p.kinds[id]
	w.frame(p, w.latency(1, 200), "external task stopped", func() core.Input {
		_, live := p.tasks[id]
		if !live && (kind != core.TaskAgent || p.stopped[id] == p.gens[id]) {
			return nil // ended already, or stopped already
		}
		delete(p.tasks, id)
		p.stopped[id] = p.gens[id]
		if kind == core.TaskAgent {
			for _, child := range slices.Sorted(maps.Keys(p.tasks)) {
				if p.owners[child] == id && p.tasks[child] == core.TaskShell {
					w.frame(p, w.latency(1, 20), "external task stopped", func() core.Input {
						if _, live := p.tasks[child]; !live {
							return nil
						}
						delete(p.tasks, child)
						return core.ExternalTask{Agent: core.MainAgent, ID: child, Kind: core.TaskShell, Owner: id, Status: "stopped", Summary: "stopped", Notify: true}
					})
				}
			}
		}
		if !live {
			return core.ExternalTask{Agent: core.MainAgent, ID: id, Kind: kind, Owner: p.owners[id], Status: "killed"}
		}
		// The real CLI wakes the owner of a stopped task at its next turn;
		// the simulated process runs that turn soon, so that every
		// notification is seen delivered by the end.
		if parent := p.owners[id]; parent != "" {
			w.wakeSubagent(p, parent)
		} else {
			p.wakes++
			defer w.nextTurn(p)
		}
		return core.ExternalTask{Agent: core.MainAgent, ID: id, Kind: kind, Owner: p.owners[id], Status: "killed", Summary: "stopped", Notify: true}
	})
}

// nextTurn starts the process's next turn when it is free: one for a
// delivered text, else a wake for finished background work.
func (w *world) nextTurn(p *extProcess) {
	if p.busy || !p.alive {
		return
	}
	wake := false
	switch {
	case len(p.queue) > 0:
		p.queue = p.queue[1:]
	case p.wakes > 0:
		p.wakes = 0
		wake = true
	default:
		return
	}
	p.busy = true
	p.turn++
	turn := p.turn
	w.frame(p, w.latency(1, 100), "turn started", func() core.Input {
		return core.ExternalTurnStarted{Agent: core.MainAgent, Session: "ext-session"}
	})
	w.frame(p, w.latency(5, 800), "turn output", func() core.Input {
		return core.ExternalMessage{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("working")}}}
	})
	if !wake && w.budget.spawns > 0 && w.rng.IntN(2) == 0 {
		w.budget.spawns--
		w.extIDs++
		id := fmt.Sprintf("x%d", w.extIDs)
		kind := core.TaskAgent
		if w.rng.IntN(2) == 0 {
			kind = core.TaskShell
		}
		owner := ""
		if kind == core.TaskShell && w.rng.IntN(3) == 0 {
			// A command of one of the process's own subagents.
			for tid, k := range sortedTasks(p.tasks) {
				if k == core.TaskAgent {
					owner = tid
					break
				}
			}
		}
		p.tasks[id] = kind
		p.kinds[id] = kind
		p.owners[id] = owner
		p.gens[id]++
		started := w.frame(p, w.latency(1, 300), "external task started", func() core.Input {
			return core.ExternalTask{Agent: core.MainAgent, ID: id, Kind: kind, Owner: owner, Status: "running", Description: "background " + id}
		})
		// Now and then the process loses a subagent's run: it never
		// reports its end (a hung subagent), and only a stop or the
		// process's exit ends it.
		if kind != core.TaskAgent || w.faults.IntN(20) != 0 {
			w.finishLater(p, id, kind, started)
		}
	}
	// A turn may hang too: then only an interrupt or the process's exit
	// ends it.
	if w.faults.IntN(30) == 0 {
		p.deaf = w.faults.IntN(2) == 0
	} else {
		w.frame(p, w.latency(10, 1500), "turn ended", func() core.Input {
			if p.turn != turn {
				return nil
			}
			return w.endTurn(p, "turn result", wake)
		})
	}
	if w.rng.IntN(12) == 0 {
		// The process dies at some point: its later frames never come.
		w.frame(p, w.latency(1, 3000), "provider died", func() core.Input {
			p.alive = false
			for _, e := range p.pending {
				e.dead = true
			}
			return core.ProviderExited{Agent: core.MainAgent, PID: p.pid, Reason: "simulated crash"}
		})
	}
}

// finishLater schedules the end of a background task the process started.
func (w *world) finishLater(p *extProcess, id string, kind core.TaskKind, started time.Time) {
	gen := p.gens[id]
	w.frameAt(p, started.Add(w.latency(50, 8000)), "external task finished", func() core.Input {
		if _, live := p.tasks[id]; !live || p.gens[id] != gen {
			return nil
		}
		delete(p.tasks, id)
		if parent := p.owners[id]; parent != "" {
			// The subagent that owns the command is woken by the
			// process: it runs again and reports again.
			w.wakeSubagent(p, parent)
		} else {
			p.wakes++
			defer w.nextTurn(p)
		}
		return core.ExternalTask{Agent: core.MainAgent, ID: id, Kind: kind, Owner: p.owners[id], Status: "completed", Summary: "result of " + id, Notify: true}
	})
}

func (w *world) endTurn(p *extProcess, result string, wake bool) core.Input {
	if !p.busy {
		return nil
	}
	p.busy = false
	defer w.nextTurn(p)
	return core.ExternalTurnEnded{Agent: core.MainAgent, Result: result, Wake: wake, NumTurns: 1}
}

// scheduleAck makes the outside caller acknowledge some of its inbox a bit
// later, so a caller session always drains.
func (w *world) scheduleAck() {
	if w.mode != modeCaller || w.ackPending {
		return
	}
	main := w.state.Agents[core.MainAgent]
	if main == nil || len(main.Inbox) == 0 {
		return
	}
	w.ackPending = true
	w.schedule(w.at(w.latency(1, 3000)), 0, "caller ack", func() core.Input {
		w.ackPending = false
		var ids []core.ItemID
		for _, it := range w.state.Agents[core.MainAgent].Inbox {
			if w.rng.IntN(3) != 0 {
				ids = append(ids, it.ID)
			}
		}
		if len(ids) == 0 {
			w.scheduleAck()
			return nil
		}
		return core.CallerAck{Agent: core.MainAgent, Items: ids}
	})
}

// sortedTasks returns a process's live tasks in id order, for determinism.
func sortedTasks(m map[string]core.TaskKind) map[string]core.TaskKind {
	// Iteration order of the returned map does not matter to callers that
	// take the first agent task: pick deterministically below.
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := map[string]core.TaskKind{}
	if len(ids) > 0 {
		for _, id := range ids {
			if m[id] == core.TaskAgent {
				out[id] = core.TaskAgent
				return out
			}
		}
	}
	return out
}

// wakeSubagent has the process run one of its subagents again (after a
// command of it finished) and report its end.
func (w *world) wakeSubagent(p *extProcess, parent string) {
	if _, live := p.tasks[parent]; live {
		return // still running: it takes the result in its current run
	}
	if p.stopped[parent] == p.gens[parent] {
		return // stopped: the process does not run it again
	}
	p.tasks[parent] = core.TaskAgent
	p.gens[parent]++
	gen := p.gens[parent]
	woken := w.frame(p, w.latency(1, 200), "subagent woken", func() core.Input {
		if _, live := p.tasks[parent]; !live || p.gens[parent] != gen {
			// Stopped before the process reported the wake: a process
			// reports no start of a run it has already stopped.
			return nil
		}
		return core.ExternalTask{Agent: core.MainAgent, ID: parent, Kind: core.TaskAgent, Status: "running"}
	})
	if w.faults.IntN(20) == 0 {
		return // the process loses this run: it never reports its end
	}
	w.frameAt(p, woken.Add(w.latency(300, 3000)), "subagent woken done", func() core.Input {
		if _, live := p.tasks[parent]; !live || p.gens[parent] != gen {
			return nil
		}
		delete(p.tasks, parent)
		p.wakes++
		defer w.nextTurn(p)
		return core.ExternalTask{Agent: core.MainAgent, ID: parent, Kind: core.TaskAgent, Status: "completed", Summary: "woken again", Notify: true}
	})
}
