package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/core"
)

// seeds returns how many seeds a test runs: VIGIL_SIM_SEEDS, or def.
func seeds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("VIGIL_SIM_SEEDS")); err == nil && n > 0 {
		return n
	}
	return def
}

func report(t *testing.T, r Result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\nreplay: go run ./cmd/vigil sim --seed %d\n", r.Seed, r.First, r.Seed)
	for _, l := range r.Trace {
		b.WriteString("  " + l + "\n")
	}
	t.Error(b.String())
}

func TestSimulatorFindsNoViolation(t *testing.T) {
	n := seeds(300)
	steps, crashes := 0, 0
	for seed := int64(1); seed <= int64(n); seed++ {
		r := Run(Options{Seed: seed})
		steps += r.Steps
		crashes += r.Crashes
		if r.First != nil {
			report(t, r)
			return
		}
	}
	t.Logf("%d seeds, %d steps, %d crashes, 0 violations", n, steps, crashes)
}

func TestSimulatorIsDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		a, b := Run(Options{Seed: seed}), Run(Options{Seed: seed})
		if a.Steps != b.Steps || a.Runs != b.Runs || a.Crashes != b.Crashes || a.Notes != b.Notes {
			t.Fatalf("seed %d differs between runs: %+v vs %+v", seed, a, b)
		}
	}
}

// Each seed bug put back into the core must be caught.
func TestSimulatorCatchesInjectedBugs(t *testing.T) {
	for _, bug := range core.Bugs {
		t.Run(string(bug), func(t *testing.T) {
			found := 0
			first := int64(0)
			for seed := int64(1); seed <= 200; seed++ {
				if r := Run(Options{Seed: seed, Inject: bug}); r.First != nil {
					found++
					if first == 0 {
						first = seed
						t.Logf("first violation, seed %d: %s", seed, r.First)
					}
				}
			}
			if found == 0 {
				t.Fatalf("no violation found with %s injected in 200 seeds", bug)
			}
			t.Logf("%s: violations in %d of 200 seeds", bug, found)
		})
	}
}
