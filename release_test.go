package vigil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/sqlite"
)

// logRecord is a log record as logRecorder keeps it.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r logRecord) String() string {
	return fmt.Sprintf("%s %q %v", r.level, r.msg, r.attrs)
}

// logRecorder is a log handler that keeps every record of Info and above,
// and passes those of Warn and above on to the test's log.
type logRecorder struct {
	next  slog.Handler
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

func newLogRecorder(t *testing.T) logRecorder {
	return logRecorder{next: testLogger(t).Handler(), mu: new(sync.Mutex), recs: new([]logRecord)}
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h logRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return nil
	}
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), as...)
	return h
}

func (h logRecorder) WithGroup(string) slog.Handler { return h }

// take returns the records kept since the last take and forgets them.
func (h logRecorder) take() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	recs := *h.recs
	*h.recs = nil
	return recs
}

// warnings are the records of Warn and above among recs, but for the
// isolation warning Open logs on machines with a weaker sandbox.
func warnings(recs []logRecord, isolation string) []logRecord {
	var out []logRecord
	for _, r := range recs {
		if r.level >= slog.LevelWarn && r.msg != isolation {
			out = append(out, r)
		}
	}
	return out
}

// withMessage are the records of recs with message msg.
func withMessage(recs []logRecord, msg string) []logRecord {
	var out []logRecord
	for _, r := range recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// deadNode names a process of this host that is not running: this
// process's pid with another start time, as defaultNode would have named
// a predecessor that died. nodeGone says so.
func deadNode(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	must(t, err)
	ticks, err := shell.SelfStartTime()
	if err != nil {
		t.Skipf("no start time of processes here: %v", err)
	}
	n := fmt.Sprintf("vigil:%s:%d:%d", host, os.Getpid(), ticks+1)
	if !nodeGone(n) {
		t.Fatalf("nodeGone(%q) = false: the test cannot name a dead owner", n)
	}
	return n
}

// noRelease is a store whose LeaseRelease does nothing: a process that
// stopped without giving its leases up, as one killed does.
type noRelease struct{ store.Store }

func (noRelease) LeaseRelease(context.Context, *store.LeaseReleaseParams) error { return nil }

const (
	backgroundScenario = `
name: background
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "sleep 30", run_in_background: true}
      - say: "started"
`
	hungScenario = "name: hung\nagents:\n  main:\n    turns:\n      - delay: 1000h\n"
)

// releaseRuntime opens a runtime on st as node, with the real clock (its
// commands' stop must not wait for a clock the test moves; nothing here
// waits for it either) and three providers: the default answers at once,
// "background" starts a background command and answers, "hung" never
// answers. Its log goes to logs.
func releaseRuntime(t *testing.T, st store.Store, node string, logs logRecorder) *Runtime {
	t.Helper()
	providers := map[string]provider.Provider{}
	for name, text := range map[string]string{"script": idleScenario, "background": backgroundScenario, "hung": hungScenario} {
		sc, err := script.Parse([]byte(text))
		must(t, err)
		providers[name] = script.New(sc, nil)
	}
	return openWith(t, st, mustParse(t, idleScenario), func(o *Options) {
		o.Node, o.Logger = node, slog.New(logs)
		o.Providers = providers
	})
}

// createMixed creates idle sessions on rt, one whose background command
// runs (sleep 30), and one whose model call is in flight, and waits until
// each is where it says. It returns their ids, those two last.
func createMixed(t *testing.T, rt *Runtime, idle int) []SessionID {
	t.Helper()
	ctx := context.Background()
	var ids []SessionID
	for range idle {
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hello"})
		must(t, err)
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		ids = append(ids, sess.ID)
	}
	sub, err := rt.Subscribe(ctx, &SubscribeParams{})
	must(t, err)
	defer sub.Close()
	bg, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Provider: "background", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	hung, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hello", Provider: "hung"})
	must(t, err)
	started, calling := false, false
	for ev := range sub.C {
		started = started || ev.Session == bg.ID && ev.Type == "task.process"
		calling = calling || ev.Session == hung.ID && ev.Type == "model.started"
		if started && calling {
			break
		}
	}
	return append(ids, bg.ID, hung.ID)
}

// TestCloseReleasesLeases: a runtime that closes releases every session's
// lease, after its last write, and says nothing at warn doing it, with
// sessions idle, running a background command, waiting on a model call and
// a subscription open. The next runtime on the store, another process (of
// this host: had the leases stayed held by the stopped one it would have
// found their owner dead), resumes them at once and logs a clean resume,
// never "owner died"; once it closes too, another owner acquires the
// leases at once, without Steal and long before they would expire.
func TestCloseReleasesLeases(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), nil)
	must(t, err)
	t.Cleanup(func() { st.Close() })
	first := deadNode(t)

	logs := newLogRecorder(t)
	rt := releaseRuntime(t, st, first, logs)
	ids := createMixed(t, rt, 5)
	live, err := rt.Subscribe(ctx, &SubscribeParams{Session: ids[0]})
	must(t, err)
	logs.take()
	must(t, rt.Close())
	for range live.C { // the subscription ends with the runtime
	}
	recs := logs.take()
	if w := warnings(recs, rt.iso.Warning); len(w) > 0 {
		t.Errorf("a clean Close logged at warn or above: %v", w)
	}
	if r := withMessage(recs, "released the sessions' leases"); len(r) != 1 || r[0].attrs["sessions"] != fmt.Sprint(len(ids)) {
		t.Errorf("Close's release log: %v; want one record of %d sessions", r, len(ids))
	}

	// The next process: every session is resumed, as stopped cleanly by
	// the first.
	rt2 := releaseRuntime(t, st, "vigil:successor", logs)
	recs = logs.take()
	if w := warnings(recs, rt2.iso.Warning); len(w) > 0 {
		t.Errorf("taking over sessions stopped cleanly logged at warn or above: %v", w)
	}
	resumed := withMessage(recs, "resuming a session stopped cleanly")
	if len(resumed) != len(ids) {
		t.Errorf("%d sessions logged as resumed after a clean stop, want %d: %v", len(resumed), len(ids), recs)
	}
	for _, r := range resumed {
		if r.level != slog.LevelInfo || r.attrs["previous_owner"] != first {
			t.Errorf("resume record %v; want info with previous_owner %s", r, first)
		}
	}
	for _, id := range ids {
		s, err := rt2.State(ctx, id)
		must(t, err)
		if s.Incarnation != 1 {
			t.Errorf("session %s: incarnation %d after the takeover, want 1", id, s.Incarnation)
		}
	}
	d, err := rt2.SessionGet(ctx, ids[len(ids)-2], nil)
	must(t, err)
	if len(d.Tasks) != 1 || d.Tasks[0].Status != TaskInterrupted {
		t.Errorf("the stopped command's task after the takeover: %+v; want it interrupted", d.Tasks)
	}
	must(t, rt2.Close())
	if w := warnings(logs.take(), rt2.iso.Warning); len(w) > 0 {
		t.Errorf("the second clean Close logged at warn or above: %v", w)
	}

	// The store shows the leases free: another owner takes each at once.
	for _, id := range ids {
		l, err := st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: string(id), Owner: "another-host", TTL: 30 * time.Second, Now: time.Now()})
		if err != nil {
			t.Fatalf("session %s: a lease released by Close was not free at once: %v", id, err)
		}
		if !l.Released || l.Previous != "vigil:successor" {
			t.Errorf("session %s: lease %+v; want released by vigil:successor", id, l)
		}
	}
}

// TestCrashIsNotACleanStop: the same runtime as TestCloseReleasesLeases,
// whose leases stay held as a killed process leaves them: its successor of
// the same host finds their owner dead, steals them and says so at warn,
// and never logs a clean resume. The distinction is the release.
func TestCrashIsNotACleanStop(t *testing.T) {
	ctx := context.Background()
	sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), nil)
	must(t, err)
	t.Cleanup(func() { sq.Close() })
	first := deadNode(t)
	logs := newLogRecorder(t)
	rt := releaseRuntime(t, noRelease{sq}, first, logs)
	ids := createMixed(t, rt, 3)
	must(t, rt.Close())
	logs.take()

	rt2 := releaseRuntime(t, sq, "vigil:successor", logs)
	recs := logs.take()
	died := withMessage(recs, "taking over a session whose owner died")
	if len(died) != len(ids) {
		t.Errorf("%d sessions logged as taken from a dead owner, want %d: %v", len(died), len(ids), recs)
	}
	for _, r := range died {
		if r.level != slog.LevelWarn || r.attrs["owner"] != first {
			t.Errorf("record %v; want warn with owner %s", r, first)
		}
	}
	if r := withMessage(recs, "resuming a session stopped cleanly"); len(r) > 0 {
		t.Errorf("sessions of a crashed owner logged as stopped cleanly: %v", r)
	}
	rt2.mu.Lock()
	n := len(rt2.actors)
	rt2.mu.Unlock()
	if n != len(ids) {
		t.Errorf("the successor took over %d sessions, want %d", n, len(ids))
	}
}

// hangingStore is a memstore whose writes, once hang is set, wait until
// their context ends: a database that stopped answering.
type hangingStore struct {
	*memstore.Store
	mu   sync.Mutex
	hang bool
}

func (s *hangingStore) hung(ctx context.Context) error {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if !hang {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("store did not answer: %w", ctx.Err())
}

func (s *hangingStore) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	if err := s.hung(ctx); err != nil {
		return nil, err
	}
	return s.Store.EventAppend(ctx, p)
}

func (s *hangingStore) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	if err := s.hung(ctx); err != nil {
		return err
	}
	return s.Store.LeaseRelease(ctx, p)
}

// TestCloseWithStoreDown: Close returns in bounded time when the store
// fails every write, and when it does not answer at all (a session's
// commit hangs too): what it could not release is logged at warn and
// expires as a crashed owner's would.
func TestCloseWithStoreDown(t *testing.T) {
	t.Run("failing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := memstore.New()
			logs := newLogRecorder(t)
			rt := openWith(t, st, mustParse(t, idleScenario), func(o *Options) { o.Logger = slog.New(logs) })
			ids := createIdle(t, rt, 3)
			st.FailWrites(store.ErrUnavailable)
			start := time.Now()
			must(t, rt.Close())
			if took := time.Since(start); took > releaseTimeout {
				t.Errorf("Close took %v with a failing store", took)
			}
			r := withMessage(logs.take(), "could not release the sessions' leases; they expire")
			if len(r) != 1 || r[0].level != slog.LevelWarn || r[0].attrs["sessions"] != fmt.Sprint(len(ids)) {
				t.Errorf("release failure log: %v", r)
			}
			st.FailWrites(nil)
			_, err := st.LeaseAcquire(context.Background(), &store.LeaseAcquireParams{Session: string(ids[0]), Owner: "other", TTL: time.Minute, Now: time.Now()})
			if !errors.Is(err, store.ErrLeaseHeld) {
				t.Errorf("a lease Close could not release: %v, want still held until it expires", err)
			}
		})
	})
	t.Run("hanging", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := &hangingStore{Store: memstore.New()}
			logs := newLogRecorder(t)
			rt := openWith(t, st, mustParse(t, idleScenario), func(o *Options) { o.Logger = slog.New(logs) })
			ids := createIdle(t, rt, 3)
			st.mu.Lock()
			st.hang = true
			st.mu.Unlock()
			// A prompt whose commit hangs: its actor is mid-step when
			// Close comes.
			prompted := make(chan error, 1)
			go func() {
				_, err := rt.Prompt(context.Background(), ids[0], &PromptParams{Text: "still there?"})
				prompted <- err
			}()
			synctest.Wait()
			start := time.Now()
			must(t, rt.Close())
			if took := time.Since(start); took > stopTimeout+releaseTimeout {
				t.Errorf("Close took %v with a store that does not answer, want at most %v", took, stopTimeout+releaseTimeout)
			}
			if err := <-prompted; err == nil {
				t.Error("the prompt whose commit hung succeeded")
			}
			recs := logs.take()
			if r := withMessage(recs, "sessions did not stop in time; cancelling what they wait for (their store writes)"); len(r) != 1 {
				t.Errorf("no warning of the sessions' writes cancelled: %v", recs)
			}
			if r := withMessage(recs, "could not release the sessions' leases; they expire"); len(r) != 1 || r[0].attrs["sessions"] != fmt.Sprint(len(ids)) {
				t.Errorf("release failure log: %v", recs)
			}
		})
	})
}

func mustParse(t *testing.T, text string) *script.Scenario {
	t.Helper()
	sc, err := script.Parse([]byte(text))
	must(t, err)
	return sc
}

// TestClosedSessionLeaseReleased: a session closed for good keeps its
// actor and lease while the runtime runs (reads are answered by it), and
// Close releases that lease with the others'.
func TestClosedSessionLeaseReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		rt := openWith(t, st, mustParse(t, idleScenario), func(o *Options) { o.Node = "closer" })
		ctx := context.Background()
		ids := createIdle(t, rt, 2)
		must(t, rt.CloseSession(ctx, ids[0], "test"))
		must(t, rt.Close())
		for _, id := range ids {
			l, err := st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: string(id), Owner: "other", TTL: time.Minute, Now: time.Now()})
			if err != nil || !l.Released || l.Previous != "closer" {
				t.Errorf("session %s after Close: %+v, %v; want its lease released by closer", id, l, err)
			}
		}
	})
}
