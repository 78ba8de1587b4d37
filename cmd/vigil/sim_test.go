package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/sim"
)

// runSim runs "vigil sim args..." and returns its exit code and output.
func runSim(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := runMain(context.Background(), e, append([]string{"sim"}, args...))
	return code, out.String(), errb.String()
}

func TestSimTraceFull(t *testing.T) {
	code, out, errs := runSim(t, "--seed", "1", "--trace", "full")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	r := sim.Run(sim.Options{Seed: 1})
	if !strings.Contains(out, "trace of seed 1 (every step):\n  #1 t=0s ") {
		t.Fatalf("no numbered full trace:\n%s", out)
	}
	if last := fmt.Sprintf("\n  #%d t=", r.Steps); !strings.Contains(out, last) {
		t.Fatalf("the full trace does not reach step %d:\n%s", r.Steps, out)
	}
}

func TestSimTraceAgent(t *testing.T) {
	code, out, errs := runSim(t, "--seed", "1", "--trace", "main")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	if !strings.Contains(out, "steps that touched main):\n  #1 t=0s ") {
		t.Fatalf("no trace of main:\n%s", out)
	}
	if code, _, errs := runSim(t, "--seeds", "3", "--trace", "full"); code != 2 || !strings.Contains(errs, "--trace needs --seed") {
		t.Fatalf("--trace without --seed: exit %d, %q", code, errs)
	}
}

func TestSimRegressions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regressions.txt")
	if err := os.WriteFile(path, []byte("# seeds\n3  # found a\n\n5  # found b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runSim(t, "--regressions", path)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	if !strings.Contains(out, "regression seeds (2, from "+path+"): 3 5\n") || !strings.Contains(out, "): 2 regression seeds, ") {
		t.Fatalf("the seeds run are not named:\n%s", out)
	}
	if code, _, errs := runSim(t, "--regressions", path, "--seeds", "9"); code != 2 {
		t.Fatalf("--regressions with --seeds: exit %d, %q", code, errs)
	}
}

// --inject and --list-bugs need a binary built with seed bugs; one without
// says so, and how to build one. (sim_seedbugs_test.go tests a seedbugs
// build's.)
func TestSimInjectNeedsASeedBugsBuild(t *testing.T) {
	if len(sim.Bugs()) > 0 {
		if code, _, errs := runSim(t, "--seeds", "1", "--inject", "no-such-bug"); code != 2 || !strings.Contains(errs, `unknown bug "no-such-bug"`) {
			t.Fatalf("--inject of an unknown bug: exit %d, %q", code, errs)
		}
		return
	}
	for _, args := range [][]string{{"--inject", "notified-flag"}, {"--list-bugs"}} {
		code, out, errs := runSim(t, args...)
		if code != 2 || !strings.Contains(errs, "no seed bugs") || !strings.Contains(errs, "go build -tags "+sim.SeedBugsTag+" ") {
			t.Fatalf("%v without seed bugs: exit %d, %q%q", args, code, out, errs)
		}
	}
}
