package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/sqlite"
)

// benchStore opens a fresh store of kind "memory" or "sqlite" (FULL) in
// dir, closed at the end of tb.
func benchStore(tb testing.TB, kind, dir string) store.Store {
	tb.Helper()
	var st store.Store = memstore.New()
	if kind == "sqlite" {
		s, err := sqlite.Open(context.Background(), filepath.Join(dir, "bench.db"), nil)
		if err != nil {
			tb.Fatal(err)
		}
		st = s
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkLoad: busy sessions of ten background workers each, every
// notification answered with a message to its worker, 2000 notifications
// per cell; saturated, and 100 sessions whose model thinks 1 s on
// average. Per iteration (one cell): wake p50/p99 over all notifications,
// delivered notifications per second, and the store's rows and commits
// per notification where it counts them.
func BenchmarkLoad(b *testing.B) {
	type cell struct {
		kind     string
		sessions int
		think    time.Duration
	}
	cells := []cell{{"memory", 1, 0}, {"memory", 10, 0}, {"sqlite", 1, 0}, {"sqlite", 10, 0},
		// The node below its capacity, as with real models: the wake's
		// tail is the writer's and the scheduler's, not a queue's.
		{"sqlite", 100, time.Second}}
	for _, c := range cells {
		name := fmt.Sprintf("%s/sessions=%d", c.kind, c.sessions)
		if c.think > 0 {
			name += "/think=" + c.think.String()
		}
		b.Run(name, func(b *testing.B) {
			var last LoadResult
			for b.Loop() {
				dir := b.TempDir()
				r, err := Load(context.Background(), Config{Store: benchStore(b, c.kind, dir), DataDir: dir, N: 2000, Think: c.think}, c.sessions)
				if err != nil {
					b.Fatal(err)
				}
				last = r
			}
			b.ReportMetric(float64(last.Wake.P50.Microseconds())/1000, "wake-p50-ms")
			b.ReportMetric(float64(last.Wake.P99.Microseconds())/1000, "wake-p99-ms")
			b.ReportMetric(last.PerSecond, "notifs/s")
			if rows, ok := last.RowsPerNote(); ok {
				b.ReportMetric(rows, "rows/notif")
			}
			if commits, ok := last.CommitsPerSec(); ok {
				b.ReportMetric(commits, "commits/s")
			}
		})
	}
}

// BenchmarkIdleSessions: 1000 idle sessions on the memory store, then 100
// hold/resume inputs to each; the Go heap each session holds and the
// process's RSS, after GC, and Open of them after a crash and after a
// clean stop.
func BenchmarkIdleSessions(b *testing.B) {
	const sessions = 1000
	var last IdleResult
	for b.Loop() {
		r, err := Idle(context.Background(), Config{Store: benchStore(b, "memory", ""), DataDir: b.TempDir()}, sessions, 100)
		if err != nil {
			b.Fatal(err)
		}
		last = r
	}
	created, after := last.HeapPerSession()
	b.ReportMetric(created, "heap-B/session")
	b.ReportMetric(after, "heap-B/session-after-inputs")
	b.ReportMetric(float64(last.CreatedGC.RSS)/(1<<20), "rss-MB")
	b.ReportMetric(float64(last.AfterInputsGC.RSS)/(1<<20), "rss-MB-after-inputs")
	b.ReportMetric(float64(last.CreatedGC.Goroutines-last.Baseline.Goroutines)/sessions, "goroutines/session")
	b.ReportMetric(float64(last.OpenAfterCrash.Microseconds())/1000, "open-after-crash-ms")
	b.ReportMetric(float64(last.Open.Microseconds())/1000, "open-ms")
}

// Load and Idle must run and deliver everything they count.
func TestLoadDelivers(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			r, err := Load(context.Background(), Config{Store: benchStore(t, kind, dir), DataDir: dir, N: 45, Workers: 3}, 3)
			if err != nil {
				t.Fatal(err)
			}
			if r.PerSession != 15 || r.Notifications != 45 || r.Wake.N != 45 {
				t.Fatalf("ran %d per session, %d delivered, %d wake samples; want 15, 45, 45", r.PerSession, r.Notifications, r.Wake.N)
			}
			t.Logf("%s: %d notifications in %s, wake %s", kind, r.Notifications, r.Elapsed, r.Wake)
		})
	}
	// The floor: many sessions on a small budget still each do real work.
	if got := LoadShare(100, 1000, 10); got != 20 {
		t.Fatalf("share of 100 over 1000 sessions of 10 workers = %d, want 20", got)
	}
}

func TestIdleRuns(t *testing.T) {
	for _, tc := range []struct{ kind, input string }{{"memory", IdleHold}, {"memory", IdleStatus}, {"sqlite", IdleHold}} {
		t.Run(tc.kind+"/"+tc.input, func(t *testing.T) {
			dir := t.TempDir()
			r, err := Idle(context.Background(), Config{Store: benchStore(t, tc.kind, dir), DataDir: dir, IdleInput: tc.input}, 5, 4)
			if err != nil {
				t.Fatal(err)
			}
			if r.Sessions != 5 || r.Inputs != 4 || r.Open <= 0 || r.CreatedGC.HeapInuse == 0 || r.CreatedGC.Goroutines == 0 {
				t.Fatalf("result %+v", r)
			}
		})
	}
	if _, err := Idle(context.Background(), Config{Store: memstore.New(), DataDir: t.TempDir(), IdleInput: "nap"}, 1, 1); err == nil {
		t.Fatal("an unknown input kind ran")
	}
}

// With a think time the workers' model calls wait before answering, and
// everything still arrives; a cancelled call ends at once with its reason.
func TestLoadThinks(t *testing.T) {
	dir := t.TempDir()
	r, err := Load(context.Background(), Config{Store: memstore.New(), DataDir: dir, N: 12, Workers: 2, Think: time.Millisecond}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Notifications != 12 || r.Wake.N != 12 {
		t.Fatalf("%d delivered, %d wake samples; want 12, 12", r.Notifications, r.Wake.N)
	}
	m := &fastModel{
		answer: func(*provider.Request) chat.Response { t.Fatal("a cancelled call answered"); return chat.Response{} },
		think:  func(*provider.Request) time.Duration { return time.Hour },
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range m.Stream(ctx, &provider.Request{AgentName: "w1"}) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled call yielded %v, want context.Canceled", err)
		}
	}
}
