package sim

import (
	"fmt"
	"os"
	"slices"
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
	Explain(&b, Options{}, r, 60)
	b.WriteString("trace (last steps):\n")
	for _, l := range r.Trace {
		b.WriteString("  " + l + "\n")
	}
	t.Error(b.String())
}

// Every seed of the regression list passes.
func TestSimulatorRegressions(t *testing.T) {
	regs, err := ReadRegressions("regressions.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) == 0 {
		t.Fatal("regressions.txt lists no seed")
	}
	for _, reg := range regs {
		if reg.Note == "" {
			t.Errorf("regressions.txt:%d: seed %d has no comment saying what it found", reg.Line, reg.Seed)
		}
		t.Run(strconv.FormatInt(reg.Seed, 10), func(t *testing.T) {
			if r := Run(Options{Seed: reg.Seed}); r.First != nil {
				t.Logf("regression seed %d: %s", reg.Seed, reg.Note)
				report(t, r)
			}
		})
	}
}

func TestParseRegressions(t *testing.T) {
	regs, err := ParseRegressions(strings.NewReader("# header\n\n 12 # found x\n34#y\n"), "list")
	if err != nil {
		t.Fatal(err)
	}
	want := []Regression{{Seed: 12, Note: "found x", Line: 3}, {Seed: 34, Note: "y", Line: 4}}
	if !slices.Equal(regs, want) {
		t.Fatalf("got %+v, want %+v", regs, want)
	}
	if _, err := ParseRegressions(strings.NewReader("12x # bad\n"), "list"); err == nil || !strings.Contains(err.Error(), "list:1") {
		t.Fatalf("a bad seed: got error %v", err)
	}
}

// A full trace has one line per step, numbered from #1; an agent's trace
// is the lines of the full trace that touch it; tracing does not change the
// run.
func TestSimulatorTraces(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		plain := Run(Options{Seed: seed})
		full := Run(Options{Seed: seed, Trace: TraceFull})
		if full.Steps != plain.Steps || full.Runs != plain.Runs || full.Notes != plain.Notes {
			t.Fatalf("seed %d: a full trace changed the run: %+v vs %+v", seed, full, plain)
		}
		if len(full.Trace) != full.Steps {
			t.Fatalf("seed %d: %d trace lines for %d steps", seed, len(full.Trace), full.Steps)
		}
		for i, l := range full.Trace {
			if !strings.HasPrefix(l, fmt.Sprintf("#%d t=", i+1)) {
				t.Fatalf("seed %d: line %d is %q", seed, i+1, l)
			}
		}
		for _, agent := range []string{"a0", "main", "a1"} {
			tr := Run(Options{Seed: seed, Trace: agent})
			if tr.Steps != plain.Steps {
				t.Fatalf("seed %d: tracing %s changed the run", seed, agent)
			}
			j := 0
			for _, l := range tr.Trace {
				for j < len(full.Trace) && full.Trace[j] != l {
					j++
				}
				if j == len(full.Trace) {
					t.Fatalf("seed %d: trace of %s has a line the full trace lacks: %q", seed, agent, l)
				}
			}
			if agent != "a1" && len(tr.Trace) == 0 {
				t.Fatalf("seed %d: no step touched %s", seed, agent)
			}
		}
	}
}

// A violation about a run names the step at which it started and the steps
// that touched its agent; Explain prints them with the agent's trace.
func TestViolationNamesTheRun(t *testing.T) {
	w := &world{touched: map[core.AgentID][]int{"a3": {4, 9, 12}}, runStep: map[runRef]int{{"a3", 2}: 9}, state: core.NewState()}
	w.steps = 20
	c := newChecker(w)
	c.violateRun("end", "a3", 2, "run a3#2 never ended")
	v := w.res.First
	if v == nil || v.Agent != "a3" || v.Run != 2 || v.RunStep != 9 || !slices.Equal(v.Steps, []int{4, 9, 12}) {
		t.Fatalf("got %+v", v)
	}
	var b strings.Builder
	Explain(&b, Options{}, w.res, 0)
	if got := b.String(); !strings.Contains(got, "run a3#2 started at step #9") || !strings.Contains(got, "#4 #9 #12") {
		t.Fatalf("Explain wrote %q", got)
	}
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
