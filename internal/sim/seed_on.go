//go:build seedbugs

package sim

import "github.com/vigilrun/vigil/core"

// Bugs lists the seed bugs Options.Inject takes.
func Bugs() []string {
	out := make([]string, len(core.Bugs))
	for i, b := range core.Bugs {
		out[i] = string(b)
	}
	return out
}

func newCore(cfg core.Config, bug string) *core.Core {
	c, err := core.NewSeeded(cfg, core.Bug(bug))
	if err != nil {
		panic("sim: " + err.Error())
	}
	return c
}

// seedEffect runs the effects only a seed bug has: the notified-flag bug's
// deferred end of a run comes back later.
func (w *world) seedEffect(ef core.Effect) {
	if f, ok := ef.(core.Finalize); ok {
		in := core.FinalizeRun(f)
		w.schedule(w.at(w.latency(1, 3000)), w.inc, "finalize", func() core.Input { return in })
	}
}
