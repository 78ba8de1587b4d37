package vigil

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

// The measurements of one node running many sessions (the issue of 10,000
// idle sessions): what an idle session costs in heap, stack and
// goroutines, how long Open takes over a store that holds many open
// sessions, and how long Close takes to stop them and release their
// leases. The benchmarks run small counts so that a regression shows in
// `go test -bench`; TestMeasureScale, run by hand, measures the full
// figures in a process of its own:
//
//	VIGIL_SCALE=idle VIGIL_SCALE_STORE=sqlite VIGIL_SCALE_SESSIONS=10000 VIGIL_SCALE_INPUTS=1000 \
//	    go test -run TestMeasureScale -count=1 -v -timeout 2h .
//	VIGIL_SCALE=open VIGIL_SCALE_STORE=sqlite VIGIL_SCALE_SESSIONS=10000 \
//	    go test -run TestMeasureScale -count=1 -v -timeout 2h .
//
// VIGIL_SCALE_OPENS sets how many Opens are measured (3), and
// VIGIL_SCALE_PROFILE=FILE writes the CPU profile of each to FILE.N.

const idleScenario = "name: idle\nagents:\n  main:\n    turns:\n      - say: \"done\"\n"

// scaleOptions are the options of the runtimes these measurements open:
// quiet, on node "scale", on the idle scenario.
func scaleOptions(tb testing.TB, st store.Store, dataDir string) Options {
	tb.Helper()
	sc, err := script.Parse([]byte(idleScenario))
	if err != nil {
		tb.Fatal(err)
	}
	return Options{
		Store: st, Providers: map[string]provider.Provider{"script": script.New(sc, nil)}, DefaultProvider: "script",
		DataDir: dataDir, Node: "scale", Sandbox: Sandbox{Mode: "full-access"},
	}
}

// createIdle creates n sessions on rt, each having answered one prompt,
// and waits until every one is quiescent. It returns their ids.
func createIdle(tb testing.TB, rt *Runtime, n int) []SessionID {
	tb.Helper()
	ids := make([]SessionID, n)
	parallel(tb, n, 32, func(i int) error {
		sess, err := rt.CreateSession(context.Background(), &SessionParams{Prompt: "hello"})
		if err != nil {
			return err
		}
		ids[i] = sess.ID
		return rt.WaitQuiescent(context.Background(), sess.ID)
	})
	return ids
}

// parallel runs f(0..n-1) on workers goroutines and fails tb on the first
// error.
func parallel(tb testing.TB, n, workers int, f func(i int) error) {
	tb.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("job %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
}

// memFigures is a reading of the process's memory after a full GC.
type memFigures struct {
	heap, stack, rss uint64
	goroutines       int
}

func readMem() memFigures {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memFigures{heap: ms.HeapAlloc, stack: ms.StackInuse, rss: rssBytes(), goroutines: runtime.NumGoroutine()}
}

func (m memFigures) String() string {
	return fmt.Sprintf("heap %.1f MiB, stacks %.1f MiB, RSS %.1f MB, %d goroutines",
		float64(m.heap)/(1<<20), float64(m.stack)/(1<<20), float64(m.rss)/1e6, m.goroutines)
}

// rssBytes is the process's resident set (VmRSS), 0 where /proc is not.
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// openScaleStore opens a store of the kind VIGIL_SCALE_STORE names
// (memory, the default, sqlite in dir, or postgres: a fresh database of
// internal/pgtest).
func openScaleStore(tb testing.TB, kind, dir string) store.Store {
	tb.Helper()
	switch kind {
	case "", "memory":
		return memstore.New()
	case "sqlite":
		st, err := sqlite.Open(context.Background(), filepath.Join(dir, "vigil.db"), nil)
		if err != nil {
			tb.Fatal(err)
		}
		return st
	case "postgres":
		// VIGIL_SCALE_PGCONNS sets the pool's size (pgxpool's default,
		// max(4, NumCPU), when unset).
		st, err := postgres.Open(context.Background(), pgtest.Fresh(tb), &postgres.Options{MaxConns: int32(envInt("VIGIL_SCALE_PGCONNS", 0))})
		if err != nil {
			tb.Fatal(err)
		}
		return st
	}
	tb.Fatalf("unknown store %q (want memory, sqlite or postgres)", kind)
	return nil
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestMeasureScale measures what VIGIL_SCALE names (idle or open) at the
// scale the other VIGIL_SCALE_* variables give; it is skipped otherwise.
// It prints figures and asserts nothing about them.
func TestMeasureScale(t *testing.T) {
	what := os.Getenv("VIGIL_SCALE")
	if what == "" {
		t.Skip("a measurement run by hand: set VIGIL_SCALE=idle or open")
	}
	kind := os.Getenv("VIGIL_SCALE_STORE")
	n := envInt("VIGIL_SCALE_SESSIONS", 10000)
	dir := t.TempDir()
	st := openScaleStore(t, kind, dir)
	defer st.Close()
	switch what {
	case "idle":
		measureIdle(t, st, dir, n, envInt("VIGIL_SCALE_INPUTS", 1000), envInt("VIGIL_SCALE_PER", 4))
	case "open":
		measureOpen(t, st, dir, n)
	default:
		t.Fatalf("VIGIL_SCALE=%q: want idle or open", what)
	}
}

func measureIdle(t *testing.T, st store.Store, dir string, n, inputs, per int) {
	ctx := context.Background()
	base := readMem()
	t.Logf("before the runtime: %s", base)
	rt, err := Open(ctx, scaleOptions(t, st, dir))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			rt.Close()
		}
	}()
	open := readMem()
	t.Logf("runtime open, no session: %s", open)
	start := time.Now()
	ids := createIdle(t, rt, n)
	t.Logf("created %d sessions in %s", n, time.Since(start).Round(time.Millisecond))
	idle := readMem()
	t.Logf("%d idle sessions: %s", n, idle)
	t.Logf("per session: heap %d B, stack %d B, RSS %d B, goroutines %.2f", perSession(idle.heap, open.heap, n), perSession(idle.stack, open.stack, n),
		perSession(idle.rss, open.rss, n), float64(idle.goroutines-open.goroutines)/float64(n))
	if inputs > 0 {
		// per callers at once on each session: a session busy with one
		// queues the others.
		start = time.Now()
		parallel(t, n*inputs, 64, func(j int) error {
			_, err := rt.SessionStatus(ctx, ids[(j/per)%n])
			return err
		})
		t.Logf("%d SessionStatus per session (%d at once on a session) in %s", inputs, per, time.Since(start).Round(time.Millisecond))
		after := readMem()
		t.Logf("after the inputs: %s", after)
		t.Logf("per session: heap %d B, stack %d B, RSS %d B, goroutines %.2f", perSession(after.heap, open.heap, n), perSession(after.stack, open.stack, n),
			perSession(after.rss, open.rss, n), float64(after.goroutines-open.goroutines)/float64(n))
	}
	rt.Close()
	closed, rt, ids = true, nil, nil
	gone := readMem()
	t.Logf("runtime closed (the store alone): %s", gone)
}

func perSession(after, before uint64, n int) int64 {
	return (int64(after) - int64(before)) / int64(n)
}

func measureOpen(t *testing.T, st store.Store, dir string, n int) {
	ctx := context.Background()
	start := time.Now()
	rt, err := Open(ctx, scaleOptions(t, st, dir))
	if err != nil {
		t.Fatal(err)
	}
	createIdle(t, rt, n)
	rt.Close()
	t.Logf("created %d sessions in %s", n, time.Since(start).Round(time.Millisecond))
	commits := func() int64 {
		if sr, ok := st.(store.StatsReader); ok {
			return sr.Stats().Commits
		}
		return 0
	}
	for round := range envInt("VIGIL_SCALE_OPENS", 3) {
		c0 := commits()
		if prof := os.Getenv("VIGIL_SCALE_PROFILE"); prof != "" {
			// The CPU profile of the Opens alone.
			f, err := os.Create(fmt.Sprintf("%s.%d", prof, round+1))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				t.Fatal(err)
			}
		}
		start = time.Now()
		cpu0 := cpuTime()
		rt, err := Open(ctx, scaleOptions(t, st, dir))
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		cpu := cpuTime() - cpu0
		pprof.StopCPUProfile()
		c1 := commits()
		rt.mu.Lock()
		got := len(rt.actors)
		rt.mu.Unlock()
		t.Logf("Open %d: took over %d sessions in %s (%.1f ms per 1000), %s of CPU, %d commits", round+1, got, took.Round(time.Millisecond), float64(took.Microseconds())/1000/float64(n)*1000, cpu.Round(time.Millisecond), c1-c0)
		// Close stops the actors and releases every lease.
		start = time.Now()
		rt.Close()
		t.Logf("Close %d: stopped %d sessions and released their leases in %s, %d commits", round+1, got, time.Since(start).Round(time.Millisecond), commits()-c1)
	}
}

// benchSessions is how many sessions the benchmarks run: enough that a
// cost per session shows, few enough for -bench.
const benchSessions = 1000

// BenchmarkIdleSessions measures what an idle session costs: heap (the
// store's share included: memstore keeps the log in memory), goroutine
// stacks and goroutines per session once 1,000 sessions are idle, and, as
// the time per op, a read (SessionStatus) of an idle session, which wakes
// its actor. A queue that holds memory per session, or a goroutine per
// idle session, shows here.
func BenchmarkIdleSessions(b *testing.B) {
	for _, kind := range []string{"memory", "sqlite"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			st := openScaleStore(b, kind, dir)
			defer st.Close()
			ctx := context.Background()
			rt, err := Open(ctx, scaleOptions(b, st, dir))
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			before := readMem()
			ids := createIdle(b, rt, benchSessions)
			idle := readMem()
			i := 0
			for b.Loop() {
				if _, err := rt.SessionStatus(ctx, ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(perSession(idle.heap, before.heap, benchSessions)), "heap-B/session")
			b.ReportMetric(float64(perSession(idle.stack, before.stack, benchSessions)), "stack-B/session")
			b.ReportMetric(float64(idle.goroutines-before.goroutines)/benchSessions, "goroutines/session")
		})
	}
}

// BenchmarkOpenSessions measures Open over a store that holds 1,000 open
// sessions: the time to take them all over, in ms per 1,000 sessions,
// and the store's commits per session (SQLite: its group commits).
func BenchmarkOpenSessions(b *testing.B) {
	for _, kind := range []string{"memory", "sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			st := openScaleStore(b, kind, dir)
			defer st.Close()
			ctx := context.Background()
			rt, err := Open(ctx, scaleOptions(b, st, dir))
			if err != nil {
				b.Fatal(err)
			}
			createIdle(b, rt, benchSessions)
			rt.Close()
			var took time.Duration
			var commits int64
			for b.Loop() {
				var c0 int64
				if sr, ok := st.(store.StatsReader); ok {
					c0 = sr.Stats().Commits
				}
				start := time.Now()
				rt, err := Open(ctx, scaleOptions(b, st, dir))
				if err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				if sr, ok := st.(store.StatsReader); ok {
					commits += sr.Stats().Commits - c0
				}
				b.StopTimer()
				rt.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N)*1000/benchSessions, "ms/1000sessions")
			b.ReportMetric(float64(commits)/float64(b.N)/benchSessions, "commits/session")
		})
	}
}

// countRenew counts the LeaseRenew calls a store gets.
type countRenew struct {
	store.Store
	calls atomic.Int64
}

func (s *countRenew) LeaseRenew(ctx context.Context, p *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	s.calls.Add(1)
	return s.Store.LeaseRenew(ctx, p)
}

// BenchmarkRenewSessions measures a renewal round of 1,000 sessions: the
// time per round and the LeaseRenew calls per round (one; it was one per
// session).
func BenchmarkRenewSessions(b *testing.B) {
	for _, kind := range []string{"memory", "sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			inner := openScaleStore(b, kind, dir)
			defer inner.Close()
			st := &countRenew{Store: inner}
			ctx := context.Background()
			rt, err := Open(ctx, scaleOptions(b, st, dir))
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			createIdle(b, rt, benchSessions)
			c0 := st.calls.Load()
			rounds := 0
			for b.Loop() {
				rt.renewAll()
				rounds++
			}
			b.ReportMetric(float64(st.calls.Load()-c0)/float64(rounds), "LeaseRenew-calls/round")
		})
	}
}
