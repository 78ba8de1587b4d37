package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/internal/bench"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
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
	stores := fs.String("store", "memory,sqlite-full,sqlite-normal,postgres", "stores to measure, comma-separated")
	pg := fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server for the postgres figures (a scratch database is created and dropped)")
	recovery := fs.Int("recovery-events", 0, "also measure recovery of a session of this many events (e.g. 1000000), with and without snapshots")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	dir, err := os.MkdirTemp("", "vigil-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n := 0
	opener := func(name string) (func() (store.Store, func(), error), error) {
		switch name {
		case "memory":
			return func() (store.Store, func(), error) { return memstore.New(), func() {}, nil }, nil
		case "sqlite-full", "sqlite-normal":
			sync := strings.ToUpper(strings.TrimPrefix(name, "sqlite-"))
			return func() (store.Store, func(), error) {
				n++
				st, err := sqlite.Open(ctx, filepath.Join(dir, fmt.Sprintf("b%d.db", n)), &sqlite.Options{Synchronous: sync})
				return st, func() {}, err
			}, nil
		case "postgres":
			return func() (store.Store, func(), error) { return scratchPostgres(ctx, *pg) }, nil
		}
		return nil, fmt.Errorf("unknown store %q (want memory, sqlite-full, sqlite-normal or postgres)", name)
	}
	fmt.Fprintf(e.stdout, "vigil bench: model answers at once; figures are vigil's own cost\n")
	for _, name := range strings.Split(*stores, ",") {
		open, err := opener(strings.TrimSpace(name))
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		fmt.Fprintf(e.stdout, "\nstore: %s\n", name)
		run := func(label string, f func(st store.Store) (string, error)) error {
			st, drop, err := open()
			if err != nil {
				fmt.Fprintf(e.stdout, "  %-46s skipped: %v\n", label, err)
				return nil
			}
			defer drop()
			defer st.Close()
			line, err := f(st)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", label, name, err)
			}
			fmt.Fprintf(e.stdout, "  %-46s %s\n", label, line)
			return nil
		}
		wake := func(ref time.Duration, f func(context.Context, bench.Config) (bench.Stats, error), n int) func(store.Store) (string, error) {
			return func(st store.Store) (string, error) {
				s, err := f(ctx, bench.Config{Store: st, DataDir: dir, N: n})
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s  (Claude Code median %s: %.0fx at p50, %.0fx at p99)", s, ref,
					float64(ref)/float64(max(s.P50, time.Microsecond)), float64(ref)/float64(max(s.P99, time.Microsecond))), nil
			}
		}
		if err := run("wake: background Bash exit -> next request", wake(ccBashMedian, bench.WakeLatencyBash, *samples/4)); err != nil {
			return err
		}
		if err := run("wake: background agent reply -> next request", wake(ccAgentMedian, bench.WakeLatencyAgent, *samples)); err != nil {
			return err
		}
		if err := run("send: SendMessage during a 100ms round", func(st store.Store) (string, error) {
			s, err := bench.SendLatency(ctx, bench.Config{Store: st, DataDir: dir, N: max(*samples/10, 5)})
			return fmt.Sprintf("%s  (%.4f of the recipient's round at p99)", s, float64(s.P99)/float64(bench.SendRound)), err
		}); err != nil {
			return err
		}
		if err := run("notifications written and delivered", func(st store.Store) (string, error) {
			s, err := bench.Notifications(ctx, bench.Config{Store: st, DataDir: dir, N: *notes}, 4)
			return s.String() + " (4 sessions x 10 workers)", err
		}); err != nil {
			return err
		}
		if *recovery > 0 && name != "memory" {
			for _, snap := range []bool{true, false} {
				label := "recovery, with snapshots"
				if !snap {
					label = "recovery, replaying every event"
				}
				if err := run(label, func(st store.Store) (string, error) {
					gen := time.Now()
					s, last, err := bench.Recovery(ctx, bench.Config{Store: st, DataDir: dir, N: *recovery}, snap)
					return fmt.Sprintf("%d events taken over in %s (generated in %s)", last, s.Elapsed.Round(time.Millisecond), time.Since(gen).Round(time.Second)), err
				}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scratchPostgres creates a database on the server at dsn and returns a
// store on it and a function that drops it.
func scratchPostgres(ctx context.Context, dsn string) (store.Store, func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("PostgreSQL not reachable: %w", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("vigil_bench_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, nil, err
	}
	cfg := conn.Config()
	st, err := postgres.Open(ctx, fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name), nil)
	drop := func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}
	if err != nil {
		drop()
		return nil, nil, err
	}
	return st, drop, nil
}
