package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/store"
)

// reject commits n events to session id: messages to an agent that does
// not exist, each rejected in one event holding text.
func reject(t testing.TB, rt *vigil.Runtime, id string, n int, text string) {
	t.Helper()
	for range n {
		m, err := rt.Message(context.Background(), vigil.SessionID(id), &vigil.MessageParams{To: "ghost", Text: text})
		if err != nil || m.Outcome != vigil.OutcomeRejected {
			t.Fatalf("message: %v %v", m, err)
		}
	}
}

// TestSSEStartsAtNow: a new client that names no position gets the events
// committed from now on, and the first frame tells it where that is; after=0
// replays from the beginning; Last-Event-ID wins over after.
func TestSSEStartsAtNow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo", Prompt: "hello"})
	h.quiet(id)
	reject(t, h.rt, id, 5, "old")
	last, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	all, err := h.st.EventListAll(context.Background(), &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	lastGlobal := all[len(all)-1].Global

	path := "/api/sessions/" + id + "/events"
	now := openSSE(t, h.ts.URL, path, "")
	if start := now.start(); start != last {
		t.Fatalf("session stream starts after %d, want %d (the end)", start, last)
	}
	nowAll := openSSE(t, h.ts.URL, "/api/events", "")
	if start := nowAll.start(); start != lastGlobal {
		t.Fatalf("stream of all sessions starts after %d, want %d (the end)", start, lastGlobal)
	}
	reject(t, h.rt, id, 1, "new")
	for _, s := range []*sseStream{now, nowAll} {
		ev, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.data.Seq != last+1 || !strings.Contains(ev.raw, `"new"`) {
			t.Errorf("first event of a new client: seq %d %s, want seq %d, the new event", ev.data.Seq, ev.raw, last+1)
		}
	}
	from0 := openSSE(t, h.ts.URL, path+"?after=0", "")
	if start := from0.start(); start != 0 {
		t.Errorf("after=0 starts after %d", start)
	}
	if ev, err := from0.next(); err != nil || ev.data.Seq != 1 || ev.event != "session.created" {
		t.Errorf("after=0: first event %+v %v", ev, err)
	}
	both := openSSE(t, h.ts.URL, path+"?after=1", "4")
	if start := both.start(); start != 4 {
		t.Errorf("Last-Event-ID 4 with after=1 starts after %d", start)
	}
	if ev, err := both.next(); err != nil || ev.data.Seq != 5 {
		t.Errorf("Last-Event-ID 4: first event %+v %v", ev, err)
	}
}

// TestSSEStartsAtNowOtherNode: "now" is the store's end even when this
// runtime published none of it (another node's events).
func TestSSEStartsAtNowOtherNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo", Prompt: "hello"})
	h.quiet(id)
	reject(t, h.rt, id, 37, "x")
	all, err := h.st.EventListAll(context.Background(), &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := vigil.Open(context.Background(), vigil.Options{
		Store: h.st, Providers: testProviders(t), DefaultProvider: "echo", DataDir: t.TempDir(), Node: "other",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	sub, err := other.Subscribe(context.Background(), &vigil.SubscribeParams{FromNow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if want := all[len(all)-1].Global; sub.Start != want {
		t.Errorf("Start %d, want %d", sub.Start, want)
	}
}

// smallBuffers makes the kernel's socket buffers small on both ends, so
// that a client that does not read stops the server's writes within a few
// kilobytes.
func smallBuffers() (func(net.Listener) net.Listener, *http.Client) {
	control := func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Control: control}).DialContext}}
	wrap := func(ln net.Listener) net.Listener { return smallSendListener{ln} }
	return wrap, client
}

type smallSendListener struct{ net.Listener }

func (l smallSendListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestSSECutsSlowClient: a client that reads slower than events commit is
// cut once its bounded buffer fills, with a vigil.cut event that says why
// and where to resume; resuming there misses nothing.
func TestSSECutsSlowClient(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wrap, client := smallBuffers()
	s := h.serve(wrap, func(o *Options) { o.StreamBuffer = 16 << 10; o.StreamWriteTimeout = 10 * time.Minute })
	id := h.create(CreateSessionRequest{Provider: "echo"})
	h.quiet(id)
	start, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/sessions/" + id + "/events"
	slow := openSSEWith(t, client, s.base, path, "")
	// The client reads nothing while 1.6 MB commit: the kernel's buffers,
	// the server's batch and the 16 KiB stream buffer hold far less.
	const n = 400
	reject(t, h.rt, id, n, strings.Repeat("y", 4096))
	next := start
	var cut CutEvent
	for {
		ev, err := slow.next()
		if err != nil {
			t.Fatalf("the stream ended without a vigil.cut event after %d: %v", next, err)
		}
		if ev.event == "vigil.cut" {
			if err := json.Unmarshal([]byte(ev.raw), &cut); err != nil {
				t.Fatalf("cut data %q: %v", ev.raw, err)
			}
			if ev.id != "" && ev.id != strconv.FormatInt(next, 10) {
				t.Errorf("the cut event has id %q", ev.id)
			}
			break
		}
		if ev.data.Seq != next+1 {
			t.Fatalf("event seq %d after %d: a gap", ev.data.Seq, next)
		}
		next = ev.data.Seq
	}
	t.Logf("cut after %d of %d events: %+v", next-start, n, cut)
	if cut.Reason != "behind" || cut.ResumeAfter != next || cut.Message == "" {
		t.Errorf("cut %+v, want reason behind, resume_after %d", cut, next)
	}
	if next >= start+n {
		t.Errorf("the slow client was cut only after every event")
	}
	if _, err := slow.next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the cut: %v, want the end of the stream", err)
	}
	// Resuming where the cut said gets the rest, no gap, none twice.
	again := openSSE(t, s.base, path, strconv.FormatInt(cut.ResumeAfter, 10))
	for next < start+n {
		ev, err := again.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.data.Seq != next+1 {
			t.Fatalf("resumed: seq %d after %d", ev.data.Seq, next)
		}
		next = ev.data.Seq
	}
}

// TestSSEStalledClientDropped: a client that takes no data at all is
// dropped once Options.StreamWriteTimeout passes with a write blocked.
func TestSSEStalledClientDropped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wrap, client := smallBuffers()
	s := h.serve(wrap, func(o *Options) { o.StreamBuffer = 64 << 20; o.StreamWriteTimeout = 50 * time.Millisecond })
	id := h.create(CreateSessionRequest{Provider: "echo"})
	h.quiet(id)
	stalled := openSSEWith(t, client, s.base, "/api/sessions/"+id+"/events", "")
	_ = stalled
	reject(t, h.rt, id, 300, strings.Repeat("z", 4096))
	done := make(chan struct{})
	go func() {
		s.srv.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second): // a guard against a hang, not a measure
		t.Fatal("the stream of a client that reads nothing is still open")
	}
}

// TestSSEOutlivesTimeouts: an event stream lives on past Options.ReadTimeout
// and WriteTimeout (which bound ordinary requests), as long as its client
// reads.
func TestSSEOutlivesTimeouts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.serve(nil, func(o *Options) {
		o.ReadTimeout, o.WriteTimeout, o.Heartbeat = 20*time.Millisecond, 20*time.Millisecond, time.Millisecond
	})
	id := h.create(CreateSessionRequest{Provider: "echo"})
	h.quiet(id)
	st := openSSE(t, s.base, "/api/sessions/"+id+"/events", "")
	st.start()
	// 100 heartbeats, at least 1 ms apart: the stream is older than both
	// timeouts.
	for beats := 0; beats < 100; {
		line, err := st.br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended after %d heartbeats: %v", beats, err)
		}
		if strings.HasPrefix(line, ": heartbeat") {
			beats++
		}
	}
	reject(t, h.rt, id, 1, "late")
	if ev, err := st.next(); err != nil || !strings.Contains(ev.raw, `"late"`) {
		t.Fatalf("event after the timeouts: %+v %v", ev, err)
	}
}

// TestSSEShutdownCut: a server shutting down tells its stream clients with
// a vigil.cut event where to resume.
func TestSSEShutdownCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo", Prompt: "hi"})
	h.quiet(id)
	last, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	st := openSSE(t, h.ts.URL, "/api/sessions/"+id+"/events?after=0", "")
	for got := int64(0); got < last; {
		ev, err := st.next()
		if err != nil {
			t.Fatal(err)
		}
		got = ev.data.Seq
	}
	h.srv.stop()
	ev, err := st.next()
	if err != nil || ev.event != "vigil.cut" {
		t.Fatalf("after shutdown: %+v %v", ev, err)
	}
	var cut CutEvent
	if err := json.Unmarshal([]byte(ev.raw), &cut); err != nil || cut.Reason != "shutdown" || cut.ResumeAfter != last {
		t.Errorf("cut %s: want reason shutdown, resume_after %d", ev.raw, last)
	}
}
