package vigil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/admit"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/internal/snapshot"
	"github.com/vigilrun/vigil/internal/textcheck"
	"github.com/vigilrun/vigil/store"
)

// request is one thing for a session actor to do: an input to step (from
// the API or from an effect), or a function to run on the actor goroutine.
type request struct {
	input  core.Input
	effect bool               // the input is an effect's outcome: never refused for a store outage
	reply  chan<- core.Output // API inputs wait for the committed output
	// view, when set, reads the state after the commit, on the actor,
	// before the reply: a caller's copy of what the input did.
	view func(s *core.State, out core.Output)
	fn   func() // a read or a control action
}

// actor steps one session. Only the goroutine that holds the actor (see
// loop) touches state, procs and cancels.
//
// Requests wait in a bounded queue (queueCap). A sender that finds it full
// waits for room: backpressure, never a drop. Each wait is counted and the
// first of an episode is logged at warn; an API caller whose context ends
// while it waits gets an error that says the session was busy and nothing
// was taken. An idle actor holds no goroutine: the first request starts
// one, and it ends when the queue is empty (10,000 idle sessions cost no
// goroutine and no queue).
type actor struct {
	rt    *Runtime
	id    core.SessionID
	state *core.State
	// lease is the lease the actor holds; its Epoch fences every write
	// and never changes. Its expiry moves on with each renewal: expires.
	lease *store.Lease

	// mu guards the mailbox and the lease's expiry: the fields up to done.
	mu      sync.Mutex
	queue   []request
	spare   []request     // the last batch's slice, reused while busy
	running bool          // a goroutine holds the actor
	stopped bool          // stop was asked: no request is taken any more
	room    chan struct{} // closed when the queue has room; nil when nobody waits
	// fullSince is when the queue filled, zero when it has room; waits
	// counts the senders that found it full since then.
	fullSince time.Time
	waits     int
	expires   time.Time // the lease's expiry, as the last renewal set it
	losing    bool      // the lease is lost or lapsed; the actor stops
	done      chan struct{}

	ctx     context.Context
	cancel  context.CancelFunc
	cancels map[string]context.CancelFunc
	procs   map[core.TaskID]*shell.Process
	started map[core.CallID]time.Time
	// ext are the provider processes of external agents, each with a
	// worker that runs its operations in order.
	ext map[core.AgentID]*extProc

	timer   Timer
	timerAt time.Time
	// trace builds the session's spans; nil when tracing is off.
	trace *sessionTrace

	// poisoned is set when a commit failed: the in-memory state is ahead of
	// the store and must be reloaded before the next step.
	poisoned error
	// stale is set when a commit failed and the state could not be read
	// back from the store: a.state holds steps the store does not, which
	// no read may show (rule 8); reads fail until the retry reloads it.
	stale     error
	deferred  []request
	retryWait time.Duration
	retryT    Timer

	moved bool // the lease was lost
	// movedErr is why, when it is not another node's doing (the lease
	// lapsed during a store outage): requests get it instead of
	// errMoved.
	movedErr error

	sinceSnap int
	// snapBytes is the size of the last snapshot: a large state is
	// snapshotted less often, so snapshots cost time in proportion to the
	// events that pass, not to the square of the session's length.
	snapBytes int
	// snapEnc encodes the snapshots of a busy session: it keeps the
	// encoded full sections of the transcripts, which are then not
	// encoded again. Dropped when the session comes to rest, so that an
	// idle session keeps none of it.
	snapEnc *snapshot.Encoder
	subs    *fanout
	quiet   []chan struct{}
	// proj holds the projection rows not written yet (projection.go).
	proj projector
	// holding is set while the actor's goroutine holds a slot of the
	// runtime's gate: it lets it go while it waits for the store (unhold).
	holding bool
}

const (
	// queueCap bounds the requests waiting for a session's actor: API
	// calls, effect outcomes, timers. It bounds memory too: an idle
	// session's queue is empty and holds nothing.
	queueCap = 64
	// maxBatch bounds the inputs stepped and committed together.
	maxBatch = 256
)

func (r *Runtime) newActor(id core.SessionID, s *core.State, lease *store.Lease) *actor {
	ctx, cancel := context.WithCancel(r.ctx)
	return &actor{
		// The goroutine that makes the actor holds it until start.
		rt: r, id: id, state: s, lease: lease, expires: lease.Expires, running: true, done: make(chan struct{}),
		ctx: ctx, cancel: cancel, cancels: map[string]context.CancelFunc{}, procs: map[core.TaskID]*shell.Process{},
		started: map[core.CallID]time.Time{}, ext: map[core.AgentID]*extProc{}, subs: newFanout(),
		// Its first commit projects what the stored rows miss (a
		// predecessor's last steps).
		proj:  projector{stale: true, lag: projLag(id)},
		trace: r.tracer.session(id),
	}
}

// start lets the actor go. Until then the goroutine that made it holds it
// (it creates or recovers the session) and requests wait in the queue.
func (a *actor) start() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running = false
	if len(a.queue) > 0 || a.stopped {
		a.holdLocked()
	}
}

// stop ends the actor after the step in progress; effects in flight are
// cancelled and the session's commands are stopped, to be recovered as
// interrupted. Requests still queued are not stepped: their callers get
// errRuntimeDone, their effect outcomes are recovered at the next start.
func (a *actor) stop() {
	a.askStop()
	<-a.done
}

// askStop is stop without the wait: done is closed once the actor has
// stopped.
func (a *actor) askStop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.stopped {
		a.stopped = true
		if a.room != nil {
			close(a.room)
			a.room = nil
		}
		a.holdLocked() // the shutdown runs on the actor's goroutine
	}
}

// releaseLease gives up the lease of a stopped actor that did not lose it,
// so that the next owner takes the session over at once (a clean stop).
// Call it only once the actor is done: nothing may be written under the
// epoch after.
func (a *actor) releaseLease() {
	<-a.done
	if !a.moved {
		a.rt.giveUp(a.lease, errRuntimeDone)
	}
}

// holdLocked starts a goroutine to hold the actor unless one holds it.
// Called with a.mu held.
func (a *actor) holdLocked() {
	if a.running {
		return
	}
	a.running = true
	a.rt.wg.Add(1)
	go a.loop()
}

// loop holds the actor: it steps the queued requests batch by batch, and
// ends when the queue is empty, or after the shutdown once stop was asked.
func (a *actor) loop() {
	defer a.rt.wg.Done()
	for {
		batch, ok := a.take()
		if !ok {
			return
		}
		if batch == nil {
			a.shutdown()
			close(a.done)
			return
		}
		a.rt.gate.Acquire(admit.Step)
		a.holding = true
		a.process(batch)
		a.holding = false
		a.rt.gate.Release()
		clear(batch) // the slice is reused: keep nothing of the batch alive
		a.mu.Lock()
		if a.spare == nil {
			a.spare = batch[:0]
		}
		a.mu.Unlock()
	}
}

// take takes the queued requests for a batch. It returns nil, true when
// the actor is to shut down, and false when the queue is empty: the
// goroutine lets the actor go, and the idle actor keeps no queue.
func (a *actor) take() ([]request, bool) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return nil, true
	}
	if len(a.queue) == 0 {
		a.running = false
		a.queue, a.spare = nil, nil
		a.mu.Unlock()
		return nil, false
	}
	var batch []request
	if len(a.queue) <= maxBatch {
		batch, a.queue, a.spare = a.queue, a.spare, nil
	} else {
		batch = slices.Clone(a.queue[:maxBatch])
		a.queue = append(a.queue[:0], a.queue[maxBatch:]...)
	}
	if a.room != nil && len(a.queue) < queueCap {
		close(a.room)
		a.room = nil
	}
	var fullFor time.Duration
	waits := a.waits
	if !a.fullSince.IsZero() && len(a.queue) < queueCap {
		fullFor = max(a.rt.clock.Now().Sub(a.fullSince), time.Nanosecond)
		a.fullSince, a.waits = time.Time{}, 0
	}
	a.mu.Unlock()
	if fullFor > 0 {
		a.rt.log.Info("session queue has room again", "session", a.id, "full_for", fullFor, "waits", waits)
	}
	return batch, true
}

// put queues r for the actor. While the queue is full it waits for room
// (backpressure): counted in Runtime.queueWaits and told to the observer
// each time, logged at warn once per episode. It returns errRuntimeDone
// once the actor stopped, and when ctx ends first an error that says the
// queue stayed full and r was not taken.
func (a *actor) put(ctx context.Context, r request) error {
	for {
		a.mu.Lock()
		if a.stopped {
			a.mu.Unlock()
			return errRuntimeDone
		}
		if len(a.queue) < queueCap {
			a.queue = append(a.queue, r)
			a.holdLocked()
			a.mu.Unlock()
			return nil
		}
		if a.room == nil {
			a.room = make(chan struct{})
		}
		room := a.room
		first := a.fullSince.IsZero()
		if first {
			a.fullSince = a.rt.clock.Now()
		}
		a.waits++
		a.mu.Unlock()
		a.rt.queueWaits.Add(1)
		if first {
			a.rt.log.Warn("session queue full; callers wait for room", "session", a.id, "queue", queueCap)
		}
		if o, ok := a.rt.opts.Observer.(QueueObserver); ok {
			o.QueueFull(SessionID(a.id))
		}
		select {
		case <-room:
		case <-ctx.Done():
			return &Error{Code: CodeOf(ctx.Err()), Err: ctx.Err(), Message: fmt.Sprintf(
				"session %s is busy: its queue of %d requests stayed full until this request gave up (%v); nothing of it was taken", a.id, queueCap, ctx.Err())}
		}
	}
}

// signal queues a request of the runtime's own (a lease's loss, a retry)
// past the bound: it never waits, so the actor may signal itself. Each
// kind has at most one in the queue at a time.
func (a *actor) signal(r request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	a.queue = append(a.queue, r)
	a.holdLocked()
}

func (a *actor) shutdown() {
	a.mu.Lock()
	a.queue, a.spare = nil, nil // their callers see done
	a.mu.Unlock()
	if a.moved {
		// The session belongs to another owner now (or to nobody until one
		// adopts it): this runtime forgets it, so it may adopt it again.
		a.rt.mu.Lock()
		if a.rt.actors[a.id] == a {
			delete(a.rt.actors, a.id)
		}
		a.rt.mu.Unlock()
	} else {
		// A clean stop writes the summary rows still pending; whoever
		// recovers the session projects them again otherwise.
		a.flushProjection()
		a.snapshotAtStop()
	}
	if a.proj.timer != nil {
		a.proj.timer.Stop()
	}
	a.cancel()
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.retryT != nil {
		a.retryT.Stop()
	}
	for _, w := range a.quiet {
		close(w)
	}
	a.quiet = nil
	a.subs.closeAll()
	for _, x := range a.ext {
		x.stop()
	}
	// Nothing outlives its process (rule 7): the session's commands end
	// with it here, whether the runtime closes or a successor owns the
	// session now; whoever recovers it marks their tasks interrupted.
	for _, p := range a.procs {
		p.Stop()
	}
	for _, p := range a.procs {
		<-p.Done()
	}
}

// submit hands an input to the actor and, for API inputs, waits for the
// committed output.
func (a *actor) submit(ctx context.Context, in core.Input) (core.Output, error) {
	return a.submitView(ctx, in, nil)
}

// submitView is submit with view run on the actor after the commit,
// before the reply, when the input succeeded.
func (a *actor) submitView(ctx context.Context, in core.Input, view func(s *core.State, out core.Output)) (core.Output, error) {
	reply := make(chan core.Output, 1)
	if err := a.put(ctx, request{input: in, reply: reply, view: view}); err != nil {
		return core.Output{}, err
	}
	select {
	case out := <-reply:
		return out, out.Err
	case <-a.done:
		return core.Output{}, errRuntimeDone
	case <-ctx.Done():
		return core.Output{}, ctx.Err()
	}
}

// submitEffect hands an effect's outcome to the actor, waiting for room
// while its queue is full. It never fails: if the actor is gone the
// outcome is recovered at the next start.
func (a *actor) submitEffect(in core.Input) {
	// Outcomes are kept whatever they hold: text no store can keep (a NUL
	// byte a command printed) is replaced before the core sees it, so the
	// state and the store agree.
	if c, changed := textcheck.Clean(in); changed {
		a.rt.log.Debug("an outcome held NUL bytes or invalid UTF-8; replaced with U+FFFD", "session", a.id, "input", fmt.Sprintf("%T", in))
		in = c
	}
	_ = a.put(context.Background(), request{input: in, effect: true})
}

// submitControl runs fn on the actor goroutine, without waiting for it to
// run; it waits for room while the queue is full. Not for the actor's own
// goroutine, which uses signal.
func (a *actor) submitControl(fn func()) {
	_ = a.put(context.Background(), request{fn: fn})
}

// view runs fn on the actor goroutine and waits for it. When it returns
// early (ctx ended, the actor stopped), fn has finished or will never run:
// fn writes its caller's variables, which the caller reads once view
// returns, error or not.
func (a *actor) view(ctx context.Context, fn func(s *core.State)) error {
	var mu sync.Mutex // held while fn runs
	abandoned := false
	done := make(chan struct{})
	var unreadable error
	if err := a.put(ctx, request{fn: func() {
		mu.Lock()
		defer mu.Unlock()
		if !abandoned {
			if unreadable = a.unreadable(); unreadable == nil {
				fn(a.state)
			}
			close(done)
		}
	}}); err != nil {
		return err
	}
	var err error
	select {
	case <-done:
		return unreadable
	case <-a.done:
		err = errRuntimeDone
	case <-ctx.Done():
		err = ctx.Err()
	}
	mu.Lock() // waits for fn if it is running
	abandoned = true
	mu.Unlock()
	return err
}

// unreadable says why a.state must not be read, or nil: after a lost
// lease it may hold a step the store refused (the new owner's state is
// the truth), and after a failed commit it may hold steps the store does
// not keep until the retry reloads it. A read never shows what the store
// may not keep (rule 8).
func (a *actor) unreadable() error {
	switch {
	case a.moved:
		why := a.movedErr
		if why == nil {
			why = errMoved
		}
		return fmt.Errorf("session %s: %w", a.id, why)
	case a.stale != nil:
		return fmt.Errorf("session %s: %w: its last step could not be stored, nor its stored state read back (%v); reads resume when the store answers reads, steps when it accepts writes", a.id, errStoreDown, a.stale)
	}
	return nil
}

// process steps a batch of inputs and commits their events in one append.
func (a *actor) process(batch []request) {
	if a.moved {
		why := a.movedErr
		if why == nil {
			why = errMoved
		}
		for _, r := range batch {
			if r.reply != nil {
				r.reply <- core.Output{Err: fmt.Errorf("session %s: %w", a.id, why)}
			}
		}
		return
	}
	if a.poisoned != nil {
		// The store failed; inputs wait for the retry, API requests are
		// refused with the cause.
		for i, r := range batch {
			if a.poisoned == nil {
				a.process(batch[i:]) // the retry succeeded mid-batch
				return
			}
			switch {
			case r.fn != nil:
				r.fn()
			case r.effect:
				a.deferred = append(a.deferred, r)
			case r.reply != nil:
				r.reply <- core.Output{Err: fmt.Errorf("session %s: %w: %v (nothing of this request was kept)", a.id, errStoreDown, a.poisoned)}
			}
		}
		return
	}
	if len(a.deferred) > 0 {
		batch = append(a.deferred, batch...)
		a.deferred = nil
	}
	if !slices.ContainsFunc(batch, func(r request) bool { return r.fn == nil }) {
		// Only reads and controls: nothing to step, commit or start.
		for _, r := range batch {
			r.fn()
		}
		return
	}
	now := a.rt.clock.Now()
	var events []core.Event
	var effects []core.Effect
	var fns []func()
	outs := make([]core.Output, len(batch))
	for i, r := range batch {
		if r.fn != nil {
			// Reads and controls run once the batch is committed: they
			// never see a state the store may not keep (rule 8).
			fns = append(fns, r.fn)
			continue
		}
		a.forget(r.input)
		out := a.rt.core.Step(a.state, now, r.input)
		outs[i] = out
		events = append(events, out.Events...)
		effects = append(effects, out.Effects...)
	}
	if len(events) > 0 {
		if _, err := a.commit(a.ctx, events); err != nil {
			a.commitFailed(batch, err)
			for _, fn := range fns {
				fn()
			}
			return
		}
	}
	for i, r := range batch {
		if r.reply != nil {
			if r.view != nil && outs[i].Err == nil {
				r.view(a.state, outs[i])
			}
			r.reply <- outs[i]
		}
	}
	a.after(events, effects)
	for _, fn := range fns {
		fn()
	}
}

// unhold lets the gate's slot go before the actor waits for the store,
// and returns the function that takes a slot again after, ahead of new
// work: a commit's waiters share a group commit, and a slot held while
// waiting would serve nobody (nor may a store that hangs keep the node's
// slots from the other sessions). Nested calls are no-ops.
func (a *actor) unhold() func() {
	if !a.holding {
		return func() {}
	}
	a.holding = false
	a.rt.gate.Release()
	return a.rehold
}

func (a *actor) rehold() {
	a.rt.gate.Acquire(admit.Resume)
	a.holding = true
}

// load reads the session's state from the store (loadState) without
// holding a slot of the gate.
func (a *actor) load() (*core.State, error) {
	defer a.unhold()()
	return loadState(a.ctx, a.rt.st, string(a.id))
}

// forget drops the cancel function of an effect whose outcome arrived.
func (a *actor) forget(in core.Input) {
	switch in := in.(type) {
	case core.ModelResponded:
		a.endCall(in.Call, nil)
	case core.ModelFailed:
		a.endCall(in.Call, errors.New(in.Error))
	case core.ToolDone:
		delete(a.cancels, "tool/"+string(in.Agent)+"/"+in.UseID)
	case core.ProcessExited:
		delete(a.procs, in.Task)
	case core.Tick:
		a.timerAt = time.Time{} // the timer fired; armTimer sets the next
	case core.ProviderExited:
		if x := a.ext[in.Agent]; x != nil && x.isExited() {
			x.stop()
			delete(a.ext, in.Agent)
		}
	}
}

func (a *actor) endCall(id core.CallID, err error) {
	delete(a.cancels, "call/"+string(id))
	if t, ok := a.started[id]; ok {
		delete(a.started, id)
		if o := a.rt.opts.Observer; o != nil {
			o.ModelCall(a.state.Session.Provider, a.rt.clock.Now().Sub(t), err)
		}
	}
}

// commit appends events and their projection, fenced by the lease epoch.
func (a *actor) commit(ctx context.Context, events []core.Event) ([]store.Record, error) {
	recs := make([]store.Record, len(events))
	for i, e := range events {
		data, err := json.Marshal(e.Body)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", e.Body.Type(), err)
		}
		recs[i] = store.Record{Session: string(a.id), Seq: e.Seq, At: e.At, Type: e.Body.Type(), Data: data}
	}
	proj := a.projection(ctx, events)
	rehold := a.unhold()
	res, err := a.rt.st.EventAppend(ctx, &store.EventAppendParams{
		Session: string(a.id), Epoch: a.lease.Epoch, Records: recs, Projection: proj,
	})
	rehold()
	a.projected(err)
	if err != nil {
		return nil, err
	}
	for i := range recs {
		if i < len(res.Globals) {
			recs[i].Global = res.Globals[i]
		}
	}
	for _, k := range res.DuplicateNotes {
		a.rt.log.Warn("notification write was a no-op: key exists", "session", a.id, "key", k)
		if o := a.rt.opts.Observer; o != nil {
			o.Dropped(SessionID(a.id), "notification "+k, "duplicate-notification")
		}
	}
	a.publish(recs)
	return recs, nil
}

// commitFailed handles a refused commit. A lost lease ends the actor.
// Otherwise the in-memory state is ahead of the store: it is reloaded
// when the store answers again, and the effect outcomes of the batch are
// stepped again then. API requests get the error; nothing of them was kept.
func (a *actor) commitFailed(batch []request, err error) {
	if errors.Is(err, store.ErrFenced) {
		a.rt.log.Error("session lease lost; another node owns it now", "session", a.id, "err", err)
		a.moved = true
		for _, r := range batch {
			if r.reply != nil {
				r.reply <- core.Output{Err: fmt.Errorf("session %s: %w", a.id, errMoved)}
			}
		}
		go a.stop()
		return
	}
	if errors.Is(err, store.ErrRefused) {
		a.refused(batch, err)
		return
	}
	a.poisoned = err
	a.rt.log.Error("commit failed; session paused until the store accepts writes", "session", a.id, "err", err)
	// The state holds the batch's steps, which the store did not take:
	// reads see the stored state instead, read back now (a store that
	// refuses writes often still answers reads), or fail until the retry.
	if s, lerr := a.load(); lerr == nil {
		a.state, a.stale = s, nil
	} else {
		a.stale = fmt.Errorf("store: %v; read back: %w", err, lerr)
		a.rt.log.Warn("the stored state could not be read back either; reads fail until the retry", "session", a.id, "err", lerr)
	}
	for _, r := range batch {
		switch {
		case r.effect:
			a.deferred = append(a.deferred, r)
		case r.reply != nil:
			r.reply <- core.Output{Err: fmt.Errorf("session %s: %w: %v (nothing of this request was kept)", a.id, errStoreDown, err)}
		}
	}
	a.scheduleRetry()
}

// refused handles a commit the store refused for good (ErrRefused): what
// the batch held can never be written as it is, and retrying it would jam
// the session (an input of the batch would be refused at every retry). The
// state is reloaded and each input is stepped and committed alone: the ones
// the store takes go on; an API request it refuses gets an error, and an
// effect outcome it refuses is replaced by its failure (refusedInput), so
// the run that waits on it goes on. When the store fails otherwise on the
// way, the rest of the batch goes to commitFailed, which pauses the
// session as for any failure.
func (a *actor) refused(batch []request, cause error) {
	a.rt.log.Error("the store refused a commit for good; stepping its inputs one by one", "session", a.id, "err", cause)
	for i, r := range batch {
		if r.fn != nil {
			continue // process runs the batch's reads after the commit
		}
		s, err := a.load()
		if err != nil {
			a.commitFailed(batch[i:], err)
			return
		}
		a.state = s
		in := r.input
		for attempt := 0; ; attempt++ {
			out := a.rt.core.Step(a.state, a.rt.clock.Now(), in)
			var err error
			if len(out.Events) > 0 {
				_, err = a.commit(a.ctx, out.Events)
			}
			if err == nil {
				if r.reply != nil {
					if r.view != nil && out.Err == nil {
						r.view(a.state, out)
					}
					r.reply <- out
				}
				a.after(out.Events, out.Effects)
				break
			}
			if !errors.Is(err, store.ErrRefused) {
				a.commitFailed(batch[i:], err)
				return
			}
			refusal := err
			if a.state, err = a.load(); err != nil {
				a.commitFailed(batch[i:], err)
				return
			}
			var ok bool
			if r.effect && attempt == 0 {
				in, ok = refusedInput(in, refusal)
			}
			if !ok {
				a.rt.log.Error("the store refused a step; it was dropped", "session", a.id, "input", fmt.Sprintf("%T", r.input), "err", refusal)
				if r.reply != nil {
					r.reply <- core.Output{Err: &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("session %s: the store refused this request for good (nothing of it was kept): %v", a.id, refusal)}}
				}
				break
			}
			a.rt.log.Error("the store refused an outcome; recording its failure instead", "session", a.id, "input", fmt.Sprintf("%T", r.input), "err", refusal)
		}
	}
}

// refusedInput is the failure that stands for an effect outcome the store
// refused, so that what waits on the outcome is answered.
func refusedInput(in core.Input, err error) (core.Input, bool) {
	why := fmt.Sprintf("vigil could not store this outcome (%v); it is lost", err)
	switch in := in.(type) {
	case core.ModelResponded:
		return core.ModelFailed{Agent: in.Agent, Call: in.Call, Error: "the model's reply: " + why, Kind: core.FailTransient}, true
	case core.ToolDone:
		return core.ToolDone{Agent: in.Agent, UseID: in.UseID, Result: "Error: the tool's result: " + why, IsError: true}, true
	case core.ProcessExited:
		in.Tail = "[the output's tail: " + why + "]"
		return in, true
	}
	return nil, false
}

func (a *actor) scheduleRetry() {
	switch {
	case a.retryWait == 0:
		a.retryWait = 200 * time.Millisecond
	case a.retryWait < 30*time.Second:
		a.retryWait *= 2
	}
	a.retryT = a.rt.clock.AfterFunc(a.retryWait, func() { a.signal(request{fn: a.retry}) })
}

// retry reloads the state from the store; the deferred inputs are stepped
// with the next batch.
func (a *actor) retry() {
	if a.poisoned == nil {
		return
	}
	s, err := a.load()
	if err == nil {
		// Reads see the stored state from now on, whether or not writes
		// are accepted yet.
		a.state, a.stale = s, nil
		// Probe that writes are accepted again: the snapshot write is fenced
		// like an append and harmless to repeat.
		err = a.saveSnapshot(s)
	}
	if err != nil {
		a.rt.log.Warn("store still failing; retrying", "session", a.id, "err", err, "waiting_inputs", len(a.deferred), "next_try", a.retryWait)
		if errors.Is(err, store.ErrFenced) {
			a.moved = true
			go a.stop()
			return
		}
		a.scheduleRetry()
		return
	}
	a.rt.log.Info("store accepts writes again; session resumes", "session", a.id, "waiting_inputs", len(a.deferred))
	a.state, a.poisoned, a.stale, a.retryWait = s, nil, nil, 0
	// A commit that failed may have landed (a lost COMMIT): what the store
	// holds in flight is started again unless it still runs here. The
	// deadline timer and the waiters follow the reloaded state.
	a.after(nil, core.InFlight(s))
	if len(a.deferred) > 0 {
		// A batch to carry the deferred inputs.
		a.signal(request{fn: func() {}})
	}
}

// restSnapshotMin is how many events since the last snapshot make a
// commit that leaves the session quiescent save one (snapshotAtRest).
const restSnapshotMin = 16

// behind reports whether least events or more passed since the last
// snapshot, and one per KiB of it: snapshots then cost at most a KiB per
// event that passed, whatever the state's size.
func (a *actor) behind(least int) bool {
	return a.sinceSnap >= max(least, a.snapBytes/1024)
}

// snapshotAtStop saves a snapshot when the session stops cleanly and is
// behind (any event since the last snapshot, at a KiB per event): the
// next owner (a restart, another node taking over) reads it instead of
// replaying them. Measured with 10,000 sessions of 100 inputs each,
// Open took 5.7-7.7 s on SQLite replaying a million events one session's
// steps at a time, scattered through the log.
func (a *actor) snapshotAtStop() {
	if a.behind(1) {
		a.snapshotNow("snapshot at stop failed; the next owner replays the events since the last one")
	}
}

// snapshotAtRest saves a snapshot when a commit leaves the session
// quiescent and it is behind by restSnapshotMin events or more. A stop
// after a crash saves nothing, so the restart replays each session's
// events since its last snapshot, read one step at a time from all over
// the log (16 µs an event on SQLite, 10,000 sessions of 100 inputs each
// on a 2-core machine): a session at rest leaves fewer than
// restSnapshotMin of them.
func (a *actor) snapshotAtRest() {
	if a.behind(restSnapshotMin) {
		a.snapshotNow("snapshot of a session at rest failed; a restart replays the events since the last one")
	}
}

// snapshotNow saves a snapshot of the state, unless it is not the
// committed one, and logs failure at warn with msg.
func (a *actor) snapshotNow(msg string) {
	if a.poisoned != nil || a.stale != nil {
		return
	}
	if err := a.saveSnapshot(a.state); err != nil {
		a.rt.log.Warn(msg, "session", a.id, "err", err)
		return
	}
	a.sinceSnap = 0
}

func (a *actor) saveSnapshot(s *core.State) error {
	if a.snapEnc == nil {
		a.snapEnc = snapshot.NewEncoder()
	}
	data, err := a.snapEnc.Encode(s)
	if err != nil {
		return err
	}
	a.snapBytes = len(data)
	defer a.unhold()()
	return a.rt.st.SnapshotSave(a.ctx, &store.SnapshotSaveParams{Session: string(a.id), Epoch: a.lease.Epoch, Seq: s.Seq, Data: data})
}

// after runs once a batch is committed: logs drops, settles waiters, starts
// effects, re-arms the deadline timer and snapshots now and then.
func (a *actor) after(events []core.Event, effects []core.Effect) {
	for _, e := range events {
		switch b := e.Body.(type) {
		case *core.SessionClosed:
			// Counted in the runtime's group (this actor's count keeps
			// it above zero here): Close returns after the cleanup,
			// whose warnings go to a log the embedder may close then.
			a.rt.wg.Go(func() { a.rt.cleanupSession(a.id) })
		case *core.Dropped:
			a.rt.log.Warn("dropped", "session", a.id, "what", b.What, "reason", b.Reason, "detail", b.Detail)
			if o := a.rt.opts.Observer; o != nil {
				o.Dropped(SessionID(a.id), b.What, b.Reason)
			}
		}
	}
	if o := a.rt.opts.Observer; o != nil && len(events) > 0 {
		observe(o, a.id, a.state, events)
	}
	if a.trace != nil && len(events) > 0 {
		a.trace.observe(a.state, events)
	}
	a.startEffects(effects)
	a.armTimer()
	a.sinceSnap += len(events)
	if a.behind(a.rt.opts.SnapshotEvery) {
		if err := a.saveSnapshot(a.state); err != nil {
			a.rt.log.Warn("snapshot failed; recovery will replay more events", "session", a.id, "err", err)
		} else {
			a.sinceSnap = 0
		}
	}
	if a.state.Quiescent() {
		// Before the waiters: one that crashes the process finds it.
		a.snapshotAtRest()
		a.snapEnc = nil
		for _, w := range a.quiet {
			close(w)
		}
		a.quiet = nil
	}
}

// armTimer keeps one timer at the state's next deadline (DESIGN rule 4).
func (a *actor) armTimer() {
	next := core.NextDeadline(a.state)
	if next.Equal(a.timerAt) {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.timerAt = next
	if next.IsZero() {
		return
	}
	d := next.Sub(a.rt.clock.Now())
	a.timer = a.rt.clock.AfterFunc(max(d, 0), func() { a.submitEffect(core.Tick{}) })
}

// leaseExpires is when the actor's lease runs out unless renewed.
func (a *actor) leaseExpires() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.expires, a.losing
}

// renewed records a renewal of the actor's lease (by the runtime's
// renewal round, which renews every session's lease at once).
func (a *actor) renewed(expires time.Time) {
	a.mu.Lock()
	if !a.losing {
		a.expires = expires
	}
	a.mu.Unlock()
}

// loseLease stops the actor because its lease is gone: lost to another
// owner (why nil), or lapsed without renewal while the store could not be
// written (why says so). Once.
func (a *actor) loseLease(why error) {
	a.mu.Lock()
	if a.losing {
		a.mu.Unlock()
		return
	}
	a.losing = true
	a.mu.Unlock()
	a.signal(request{fn: func() {
		if a.moved {
			return
		}
		if why == nil {
			a.rt.log.Error("session lease lost; stopping the session here", "session", a.id)
		} else {
			// The lease ran out without a renewal: another node may own
			// the session now. Stop acting for it (its processes end)
			// before two nodes act at once; it is adopted again when the
			// store answers.
			a.rt.log.Error("session lease expired without renewal; stopping the session here", "session", a.id, "err", why)
			a.movedErr = fmt.Errorf("%w: the session's lease lapsed while the store could not be written (%v); this node takes it back when the store answers", errStoreDown, why)
			if a.rt.cl != nil {
				// Another node may run it now: the caller looks for it.
				a.movedErr = fmt.Errorf("%w: the session's lease lapsed without renewal (%v)", errMoved, why)
			}
		}
		a.moved = true
		go a.stop()
	}})
}

// killStale ends processes a previous owner of the session left behind,
// before recovery reports anything (rule 7: a task is not reported ended
// while a process of it lives). With cgroups that is every process in the
// session's groups; without, the process groups of the recorded leaders.
// scan, when not nil, is what the recovery pass found under the cgroup
// roots (killSessionGroups).
func (a *actor) killStale(scan *groupScan) {
	var groups []string
	for _, id := range a.state.Order {
		ag := a.state.Agents[id]
		if ag.Cgroup != "" {
			groups = append(groups, ag.Cgroup)
		}
		if ag.PID == 0 {
			continue
		}
		if killed, err := shell.KillStale(ag.PID, ag.StartTicks); err != nil {
			a.rt.log.Warn("could not check a stale provider process", "session", a.id, "agent", id, "pid", ag.PID, "err", err)
		} else if killed {
			a.rt.log.Warn("ended a provider process left by the previous vigil", "session", a.id, "agent", id, "pid", ag.PID)
		}
	}
	for _, id := range a.state.TaskOrder {
		t := a.state.Tasks[id]
		if t.Kind != core.TaskShell || !t.Status.Live() {
			continue
		}
		if t.Cgroup != "" {
			groups = append(groups, t.Cgroup)
		}
		if t.PID == 0 {
			continue
		}
		killed, err := shell.KillStale(t.PID, t.StartTicks)
		switch {
		case err != nil:
			a.rt.log.Warn("could not check a stale process", "session", a.id, "task", id, "pid", t.PID, "err", err)
		case killed:
			a.rt.log.Warn("ended a process left by the previous vigil", "session", a.id, "task", id, "pid", t.PID)
		}
	}
	if n := a.killSessionGroups(groups, scan); n > 0 {
		a.rt.log.Warn("ended processes left by the previous vigil", "session", a.id, "processes", n)
	}
}
