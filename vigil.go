// Package vigil is a durable runtime for AI-agent sessions that do
// background work: a main agent, background subagents and shell tasks,
// messages between agents, inboxes with priorities, timers and a user queue
// that can be held — in which the signal that background work came back is
// never lost.
//
// A Runtime owns sessions. Each session is stepped by one goroutine at a
// time (an actor; an idle session has none) that feeds inputs to the pure
// core (package core), commits the resulting events to the store before
// anything else happens, then starts the effects: model calls through a
// provider, tool executions, shell processes, timers. Effects come back as
// inputs, through a bounded queue per session. At start-up the runtime
// takes over every open session in its store, many at once, and finishes
// what the previous process left open before it accepts work; one
// LeaseRenew call a round then renews all their leases.
package vigil

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/admit"
	"github.com/vigilrun/vigil/internal/clock"
	"github.com/vigilrun/vigil/internal/cmdenv"
	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store"
	"go.opentelemetry.io/otel/trace"
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
	// A session also saves one at rest (a commit that leaves it quiescent
	// 16 events or more after its last snapshot) and at a clean stop, at
	// the same KiB per event at most.
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
	// Cluster, when set, makes this runtime one node of several sharing
	// the store (see ClusterOptions); nil runs a single node.
	Cluster *ClusterOptions
	// TracerProvider, when set, receives OpenTelemetry spans built from
	// the committed events: one trace per session, a span per run, each
	// model and tool call a child of its run (see trace.go). nil turns
	// tracing off. Build it with sdktrace.WithIDGenerator(TraceIDGenerator()):
	// with other IDs, spans still nest within one process's life, but a
	// span that crosses a restart or a move to another node loses its
	// parent and links, and a session may spread over several traces (a
	// warning is logged once).
	TracerProvider trace.TracerProvider
	// TraceContent records prompts, replies and tool arguments and results
	// in spans (gen_ai.input.messages, gen_ai.output.messages,
	// gen_ai.tool.call.arguments, gen_ai.tool.call.result); off, spans
	// carry no text of the conversation.
	TraceContent bool
	// CPUSlots, when positive, is how many of the runtime's steps run at
	// once (one per processor is the natural choice); 0 sets no limit. On
	// a saturated node the steps that wait are then served by priority: a
	// step whose commit returned first, then results and requests, and
	// last the start of a background agent's model call (internal/admit).
	// Measured with `vigil bench --load --cpu-slots`: with 10 to 100 busy
	// sessions wakes came sooner and more notifications were delivered,
	// with 1,000 the median wake was far later; so it is off by default.
	CPUSlots int
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

	mu     sync.Mutex
	actors map[core.SessionID]*actor
	closed bool
	wg     sync.WaitGroup
	// gate orders the actors' CPU work by priority when the node is
	// saturated; nil admits everything at once (Options.CPUSlots).
	gate     *admit.Gate
	leaseTTL time.Duration
	// loopStop ends the renewal and adoption loops.
	loopStop chan struct{}
	// queueWaits counts the requests that found a session's queue full
	// and waited for room (backpressure).
	queueWaits atomic.Int64
	// takeovers are the takeovers in progress.
	takeovers map[core.SessionID]*takeover
	// inflight counts the creations and takeovers in progress; each Add is
	// made under mu while the runtime is open, so Close, which waits for
	// them, sees every lease they acquired given up.
	inflight sync.WaitGroup
	allSubs  *fanout
	// cl is the runtime's part in a cluster; nil for a single node.
	cl *cluster
	// tracer builds spans from committed events; nil when tracing is off.
	tracer *tracer
	// started is when the runtime opened.
	started time.Time
	iso     Isolation
	sandbox sandbox.Report
	// tools are the sessions' added tools (SetTools), under mu.
	tools map[SessionID]ToolSet
	// roots are the cgroup roots runtimes on the data directory used.
	roots rootsMemo
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
	var gate *admit.Gate
	if opts.CPUSlots > 0 {
		gate = admit.New(opts.CPUSlots, opts.Clock.Now)
	}
	opts.Core.ContextWindow = contextWindows(opts.Core.ContextWindow, opts.Providers, opts.DefaultProvider)
	rctx, cancel := context.WithCancel(context.Background())
	r := &Runtime{
		opts: opts, core: core.New(opts.Core), clock: opts.Clock, log: opts.Logger, st: opts.Store,
		ctx: rctx, cancel: cancel, actors: map[core.SessionID]*actor{}, leaseTTL: opts.LeaseTTL, takeovers: map[core.SessionID]*takeover{},
		loopStop: make(chan struct{}), allSubs: newFanout(), started: opts.Clock.Now(),
		tracer: newTracer(opts.TracerProvider, opts.TraceContent, opts.Logger), gate: gate,
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
	if opts.Cluster != nil {
		if err := r.joinCluster(ctx, *opts.Cluster); err != nil {
			r.Close()
			return nil, err
		}
	}
	if err := r.recoverAll(ctx, true); err != nil {
		r.Close()
		return nil, err
	}
	renew, adopt := r.renewLoop(), r.adoptLoop()
	r.wg.Add(2)
	go renew()
	go adopt()
	if r.cl != nil {
		r.wg.Add(2)
		go r.periodically(r.cl.opts.Heartbeat, nil, r.beat)()
		go r.feedLoop()
	}
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

// recoverWorkers is how many sessions recoverAll takes over at once. The
// takeovers' writes share commits (the stores' group commit: 10,000
// sessions took 20,000 commits one by one, about 1,000 now) and their
// reads run side by side, so a store of 10,000 open sessions opens in a
// third of the time one by one took. Past 128 the commits get fewer but
// the time does not (BenchmarkOpenSessions).
const recoverWorkers = 128

// clusterRecoverWorkers is recoverWorkers for a cluster node.
const clusterRecoverWorkers = 4

// recoverAll takes over the open sessions of the store that Adopt accepts
// and no live owner holds, recoverWorkers at a time. atOpen is set for
// Open's pass, which precedes the periodic ones (adoptLoop).
func (r *Runtime) recoverAll(ctx context.Context, atOpen bool) error {
	var rows []store.SessionRow
	var err error
	if r.cl != nil {
		rows, err = r.clusterCandidates(ctx)
	} else if rows, err = r.st.SessionList(ctx, &store.SessionListParams{Open: true}); err != nil {
		err = fmt.Errorf("vigil: list sessions: %w", err)
	}
	if err != nil {
		return err
	}
	todo := make([]*store.SessionRow, 0, len(rows))
	for i, row := range rows {
		r.mu.Lock()
		_, mine := r.actors[core.SessionID(row.ID)]
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return nil
		}
		if !mine && r.opts.Adopt(summaryOut(row)) {
			todo = append(todo, &rows[i])
		}
	}
	// The sessions are reserved for their takeovers, their leases
	// acquired and then their tails read (snapshots and the events after
	// them) a chunk at a time, in one call each, as the workers come to
	// the chunk before it (before, a transaction and two reads each: with
	// 10,000 sessions on PostgreSQL, most of Open's time). A cluster
	// node's chunks are small: a request for a reserved session waits for
	// its takeover, where it would otherwise take the session over itself.
	chunk := acquireChunk
	if r.cl != nil {
		chunk = clusterAcquireChunk
	}
	// At a single node's Open, the sessions taken over were left by a
	// vigil that crashed or stopped: nothing makes a session cgroup while
	// they are taken over, so the cgroup roots are listed once for all of
	// them. A later pass, or a cluster node's, lists nothing, and each
	// takeover looks for its session's groups after taking its lease, as
	// adopt's do.
	var groups *groupScan
	if atOpen && r.cl == nil && len(todo) > 0 {
		groups = r.scanGroups()
	}
	jobs := make([]recoverJob, len(todo))
	for i, row := range todo {
		jobs[i].row = row
	}
	chunks := make([]sync.Once, (len(jobs)+chunk-1)/chunk)
	prepare := func(k int) {
		part := jobs[k*chunk : min(len(jobs), (k+1)*chunk)]
		n := 0
		for i := range part {
			t, _, err := r.reserve(core.SessionID(part[i].row.ID))
			if errors.Is(err, errRuntimeDone) {
				break
			}
			if t != nil {
				part[i].t = t
				part[n], part[i] = part[i], part[n]
				n++
			}
		}
		r.acquireLeases(ctx, part[:n])
		r.loadTails(ctx, part[:n])
	}
	var (
		mu     sync.Mutex
		failed error
		next   atomic.Int64
		wg     sync.WaitGroup
		done   atomic.Bool
	)
	workers := recoverWorkers
	if r.cl != nil {
		// The store's pool is shared with the heartbeats and renewals,
		// and a takeover may wait for a paused node's row lock.
		workers = clusterRecoverWorkers
	}
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				k := i / chunk
				if done.Load() {
					// Close cut Open short: what was not taken over is
					// left as it was, its lease given up if its chunk was
					// prepared (the Once orders these reads).
					chunks[k].Do(func() {})
					if j := jobs[i]; j.t != nil {
						if j.lease != nil {
							r.giveUp(j.lease, errRuntimeDone)
						}
						r.finishReserved(core.SessionID(j.row.ID), j.t, nil, errRuntimeDone)
					}
					continue
				}
				chunks[k].Do(func() { prepare(k) })
				if i == k*chunk && k+1 < len(chunks) {
					// The next chunk's leases and tails are read while
					// this one's sessions are taken over: one chunk
					// ahead, no more, so that no lease waits long.
					wg.Add(1)
					go func() {
						defer wg.Done()
						chunks[k+1].Do(func() { prepare(k + 1) })
					}()
				}
				if jobs[i].t == nil {
					continue // running here already, or being taken over
				}
				id, row := core.SessionID(jobs[i].row.ID), jobs[i].row
				if r.cl != nil {
					// A live owner may write the session's rows after the
					// listing, until its lease ends: this takeover reads
					// them after its own lease is taken, or it would project
					// those events again (and report their notifications
					// written twice).
					row = nil
				}
				ahead := readAhead{lease: jobs[i].lease, tail: jobs[i].tail, groups: groups}
				jobs[i].tail = nil // not held until the last takeover ends
				_, err := r.adoptReserved(ctx, id, row, jobs[i].t, ahead)
				switch {
				case err == nil, errors.Is(err, errRecovering):
				case errors.Is(err, errRuntimeDone), r.closing():
					// The runtime closes: a takeover it cut short is no
					// failure.
					r.log.Debug("takeover ended by Close", "session", id, "err", err)
					done.Store(true)
				case errors.Is(err, store.ErrLeaseHeld):
					r.log.Debug("session owned by a live node; not taken over", "session", id, "err", err)
				default:
					// One session that cannot be taken over does not keep
					// the others from it; it is tried again at the next
					// pass.
					r.log.Error("could not take over a session; will retry", "session", id, "err", err)
					mu.Lock()
					failed = errors.Join(failed, fmt.Errorf("recover session %s: %w", id, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil && !r.closing() {
		r.log.Warn("some sessions were not taken over", "err", failed)
	}
	return nil
}

// acquireChunk is how many sessions' leases recoverAll acquires in one
// call: few enough that the last of them is taken over long before its
// lease would run out. clusterAcquireChunk is a cluster node's.
const (
	acquireChunk        = 256
	clusterAcquireChunk = 16
)

// recoverJob is a session recoverAll takes over: its row as listed, its
// reserved takeover and, once its chunk's leases are acquired, its lease
// (nil when another owner held it, or the call failed: its takeover then
// acquires it alone, as adopt does) and its tail, read under that lease
// (nil when it was not read: its takeover reads it).
type recoverJob struct {
	row   *store.SessionRow
	t     *takeover
	lease *store.Lease
	tail  *store.Tail
}

// acquireLeases acquires the leases of jobs in one store call. A failure
// leaves each takeover to acquire its own.
func (r *Runtime) acquireLeases(ctx context.Context, jobs []recoverJob) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.row.ID
	}
	res, err := r.st.LeaseAcquireMany(ctx, &store.LeaseAcquireManyParams{Owner: r.opts.Node, Sessions: ids, TTL: r.leaseTTL, Now: r.clock.Now()})
	if err != nil {
		r.log.Debug("could not acquire the leases of a chunk of sessions at once; each takeover acquires its own", "sessions", len(ids), "err", err)
		return
	}
	leases := make(map[string]*store.Lease, len(res.Leases))
	for i := range res.Leases {
		leases[res.Leases[i].Session] = &res.Leases[i]
	}
	for i := range jobs {
		jobs[i].lease = leases[jobs[i].row.ID]
	}
}

// tailLimit is how many events of a session after its snapshot
// loadTails reads, and tailBytes how many bytes of snapshots and events
// it reads for a chunk of sessions at most; a takeover reads what is left
// itself. At rest a session saves a snapshot after 16 events, so most
// tails are far shorter; an idle session's snapshot is a few KiB.
const (
	tailLimit = 256
	tailBytes = 16 << 20
)

// loadTails reads, in one store call, the tails of the jobs whose lease
// was acquired. The ones it did not get to (tailBytes), or a failure,
// leave each takeover to read its own.
func (r *Runtime) loadTails(ctx context.Context, jobs []recoverJob) {
	var ids []string
	at := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if j.lease != nil {
			ids = append(ids, j.row.ID)
			at[j.row.ID] = i
		}
	}
	if len(ids) == 0 {
		return
	}
	tails, err := r.st.TailLoadMany(ctx, &store.TailLoadManyParams{Sessions: ids, Limit: tailLimit, MaxBytes: tailBytes})
	if err != nil {
		r.log.Debug("could not read the tails of a chunk of sessions at once; each takeover reads its own", "sessions", len(ids), "err", err)
		return
	}
	for i := range tails {
		if k, ok := at[tails[i].Session]; ok {
			jobs[k].tail = &tails[i]
		}
	}
}

// closing reports whether Close was called.
func (r *Runtime) closing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// takeover is a takeover in progress, for the requests that wait for it.
type takeover struct {
	done chan struct{} // closed when it ends
	err  error         // why it failed, once done is closed; nil when it did not
}

// adopt takes a session over and registers its actor, unless this runtime
// already has it (its actor is returned) or is taking it over
// (errRecovering). row is the session's row when a listing read it, or nil.
func (r *Runtime) adopt(ctx context.Context, id core.SessionID, row *store.SessionRow) (*actor, error) {
	t, a, err := r.reserve(id)
	if t == nil {
		return a, err
	}
	return r.adoptReserved(ctx, id, row, t, readAhead{})
}

// reserve marks session id as being taken over by this runtime: it
// returns the takeover to finish with adoptReserved, or, when the runtime
// has the session already (its actor) or is taking it over (errRecovering)
// or closes (errRuntimeDone), no takeover.
func (r *Runtime) reserve(id core.SessionID) (*takeover, *actor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, errRuntimeDone
	}
	if a, taken := r.actors[id]; taken {
		if a == nil {
			return nil, nil, fmt.Errorf("session %s: %w", id, errRecovering)
		}
		return nil, a, nil
	}
	r.actors[id] = nil // reserved while it is taken over
	t := &takeover{done: make(chan struct{})}
	r.takeovers[id] = t
	r.inflight.Add(1)
	return t, nil, nil
}

// readAhead is what a recovery pass read for a takeover before it comes
// to it; takeOver reads what is nil itself.
type readAhead struct {
	// lease is the session's lease, acquired for it already.
	lease *store.Lease
	// tail is the session's tail, read under that lease.
	tail *store.Tail
	// groups is what the pass found under the cgroup roots (scanGroups).
	groups *groupScan
}

// adoptReserved takes over a session reserve reserved, from what the
// recovery pass read for it already (ahead), and registers its actor.
func (r *Runtime) adoptReserved(ctx context.Context, id core.SessionID, row *store.SessionRow, t *takeover, ahead readAhead) (*actor, error) {
	a, err := r.takeOver(ctx, id, row, ahead)
	return r.finishReserved(id, t, a, err)
}

// finishReserved ends the takeover t of session id with its actor a, or
// its failure err: the actor is registered, or the reservation dropped.
func (r *Runtime) finishReserved(id core.SessionID, t *takeover, a *actor, err error) (*actor, error) {
	defer r.inflight.Done()
	r.mu.Lock()
	closed := r.closed
	if err != nil || closed {
		delete(r.actors, id)
	} else {
		r.actors[id] = a
	}
	t.err = err
	delete(r.takeovers, id)
	close(t.done)
	r.mu.Unlock()
	if err == nil && closed {
		// Close did not see this actor: it stops here, and its lease is
		// given up as Close gives up the others'.
		a.stop()
		a.releaseLease()
		return nil, errRuntimeDone
	}
	return a, err
}

// takeOver acquires a session's lease (unless ahead holds one acquired for
// it already), rebuilds its state and recovers it. A lease held by a
// process of this host that is gone is taken at once.
//
// row, when not nil, is the session's row as a listing read it before the
// lease was taken: its LastSeq is at most the stored one's. ahead.tail,
// when not nil, is the session's tail read under lease (loadStateTail).
func (r *Runtime) takeOver(ctx context.Context, id core.SessionID, row *store.SessionRow, ahead readAhead) (*actor, error) {
	p := &store.LeaseAcquireParams{Session: string(id), Owner: r.opts.Node, TTL: r.leaseTTL, Now: r.clock.Now()}
	lease := ahead.lease
	if lease == nil {
		var err error
		lease, err = r.st.LeaseAcquire(ctx, p)
		var held *store.LeaseHeldError
		if errors.As(err, &held) && (nodeGone(held.Owner) || (r.cl != nil && r.cl.dead(r.opts.Node, held.Owner))) {
			p.Steal = held.Owner
			lease, err = r.st.LeaseAcquire(ctx, p)
		}
		if err != nil {
			return nil, err
		}
	}
	previous, cause := r.logTakeover(id, lease, p.Steal)
	s, tail, err := loadStateTail(ctx, r.st, string(id), ahead.tail)
	if err != nil {
		r.giveUpIfClosing(lease, err)
		return nil, err
	}
	a := r.newActor(id, s, lease)
	// The recovery's commit projects what the session's row misses: from
	// the row listed (when this takeover comes from a single node's
	// listing at Open: only a predecessor whose lease was still running
	// could have written since, and then some notes are projected again
	// and reported written twice) and the events just read.
	a.proj.seed = &projSeed{row: row, tail: tail}
	a.killStale(ahead.groups)
	a.trace.resume(s) // before the recovery step changes s
	out := r.core.Step(s, r.clock.Now(), core.Recover{Incarnation: s.Incarnation + 1, Previous: previous, Cause: cause})
	if _, err := a.commit(ctx, out.Events); err != nil {
		a.cancel()
		r.giveUpIfClosing(lease, err)
		return nil, fmt.Errorf("commit recovery: %w", err)
	}
	r.log.Info("session recovered", "session", id, "seq", s.Seq, "events", len(out.Events))
	a.after(out.Events, out.Effects)
	// Snapshots go on at the pace of the one it read: the events after it
	// count, and its size. Counted only now, so that Open does not save
	// snapshots: the session's next commit at rest does.
	a.sinceSnap += int(tail.End - tail.After)
	a.snapBytes = tail.SnapBytes
	a.start()
	return a, nil
}

// logTakeover says whose session a takeover took and why it could: its
// owner stopped cleanly and released the lease (a handover, an ordinary
// resume, at info), or died (a process of this host that is gone: the
// lease was stolen from it, or had expired), or stopped renewing it
// (another host's lease ran out: a crash, a partition or a long pause), at
// warn. This node's own lease that lapsed (a store outage) or a session's
// first lease says nothing more than "session recovered". It returns the
// previous owner and the cause (core.TakeoverHandover, ...) for the
// recovery's event to record; "" and "" when there is nothing to say.
func (r *Runtime) logTakeover(id core.SessionID, l *store.Lease, stolen string) (previous, cause string) {
	switch {
	case stolen != "":
		r.log.Warn("taking over a session whose owner died", "session", id, "owner", stolen)
		return stolen, core.TakeoverOwnerDied
	case l.Released:
		r.log.Info("resuming a session stopped cleanly", "session", id, "previous_owner", l.Previous)
		return l.Previous, core.TakeoverHandover
	case l.Previous == "" || l.Previous == r.opts.Node:
		return "", ""
	case nodeGone(l.Previous):
		r.log.Warn("taking over a session whose owner died", "session", id, "owner", l.Previous, "lease", "expired")
		return l.Previous, core.TakeoverOwnerDied
	default:
		r.log.Warn("taking over a session whose owner stopped renewing its lease", "session", id, "owner", l.Previous)
		return l.Previous, core.TakeoverLeaseExpired
	}
}

// giveUpIfClosing gives up the lease of a takeover or a creation that
// failed because Close cut it short, which would otherwise look like a
// crash to the next owner. One that failed otherwise (the store failing)
// keeps it until it expires, as before: a takeover retries it.
func (r *Runtime) giveUpIfClosing(l *store.Lease, why error) {
	if r.closing() {
		r.giveUp(l, why)
	}
}

// giveUp releases a lease this runtime acquired and will write nothing
// under. Best effort: a lease it cannot release expires.
func (r *Runtime) giveUp(l *store.Lease, why error) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := store.ReleaseOne(ctx, r.st, l.Session, l.Owner, l.Epoch); err != nil {
		r.log.Debug("could not release the lease of a session not taken; it expires", "session", l.Session, "why", why, "err", err)
	}
}

// loadState rebuilds a session from its newest snapshot and the events
// after it.
func loadState(ctx context.Context, st store.Store, id string) (*core.State, error) {
	s, _, err := loadStateTail(ctx, st, id, nil)
	return s, err
}

// logTail is what loadStateTail read of a session's log after its
// snapshot: the events after seq After, up to End, where the log ended
// then. Events is nil when there were more than one page of them.
// SnapBytes is the snapshot's size (0: none).
type logTail struct {
	After, End int64
	Events     []core.Event
	SnapBytes  int
}

// loadStateTail is loadState that also returns the events it read after
// the snapshot, for a takeover's first projection (reproject), which
// reads them otherwise. pre, when not nil, is the session's tail read
// already (TailLoadMany: recoverAll reads a chunk of sessions' at once);
// what it misses is read on from the store.
//
// The events after the snapshot are read and decoded beside the
// snapshot's decoding, a page ahead of their application (readTail): a
// long session's tail (up to one event per KiB of its snapshot) was
// otherwise read, decoded and applied on one goroutine after it, while
// the other processors waited.
func loadStateTail(ctx context.Context, st store.Store, id string, pre *store.Tail) (*core.State, *logTail, error) {
	return loadStateTailPaged(ctx, st, id, pre, eventPage)
}

// loadStateTailPaged is loadStateTail reading page events a call.
func loadStateTailPaged(ctx context.Context, st store.Store, id string, pre *store.Tail, page int) (*core.State, *logTail, error) {
	if pre == nil {
		pre = &store.Tail{Session: id}
		snap, err := st.SnapshotLoad(ctx, id)
		switch {
		case err == nil:
			pre.Snapshot = snap
		case errors.Is(err, store.ErrNotFound):
		default:
			return nil, nil, fmt.Errorf("load snapshot: %w", err)
		}
	}
	var after int64
	if pre.Snapshot != nil {
		after = pre.Snapshot.Seq
	}
	// A tail read ahead stops when the load ends first (an error), and
	// the load waits for it.
	readCtx, cancel := context.WithCancel(ctx)
	pages := make(chan tailPage, 1)
	go readTail(readCtx, st, id, pre, after, page, pages)
	defer func() {
		cancel()
		for range pages {
		}
	}()

	s := core.NewState()
	snapBytes := 0
	if snap := pre.Snapshot; snap != nil {
		if err := decodeState(snap.Data, s); err != nil {
			return nil, nil, fmt.Errorf("decode snapshot at %d: %w", snap.Seq, err)
		}
		snapBytes = len(snap.Data)
	}
	if s.Seq != after {
		// The snapshot holds the state at another event than the store
		// says: the tail is read again, from the store, after the state's.
		cancel()
		for range pages {
		}
		again, cancelAgain := context.WithCancel(ctx)
		defer cancelAgain()
		pages = make(chan tailPage, 1)
		go readTail(again, st, id, &store.Tail{Session: id}, s.Seq, page, pages)
	}
	// The events are kept while they fit in one page (none read is an
	// empty tail, not a missing one).
	tail := &logTail{After: s.Seq, SnapBytes: snapBytes, Events: make([]core.Event, 0, len(pre.Records))}
	keep := true
	for p := range pages {
		if p.err != nil {
			return nil, nil, p.err
		}
		if keep = keep && len(tail.Events)+len(p.events) < page; !keep {
			tail.Events = nil
		}
		for _, e := range p.events {
			core.Apply(s, e)
		}
		if keep {
			tail.Events = append(tail.Events, p.events...)
		}
	}
	if s.Session.ID == "" {
		return nil, nil, fmt.Errorf("session %s: %w", id, errNoSession)
	}
	tail.End = s.Seq
	return s, tail, nil
}

// tailPage is a page of a session's events, decoded, or why it could not
// be read.
type tailPage struct {
	events []core.Event
	err    error
}

// readTail sends the events of session id after seq after to pages, page
// by page, decoded, and closes it: pre's records first, then, unless pre
// is complete, pages of up to page events read from the store, each read
// while the one before is applied. It stops at the first error, which it
// sends, or when ctx ends.
func readTail(ctx context.Context, st store.Store, id string, pre *store.Tail, after int64, page int, pages chan<- tailPage) {
	defer close(pages)
	send := func(p tailPage) bool {
		select {
		case pages <- p:
			return p.err == nil
		case <-ctx.Done():
			return false
		}
	}
	recs, done := pre.Records, pre.Complete
	for {
		events, err := decodeEvents(recs)
		if !send(tailPage{events: events, err: err}) || done {
			return
		}
		if len(recs) > 0 {
			after = recs[len(recs)-1].Seq
		}
		recs, err = st.EventList(ctx, &store.EventListParams{Session: id, AfterSeq: after, Limit: page})
		if err != nil {
			send(tailPage{err: fmt.Errorf("load events after %d: %w", after, err)})
			return
		}
		done = len(recs) < page
	}
}

// decodeEvents decodes records' events, a large page's on every
// processor.
func decodeEvents(recs []store.Record) ([]core.Event, error) {
	events := make([]core.Event, len(recs))
	errs := make([]error, len(recs))
	decode := func(from, to int) {
		for i := from; i < to; i++ {
			events[i], errs[i] = decodeEvent(recs[i])
		}
	}
	if n := runtime.GOMAXPROCS(0); len(recs) < 1024 || n == 1 {
		decode(0, len(recs))
	} else {
		var wg sync.WaitGroup
		part := (len(recs) + n - 1) / n
		for from := 0; from < len(recs); from += part {
			wg.Go(func() { decode(from, min(from+part, len(recs))) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return events, nil
}

// eventPage is how many events loadStateTail reads a call.
const eventPage = 10_000

// decodeEvent decodes a stored record into a core event.
func decodeEvent(rec store.Record) (core.Event, error) {
	body, err := core.DecodeBody(rec.Type, rec.Data)
	if err != nil {
		return core.Event{}, fmt.Errorf("event %s#%d: %w", rec.Session, rec.Seq, err)
	}
	return core.Event{Seq: rec.Seq, At: rec.At, Body: body}, nil
}

// renewLoop renews the leases of every session this runtime runs, every
// third of the lease's life, in one LeaseRenew call a round (renewAll).
// Its first round is armed when it is made; run it on a goroutine of its
// own.
func (r *Runtime) renewLoop() func() {
	var poke <-chan struct{}
	if r.cl != nil {
		poke = r.cl.renewNow
	}
	return r.periodically(r.leaseTTL/3, poke, r.renewAll)
}

// adoptLoop takes over, at the same period, the sessions whose owner went
// away. It is a loop of its own: an adoption that is slow or blocked (a
// takeover waits for the store) never delays the renewals.
//
// In a cluster it runs every two heartbeats, and at once when the
// heartbeat sees a node die, leave or drain; a pass reads the leases
// only, and takes over just the sessions whose lease is free or whose
// owner is dead.
func (r *Runtime) adoptLoop() func() {
	d, poke := r.leaseTTL/3, (<-chan struct{})(nil)
	if r.cl != nil {
		d, poke = 2*r.cl.opts.Heartbeat, r.cl.adoptNow
	}
	return r.periodically(d, poke, func() {
		if err := r.recoverAll(r.ctx, false); err != nil && r.ctx.Err() == nil {
			r.log.Warn("adopting orphaned sessions failed; will retry", "err", err)
		}
	})
}

// periodically arms f to run every d on the runtime's clock until the
// runtime closes, and returns the loop that runs it (it calls r.wg.Done
// at its end). The first round is armed now, the next one as each round
// starts, so a slow round does not push the next back: it starts as soon
// as the slow one ends. A receive on poke (nil: none) runs a round at
// once.
func (r *Runtime) periodically(d time.Duration, poke <-chan struct{}, f func()) func() {
	arm := func() (<-chan struct{}, Timer) {
		c := make(chan struct{})
		return c, r.clock.AfterFunc(d, func() { close(c) })
	}
	next, t := arm()
	return func() {
		defer r.wg.Done()
		for {
			select {
			case <-r.loopStop:
				t.Stop()
				return
			case <-next:
			case <-poke:
				t.Stop()
			}
			next, t = arm()
			f()
		}
	}
}

// renewAll renews the leases of every session actor in one LeaseRenew
// call, then tells each actor: a renewed lease runs to the new expiry; a
// lost one stops its actor (another owner holds the session). When the
// call fails, nothing is renewed and the actors whose lease ran out
// meanwhile stop (another node may own them now); the others are renewed
// at the next round. The call may take at most a round: a store that
// does not answer counts as failing.
func (r *Runtime) renewAll() {
	r.mu.Lock()
	actors := make(map[string]*actor, len(r.actors))
	for id, a := range r.actors {
		if a != nil {
			actors[string(id)] = a
		}
	}
	r.mu.Unlock()
	refs := make([]store.LeaseRef, 0, len(actors))
	for id, a := range actors {
		if _, losing := a.leaseExpires(); losing {
			delete(actors, id)
			continue
		}
		refs = append(refs, store.LeaseRef{Session: id, Epoch: a.lease.Epoch})
	}
	if len(refs) == 0 {
		return
	}
	slices.SortFunc(refs, func(x, y store.LeaseRef) int { return strings.Compare(x.Session, y.Session) })
	ctx, cancel := context.WithCancel(r.ctx)
	var late atomic.Bool
	wait := r.leaseTTL / 3
	t := r.clock.AfterFunc(wait, func() { late.Store(true); cancel() })
	start := r.clock.Now()
	res, err := r.st.LeaseRenew(ctx, &store.LeaseRenewParams{Owner: r.opts.Node, Leases: refs, TTL: r.leaseTTL, Now: start})
	t.Stop()
	cancel()
	if r.ctx.Err() != nil {
		return // closing
	}
	if err != nil && late.Load() {
		err = fmt.Errorf("renew %d leases: the store did not answer within %s: %w", len(refs), wait, err)
	}
	if err == nil {
		if r.cl != nil {
			r.cl.renewed(start)
		}
		for _, id := range res.Renewed {
			if a := actors[id]; a != nil {
				a.renewed(res.Expires)
				delete(actors, id)
			}
		}
		for _, id := range res.Lost {
			if a := actors[id]; a != nil {
				a.loseLease(nil)
				delete(actors, id)
			}
		}
		if len(actors) == 0 {
			return
		}
		// The store said nothing of these: not renewed.
		err = fmt.Errorf("renew leases: the store reported neither renewal nor loss of %d sessions", len(actors))
	}
	now := r.clock.Now()
	lapsed := 0
	for _, a := range actors {
		if exp, _ := a.leaseExpires(); !now.Before(exp) {
			a.loseLease(err)
			lapsed++
		}
	}
	r.log.Warn("lease renewal failed; will retry", "sessions", len(refs), "lapsed", lapsed, "err", err)
}

// Close stops every session actor after the step in progress, cancels the
// effects in flight (their sessions recover them at the next start),
// leaves the store consistent and releases the sessions' leases, so that
// the next runtime on the store, of this host or another, resumes them at
// once (a clean stop, not a crash). A store that does not answer holds
// Close up at most stopTimeout for the sessions' last writes and
// releaseTimeout for the releases; the leases it did not release expire.
// It does not close the store. Safe to call twice.
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
	if r.cl != nil {
		r.drain()
	}
	close(r.loopStop)
	r.stopActors(actors)
	r.cancel()
	r.wg.Wait()
	if r.cl != nil {
		r.waitSaves()
	}
	// Every actor has stopped and made its last write: no write follows
	// a release under its epoch.
	r.releaseLeases(actors)
	if r.cl != nil {
		r.leave()
		r.cl.feed.closeAll()
	}
	r.allSubs.closeAll()
	if r.iso.Containment.Cgroups {
		// The sessions' commands have ended; their empty groups go.
		shell.RemoveEmptyCgroups(r.iso.Containment.Root)
	}
	return nil
}

const (
	// stopTimeout bounds how long Close waits for the sessions' last
	// steps and writes; then their store calls are cancelled.
	stopTimeout = 10 * time.Second
	// releaseTimeout bounds Close's lease release, and the wait for the
	// creations and takeovers in progress whose leases it releases too.
	releaseTimeout = 5 * time.Second
)

// stopActors stops the actors, all at once (their commands end side by
// side, not one session after another). Those not stopped after
// stopTimeout (a store that does not answer their step's write) have
// their store calls cancelled, and are waited for then.
func (r *Runtime) stopActors(actors []*actor) {
	for _, a := range actors {
		a.askStop()
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	cancelled := false
	for _, a := range actors {
		if !cancelled {
			select {
			case <-a.done:
				continue
			case <-t.C:
				cancelled = true
				r.log.Warn("sessions did not stop in time; cancelling what they wait for (their store writes)", "waited", stopTimeout)
				r.cancel()
			}
		}
		<-a.done
	}
}

// releaseLeases gives up the leases of the stopped actors (the moved ones
// hold none) in one LeaseRelease call, then waits, within the same bound,
// for the creations and takeovers in progress, which give their leases up
// themselves. What is not released within releaseTimeout expires
// (LeaseTTL); that is logged at warn.
func (r *Runtime) releaseLeases(actors []*actor) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	refs := make([]store.LeaseRef, 0, len(actors))
	for _, a := range actors {
		if !a.moved { // read after the actor stopped: it writes moved no more
			refs = append(refs, store.LeaseRef{Session: string(a.id), Epoch: a.lease.Epoch})
		}
	}
	if len(refs) > 0 {
		// In the order the stores lock leases in.
		slices.SortFunc(refs, func(x, y store.LeaseRef) int { return strings.Compare(x.Session, y.Session) })
		errc := make(chan error, 1)
		go func() { errc <- r.st.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: r.opts.Node, Leases: refs}) }()
		var err error
		select {
		case err = <-errc:
		case <-ctx.Done():
			err = fmt.Errorf("the store did not answer within %s: %w", releaseTimeout, ctx.Err())
		}
		if err != nil {
			r.log.Warn("could not release the sessions' leases; they expire", "sessions", len(refs), "expire_within", r.leaseTTL, "err", err)
		} else {
			r.log.Info("released the sessions' leases", "sessions", len(refs), "took", time.Since(start))
		}
	}
	inflight := make(chan struct{})
	go func() {
		r.inflight.Wait()
		close(inflight)
	}()
	select {
	case <-inflight:
	case <-ctx.Done():
		r.log.Warn("sessions being created or taken over did not end in time; their leases expire", "waited", releaseTimeout)
	}
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
// for. A takeover that failed answers with its failure (a store that
// cannot be written is errStoreDown, as for reclaim). It is called
// without r.mu.
func (r *Runtime) waitTakeover(id string) (*actor, error) {
	r.mu.Lock()
	t := r.takeovers[core.SessionID(id)]
	r.mu.Unlock()
	ended := false
	if t != nil {
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-t.done:
			ended = true
		case <-r.ctx.Done():
		case <-timer.C:
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.actors[core.SessionID(id)]; a != nil {
		return a, nil
	}
	if ended && t.err != nil && !errors.Is(t.err, errRecovering) {
		return nil, r.takeoverErr(id, t.err)
	}
	return nil, fmt.Errorf("session %s: %w", id, errRecovering)
}

// takeoverErr is what a request hears of a takeover of its session that
// failed: errMoved when another live node holds the session, errRuntimeDone
// when this runtime closes, otherwise errStoreDown with the cause.
func (r *Runtime) takeoverErr(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		return fmt.Errorf("session %s: %w (%w)", id, errMoved, err)
	case errors.Is(err, store.ErrFenced):
		// Another node took the session while this one took it over.
		return fmt.Errorf("session %s: %w (%w)", id, errMoved, err)
	case errors.Is(err, errRuntimeDone):
		return err
	}
	return fmt.Errorf("session %s: %w: %v", id, errStoreDown, err)
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
	a, err := r.adopt(ctx, core.SessionID(id), nil)
	switch {
	case err == nil:
		return a, nil
	case errors.Is(err, errRecovering):
		return r.waitTakeover(id)
	}
	return nil, r.takeoverErr(id, err)
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
