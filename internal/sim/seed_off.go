//go:build !seedbugs

package sim

import (
	"fmt"

	"github.com/vigilrun/vigil/core"
)

// Bugs lists the seed bugs Options.Inject takes: none in this build. A
// build with the seedbugs tag (see SeedBugsTag) has them.
func Bugs() []string { return nil }

func newCore(cfg core.Config, bug string) *core.Core {
	if bug != "" {
		panic(fmt.Sprintf("sim: cannot inject %q: this build has no seed bugs; build with -tags %s", bug, SeedBugsTag))
	}
	return core.New(cfg)
}

// seedEffect runs the effects only a seed bug has: none in this build.
func (w *world) seedEffect(core.Effect) {}
