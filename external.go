package vigil

import (
	"fmt"
	"sync"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
)

// extProc is the provider process of one external agent. Its operations
// (start, deliver, interrupt, stop a task) run in order on one goroutine,
// off the actor's.
type extProc struct {
	a     *actor
	agent core.AgentID
	ops   chan func()
	quit  chan struct{}
	once  sync.Once
	// proc is touched only by the worker goroutine.
	proc provider.SessionProcess
	// exited is set on the actor goroutine when the process is gone.
	exited bool
}

// extFor returns the worker of an agent's provider process, creating it.
func (a *actor) extFor(agent core.AgentID) *extProc {
	if x := a.ext[agent]; x != nil && !x.exited {
		return x
	}
	x := &extProc{a: a, agent: agent, ops: make(chan func(), 64), quit: make(chan struct{})}
	a.ext[agent] = x
	go x.run()
	return x
}

func (x *extProc) run() {
	for {
		select {
		case op := <-x.ops:
			op()
		case <-x.quit:
			if x.proc != nil {
				_ = x.proc.Close()
			}
			return
		}
	}
}

func (x *extProc) stop() { x.once.Do(func() { close(x.quit) }) }

// do runs f on the process, if one is running.
func (x *extProc) do(f func(provider.SessionProcess) error) {
	x.enqueue(func() {
		if x.proc == nil {
			return
		}
		if err := f(x.proc); err != nil {
			x.a.rt.log.Warn("provider process operation failed", "session", x.a.id, "agent", x.agent, "err", err)
		}
	})
}

func (x *extProc) enqueue(op func()) {
	select {
	case x.ops <- op:
	case <-x.quit:
	}
}

// deliver hands a run's items to the process, starting it first when
// needed. A process that cannot start or take the items ends the run
// through ProviderExited, like any process that goes away.
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
	x.enqueue(func() {
		if x.proc == nil {
			if drv == nil {
				a.submitEffect(core.ProviderExited{Agent: ef.Agent, Reason: fmt.Sprintf("no session driver %q is configured", ef.Provider)})
				return
			}
			var mu sync.Mutex
			st.Emit = func(in core.Input) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := in.(core.ProviderExited); ok {
					a.submitControl(func() { x.exited = true })
				}
				a.submitEffect(in)
			}
			p, err := drv.Start(a.ctx, st)
			if err != nil {
				a.submitEffect(core.ProviderExited{Agent: ef.Agent, Reason: "could not start: " + err.Error()})
				return
			}
			x.proc = p
			a.submitEffect(core.ProviderStarted{Agent: ef.Agent, PID: p.PID(), StartTicks: p.StartTicks()})
		}
		if err := x.proc.Deliver(ef.Text, ef.Priority); err != nil {
			a.rt.log.Warn("could not deliver to the provider process; ending it", "session", a.id, "agent", ef.Agent, "err", err)
			_ = x.proc.Close()
		}
	})
}
