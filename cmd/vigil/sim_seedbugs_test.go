//go:build seedbugs

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/sim"
)

// A failing regression seed fails the run and prints its replay command.
func TestSimRegressionFailurePrintsReplay(t *testing.T) {
	bug := sim.Bugs()[0]
	seed := int64(0)
	for s := int64(1); s <= 300 && seed == 0; s++ {
		if sim.Run(sim.Options{Seed: s, Inject: bug}).First != nil {
			seed = s
		}
	}
	if seed == 0 {
		t.Fatalf("no seed in 1..300 fails with %s injected", bug)
	}
	path := filepath.Join(t.TempDir(), "regressions.txt")
	if err := os.WriteFile(path, fmt.Appendf(nil, "%d  # fails with %s\n", seed, bug), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runSim(t, "--regressions", path, "--inject", string(bug))
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	if want := fmt.Sprintf("replay with: vigil sim --seed %d --inject %s\n", seed, bug); !strings.Contains(out, want) {
		t.Fatalf("no %q in:\n%s", want, out)
	}
}
