package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/sim"
)

func cmdSim(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	seeds := fs.Int("seeds", 1000, "how many seeds to run")
	seed := fs.Int64("seed", 0, "run only this seed, with its trace")
	first := fs.Int64("from", 1, "the first seed")
	inject := fs.String("inject", "", "put a seed bug back into the core: notified-flag, oneshot-drain or held-continuation")
	expect := fs.Bool("expect-violation", false, "succeed only if a violation is found (for --inject)")
	noCrash := fs.Bool("no-crash", false, "disable crash-and-recover")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "seeds run in parallel")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	bug := core.Bug(*inject)
	if bug != core.BugNone {
		known := false
		for _, b := range core.Bugs {
			known = known || b == bug
		}
		if !known {
			return &exitError{code: 2, err: fmt.Errorf("unknown bug %q (want notified-flag, oneshot-drain or held-continuation)", *inject)}
		}
	}
	from, n := *first, int64(*seeds)
	if *seed != 0 {
		from, n = *seed, 1
	}
	start := time.Now()
	var (
		mu                               sync.Mutex
		steps, crashes, runs, notes, bad int64
		firstBad                         *sim.Result
		modes                            = map[string]int{}
	)
	next := from
	var wg sync.WaitGroup
	for range max(*workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= from+n || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				s := next
				next++
				mu.Unlock()
				r := sim.Run(sim.Options{Seed: s, Inject: bug, NoCrash: *noCrash})
				mu.Lock()
				steps += int64(r.Steps)
				crashes += int64(r.Crashes)
				runs += int64(r.Runs)
				notes += int64(r.Notes)
				modes[r.Mode]++
				if r.First != nil {
					bad++
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
	if bug != core.BugNone {
		label = "core with injected bug " + string(bug)
	}
	fmt.Fprintf(e.stdout, "vigil sim (%s): %d seeds from %d, %d steps, %d runs, %d notifications, %d crashes recovered, %d seeds with violations, %s\n",
		label, n, from, steps, runs, notes, crashes, bad, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "sessions by driver: %d vigil loop, %d provider process, %d outside caller\n", modes["loop"], modes["external"], modes["caller"])
	if firstBad != nil {
		fmt.Fprintf(e.stdout, "first violation: seed %d: %s\nreplay with: vigil sim --seed %d", firstBad.Seed, firstBad.First, firstBad.Seed)
		if bug != core.BugNone {
			fmt.Fprintf(e.stdout, " --inject %s", bug)
		}
		fmt.Fprintln(e.stdout, "\ntrace (last steps):")
		for _, l := range firstBad.Trace {
			fmt.Fprintln(e.stdout, "  "+l)
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
