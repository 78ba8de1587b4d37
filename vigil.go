// Package vigil is a durable runtime for AI-agent sessions that do
// background work: a main agent, background subagents and shell tasks,
// messages between agents, inboxes with priorities, timers and a user queue
// that can be held — in which the signal that background work came back is
// never lost.
//
// A Runtime owns sessions. Each session is stepped by one goroutine (an
// actor) that feeds inputs to the pure core (package core), commits the
// resulting events to the store before anything else happens, then starts
// the effects: model calls through a provider, tool executions, shell
// processes, timers. Effects come back as inputs. At start-up the runtime
// takes over every open session in its store and finishes what the
// previous process left open before it accepts work.
package vigil

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/clock"
	"github.com/vigilrun/vigil/internal/cmdenv"
	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
)

// Clock tells time and runs functions later: the runtime's timers, the
// commands' timeouts and every timestamp read it. Tests inject a fake or
// run in a testing/synctest bubble with the real one.
type Clock = clock.Clock

// Timer is a function scheduled by a Clock.
type Timer = clock.Timer

// RealClock is the system clock.
func RealClock() Clock { return clock.Real() }

// Options configures a Runtime. Nil and zero fields mean defaults.
type Options struct {
	// Store keeps sessions durable. Required.
	Store store.Store
	// Providers are the model providers by name. A session names one; its
	// subagents use the same unless they ask for another model.
	Providers map[string]provider.Provider
	// Drivers are the providers that run turns themselves in a process
	// (Claude Code), by name. A session that names one is driven by it.
	Drivers map[string]provider.SessionDriver
	// DefaultProvider is used by sessions that name none.
	DefaultProvider string
	// DataDir holds task output files: DataDir/sessions/<id>/tasks/.
	DataDir string
	// Node identifies this process as the owner of session leases. The
	// default, "vigil:<host>:<pid>:<start ticks>", lets a later process of
	// the same host see that its predecessor died and take its sessions at
	// once instead of waiting for their leases to expire.
	Node string
	// Adopt says which open sessions of the store this runtime takes over,
	// at Open and whenever their owner goes away; nil means all of them.
	Adopt func(SessionSummary) bool
	// LeaseTTL is how long a session lease lasts without renewal (30s).
	LeaseTTL time.Duration
	// Core sets the core's limits.
	Core core.Config
	// Clock defaults to the system clock.
	Clock Clock
	// Logger receives structured logs; every drop is logged at warn.
	Logger *slog.Logger
	// NewID makes session ids; the default is random.
	NewID func() string
	// SnapshotEvery saves a state snapshot after this many events (5000),
	// or after one event per KiB of the last snapshot when that is more.
	SnapshotEvery int
	// Observer, when set, is told about runtime events (for metrics).
	Observer Observer
	// MaxToolOutput caps the output of a foreground tool returned to the
	// model, in bytes (32 KiB).
	MaxToolOutput int
	// CommandEnv names more variables of vigil's environment that agents'
	// commands get, beyond the allowlist of internal/cmdenv (PATH, HOME,
	// the locale, TERM, USER, SHELL, TMPDIR, TZ). Names starting with
	// VIGIL_ are refused.
	CommandEnv []string
	// Sandbox configures the kernel sandbox of agents' commands; the zero
	// value confines them to the session's directories where the machine
	// can.
	Sandbox Sandbox
}

// Runtime runs sessions.
type Runtime struct {
	opts   Options
	core   *core.Core
	clock  Clock
	log    *slog.Logger
	st     store.Store
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	actors    map[core.SessionID]*actor
	closed    bool
	wg        sync.WaitGroup
	leaseTTL  time.Duration
	renewStop chan struct{}
	// takeovers are closed when the takeover of their session ends.
	takeovers map[core.SessionID]chan struct{}
	allSubs   *fanout
	iso       Isolation
	sandbox   sandbox.Report
}

// Open starts a runtime on a store and takes over every open session in it:
// each is rebuilt from its events, processes the previous owner left are
// ended, their tasks end interrupted with a notification, model calls that
// were in flight are issued again. Open returns when that is done.
func Open(ctx context.Context, opts Options) (*Runtime, error) {
	r, err := open(ctx, opts)
	if err != nil {
		return nil, wrapErr(err)
	}
	return r, nil
}

func open(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Store == nil {
		return nil, invalidf("vigil: Options.Store is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NewID == nil {
		opts.NewID = randomID
	}
	if opts.Node == "" {
		opts.Node = defaultNode()
	}
	if opts.Adopt == nil {
		opts.Adopt = func(SessionSummary) bool { return true }
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 30 * time.Second
	}
	if opts.SnapshotEvery == 0 {
		opts.SnapshotEvery = 5000
	}
	if err := cmdenv.Check(opts.CommandEnv); err != nil {
		return nil, fmt.Errorf("vigil: %w", err)
	}
	if opts.MaxToolOutput == 0 {
		opts.MaxToolOutput = 32 << 10
	}
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(os.TempDir(), "vigil-"+opts.Node)
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("vigil: data dir: %w", err)
	}
	opts.Core.ContextWindow = contextWindows(opts.Core.ContextWindow, opts.Providers, opts.DefaultProvider)
	rctx, cancel := context.WithCancel(context.Background())
	r := &Runtime{
		opts: opts, core: core.New(opts.Core), clock: opts.Clock, log: opts.Logger, st: opts.Store,
		ctx: rctx, cancel: cancel, actors: map[core.SessionID]*actor{}, leaseTTL: opts.LeaseTTL, takeovers: map[core.SessionID]chan struct{}{},
		renewStop: make(chan struct{}), allSubs: newFanout(),
	}
	iso, rep, err := setupIsolation(ctx, opts.Sandbox, opts.DataDir)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("vigil: %w", err)
	}
	r.iso, r.sandbox = iso, rep
	r.log.Info("isolation", "sandbox", iso.Sandbox, "network", iso.Network, "kernel", iso.Kernel, "containment", iso.Containment.Note)
	if iso.Warning != "" {
		r.log.Warn(iso.Warning)
	}
	if err := r.recoverAll(ctx); err != nil {
		r.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.renewLoop()
	return r, nil
}

func randomID() string {
	const alphabet = "abcdefghijkmnopqrstuvwxyz23456789"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// recoverAll takes over the open sessions of the store that Adopt accepts
// and no live owner holds.
func (r *Runtime) recoverAll(ctx context.Context) error {
	rows, err := r.st.SessionList(ctx, &store.SessionListParams{Open: true})
	if err != nil {
		return fmt.Errorf("vigil: list sessions: %w", err)
	}
	var failed error
	defer func() {
		if failed != nil {
			r.log.Warn("some sessions were not taken over", "err", failed)
		}
	}()
	for _, row := range rows {
		r.mu.Lock()
		_, mine := r.actors[core.SessionID(row.ID)]
		closed := r.closed
		r.mu.Unlock()
		if mine || closed || !r.opts.Adopt(summaryOut(row)) {
			continue
		}
		_, err := r.adopt(ctx, core.SessionID(row.ID))
		if errors.Is(err, errRuntimeDone) {
			return nil
		}
		if errors.Is(err, errRecovering) {
			continue
		}
		if errors.Is(err, store.ErrLeaseHeld) {
			r.log.Debug("session owned by a live node; not taken over", "session", row.ID, "err", err)
			continue
		}
		if err != nil {
			// One session that cannot be taken over does not keep the
			// others from it; it is tried again at the next pass.
			r.log.Error("could not take over a session; will retry", "session", row.ID, "err", err)
			failed = errors.Join(failed, fmt.Errorf("recover session %s: %w", row.ID, err))
			continue
		}
	}
	return nil
}

// adopt takes a session over and registers its actor, unless this runtime
// already has it (its actor is returned) or is taking it over (errRecovering).
func (r *Runtime) adopt(ctx context.Context, id core.SessionID) (*actor, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errRuntimeDone
	}
	if a, taken := r.actors[id]; taken {
		r.mu.Unlock()
		if a == nil {
			return nil, fmt.Errorf("session %s: %w", id, errRecovering)
		}
		return a, nil
	}
	r.actors[id] = nil // reserved while it is taken over
	done := make(chan struct{})
	r.takeovers[id] = done
	r.mu.Unlock()
	a, err := r.takeOver(ctx, id)
	r.mu.Lock()
	closed := r.closed
	if err != nil || closed {
		delete(r.actors, id)
	} else {
		r.actors[id] = a
	}
	delete(r.takeovers, id)
	close(done)
	r.mu.Unlock()
	if err == nil && closed {
		a.stop()
		return nil, errRuntimeDone
	}
	return a, err
}

// takeOver acquires a session's lease, rebuilds its state and recovers it.
// A lease held by a process of this host that is gone is taken at once.
func (r *Runtime) takeOver(ctx context.Context, id core.SessionID) (*actor, error) {
	p := &store.LeaseAcquireParams{Session: string(id), Owner: r.opts.Node, TTL: r.leaseTTL, Now: r.clock.Now()}
	lease, err := r.st.LeaseAcquire(ctx, p)
	var held *store.LeaseHeldError
	if errors.As(err, &held) && nodeGone(held.Owner) {
		r.log.Warn("taking over a session whose owner died", "session", id, "owner", held.Owner)
		p.Steal = held.Owner
		lease, err = r.st.LeaseAcquire(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	s, err := loadState(ctx, r.st, string(id))
	if err != nil {
		return nil, err
	}
	a := r.newActor(id, s, lease)
	a.killStale()
	out := r.core.Step(s, r.clock.Now(), core.Recover{Incarnation: s.Incarnation + 1})
	if _, err := a.commit(ctx, out.Events); err != nil {
		return nil, fmt.Errorf("commit recovery: %w", err)
	}
	r.log.Info("session recovered", "session", id, "seq", s.Seq, "events", len(out.Events))
	a.after(out.Events, out.Effects)
	a.start()
	return a, nil
}

// loadState rebuilds a session from its newest snapshot and the events
// after it.
func loadState(ctx context.Context, st store.Store, id string) (*core.State, error) {
	s := core.NewState()
	snap, err := st.SnapshotLoad(ctx, id)
	switch {
	case err == nil:
		if err := decodeState(snap.Data, s); err != nil {
			return nil, fmt.Errorf("decode snapshot at %d: %w", snap.Seq, err)
		}
	case errors.Is(err, store.ErrNotFound):
	default:
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	for {
		recs, err := st.EventList(ctx, &store.EventListParams{Session: id, AfterSeq: s.Seq, Limit: 10_000})
		if err != nil {
			return nil, fmt.Errorf("load events after %d: %w", s.Seq, err)
		}
		for _, rec := range recs {
			e, err := decodeEvent(rec)
			if err != nil {
				return nil, err
			}
			core.Apply(s, e)
		}
		if len(recs) < 10_000 {
			break
		}
	}
	if s.Session.ID == "" {
		return nil, fmt.Errorf("session %s: %w", id, errNoSession)
	}
	return s, nil
}

// DecodeEvent decodes a stored record into a core event.
func decodeEvent(rec store.Record) (core.Event, error) {
	body, err := core.DecodeBody(rec.Type, rec.Data)
	if err != nil {
		return core.Event{}, fmt.Errorf("event %s#%d: %w", rec.Session, rec.Seq, err)
	}
	return core.Event{Seq: rec.Seq, At: rec.At, Body: body}, nil
}

func (r *Runtime) renewLoop() {
	defer r.wg.Done()
	every := r.leaseTTL / 3
	for {
		done := make(chan struct{})
		t := r.clock.AfterFunc(every, func() { close(done) })
		select {
		case <-r.renewStop:
			t.Stop()
			return
		case <-done:
		}
		r.mu.Lock()
		actors := make([]*actor, 0, len(r.actors))
		for _, a := range r.actors {
			if a != nil {
				actors = append(actors, a)
			}
		}
		r.mu.Unlock()
		for _, a := range actors {
			a.submitControl(func() { a.renew() })
		}
		// Sessions whose owner went away are taken over here.
		if err := r.recoverAll(r.ctx); err != nil && r.ctx.Err() == nil {
			r.log.Warn("adopting orphaned sessions failed; will retry", "err", err)
		}
	}
}

// Close stops every session actor after the step in progress, cancels the
// effects in flight (their sessions recover them at the next start) and
// leaves the store consistent. It does not close the store. Safe to call
// twice.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	actors := make([]*actor, 0, len(r.actors))
	for _, a := range r.actors {
		if a != nil {
			actors = append(actors, a)
		}
	}
	r.mu.Unlock()
	close(r.renewStop)
	for _, a := range actors {
		a.stop()
	}
	r.cancel()
	r.wg.Wait()
	r.allSubs.closeAll()
	if r.iso.Containment.Cgroups {
		// The sessions' commands have ended; their empty groups go.
		shell.RemoveEmptyCgroups(r.iso.Containment.Root)
	}
	return nil
}

// actor returns the session's actor here: the running one, the one a
// takeover in progress is making (waited for), or one taken over now
// (reclaim).
func (r *Runtime) actor(id string) (*actor, error) {
	r.mu.Lock()
	closed := r.closed
	a, reserved := r.actors[core.SessionID(id)]
	r.mu.Unlock()
	switch {
	case closed:
		return nil, errRuntimeDone
	case a != nil:
		return a, nil
	case reserved:
		return r.waitTakeover(id)
	}
	return r.reclaim(id)
}

// waitTakeover waits, up to 10 s, for the takeover of a session in
// progress, so that a request that comes a moment early is served rather
// than refused; a session being created (not stored yet) is not waited
// for. It is called without r.mu.
func (r *Runtime) waitTakeover(id string) (*actor, error) {
	r.mu.Lock()
	done := r.takeovers[core.SessionID(id)]
	r.mu.Unlock()
	if done != nil {
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-r.ctx.Done():
		case <-t.C:
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.actors[core.SessionID(id)]; a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("session %s: %w", id, errRecovering)
}

// reclaim answers for a session this runtime has no actor for. The store
// says whether it exists; an open one whose owner is gone (this node
// itself, when its lease lapsed during a store outage) is taken over now,
// so a client never takes a session for deleted because the store was
// away. The answer is errStoreDown while the store cannot say,
// errNoSession for a session it does not hold (or a closed one), and
// errMoved when another live node holds it.
func (r *Runtime) reclaim(id string) (*actor, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	row, err := r.st.SessionGet(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("session %s: %w", id, errNoSession)
	case err != nil:
		return nil, fmt.Errorf("session %s: %w: %v", id, errStoreDown, err)
	case row.Closed:
		return nil, fmt.Errorf("session %s: %w (it is closed)", id, errNoSession)
	case !r.opts.Adopt(summaryOut(*row)):
		return nil, fmt.Errorf("session %s: %w (this node does not serve it)", id, errMoved)
	}
	a, err := r.adopt(ctx, core.SessionID(id))
	switch {
	case err == nil:
		return a, nil
	case errors.Is(err, store.ErrLeaseHeld):
		return nil, fmt.Errorf("session %s: %w", id, errMoved)
	case errors.Is(err, errRecovering):
		return r.waitTakeover(id)
	case errors.Is(err, errRuntimeDone):
		return nil, err
	}
	return nil, fmt.Errorf("session %s: %w: %v", id, errStoreDown, err)
}

// sessionDir is where a session's files live.
func (r *Runtime) sessionDir(id core.SessionID) string {
	return filepath.Join(r.opts.DataDir, "sessions", string(id))
}

// resolveOutput turns a task's relative output path into a file path.
func (r *Runtime) resolveOutput(id core.SessionID, rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.Contains(rel, "..") {
		return "", fmt.Errorf("bad output path %q", rel)
	}
	return filepath.Join(r.sessionDir(id), filepath.FromSlash(rel)), nil
}

// contextWindows answers a model's context window: what its provider
// declares (provider.Windowed), else what the configuration knows.
func contextWindows(known func(provider, model string) int, provs map[string]provider.Provider, def string) func(string, string) int {
	return func(prov, model string) int {
		if prov == "" {
			prov = def
		}
		if w, ok := provs[prov].(provider.Windowed); ok {
			if n := w.ContextWindow(model); n > 0 {
				return n
			}
		}
		if known != nil {
			return known(prov, model)
		}
		return 0
	}
}
