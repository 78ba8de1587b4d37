package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
)

// Load's defaults.
const (
	// LoadWorkers is the number of background subagents each session's
	// main agent keeps busy when Config.Workers is zero.
	LoadWorkers = 10
	// LoadFloorPerWorker bounds each session's share of the notification
	// budget from below: at least this many notifications per worker, so
	// that with many sessions each still does real work after its workers'
	// first runs.
	LoadFloorPerWorker = 2
	// loadParallel is how many sessions are created at once.
	loadParallel = 64
)

// LoadResult is what one Load cell ran and measured.
type LoadResult struct {
	// Sessions, Workers and PerSession are what ran: Sessions sessions of
	// Workers background subagents each, every session producing
	// PerSession notifications.
	Sessions, Workers, PerSession int
	// Notifications is how many were delivered (checked: all of them).
	Notifications int
	// Elapsed runs from the first session's creation to the last one's
	// quiescence.
	Elapsed time.Duration
	// Wake summarises the wake samples: for each notification, from its
	// worker's final answer (when the provider returned it) to the main
	// agent's next model request that carries it.
	Wake Stats
	// PerSecond is Notifications / Elapsed.
	PerSecond float64
	// CPU is the processor time (user and system) the whole process used
	// during Elapsed: with Elapsed, how busy vigil kept the machine (the
	// load generator, the fake model and the store's client are in it).
	CPU time.Duration
	// Store is what the store wrote during the cell (the difference of two
	// store.StatsReader readings); valid when HaveStats.
	Store     store.Stats
	HaveStats bool
}

// RowsPerNote is how many rows the store inserted or updated per
// delivered notification; false when the store does not count.
func (r LoadResult) RowsPerNote() (float64, bool) {
	if !r.HaveStats || r.Notifications == 0 {
		return 0, false
	}
	return float64(r.Store.Rows) / float64(r.Notifications), true
}

// RowsPerNoteByTable is RowsPerNote by table (steps, sessions, agents,
// runs, ...); nil when the store does not count.
func (r LoadResult) RowsPerNoteByTable() map[string]float64 {
	if !r.HaveStats || r.Notifications == 0 || len(r.Store.Tables) == 0 {
		return nil
	}
	out := make(map[string]float64, len(r.Store.Tables))
	for t, n := range r.Store.Tables {
		out[t] = float64(n) / float64(r.Notifications)
	}
	return out
}

// AppendsPerNote is how many appends (committed steps) the store took per
// delivered notification; false when the store does not count.
func (r LoadResult) AppendsPerNote() (float64, bool) {
	if !r.HaveStats || r.Notifications == 0 {
		return 0, false
	}
	return float64(r.Store.Appends) / float64(r.Notifications), true
}

// CommitsPerSec is how many transactions the store committed per second
// during the cell; false when the store does not count.
func (r LoadResult) CommitsPerSec() (float64, bool) {
	if !r.HaveStats || r.Elapsed <= 0 {
		return 0, false
	}
	return float64(r.Store.Commits) / r.Elapsed.Seconds(), true
}

// RowsPerSec is the store's rows per second during the cell (rows per
// notification times notifications per second); false when the store
// does not count.
func (r LoadResult) RowsPerSec() (float64, bool) {
	if !r.HaveStats || r.Elapsed <= 0 {
		return 0, false
	}
	return float64(r.Store.Rows) / r.Elapsed.Seconds(), true
}

// storeStats reads st's write counters, if it keeps them.
func storeStats(st store.Store) (store.Stats, bool) {
	if sr, ok := st.(store.StatsReader); ok {
		return sr.Stats(), true
	}
	return store.Stats{}, false
}

// LoadShare is each session's share of a budget of total notifications
// over sessions sessions of workers workers: the budget spread evenly, but
// never below LoadFloorPerWorker per worker.
func LoadShare(total, sessions, workers int) int {
	return max(total/max(sessions, 1), LoadFloorPerWorker*workers, 1)
}

// Load runs sessions busy sessions on one runtime. Each session's main
// agent starts Config.Workers background subagents (LoadWorkers when
// zero) and answers every notification it reads with a SendMessage to that
// worker, which answers at once (after Config.Think when set) and so
// notifies again, until the session
// has produced its share of cfg.N notifications (LoadShare). The fake model
// does O(1) work per request: it reads only the request's last message and
// keeps per-session counters.
//
// It measures the wake latency of every notification (see
// LoadResult.Wake), the delivered notifications per second, and, when the
// store implements store.StatsReader, what the store wrote. It fails when
// a notification was not delivered or not seen by its main agent.
func Load(ctx context.Context, cfg Config, sessions int) (LoadResult, error) {
	if sessions <= 0 {
		return LoadResult{}, fmt.Errorf("load: %d sessions", sessions)
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = LoadWorkers
	}
	per := LoadShare(cfg.N, sessions, workers)
	m := newLoadModel(workers, per)
	model := &fastModel{answer: m.answer}
	if cfg.Think > 0 {
		model.think = func(req *provider.Request) time.Duration {
			if req.AgentName == "main" {
				return 0
			}
			// Spread over [Think/2, 3*Think/2), as real models' times
			// are: a fixed time would start every worker's calls in
			// step and turn the load into bursts.
			return cfg.Think/2 + rand.N(cfg.Think)
		}
	}
	rt, err := open(ctx, cfg, model)
	if err != nil {
		return LoadResult{}, fmt.Errorf("load: open: %w", err)
	}
	defer rt.Close()
	return loadOn(ctx, []*vigil.Runtime{rt}, []store.Store{cfg.Store}, m, sessions)
}

// loadOn runs Load's workload on runtimes that share one store (one
// runtime, or the nodes of a cluster, each with its store in stores): the
// sessions are created on the runtimes in turn, and m answers for all.
func loadOn(ctx context.Context, rts []*vigil.Runtime, stores []store.Store, m *loadModel, sessions int) (LoadResult, error) {
	workers, per := m.workers, m.per
	before, haveStats := sumStats(stores)
	cpu0 := processCPU()
	start := time.Now()
	ids := make([]vigil.SessionID, sessions)
	if err := parallel(ctx, sessions, loadParallel, func(i int) error {
		// A bound on model rounds far above the default budget's 5,000: a
		// session of thousands of notifications needs more rounds.
		sess, err := rts[i%len(rts)].CreateSession(ctx, &vigil.SessionParams{Prompt: "go", Permissions: vigil.Permissions{Mode: vigil.PermBypass}, Budget: vigil.Budget{Rounds: 1 << 30}})
		if err != nil {
			return fmt.Errorf("create session %d: %w", i, err)
		}
		ids[i] = sess.ID
		return nil
	}); err != nil {
		return LoadResult{}, fmt.Errorf("load: %w", err)
	}
	for i, id := range ids {
		if err := rts[i%len(rts)].WaitQuiescent(ctx, id); err != nil {
			return LoadResult{}, fmt.Errorf("load: session %s: %w", id, err)
		}
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	after, _ := sumStats(stores)

	res := LoadResult{Sessions: sessions, Workers: workers, PerSession: per, Elapsed: elapsed, CPU: cpu, HaveStats: haveStats}
	if haveStats {
		res.Store = after.Since(before)
	}
	var problems []error
	for i, id := range ids {
		d, err := rts[i%len(rts)].SessionGet(ctx, id, &vigil.SessionGetParams{Notifications: true})
		if err != nil {
			return LoadResult{}, fmt.Errorf("load: read session %s: %w", id, err)
		}
		delivered := 0
		for _, n := range d.Notifications {
			if n.DeliveredRun > 0 {
				delivered++
			}
		}
		res.Notifications += delivered
		if delivered != per || len(d.Notifications) != per {
			problems = append(problems, fmt.Errorf("session %s: %d notifications written, %d delivered, want %d", id, len(d.Notifications), delivered, per))
		}
	}
	samples, err := m.result(ids)
	if err != nil {
		problems = append(problems, err)
	}
	res.Wake = Summarize(samples)
	res.PerSecond = float64(res.Notifications) / elapsed.Seconds()
	if len(problems) > 0 {
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Errorf("and %d more", len(problems)-5))
		}
		return res, fmt.Errorf("load: %d sessions of %d notifications: %w", sessions, per, errors.Join(problems...))
	}
	return res, nil
}

// sumStats adds up the write counters of stores; false when one of them
// does not count.
func sumStats(stores []store.Store) (store.Stats, bool) {
	var sum store.Stats
	for _, st := range stores {
		s, ok := storeStats(st)
		if !ok {
			return store.Stats{}, false
		}
		sum = sum.Add(s)
	}
	return sum, true
}

// processCPU is the processor time the process used so far (user and
// system), or 0 where getrusage fails.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallel runs fn(0..n-1) on up to width goroutines and returns the
// first error.
func parallel(ctx context.Context, n, width int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, width) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// loadModel is Load's fake model: O(1) work per request (it reads the last
// message only), with per-session counters.
type loadModel struct {
	workers, per int

	mu       sync.Mutex
	sessions map[string]*loadSession
}

// loadSession is one session's counters.
type loadSession struct {
	mu      sync.Mutex
	started bool
	// seen counts the notifications main read; sent the SendMessages it
	// made; unmatched the notifications without a final answer to match.
	seen, sent, unmatched int
	// finished holds, per worker agent id, when the provider returned its
	// last final answer that main has not read yet.
	finished map[string]time.Time
	wake     []time.Duration
}

func newLoadModel(workers, per int) *loadModel {
	return &loadModel{workers: workers, per: per, sessions: map[string]*loadSession{}}
}

func (m *loadModel) session(id string) *loadSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil {
		s = &loadSession{finished: map[string]time.Time{}}
		m.sessions[id] = s
	}
	return s
}

func (m *loadModel) answer(req *provider.Request) chat.Response {
	now := time.Now()
	s := m.session(req.Session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.AgentName != "main" {
		s.finished[req.Agent] = time.Now()
		return chat.Response{Content: []chat.Block{chat.Text("ok")}, StopReason: chat.StopEndTurn}
	}
	if !s.started {
		s.started = true
		blocks := make([]chat.Block, m.workers)
		for i := range blocks {
			blocks[i] = toolUse(fmt.Sprintf("s%d", i), "Agent", map[string]any{"prompt": fmt.Sprintf("work %d", i), "name": fmt.Sprintf("w%d", i), "run_in_background": true})
		}
		return chat.Response{Content: blocks, StopReason: chat.StopToolUse}
	}
	var blocks []chat.Block
	if len(req.Messages) > 0 {
		for _, b := range req.Messages[len(req.Messages)-1].Content {
			if !strings.HasPrefix(b.Text, "<task-notification>") {
				continue
			}
			name, id := noteAgent(b.Text)
			s.seen++
			if t, ok := s.finished[id]; ok {
				s.wake = append(s.wake, now.Sub(t))
				delete(s.finished, id)
			} else {
				s.unmatched++
			}
			if m.workers+s.sent < m.per && name != "" {
				s.sent++
				blocks = append(blocks, toolUse(fmt.Sprintf("m%d", s.sent), "SendMessage", map[string]any{"to": name, "message": "again"}))
			}
		}
	}
	if len(blocks) == 0 {
		return chat.Response{Content: []chat.Block{chat.Text("waiting")}, StopReason: chat.StopEndTurn}
	}
	return chat.Response{Content: blocks, StopReason: chat.StopToolUse}
}

// noteAgent reads the agent's name and id from a rendered notification's
// "<agent>name (id)</agent>" line.
func noteAgent(text string) (name, id string) {
	_, rest, ok := strings.Cut(text, "<agent>")
	if !ok {
		return "", ""
	}
	line, _, _ := strings.Cut(rest, "</agent>")
	name, id, _ = strings.Cut(line, " (")
	return name, strings.TrimSuffix(id, ")")
}

// result returns the wake samples of the sessions, checking that every
// session's main agent read every notification and matched each to a
// final answer.
func (m *loadModel) result(ids []vigil.SessionID) ([]time.Duration, error) {
	var all []time.Duration
	var problems []error
	for _, id := range ids {
		s := m.session(string(id))
		s.mu.Lock()
		all = append(all, s.wake...)
		if s.seen != m.per || s.unmatched > 0 {
			problems = append(problems, fmt.Errorf("session %s: main read %d notifications (%d without a final answer), want %d", id, s.seen, s.unmatched, m.per))
		}
		s.mu.Unlock()
	}
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Errorf("and %d more", len(problems)-5))
	}
	return all, errors.Join(problems...)
}
