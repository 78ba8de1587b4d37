package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil/internal/sim"
)

func cmdSim(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	seeds := fs.Int("seeds", 1000, "how many seeds to run")
	seed := fs.Int64("seed", 0, "run only this seed, with its trace")
	first := fs.Int64("from", 1, "the first seed")
	inject := fs.String("inject", "", "put a seed bug back into the core: "+bugNames())
	listBugs := fs.Bool("list-bugs", false, "print the names of the seed bugs --inject takes, one a line"+seedBugsOnly())
	expect := fs.Bool("expect-violation", false, "succeed only if a violation is found (for --inject)")
	noCrash := fs.Bool("no-crash", false, "disable crash-and-recover")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "seeds run in parallel")
	trace := fs.String("trace", "", "with --seed: print every step (full), or every step that touched one agent, by id (a3) or name (cc-x5, main)")
	regressions := fs.String("regressions", "", "run exactly the seeds listed in this file (internal/sim/regressions.txt)")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if (*listBugs || *inject != "") && len(sim.Bugs()) == 0 {
		return &exitError{code: 2, err: errNoSeedBugs}
	}
	if *listBugs {
		for _, b := range sim.Bugs() {
			fmt.Fprintln(e.stdout, b)
		}
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *trace != "" && !set["seed"] {
		return &exitError{code: 2, err: fmt.Errorf("--trace needs --seed")}
	}
	if *regressions != "" && (set["seed"] || set["seeds"] || set["from"]) {
		return &exitError{code: 2, err: fmt.Errorf("--regressions runs the seeds of its file: no --seed, --seeds or --from with it")}
	}
	bug := *inject
	if bug != "" && !slices.Contains(sim.Bugs(), bug) {
		return &exitError{code: 2, err: fmt.Errorf("unknown bug %q (want %s)", bug, bugNames())}
	}
	from, n := *first, int64(*seeds)
	if set["seed"] {
		from, n = *seed, 1
	}
	// list, if set, is the seeds to run instead of from, from+1, ...
	var list []int64
	if *regressions != "" {
		regs, err := sim.ReadRegressions(*regressions)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if len(regs) == 0 {
			return &exitError{code: 2, err: fmt.Errorf("%s lists no seed", *regressions)}
		}
		var names []string
		for _, r := range regs {
			list = append(list, r.Seed)
			names = append(names, strconv.FormatInt(r.Seed, 10))
		}
		n = int64(len(list))
		fmt.Fprintf(e.stdout, "regression seeds (%d, from %s): %s\n", n, *regressions, strings.Join(names, " "))
	}
	opts := sim.Options{Inject: bug, NoCrash: *noCrash, Trace: *trace}
	start := time.Now()
	var (
		mu                               sync.Mutex
		steps, crashes, runs, notes, bad int64
		firstBad                         *sim.Result
		badSeeds                         []int64
		single                           sim.Result // the only seed's, with --seed
		modes                            = map[string]int{}
	)
	next := int64(0) // the index of the next seed
	var wg sync.WaitGroup
	for range max(*workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= n || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				s := from + next
				if list != nil {
					s = list[next]
				}
				next++
				mu.Unlock()
				o := opts
				o.Seed = s
				r := sim.Run(o)
				mu.Lock()
				steps += int64(r.Steps)
				crashes += int64(r.Crashes)
				runs += int64(r.Runs)
				notes += int64(r.Notes)
				modes[r.Mode]++
				if n == 1 {
					single = r
				}
				if r.First != nil {
					bad++
					badSeeds = append(badSeeds, r.Seed)
					if firstBad == nil || r.Seed < firstBad.Seed {
						rr := r
						firstBad = &rr
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return &exitError{code: 130, err: ctx.Err()}
	}
	label := "correct core"
	if bug != "" {
		label = "core with injected bug " + bug
	}
	which := fmt.Sprintf("%d seeds from %d", n, from)
	if list != nil {
		which = fmt.Sprintf("%d regression seeds", n)
	}
	fmt.Fprintf(e.stdout, "vigil sim (%s): %s, %d steps, %d runs, %d notifications, %d crashes recovered, %d seeds with violations, %s\n",
		label, which, steps, runs, notes, crashes, bad, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "sessions by driver: %d vigil loop, %d provider process, %d outside caller\n", modes["loop"], modes["external"], modes["caller"])
	if *trace != "" {
		printTrace(e, *trace, single)
	}
	if firstBad != nil && firstBad.First != nil {
		flags := ""
		if bug != "" {
			flags += " --inject " + bug
		}
		if *noCrash {
			flags += " --no-crash"
		}
		fmt.Fprintf(e.stdout, "first violation: seed %d: %s\nreplay with: vigil sim --seed %d%s\n", firstBad.Seed, firstBad.First, firstBad.Seed, flags)
		if len(badSeeds) > 1 {
			slices.Sort(badSeeds)
			more := badSeeds[1:]
			if len(more) > 20 {
				more = more[:20]
			}
			fmt.Fprintf(e.stdout, "other seeds with violations (%d): %s", len(badSeeds)-1, strings.Trim(fmt.Sprint(more), "[]"))
			if len(badSeeds)-1 > len(more) {
				fmt.Fprint(e.stdout, " ...")
			}
			fmt.Fprintln(e.stdout)
		}
		if v := firstBad.First; v.Agent != "" {
			lines := 200
			if *trace != "" {
				lines = 0 // printed above
			}
			sim.Explain(e.stdout, sim.Options{Inject: bug, NoCrash: *noCrash}, *firstBad, lines)
			if lines > 0 {
				fmt.Fprintf(e.stdout, "every step of %s: vigil sim --seed %d%s --trace %s\n", v.Agent, firstBad.Seed, flags, v.Agent)
			}
		}
		if *trace == "" {
			fmt.Fprintln(e.stdout, "trace (last steps):")
			for _, l := range firstBad.Trace {
				fmt.Fprintln(e.stdout, "  "+l)
			}
		}
	}
	switch {
	case *expect && bad == 0:
		return &exitError{code: 1, err: fmt.Errorf("expected a violation with %s injected; found none", bug)}
	case !*expect && bad > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d seed(s) violated the rules", bad)}
	}
	return nil
}

// printTrace prints the trace of one seed that --trace asked for.
func printTrace(e *env, which string, r sim.Result) {
	switch {
	case which == sim.TraceFull:
		fmt.Fprintf(e.stdout, "trace of seed %d (every step):\n", r.Seed)
	case len(r.Trace) == 0:
		fmt.Fprintf(e.stdout, "trace of seed %d: no step touched %s; its agents (id name): %s\n", r.Seed, which, strings.Join(r.Agents, ", "))
	default:
		fmt.Fprintf(e.stdout, "trace of seed %d (the %d of %d steps that touched %s):\n", r.Seed, len(r.Trace), r.Steps, which)
	}
	for _, l := range r.Trace {
		fmt.Fprintln(e.stdout, "  "+l)
	}
}

// errNoSeedBugs answers --inject and --list-bugs in a binary built
// without seed bugs.
var errNoSeedBugs = fmt.Errorf("this vigil binary has no seed bugs: build one with\n"+
	"  go build -tags %s -o /tmp/vigil-bugs ./cmd/vigil\nand run /tmp/vigil-bugs sim --list-bugs", sim.SeedBugsTag)

// bugNames lists the seed bugs --inject takes.
func bugNames() string {
	if len(sim.Bugs()) == 0 {
		return "none in this binary; a build with -tags " + sim.SeedBugsTag + " has them"
	}
	return strings.Join(sim.Bugs(), ", ")
}

// seedBugsOnly notes, in a binary without seed bugs, that a flag needs a
// binary built with them.
func seedBugsOnly() string {
	if len(sim.Bugs()) == 0 {
		return " (only in a binary built with -tags " + sim.SeedBugsTag + ")"
	}
	return ""
}
