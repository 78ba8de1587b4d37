//go:build seedbugs

package sim

import "testing"

// Each seed bug put back into the core must be caught.
func TestSimulatorCatchesInjectedBugs(t *testing.T) {
	for _, bug := range Bugs() {
		t.Run(bug, func(t *testing.T) {
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

func TestBugsListsEverySeedBug(t *testing.T) {
	if len(Bugs()) < 8 {
		t.Fatalf("a seedbugs build lists %d seed bugs: %v", len(Bugs()), Bugs())
	}
}
