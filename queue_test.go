package vigil

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// queueObserver counts the queue-full reports; the other measurements are
// ignored.
type queueObserver struct{ full atomic.Int64 }

func (o *queueObserver) RunStarted(SessionID, string)                           {}
func (o *queueObserver) RunEnded(SessionID, string)                             {}
func (o *queueObserver) NotificationWritten(SessionID, string)                  {}
func (o *queueObserver) NotificationDelivered(SessionID, string, time.Duration) {}
func (o *queueObserver) MessageResolved(SessionID, string)                      {}
func (o *queueObserver) Dropped(SessionID, string, string)                      {}
func (o *queueObserver) ModelCall(string, time.Duration, error)                 {}
func (o *queueObserver) QueueFull(SessionID)                                    { o.full.Add(1) }

// syncBuffer is a bytes.Buffer for a logger that many goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFullQueueWaitsVisibly: a session's queue is bounded. While its actor
// is busy and queueCap requests wait, the next caller waits for room, and
// that is counted, logged at warn and told to the observer; an API caller
// whose deadline passes gets an error saying the session was busy and
// nothing was taken; a model's answer that arrives meanwhile waits too,
// and is stepped once there is room, never dropped. Before, the queue was
// a channel of 4096 that took the caller without a word (a 160 KiB ring
// per session).
func TestFullQueueWaitsVisibly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Parse([]byte("name: slow\nagents:\n  main:\n    turns:\n      - delay: 1s\n        say: \"done\"\n"))
		must(t, err)
		obs := &queueObserver{}
		logs := &syncBuffer{}
		rt := openWith(t, memstore.New(), sc, func(o *Options) {
			o.Observer = obs
			o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go"})
		must(t, err)
		// The model's round (1 s) is in flight; the actor is kept busy.
		held, release := make(chan struct{}), make(chan struct{})
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock) // before the runtime closes, also when the test fails
		go rt.Inspect(ctx, sess.ID, func(*core.State) { close(held); <-release })
		<-held
		var wg sync.WaitGroup
		errs := make(chan error, queueCap)
		for range queueCap {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := rt.SessionStatus(ctx, sess.ID)
				errs <- err
			}()
		}
		synctest.Wait()

		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = rt.SessionStatus(cctx, sess.ID)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || CodeOf(err) != CodeTimeout || !strings.Contains(err.Error(), "busy") || !strings.Contains(err.Error(), "nothing of it was taken") {
			t.Fatalf("a request that found the queue full until its deadline: %v (code %s); want a timeout that says the session was busy", err, CodeOf(err))
		}
		// The caller and the model's answer (at 1 s) found it full.
		if n := rt.queueWaits.Load(); n < 2 {
			t.Errorf("%d waits for room counted, want at least 2 (the caller, the model's answer)", n)
		}
		if n := obs.full.Load(); n < 2 {
			t.Errorf("the observer heard of %d waits for room, want at least 2", n)
		}
		if !strings.Contains(logs.String(), "session queue full") {
			t.Errorf("no warning of the full queue was logged:\n%s", logs.String())
		}

		unblock()
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, err)
		}
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		s, err := rt.State(ctx, sess.ID)
		must(t, err)
		main := s.Agents[core.MainAgent]
		if last := main.Runs[len(main.Runs)-1]; last.Status != core.RunCompleted || last.Reply != "done" {
			t.Fatalf("the run whose model answered into the full queue ended %s with %q, want completed with the answer", last.Status, last.Reply)
		}
	})
}

// actorGoroutines counts the goroutines that hold a session actor.
func actorGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "vigil.(*actor).loop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestIdleSessionsHoldNoGoroutine: an idle session costs no goroutine; a
// request to it starts one, which ends when the session is idle again.
// Before, every session kept a goroutine (and its stack) for good.
func TestIdleSessionsHoldNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Parse([]byte(idleScenario))
		must(t, err)
		rt := openWith(t, memstore.New(), sc, nil)
		ctx := context.Background()
		ids := make([]SessionID, 50)
		for i := range ids {
			sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hello"})
			must(t, err)
			ids[i] = sess.ID
		}
		for _, id := range ids {
			must(t, rt.WaitQuiescent(ctx, id))
		}
		synctest.Wait()
		if n := actorGoroutines(); n != 0 {
			t.Fatalf("%d goroutines hold actors of %d idle sessions, want 0", n, len(ids))
		}
		// Each answers again, and lets its goroutine go after.
		for _, id := range ids {
			_, err := rt.Prompt(ctx, id, &PromptParams{Text: "again"})
			must(t, err)
		}
		for _, id := range ids {
			must(t, rt.WaitQuiescent(ctx, id))
			s, err := rt.State(ctx, id)
			must(t, err)
			if runs := s.Agents[core.MainAgent].Runs; len(runs) != 2 || runs[1].Status != core.RunCompleted {
				t.Fatalf("session %s: the second prompt's run did not complete", id)
			}
		}
		synctest.Wait()
		if n := actorGoroutines(); n != 0 {
			t.Fatalf("%d goroutines hold actors after the sessions went idle again, want 0", n)
		}
	})
}
