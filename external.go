package vigil

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
)

// extProc is the provider process of one external agent. Its operations
// (start, deliver, interrupt, stop a task) run in order on one goroutine,
// off the actor's. The actor queues them without waiting (enqueue): the
// worker waits for the actor's queue when it hands an outcome over, so the
// actor must never wait for the worker's.
type extProc struct {
	a     *actor
	agent core.AgentID
	wake  chan struct{} // an operation was queued (buffered, 1)
	quit  chan struct{}
	once  sync.Once

	mu sync.Mutex
	// ops are the operations queued, in order. They are the effects of
	// the actor's own steps, as many as the steps asked for.
	ops []func()
	// proc is the running process, nil when none.
	proc provider.SessionProcess
	// exited is set when the current process is gone: the worker is done.
	exited bool
}

// extFor returns the worker of an agent's provider process, creating it.
func (a *actor) extFor(agent core.AgentID) *extProc {
	if x := a.ext[agent]; x != nil {
		if !x.isExited() {
			return x
		}
		x.stop() // its process is gone; the worker goes too
	}
	x := &extProc{a: a, agent: agent, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	a.ext[agent] = x
	go x.run()
	return x
}

func (x *extProc) isExited() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.exited
}

func (x *extProc) current() provider.SessionProcess {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.proc
}

func (x *extProc) run() {
	for {
		select {
		case <-x.wake:
			for op := x.next(); op != nil; op = x.next() {
				op()
			}
		case <-x.quit:
			if p := x.current(); p != nil {
				_ = p.Close()
			}
			return
		}
	}
}

// next takes the next operation queued, nil when none is or the worker is
// stopping.
func (x *extProc) next() func() {
	select {
	case <-x.quit:
		return nil
	default:
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.ops) == 0 {
		x.ops = nil
		return nil
	}
	op := x.ops[0]
	x.ops[0] = nil
	x.ops = x.ops[1:]
	return op
}

func (x *extProc) stop() { x.once.Do(func() { close(x.quit) }) }

// do runs f on the process, if one is running.
func (x *extProc) do(f func(provider.SessionProcess) error) {
	x.enqueue(func() {
		p := x.current()
		if p == nil {
			return
		}
		if err := f(p); err != nil {
			x.a.rt.log.Warn("provider process operation failed", "session", x.a.id, "agent", x.agent, "err", err)
		}
	})
}

// enqueue queues op for the worker; it never waits. A stopped worker
// takes nothing more.
func (x *extProc) enqueue(op func()) {
	select {
	case <-x.quit:
		return
	default:
	}
	x.mu.Lock()
	x.ops = append(x.ops, op)
	x.mu.Unlock()
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// deliver hands a run's items to the process, starting one first when
// there is none or the one there is ending. A process that cannot start or
// take the items ends the run through ProviderExited, like any process
// that goes away.
func (x *extProc) deliver(ef core.Deliver) {
	a := x.a
	drv := a.rt.opts.Drivers[ef.Provider]
	if drv == nil {
		drv = a.rt.opts.Drivers[a.rt.opts.DefaultProvider]
	}
	st := &provider.SessionStart{
		Session: string(a.id), Agent: ef.Agent, Cwd: a.state.Session.Cwd, Model: ef.Model,
		Resume: ef.Resume, PermissionMode: a.state.Session.Permissions.Mode,
	}
	// Each process a group of its own: an idle release's next process
	// starts while the last one may still be ending.
	st.Cgroup = a.rt.cgroupFor(a.id, "agent-"+string(ef.Agent)+"-"+randomID())
	x.enqueue(func() {
		if p := x.current(); p != nil {
			err := p.Deliver(ef.Text, ef.Priority)
			if err == nil {
				return
			}
			if !errors.Is(err, provider.ErrProcessEnded) {
				a.rt.log.Warn("could not deliver to the provider process; ending it", "session", a.id, "agent", ef.Agent, "err", err)
				_ = p.Close()
				return
			}
			// The process was ending (an idle release): a new one takes
			// the items. The old one's exit names its pid, so the core
			// tells it from the new one.
			a.rt.log.Info("provider process was ending; starting a new one", "session", a.id, "agent", ef.Agent)
			x.mu.Lock()
			x.proc = nil
			x.mu.Unlock()
		}
		if drv == nil {
			a.submitEffect(core.ProviderExited{Agent: ef.Agent, Reason: fmt.Sprintf("no session driver %q is configured", ef.Provider)})
			return
		}
		var started provider.SessionProcess
		var emitMu sync.Mutex
		st.Emit = func(in core.Input) {
			emitMu.Lock()
			defer emitMu.Unlock()
			if _, ok := in.(core.ProviderExited); ok {
				x.mu.Lock()
				if x.proc == started {
					x.exited = true
				}
				x.mu.Unlock()
			}
			a.submitEffect(in)
		}
		emitMu.Lock()
		p, err := drv.Start(a.ctx, st)
		started = p
		emitMu.Unlock()
		if err != nil {
			a.submitEffect(core.ProviderExited{Agent: ef.Agent, Reason: "could not start: " + err.Error()})
			return
		}
		x.mu.Lock()
		x.proc = p
		x.mu.Unlock()
		a.submitEffect(core.ProviderStarted{Agent: ef.Agent, PID: p.PID(), StartTicks: p.StartTicks(), Cgroup: st.Cgroup})
		if err := p.Deliver(ef.Text, ef.Priority); err != nil {
			a.rt.log.Warn("could not deliver to the new provider process; ending it", "session", a.id, "agent", ef.Agent, "err", err)
			_ = p.Close()
		}
	})
}
