// Package bench holds vigil's performance workloads. They run on the real
// runtime with a model provider that answers at once, so what they measure
// is vigil itself. Go benchmarks (bench_test.go) and the `vigil bench`
// command both run them; figures are reported as percentiles and rates,
// never asserted.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
)

// Stats summarises a series of durations or a rate.
type Stats struct {
	N         int
	P50       time.Duration
	P90       time.Duration
	P99       time.Duration
	Max       time.Duration
	PerSecond float64
	Elapsed   time.Duration
}

// Summarize computes percentiles of samples.
func Summarize(samples []time.Duration) Stats {
	s := Stats{N: len(samples)}
	if len(samples) == 0 {
		return s
	}
	xs := slices.Clone(samples)
	slices.Sort(xs)
	at := func(p float64) time.Duration {
		i := int(p*float64(len(xs))+0.5) - 1
		return xs[min(max(i, 0), len(xs)-1)]
	}
	s.P50, s.P90, s.P99, s.Max = at(0.50), at(0.90), at(0.99), xs[len(xs)-1]
	return s
}

// String implements fmt.Stringer.
func (s Stats) String() string {
	if s.PerSecond > 0 {
		return fmt.Sprintf("n=%d %.0f/s in %s", s.N, s.PerSecond, s.Elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s", s.N, s.P50, s.P90, s.P99, s.Max)
}

// Config is a workload's setup.
type Config struct {
	// Store is the store to run on (the caller closes it).
	Store store.Store
	// DataDir holds task output files.
	DataDir string
	// N is the number of samples (latency) or notifications (throughput,
	// and Load's budget for a cell).
	N int
	// Workers is the number of background subagents per session in Load;
	// zero means LoadWorkers.
	Workers int
	// IdleInput is the input Idle sends its sessions: IdleHold (the
	// default) or IdleStatus.
	IdleInput string
	// CPUSlots is the runtime's vigil.Options.CPUSlots: N steps at a
	// time, the others served by priority; 0 no limit.
	CPUSlots int
	// Think is how long Load's model takes, on average, to answer a
	// worker (a subagent's model call), spread evenly over Think/2 to
	// 3*Think/2: zero answers at once, which keeps the node saturated; a
	// think time sets the offered load below that, as real models do.
	Think time.Duration
}

// fastModel answers every call through a function of the request: at
// once, or after think's time for the request.
type fastModel struct {
	answer func(req *provider.Request) chat.Response
	// think, when set, is how long to wait before answering req.
	think func(req *provider.Request) time.Duration
}

// Name implements provider.Provider.
func (m *fastModel) Name() string { return "bench" }

// Stream implements provider.Provider.
func (m *fastModel) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	return func(yield func(provider.Event, error) bool) {
		if m.think != nil {
			if d := m.think(req); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					yield(provider.Event{}, ctx.Err())
					return
				case <-t.C:
				}
			}
		}
		resp := m.answer(req)
		yield(provider.Event{Type: provider.EventDone, Response: &resp}, nil)
	}
}

func toolUse(id, name string, input any) chat.Block {
	b, _ := json.Marshal(input)
	return chat.Block{Type: chat.BlockToolUse, ID: id, Name: name, Input: b}
}

func lastText(req *provider.Request) string {
	if len(req.Messages) == 0 {
		return ""
	}
	var b strings.Builder
	for _, c := range req.Messages[len(req.Messages)-1].Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func open(ctx context.Context, cfg Config, m provider.Provider) (*vigil.Runtime, error) {
	return vigil.Open(ctx, vigil.Options{
		Store: cfg.Store, Providers: map[string]provider.Provider{"bench": m}, DefaultProvider: "bench",
		DataDir: cfg.DataDir, Node: "bench", CPUSlots: cfg.CPUSlots,
	})
}

// runSession runs one bypass-mode session with prompt "go" on a runtime
// whose only provider is m, until it is quiescent.
func runSession(ctx context.Context, cfg Config, m provider.Provider, cwd string) error {
	rt, err := open(ctx, cfg, m)
	if err != nil {
		return err
	}
	defer rt.Close()
	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "go", Cwd: cwd, Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
	if err != nil {
		return err
	}
	return rt.WaitQuiescent(ctx, sess.ID)
}

// WakeLatencyBash measures, N times, the time from a background shell
// task's completion to its owner's next model request. The command's last
// step writes the time (date +%s%N), as in the Claude Code measurement the
// figure is compared with; the session is idle when the task completes.
func WakeLatencyBash(ctx context.Context, cfg Config) (Stats, error) {
	dir, err := os.MkdirTemp(cfg.DataDir, "wake")
	if err != nil {
		return Stats{}, err
	}
	var mu sync.Mutex
	var samples []time.Duration
	var failure error
	n := 0
	m := &fastModel{answer: func(req *provider.Request) chat.Response {
		now := time.Now()
		if strings.Contains(lastText(req), "<task-notification>") {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("done-%d", n)))
			mu.Lock()
			if err == nil {
				ns, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				if perr == nil {
					samples = append(samples, now.Sub(time.Unix(0, ns)))
				}
			} else if failure == nil {
				failure = err
			}
			mu.Unlock()
			n++
		} else if len(req.Messages) > 1 {
			return chat.Response{Content: []chat.Block{chat.Text("waiting")}, StopReason: chat.StopEndTurn}
		}
		if n >= cfg.N {
			return chat.Response{Content: []chat.Block{chat.Text("done")}, StopReason: chat.StopEndTurn}
		}
		cmd := fmt.Sprintf("sleep 0.02; date +%%s%%N > %s", filepath.Join(dir, fmt.Sprintf("done-%d", n)))
		return chat.Response{Content: []chat.Block{toolUse(fmt.Sprintf("b%d", n), "Bash", map[string]any{"command": cmd, "run_in_background": true})}, StopReason: chat.StopToolUse}
	}}
	if err := runSession(ctx, cfg, m, dir); err != nil {
		return Stats{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if failure != nil {
		return Stats{}, failure
	}
	return Summarize(samples), nil
}

// WakeLatencyAgent measures, N times, the time from a background
// subagent's final answer (when the provider returns it) to its owner's
// next model request, with the owner idle. The subagent is resumed by a
// message for every sample.
func WakeLatencyAgent(ctx context.Context, cfg Config) (Stats, error) {
	var mu sync.Mutex
	var samples []time.Duration
	var finished time.Time
	n := 0
	m := &fastModel{answer: func(req *provider.Request) chat.Response {
		mu.Lock()
		defer mu.Unlock()
		if req.AgentName != "main" {
			// Let the owner end its turn first: the wake is from idle.
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			finished = time.Now()
			return chat.Response{Content: []chat.Block{chat.Text("result")}, StopReason: chat.StopEndTurn}
		}
		if strings.Contains(lastText(req), "<task-notification>") {
			samples = append(samples, time.Since(finished))
			n++
		} else if len(req.Messages) > 1 {
			return chat.Response{Content: []chat.Block{chat.Text("waiting")}, StopReason: chat.StopEndTurn}
		}
		switch {
		case n >= cfg.N:
			return chat.Response{Content: []chat.Block{chat.Text("done")}, StopReason: chat.StopEndTurn}
		case n == 0:
			return chat.Response{Content: []chat.Block{toolUse("a0", "Agent", map[string]any{
				"prompt": "work", "name": "worker", "run_in_background": true,
			})}, StopReason: chat.StopToolUse}
		}
		return chat.Response{Content: []chat.Block{toolUse(fmt.Sprintf("m%d", n), "SendMessage", map[string]any{
			"to": "worker", "message": "again",
		})}, StopReason: chat.StopToolUse}
	}}
	if err := runSession(ctx, cfg, m, ""); err != nil {
		return Stats{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	return Summarize(samples), nil
}

// Notifications measures how many notifications per second the runtime
// writes and delivers in a session of realistic size: the main agent starts
// ten background workers, and answers every notification with a message
// to its worker, which answers at once, until N notifications were
// delivered. Sessions run that workload in parallel sessions.
func Notifications(ctx context.Context, cfg Config, sessions int) (Stats, error) {
	const workers = 10
	per := cfg.N / max(sessions, 1)
	m := &fastModel{answer: func(req *provider.Request) chat.Response {
		if req.AgentName != "main" {
			return chat.Response{Content: []chat.Block{chat.Text("ok")}, StopReason: chat.StopEndTurn}
		}
		last := req.Messages[len(req.Messages)-1]
		if len(req.Messages) == 1 {
			var blocks []chat.Block
			for i := range workers {
				blocks = append(blocks, toolUse(fmt.Sprintf("s%d", i), "Agent", map[string]any{"prompt": fmt.Sprintf("work %d", i), "name": fmt.Sprintf("w%d", i), "run_in_background": true}))
			}
			return chat.Response{Content: blocks, StopReason: chat.StopToolUse}
		}
		// Count the notifications main has read so far.
		seen := 0
		for _, msg := range req.Messages {
			for _, b := range msg.Content {
				if strings.HasPrefix(b.Text, "<task-notification>") {
					seen++
				}
			}
		}
		var blocks []chat.Block
		for i, b := range last.Content {
			if !strings.HasPrefix(b.Text, "<task-notification>") || seen+len(blocks) >= per {
				continue
			}
			_, rest, _ := strings.Cut(b.Text, "<agent>")
			name, _, _ := strings.Cut(rest, " ")
			blocks = append(blocks, toolUse(fmt.Sprintf("m%d-%d", len(req.Messages), i), "SendMessage", map[string]any{"to": name, "message": "again"}))
		}
		if len(blocks) == 0 {
			return chat.Response{Content: []chat.Block{chat.Text("waiting")}, StopReason: chat.StopEndTurn}
		}
		return chat.Response{Content: blocks, StopReason: chat.StopToolUse}
	}}
	rt, err := open(ctx, cfg, m)
	if err != nil {
		return Stats{}, err
	}
	defer rt.Close()
	start := time.Now()
	ids := make([]vigil.SessionID, sessions)
	for i := range ids {
		sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "go", Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
		if err != nil {
			return Stats{}, err
		}
		ids[i] = sess.ID
	}
	for _, id := range ids {
		if err := rt.WaitQuiescent(ctx, id); err != nil {
			return Stats{}, err
		}
	}
	elapsed := time.Since(start)
	delivered := 0
	for _, id := range ids {
		d, err := rt.SessionGet(ctx, id, &vigil.SessionGetParams{Notifications: true})
		if err != nil {
			return Stats{}, err
		}
		for _, n := range d.Notifications {
			if n.DeliveredRun > 0 {
				delivered++
			}
		}
	}
	if delivered < cfg.N/max(sessions, 1)*sessions {
		return Stats{}, fmt.Errorf("%d of %d notifications delivered", delivered, cfg.N)
	}
	return Stats{N: delivered, Elapsed: elapsed, PerSecond: float64(delivered) / elapsed.Seconds()}, nil
}
