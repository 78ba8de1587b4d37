package vigil

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// renewStore is a memstore that reports each LeaseRenew call (after it
// ran). Once blockList is set, SessionList blocks until its context ends:
// an adoption scan that hangs. Once blockRenew is set, LeaseRenew says so
// on entered and blocks until its context ends: a store that does not
// answer.
type renewStore struct {
	*memstore.Store
	calls      chan store.LeaseRenewParams
	entered    chan struct{}
	blockList  atomic.Bool
	blockRenew atomic.Bool
}

func newRenewStore() *renewStore {
	return &renewStore{Store: memstore.New(), calls: make(chan store.LeaseRenewParams, 64), entered: make(chan struct{}, 64)}
}

func (s *renewStore) LeaseRenew(ctx context.Context, p *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	if s.blockRenew.Load() {
		s.entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	res, err := s.Store.LeaseRenew(ctx, p)
	q := *p
	q.Leases = slices.Clone(p.Leases)
	s.calls <- q
	return res, err
}

func (s *renewStore) SessionList(ctx context.Context, p *store.SessionListParams) ([]store.SessionRow, error) {
	if s.blockList.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.SessionList(ctx, p)
}

// nextRenew waits for the next LeaseRenew call.
func (s *renewStore) nextRenew(t *testing.T, what string) store.LeaseRenewParams {
	t.Helper()
	select {
	case p := <-s.calls:
		return p
	case <-time.After(20 * time.Second):
		t.Fatalf("no LeaseRenew call %s", what)
	}
	panic("unreachable")
}

// failedRounds is a log handler that passes records on to next and says
// on failed when a renewal round that failed is over: the test moves the
// clock on only then, as it would not move during the round.
type failedRounds struct {
	slog.Handler
	failed chan struct{}
}

func (h failedRounds) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "lease renewal failed; will retry" {
		defer func() { h.failed <- struct{}{} }()
	}
	return h.Handler.Handle(ctx, r)
}

func (h failedRounds) WithAttrs(as []slog.Attr) slog.Handler {
	return failedRounds{h.Handler.WithAttrs(as), h.failed}
}

func (h failedRounds) WithGroup(name string) slog.Handler {
	return failedRounds{h.Handler.WithGroup(name), h.failed}
}

// roundFailed waits until a renewal round that failed is over.
func roundFailed(t *testing.T, failed chan struct{}, what string) {
	t.Helper()
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatalf("the renewal round %s did not fail", what)
	}
}

// renewRuntime opens a runtime on st with a manual clock and a 30 s lease
// (a renewal round every 10 s) and creates n idle sessions on it. failed
// hears of each renewal round that failed, once it is over.
func renewRuntime(t *testing.T, st store.Store, n int) (rt *Runtime, clock *manualClock, ids []SessionID, failed chan struct{}) {
	t.Helper()
	sc, err := script.Parse([]byte(idleScenario))
	must(t, err)
	clock = &manualClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	failed = make(chan struct{}, 64)
	rt = openWith(t, st, sc, func(o *Options) {
		o.Clock, o.LeaseTTL = clock, 30*time.Second
		o.Logger = slog.New(failedRounds{o.Logger.Handler(), failed})
	})
	ctx := context.Background()
	ids = make([]SessionID, n)
	for i := range ids {
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hello"})
		must(t, err)
		ids[i] = sess.ID
		must(t, rt.WaitQuiescent(ctx, sess.ID))
	}
	return rt, clock, ids, failed
}

func actorOf(t *testing.T, rt *Runtime, id SessionID) *actor {
	t.Helper()
	a, err := rt.actor(string(id))
	must(t, err)
	return a
}

func waitDone(t *testing.T, a *actor, what string) {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not stop", what)
	}
}

func stopped(a *actor) bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// TestRenewalOneCallPerRound: a renewal round renews every session's lease
// in one LeaseRenew call, and the renewal moves each lease's expiry on:
// when the store fails after a round, the sessions stop when the lease that
// round gave them lapses, not before. Before, every session renewed alone:
// 40 calls a round here, 1,000 writes a second at 10,000 sessions.
func TestRenewalOneCallPerRound(t *testing.T) {
	st := newRenewStore()
	rt, clock, ids, failed := renewRuntime(t, st, 40)
	for round := 1; round <= 2; round++ {
		clock.advance(10 * time.Second) // t0+10s, t0+20s
		p := st.nextRenew(t, "in a renewal round")
		if len(p.Leases) != len(ids) {
			t.Fatalf("round %d: a LeaseRenew call renewed %d leases, want all %d sessions' in one call", round, len(p.Leases), len(ids))
		}
		if p.Owner != "test" || p.TTL != 30*time.Second {
			t.Fatalf("round %d: renewed for %q with TTL %s", round, p.Owner, p.TTL)
		}
		for _, id := range ids {
			if !slices.ContainsFunc(p.Leases, func(l store.LeaseRef) bool { return l.Session == string(id) }) {
				t.Fatalf("round %d: session %s was not renewed", round, id)
			}
		}
	}
	if len(st.calls) != 0 {
		t.Fatalf("%d more LeaseRenew calls in two rounds", len(st.calls))
	}
	// The leases run to t0+50s now. With the store failing, the rounds at
	// 30 and 40 s renew nothing and stop nobody: the round at 50 s still
	// asks for every lease. It stops them all.
	actors := make([]*actor, len(ids))
	for i, id := range ids {
		actors[i] = actorOf(t, rt, id)
	}
	st.FailWrites(store.ErrFull)
	for _, at := range []string{"30s", "40s", "50s"} {
		clock.advance(10 * time.Second)
		if p := st.nextRenew(t, "at t0+"+at); len(p.Leases) != len(ids) {
			t.Fatalf("at t0+%s the round renewed %d leases, want %d: sessions stopped before their renewed lease lapsed", at, len(p.Leases), len(ids))
		}
		roundFailed(t, failed, "at t0+"+at)
	}
	for i, a := range actors {
		waitDone(t, a, "session "+string(ids[i])+" whose lease lapsed at t0+50s")
	}
}

// TestLostLeaseStopsOnlyThatSession: a round that finds one session's
// lease taken by another owner stops that session, and only it; the
// others are renewed and go on.
func TestLostLeaseStopsOnlyThatSession(t *testing.T) {
	st := newRenewStore()
	rt, clock, ids, _ := renewRuntime(t, st, 5)
	ctx := context.Background()
	lost := actorOf(t, rt, ids[0])
	if _, err := st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: string(ids[0]), Owner: "other", TTL: time.Hour, Now: clock.Now(), Steal: "test"}); err != nil {
		t.Fatal(err)
	}
	others := make([]*actor, 0, len(ids)-1)
	for _, id := range ids[1:] {
		others = append(others, actorOf(t, rt, id))
	}
	clock.advance(10 * time.Second)
	if p := st.nextRenew(t, "in the first round"); len(p.Leases) != len(ids) {
		t.Fatalf("the round renewed %d leases, want %d", len(p.Leases), len(ids))
	}
	waitDone(t, lost, "the session whose lease another owner took")
	if _, err := rt.Prompt(ctx, ids[0], &PromptParams{Text: "still yours?"}); !errors.Is(err, ErrMoved) {
		t.Fatalf("a prompt to the lost session: %v, want ErrMoved", err)
	}
	clock.advance(10 * time.Second)
	p := st.nextRenew(t, "in the second round")
	if len(p.Leases) != len(ids)-1 || slices.ContainsFunc(p.Leases, func(l store.LeaseRef) bool { return l.Session == string(ids[0]) }) {
		t.Fatalf("the second round renewed %v, want the %d other sessions", p.Leases, len(ids)-1)
	}
	for i, a := range others {
		if stopped(a) {
			t.Fatalf("session %s stopped with another session's lease", ids[i+1])
		}
		if _, err := rt.Prompt(ctx, ids[i+1], &PromptParams{Text: "and you?"}); err != nil {
			t.Fatalf("session %s after another lost its lease: %v", ids[i+1], err)
		}
		must(t, rt.WaitQuiescent(ctx, ids[i+1]))
	}
}

// TestRenewalOutageStopsLapsedSessions: while the store fails, each
// session stops when its own lease lapses, and a request to it then says
// the store is unavailable (never "no such session"); once the store
// answers, a request takes it back.
func TestRenewalOutageStopsLapsedSessions(t *testing.T) {
	st := newRenewStore()
	rt, clock, ids, failed := renewRuntime(t, st, 1) // lease to t0+30s
	ctx := context.Background()
	clock.advance(5 * time.Second)
	late, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hello"}) // lease to t0+35s
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, late.ID))
	early, later := actorOf(t, rt, ids[0]), actorOf(t, rt, late.ID)
	st.FailWrites(store.ErrFull)
	for _, d := range []time.Duration{5 * time.Second, 10 * time.Second} { // t0+10s, t0+20s
		clock.advance(d)
		if p := st.nextRenew(t, "in the outage"); len(p.Leases) != 2 {
			t.Fatalf("a round in the outage asked for %d leases, want 2: a session stopped before its lease lapsed", len(p.Leases))
		}
		roundFailed(t, failed, "in the outage")
	}
	clock.advance(10 * time.Second) // t0+30s: the first lease lapses
	st.nextRenew(t, "at t0+30s")
	roundFailed(t, failed, "at t0+30s")
	waitDone(t, early, "the session whose lease lapsed at t0+30s")
	if stopped(later) {
		t.Fatal("the session whose lease runs to t0+35s stopped at t0+30s")
	}
	_, err = rt.Prompt(ctx, ids[0], &PromptParams{Text: "during"})
	wantStoreDown(t, "a prompt to the lapsed session", err)
	clock.advance(10 * time.Second) // t0+40s
	if p := st.nextRenew(t, "at t0+40s"); len(p.Leases) != 1 || p.Leases[0].Session != string(late.ID) {
		t.Fatalf("at t0+40s the round asked for %v, want only the later session's lease", p.Leases)
	}
	roundFailed(t, failed, "at t0+40s")
	waitDone(t, later, "the session whose lease lapsed at t0+35s")

	st.FailWrites(nil)
	// The first request takes the session back; while an adoption scan
	// takes it at that moment it answers ErrRecovering, once each scan
	// (it waits for the scan's takeover to end).
	for attempt := 0; ; attempt++ {
		_, err := rt.Prompt(ctx, ids[0], &PromptParams{Text: "after"})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrRecovering) || attempt == 3 {
			t.Fatalf("a prompt once the store answers again: %v", err)
		}
	}
	must(t, rt.WaitQuiescent(ctx, ids[0]))
}

// TestAdoptionDoesNotDelayRenewal: an adoption scan that hangs (its store
// read never answers) does not hold up the renewals. Before, the scan ran
// in the renewal loop after each round, and no round came after it.
func TestAdoptionDoesNotDelayRenewal(t *testing.T) {
	st := newRenewStore()
	_, clock, ids, _ := renewRuntime(t, st, 3)
	st.blockList.Store(true)
	for round := 1; round <= 3; round++ {
		clock.advance(10 * time.Second)
		if p := st.nextRenew(t, "while an adoption scan hangs"); len(p.Leases) != len(ids) {
			t.Fatalf("round %d renewed %d leases, want %d", round, len(p.Leases), len(ids))
		}
	}
}

// TestHungRenewalStillStopsLapsedSessions: a LeaseRenew call that never
// answers is given up after a round, so the rounds go on and a session
// still stops when its lease lapses.
func TestHungRenewalStillStopsLapsedSessions(t *testing.T) {
	st := newRenewStore()
	rt, clock, ids, failed := renewRuntime(t, st, 2) // leases to t0+30s
	actors := []*actor{actorOf(t, rt, ids[0]), actorOf(t, rt, ids[1])}
	st.blockRenew.Store(true)
	entered := func(what string) {
		t.Helper()
		select {
		case <-st.entered:
		case <-time.After(20 * time.Second):
			t.Fatalf("no LeaseRenew call %s", what)
		}
	}
	clock.advance(10 * time.Second) // t0+10s: the call hangs
	entered("at t0+10s")
	clock.advance(10 * time.Second) // t0+20s: given up; the next round's call hangs
	roundFailed(t, failed, "that hung at t0+10s")
	entered("at t0+20s")
	for i, a := range actors {
		if stopped(a) {
			t.Fatalf("session %s stopped at t0+20s, before its lease lapsed", ids[i])
		}
	}
	clock.advance(10 * time.Second) // t0+30s: given up; the leases lapsed
	roundFailed(t, failed, "that hung at t0+20s")
	for i, a := range actors {
		waitDone(t, a, "session "+string(ids[i])+" whose lease lapsed while the store did not answer")
	}
}
