package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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
	load := fs.String("load", "", "run the load table instead: busy sessions per cell, comma-separated (e.g. 1,10,100,1000)")
	loadNotes := fs.Int("load-notifications", 20000, "notifications per load cell, spread over its sessions (at least 2 per worker per session)")
	loadWorkers := fs.Int("load-workers", bench.LoadWorkers, "background subagents per session in the load table")
	think := fs.Duration("load-think", 0, "how long, on average, the load table's model takes to answer a worker (a subagent's call), spread over half to one and a half times it; 0 at once, which keeps the node saturated")
	cpuSlots := fs.Int("cpu-slots", 0, "the runtime's CPU slots in the load table (vigil.Options.CPUSlots): N steps at a time, the others served by priority (a background agent's call last); 0 no limit")
	ceiling := fs.Duration("ceiling", time.Second, "how long each of the two disk ceiling measurements runs per load cell")
	idle := fs.Int("idle", 0, "run the idle figures instead: this many idle sessions per store (e.g. 10000)")
	idleInputs := fs.Int("idle-inputs", 100, "inputs to each idle session")
	idleInput := fs.String("idle-input", bench.IdleHold, "the idle inputs: hold (alternate hold and resume of the user queue, one committed event each) or status (a SessionStatus read)")
	nodes := fs.Int("nodes", 0, "run the cluster table instead: durable notifications/s and wake latency on 1 node and on this many (runtimes of this process on one PostgreSQL database), side by side; --load sets the session counts (default 10,100)")
	idleCluster := fs.Int("idle-cluster", 0, "measure the idle cost instead: this many idle sessions (e.g. 1000) over --nodes nodes (default 3) on one PostgreSQL database, and the transactions/s the database commits while nothing happens")
	idleWindow := fs.Duration("idle-window", 30*time.Second, "how long --idle-cluster counts transactions")
	idleSettle := fs.Duration("idle-settle", 10*time.Second, "how long --idle-cluster lets the nodes settle after creating the sessions, before it counts")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	dir, err := os.MkdirTemp("", "vigil-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *nodes < 0 || *idleCluster < 0 {
		return &exitError{code: 2, err: fmt.Errorf("--nodes and --idle-cluster take a count")}
	}
	if *idleCluster > 0 {
		n := *nodes
		if n == 0 {
			n = 3
		}
		return benchIdleCluster(ctx, e, *pg, dir, n, *idleCluster, *idleSettle, *idleWindow)
	}
	if *nodes > 0 {
		list := *load
		if list == "" {
			list = "10,100"
		}
		counts, err := sessionCounts(list)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		return benchCluster(ctx, e, *pg, dir, *nodes, counts, *loadNotes, *loadWorkers)
	}
	n := 0
	opener := func(name string) (func() (*benchStore, error), error) {
		switch name {
		case "memory":
			return func() (*benchStore, error) { return &benchStore{st: memstore.New(), drop: func() {}}, nil }, nil
		case "sqlite-full", "sqlite-normal":
			sync := strings.ToUpper(strings.TrimPrefix(name, "sqlite-"))
			return func() (*benchStore, error) {
				n++
				opts := &sqlite.Options{Synchronous: sync}
				path := filepath.Join(dir, fmt.Sprintf("b%d.db", n))
				st, err := sqlite.Open(ctx, path, opts)
				if err != nil {
					return nil, err
				}
				return &benchStore{st: st, drop: func() {}, ceiling: func(ctx context.Context, budget time.Duration) (store.Ceiling, error) {
					// Beside the store's file: the same disk, driver and settings.
					return sqlite.MeasureCeiling(ctx, path+"-ceiling", opts, budget)
				}}, nil
			}, nil
		case "postgres":
			return func() (*benchStore, error) {
				st, dsn, drop, err := scratchPostgres(ctx, *pg)
				if err != nil {
					return nil, err
				}
				return &benchStore{st: st, drop: drop, ceiling: func(ctx context.Context, budget time.Duration) (store.Ceiling, error) {
					return postgres.MeasureCeiling(ctx, dsn, nil, budget)
				}}, nil
			}, nil
		}
		return nil, fmt.Errorf("unknown store %q (want memory, sqlite-full, sqlite-normal or postgres)", name)
	}
	var names []string
	for _, name := range strings.Split(*stores, ",") {
		names = append(names, strings.TrimSpace(name))
	}
	if *load != "" || *idle > 0 {
		counts, err := sessionCounts(*load)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if *think < 0 {
			return &exitError{code: 2, err: fmt.Errorf("--load-think %s: want 0 or more", *think)}
		}
		if *idle > 0 && *idleInputs < 0 {
			return &exitError{code: 2, err: fmt.Errorf("--idle-inputs %d: want 0 or more", *idleInputs)}
		}
		lc := loadConfig{
			dir: dir, sessions: counts, notes: *loadNotes, workers: *loadWorkers, ceiling: *ceiling, cpuSlots: *cpuSlots, think: *think,
			idle: *idle, idleInputs: *idleInputs, idleInput: *idleInput,
		}
		return benchLoad(ctx, e, names, opener, lc)
	}
	fmt.Fprintf(e.stdout, "vigil bench: model answers at once; figures are vigil's own cost\n")
	for _, name := range names {
		open, err := opener(name)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		fmt.Fprintf(e.stdout, "\nstore: %s\n", name)
		run := func(label string, f func(st store.Store) (string, error)) error {
			bs, err := open()
			if err != nil {
				fmt.Fprintf(e.stdout, "  %-46s skipped: %v\n", label, err)
				return nil
			}
			defer bs.close()
			line, err := f(bs.st)
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
// store on it, its DSN and a function that drops it.
func scratchPostgres(ctx context.Context, dsn string) (store.Store, string, func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, "", nil, fmt.Errorf("PostgreSQL not reachable: %w", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("vigil_bench_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	cfg := conn.Config()
	scratch := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	st, err := postgres.Open(ctx, scratch, nil)
	drop := func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return st, scratch, drop, nil
}

// benchStore is a store under measurement.
type benchStore struct {
	st store.Store
	// drop removes what the store left (a scratch database).
	drop func()
	// ceiling measures the disk beneath with the store's driver and
	// settings; nil for the memory store.
	ceiling func(ctx context.Context, budget time.Duration) (store.Ceiling, error)
}

// close closes the store and drops it.
func (b *benchStore) close() {
	b.st.Close()
	b.drop()
}

// loadConfig is what --load and --idle ask for.
type loadConfig struct {
	dir        string
	sessions   []int
	notes      int
	workers    int
	ceiling    time.Duration
	cpuSlots   int
	think      time.Duration
	idle       int
	idleInputs int
	idleInput  string
}

// sessionCounts parses --load's list.
func sessionCounts(list string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--load %q: want session counts like 1,10,100", list)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// benchLoad runs the load table and the idle figures on each store.
func benchLoad(ctx context.Context, e *env, names []string, opener func(string) (func() (*benchStore, error), error), lc loadConfig) error {
	opens := make([]func() (*benchStore, error), len(names))
	for i, name := range names {
		open, err := opener(name)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		opens[i] = open
	}
	if lc.think > 0 && len(lc.sessions) > 0 {
		fmt.Fprintf(e.stdout, "vigil bench: the model answers main at once and the workers after %s on average; wakes are vigil's own cost, notif/s is bounded by the think time\n", lc.think)
	} else {
		fmt.Fprintf(e.stdout, "vigil bench: model answers at once; figures are vigil's own cost\n")
	}
	if len(lc.sessions) > 0 {
		workers := lc.workers
		if workers <= 0 {
			workers = bench.LoadWorkers
		}
		fmt.Fprintf(e.stdout, "\nload: %d notifications per cell spread over its sessions (at least %d per session), %d background workers per session;\n",
			lc.notes, bench.LoadShare(0, 1, workers), workers)
		slots := fmt.Sprintf("%d", lc.cpuSlots)
		if lc.cpuSlots <= 0 {
			slots = "no limit"
		}
		fmt.Fprintf(e.stdout, "cpu slots: %s (--cpu-slots: steps that run at once; the others wait by priority, a background agent's call last);\n", slots)
		if lc.think > 0 {
			fmt.Fprintf(e.stdout, "think: the model answers a worker after %s on average, spread over half to one and a half times it (--load-think; main at once): the offered load is below the node's capacity, as with real models;\n", lc.think)
		} else {
			fmt.Fprintf(e.stdout, "think: none (--load-think): every answer comes at once, so the node is saturated and a wake waits behind the other sessions' steps;\n")
		}
		fmt.Fprintf(e.stdout, "wake = worker's final answer -> main's next model request carrying its notification; rows = rows the store inserted or updated;\n")
		fmt.Fprintf(e.stdout, "ceiling = the same driver and settings, serial single-row commits for %s, then 1000-row transactions for %s, just before and just after\n", lc.ceiling, lc.ceiling)
		fmt.Fprintf(e.stdout, "the cell: the mean of the two; ceil spread = larger/smaller reading, of commits/s and of rows/s;\n")
		fmt.Fprintf(e.stdout, "ceil commit p99 = the 99th percentile of the serial single-row commits' latency: a durable wake waits for at least one commit;\n")
		fmt.Fprintf(e.stdout, "by time = that p99 weighted by the commits' length: a write arriving at a random moment lands, 1 time in 100,\n")
		fmt.Fprintf(e.stdout, "  in a commit at least this long and waits for its rest, then for its own (a disk's rare stalls can take much of its time);\n")
		fmt.Fprintf(e.stdout, "cpu = the process's CPU time over the cell's wall time (%d cores); loadavg = the machine's, at the cell's end; took = the whole cell with its ceiling\n\n", runtime.NumCPU())
		fmt.Fprintln(e.stdout, loadHeader())
		var byTable []string
		for i, name := range names {
			for _, sessions := range lc.sessions {
				row, tables, err := loadCell(ctx, opens[i], name, sessions, lc)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, row)
				if tables != "" {
					byTable = append(byTable, fmt.Sprintf("%-13s  %8d  %s", name, sessions, tables))
				}
			}
		}
		if len(byTable) > 0 {
			fmt.Fprintf(e.stdout, "\nrows/notif by table (what each store counts: SQLite its lease writes too, PostgreSQL event_counter's row once a commit):\n")
			for _, l := range byTable {
				fmt.Fprintln(e.stdout, l)
			}
		}
	}
	if lc.idle > 0 {
		for i, name := range names {
			if err := idleFigures(ctx, e, opens[i], name, lc); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadColumn is a column of the load table.
type loadColumn struct {
	title string
	width int
}

// loadColumns are the load table's column titles and widths.
func loadColumns() []loadColumn {
	return []loadColumn{
		{"store", 13}, {"sessions", 8}, {"notifs", 7}, {"wake p50", 9}, {"wake p99", 9}, {"notif/s", 8},
		{"appends/notif", 13}, {"rows/notif", 10}, {"commits/s", 9}, {"ceil commits/s", 14}, {"ceil rows/s", 11},
		{"notif/s÷ceil-commits", 20}, {"rows/s÷ceil-rows", 16}, {"ceil spread", 11}, {"ceil commit p99", 15}, {"by time", 8}, {"cpu", 5}, {"loadavg", 7}, {"took", 7},
	}
}

// loadHeader is the load table's title row.
func loadHeader() string {
	cols := loadColumns()
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = c.title
	}
	return loadRow(cells)
}

// loadRow aligns a row of the load table: the first column left, the
// others right.
func loadRow(cells []string) string {
	var b strings.Builder
	for i, c := range loadColumns() {
		if i == 0 {
			fmt.Fprintf(&b, "%-*s", c.width, cells[i])
			continue
		}
		fmt.Fprintf(&b, "  %*s", c.width, cells[i])
	}
	return strings.TrimRight(b.String(), " ")
}

// loadCell runs one cell of the load table on a fresh store and measures
// the disk ceiling beside it. It returns the cell's row and its rows per
// notification by table ("" when the store does not count them).
func loadCell(ctx context.Context, open func() (*benchStore, error), name string, sessions int, lc loadConfig) (row, tables string, err error) {
	start := time.Now()
	bs, err := open()
	if err != nil {
		return fmt.Sprintf("%-13s  %8d  skipped: %v", name, sessions, err), "", nil
	}
	defer bs.close()
	// The ceiling is measured just before and just after the cell, and
	// the two readings averaged: a disk shared with other work varies.
	var readings []store.Ceiling
	ceiling := func() error {
		if bs.ceiling == nil {
			return nil
		}
		c, err := bs.ceiling(ctx, lc.ceiling)
		if err != nil {
			return fmt.Errorf("disk ceiling of %s: %w", name, err)
		}
		readings = append(readings, c)
		return nil
	}
	if err := ceiling(); err != nil {
		return "", "", err
	}
	r, err := bench.Load(ctx, bench.Config{Store: bs.st, DataDir: lc.dir, N: lc.notes, Workers: lc.workers, CPUSlots: lc.cpuSlots, Think: lc.think}, sessions)
	if err != nil {
		return "", "", fmt.Errorf("load %d sessions on %s: %w", sessions, name, err)
	}
	if err := ceiling(); err != nil {
		return "", "", err
	}
	na := "n/a"
	rate := func(v float64, ok bool) string {
		if !ok {
			return na
		}
		return fmt.Sprintf("%.0f", v)
	}
	ratio := func(v float64, ok bool) string {
		if !ok {
			return na
		}
		return fmt.Sprintf("%.2f", v)
	}
	rows, haveRows := r.RowsPerNote()
	appends, haveAppends := r.AppendsPerNote()
	commits, haveCommits := r.CommitsPerSec()
	rowsPerSec, _ := r.RowsPerSec()
	cells := []string{
		name, strconv.Itoa(sessions), strconv.Itoa(r.Notifications), ms(r.Wake.P50), ms(r.Wake.P99), rate(r.PerSecond, true),
		ratio(appends, haveAppends), ratio(rows, haveRows), rate(commits, haveCommits), na, na, na, na, na, na, na,
		fmt.Sprintf("%.0f%%", 100*r.CPU.Seconds()/r.Elapsed.Seconds()), loadAvg(), fmt.Sprintf("%.1fs", time.Since(start).Seconds()),
	}
	if len(readings) == 2 {
		a, b := readings[0], readings[1]
		commitsPerSec, rowsCeil := (a.CommitsPerSec+b.CommitsPerSec)/2, (a.RowsPerSec+b.RowsPerSec)/2
		cells[9], cells[10] = rate(commitsPerSec, true), rate(rowsCeil, true)
		cells[11] = ratio(r.PerSecond/commitsPerSec, commitsPerSec > 0)
		cells[12] = ratio(rowsPerSec/rowsCeil, haveRows && rowsCeil > 0)
		spread := func(x, y float64) float64 { return max(x, y) / max(min(x, y), 1e-9) }
		cells[13] = fmt.Sprintf("x%.1f/x%.1f", spread(a.CommitsPerSec, b.CommitsPerSec), spread(a.RowsPerSec, b.RowsPerSec))
		cells[14] = ms((a.CommitP99 + b.CommitP99) / 2)
		cells[15] = ms((a.CommitP99ByTime + b.CommitP99ByTime) / 2)
	}
	return loadRow(cells), tableRows(r.RowsPerNoteByTable()), nil
}

// tableRows formats rows per notification by table, the most first:
// "runs 1.51  agents 1.16 ...".
func tableRows(by map[string]float64) string {
	names := slices.SortedFunc(maps.Keys(by), func(a, b string) int {
		if c := cmp.Compare(by[b], by[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, by[n])
	}
	return strings.Join(parts, "  ")
}

// loadAvg is the machine's one-minute load average (/proc/loadavg), or
// "?" where it cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// idleFigures runs the idle figures on a fresh store.
func idleFigures(ctx context.Context, e *env, open func() (*benchStore, error), name string, lc loadConfig) error {
	what := "hold/resume inputs (one committed event each)"
	if lc.idleInput == bench.IdleStatus {
		what = "SessionStatus reads"
	}
	fmt.Fprintf(e.stdout, "\nidle: %d sessions on %s, then %d %s to each\n", lc.idle, name, lc.idleInputs, what)
	bs, err := open()
	if err != nil {
		fmt.Fprintf(e.stdout, "  skipped: %v\n", err)
		return nil
	}
	defer bs.close()
	r, err := bench.Idle(ctx, bench.Config{Store: bs.st, DataDir: lc.dir, IdleInput: lc.idleInput}, lc.idle, lc.idleInputs)
	if err != nil {
		return fmt.Errorf("idle %d sessions on %s: %w", lc.idle, name, err)
	}
	mb := func(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
	perSession := func(m bench.Mem) string {
		return fmt.Sprintf("%.1f KB", (float64(m.HeapInuse)-float64(r.Baseline.HeapInuse))/float64(max(r.Sessions, 1))/1024)
	}
	fmt.Fprintf(e.stdout, "  %-32s %12s  %14s  %10s  %10s\n", "", "Go heap", "heap/session", "RSS", "goroutines")
	for _, row := range []struct {
		label string
		m     bench.Mem
	}{
		{"before any session (GC)", r.Baseline},
		{"after creating them", r.Created},
		{"after creating them (GC)", r.CreatedGC},
		{fmt.Sprintf("after %d inputs each", r.Inputs), r.AfterInputs},
		{fmt.Sprintf("after %d inputs each (GC)", r.Inputs), r.AfterInputsGC},
		{"after both reopens (GC)", r.Reopened},
	} {
		fmt.Fprintf(e.stdout, "  %-32s %12s  %14s  %10s  %10d\n", row.label, mb(row.m.HeapInuse), perSession(row.m), mb(row.m.RSS), row.m.Goroutines)
	}
	inputs := float64(r.Sessions) * float64(r.Inputs)
	fmt.Fprintf(e.stdout, "  %-42s %s (%.0f sessions/s)\n", fmt.Sprintf("create %d sessions (one model round each)", r.Sessions), r.Create.Round(time.Millisecond), float64(r.Sessions)/r.Create.Seconds())
	if r.Inputs > 0 {
		fmt.Fprintf(e.stdout, "  %-42s %s (%.0f/s)\n", fmt.Sprintf("%.0f inputs", inputs), r.InputsTook.Round(time.Millisecond), inputs/r.InputsTook.Seconds())
	}
	fmt.Fprintf(e.stdout, "  %-42s %s\n", fmt.Sprintf("Open of %d sessions after a crash", r.Sessions), r.OpenAfterCrash.Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "  %-42s %s\n", "Open of them after a clean stop", r.Open.Round(time.Millisecond))
	return nil
}

// clusterStores creates a scratch database on the server at dsn and opens
// n stores on it (n nodes' connections); close closes them and drops it.
func clusterStores(ctx context.Context, dsn string, n int) (stores []store.Store, scratch string, close func(), err error) {
	first, scratch, drop, err := scratchPostgres(ctx, dsn)
	if err != nil {
		return nil, "", nil, err
	}
	stores = []store.Store{first}
	close = func() {
		for _, st := range stores {
			st.Close()
		}
		drop()
	}
	for len(stores) < n {
		st, err := postgres.Open(ctx, scratch, nil)
		if err != nil {
			close()
			return nil, "", nil, fmt.Errorf("open a second store on %s: %w", scratch, err)
		}
		stores = append(stores, st)
	}
	return stores, scratch, close, nil
}

// benchCluster prints the cluster table: each session count on 1 node and
// on nodes nodes, side by side, each cell on a fresh database.
func benchCluster(ctx context.Context, e *env, pg, dir string, nodes int, counts []int, notes, workers int) error {
	if workers <= 0 {
		workers = bench.LoadWorkers
	}
	fmt.Fprintf(e.stdout, "vigil bench --nodes %d: model answers at once; figures are vigil's own cost\n", nodes)
	fmt.Fprintf(e.stdout, "nodes are runtimes of this process, each with its own connections to one PostgreSQL database and serving the calls the others forward to it;\n")
	fmt.Fprintf(e.stdout, "%d notifications per cell spread over its sessions (at least %d per session), %d background workers per session, the sessions created on the nodes in turn;\n",
		notes, bench.LoadShare(0, 1, workers), workers)
	fmt.Fprintf(e.stdout, "wake = worker's final answer -> main's next model request carrying its notification; commits/s = the nodes' store transactions\n\n")
	sides := []int{1, nodes}
	head := fmt.Sprintf("%-8s  %7s", "sessions", "notifs")
	for _, n := range sides {
		label := fmt.Sprintf("%d node", n)
		if n > 1 {
			label += "s"
		}
		head += fmt.Sprintf("  |  %-8s %8s  %9s  %9s  %9s", label, "notif/s", "wake p50", "wake p99", "commits/s")
	}
	fmt.Fprintln(e.stdout, head+fmt.Sprintf("  |  %d/1 notif/s", nodes))
	for _, sessions := range counts {
		var rates []float64
		row := ""
		total := 0
		for _, n := range sides {
			stores, _, closeStores, err := clusterStores(ctx, pg, n)
			if err != nil {
				return fmt.Errorf("cluster of %d: %w", n, err)
			}
			r, err := bench.LoadCluster(ctx, bench.ClusterConfig{Stores: stores, DataDir: dir, N: notes, Workers: workers}, sessions)
			closeStores()
			if err != nil {
				return fmt.Errorf("%d sessions on %d nodes: %w", sessions, n, err)
			}
			commits := "n/a"
			if c, ok := r.CommitsPerSec(); ok {
				commits = fmt.Sprintf("%.0f", c)
			}
			total = r.Notifications
			rates = append(rates, r.PerSecond)
			row += fmt.Sprintf("  |  %-8s %8.0f  %9s  %9s  %9s", "", r.PerSecond, ms(r.Wake.P50), ms(r.Wake.P99), commits)
		}
		fmt.Fprintln(e.stdout, fmt.Sprintf("%-8d  %7d", sessions, total)+row+fmt.Sprintf("  |  x%.2f", rates[1]/max(rates[0], 1e-9)))
	}
	return nil
}

// benchIdleCluster prints the idle cost: the transactions/s the database
// commits with sessions idle sessions open over nodes nodes.
func benchIdleCluster(ctx context.Context, e *env, pg, dir string, nodes, sessions int, settle, window time.Duration) error {
	stores, scratch, closeStores, err := clusterStores(ctx, pg, nodes)
	if err != nil {
		return err
	}
	defer closeStores()
	fmt.Fprintf(e.stdout, "vigil bench --idle-cluster %d: %d idle sessions over %d nodes (runtimes of this process) on one PostgreSQL database\n", sessions, sessions, nodes)
	r, err := bench.IdleCluster(ctx, bench.ClusterConfig{Stores: stores, DataDir: dir}, scratch, sessions, settle, window)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "  sessions per node at the window's start: %v (after %s to settle)\n", r.PerNode, settle)
	fmt.Fprintf(e.stdout, "  transactions committed in %s with nothing to do: %d (%.1f/s; %.3f/s per session), rolled back: %d\n",
		r.Window, r.Commits, r.PerSecond(), r.PerSecond()/float64(max(sessions, 1)), r.Rollbacks)
	return nil
}
