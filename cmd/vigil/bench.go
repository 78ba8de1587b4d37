package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vigilrun/vigil/bench"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// Claude Code 2.1.328's idle-wake medians, measured against a fake model
// (shared/claude-code-observed.md): the bar vigil's figures are set against.
const (
	ccAgentMedian = 76 * time.Millisecond
	ccBashMedian  = 106 * time.Millisecond
)

func cmdBench(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	samples := fs.Int("samples", 200, "wake-latency samples per kind")
	notes := fs.Int("notifications", 4000, "notifications for the throughput figure")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	dir, err := os.MkdirTemp("", "vigil-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type backend struct {
		name string
		open func() (store.Store, error)
	}
	backends := []backend{{"memory", func() (store.Store, error) { return memstore.New(), nil }}}
	for _, b := range backends {
		fmt.Fprintf(e.stdout, "store: %s\n", b.name)
		run := func(label string, ref time.Duration, f func(context.Context, bench.Config) (bench.Stats, error), n int) error {
			st, err := b.open()
			if err != nil {
				return err
			}
			defer st.Close()
			s, err := f(ctx, bench.Config{Store: st, DataDir: dir, N: n})
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			fmt.Fprintf(e.stdout, "  %-44s %s  (Claude Code 2.1.328 median %s: %.0fx at the median)\n",
				label, s, ref, float64(ref)/float64(max(s.P50, time.Microsecond)))
			return nil
		}
		if err := run("wake: background Bash exit -> next request", ccBashMedian, bench.WakeLatencyBash, *samples/4); err != nil {
			return err
		}
		if err := run("wake: background agent reply -> next request", ccAgentMedian, bench.WakeLatencyAgent, *samples); err != nil {
			return err
		}
		st, err := b.open()
		if err != nil {
			return err
		}
		s, err := bench.Notifications(ctx, bench.Config{Store: st, DataDir: dir, N: *notes}, 4)
		st.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "  %-44s %s (4 sessions x 10 workers)\n", "notifications written and delivered", s)
	}
	return nil
}
