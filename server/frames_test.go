package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/store"
)

// referenceFrame is an event's SSE frame as the server wrote it before
// frames were shared, kept here to hold the wire format byte for byte.
func referenceFrame(rec vigil.Event, id int64) string {
	var buf bytes.Buffer
	data := json.RawMessage(rec.Data)
	if !json.Valid(data) {
		data = json.RawMessage("null")
	}
	if bytes.ContainsAny(data, "\r\n") {
		var c bytes.Buffer
		if json.Compact(&c, data) == nil {
			data = c.Bytes()
		}
	}
	q := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	buf.WriteString("id: " + strconv.FormatInt(id, 10) + "\nevent: " + rec.Type + "\ndata: ")
	buf.WriteString(`{"session":` + q(string(rec.Session)) + `,"seq":` + strconv.FormatInt(rec.Seq, 10) +
		`,"global":` + strconv.FormatInt(rec.Global, 10) + `,"at":"` + rec.At.Format(time.RFC3339Nano) +
		`","type":` + q(rec.Type) + `,"data":`)
	buf.Write(data)
	buf.WriteString("}\n\n")
	return buf.String()
}

// frames reads the next n event frames of the stream as sent, from their
// id line to the blank line that ends them; comment frames (heartbeats)
// are skipped.
func (s *sseStream) frames(n int) []string {
	s.t.Helper()
	var out []string
	var cur strings.Builder
	for len(out) < n {
		line, err := s.br.ReadString('\n')
		if err != nil {
			s.t.Fatalf("after %d frames: %v", len(out), err)
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		cur.WriteString(line)
		if line == "\n" {
			if cur.Len() > 1 {
				out = append(out, cur.String())
			}
			cur.Reset()
		}
	}
	return out
}

// TestSSEFrameRenderedOnce: two clients of a session's stream and two of
// every session's stream receive the same bytes for the same events, the
// bytes the server always sent (referenceFrame), and each event's frame is
// rendered once for all four; when they leave, the frames are let go. It
// fails if frames go back to being rendered per client.
func TestSSEFrameRenderedOnce(t *testing.T) {
	t.Parallel()
	const n = 40
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	h.quiet(id)
	var bySeq, byGlobal []*sseStream
	for range 2 {
		bySeq = append(bySeq, openSSE(t, h.ts.URL, "/api/sessions/"+id+"/events", ""))
		byGlobal = append(byGlobal, openSSE(t, h.ts.URL, "/api/events", ""))
	}
	for _, s := range append(bySeq, byGlobal...) {
		s.start()
	}
	after, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	rendered := h.srv.frames.renders.Load()
	// Text a JSON encoder may escape in several ways, and a newline.
	reject(t, h.rt, id, n, "<a href=\"x\">&amp;</a>\u2028\n\ttab é")

	recs, err := h.st.EventList(context.Background(), &store.EventListParams{Session: id, AfterSeq: after})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("the store holds %d events after %d, want %d", len(recs), after, n)
	}
	got := make([][]string, 4)
	for i, s := range append(bySeq, byGlobal...) {
		got[i] = s.frames(n)
	}
	for k, rec := range recs {
		e := vigil.Event{Session: vigil.SessionID(rec.Session), Seq: rec.Seq, Global: rec.Global, At: rec.At, Type: rec.Type, Data: rec.Data}
		wantSeq, wantGlobal := referenceFrame(e, rec.Seq), referenceFrame(e, rec.Global)
		for i, want := range []string{wantSeq, wantSeq, wantGlobal, wantGlobal} {
			if got[i][k] != want {
				t.Fatalf("client %d, event %d:\n got %q\nwant %q", i, k, got[i][k], want)
			}
		}
	}
	if r := h.srv.frames.renders.Load() - rendered; r != n {
		t.Errorf("%d events were rendered %d times for 4 clients; want once each (%d)", n, r, n)
	}

	// With the last stream gone the frames are let go.
	for _, s := range append(bySeq, byGlobal...) {
		s.close()
	}
	h.srv.streams.Wait()
	h.srv.frames.mu.Lock()
	defer h.srv.frames.mu.Unlock()
	if b := h.srv.frames.bytes; b != 0 {
		t.Errorf("with no stream open the frames hold %d bytes", b)
	}
}

// TestFrameCacheBounded: the frames kept stay under its bound, the
// oldest go first, the newest are found again without rendering, an
// event too large to keep is rendered each time, and events whose Globals
// share a slot each get their own bytes.
func TestFrameCacheBounded(t *testing.T) {
	t.Parallel()
	c := newFrameCache(slog.New(slog.DiscardHandler), 4<<20)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	event := func(global int64, size int) vigil.Event {
		data := `"` + strings.Repeat("x", size) + `"`
		return vigil.Event{Session: "s1", Seq: global + 100, Global: global, At: at, Type: "message.rejected", Data: []byte(data)}
	}
	check := func(e vigil.Event) {
		t.Helper()
		for _, bySeq := range []bool{true, false} {
			id := e.Global
			if bySeq {
				id = e.Seq
			}
			var buf bytes.Buffer
			c.write(&buf, e, bySeq)
			if want := referenceFrame(e, id); buf.String() != want {
				t.Fatalf("event %d (bySeq %v): got %.200q, want %.200q", e.Global, bySeq, buf.String(), want)
			}
		}
	}
	held := func() int64 {
		var sum int64
		for i := range c.slots {
			if f := c.slots[i].f.Load(); f != nil {
				sum += f.size()
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if sum != c.bytes {
			t.Fatalf("the slots hold %d bytes, the cache counts %d", sum, c.bytes)
		}
		return sum
	}
	const size = 100 << 10
	for g := int64(1); g <= 3*c.max/size; g++ {
		check(event(g, size))
		if b := held(); b > c.max {
			t.Fatalf("after event %d the cache holds %d bytes, over %d", g, b, c.max)
		}
	}
	last := int64(3 * c.max / size)
	r := c.renders.Load()
	for g := last - 10; g <= last; g++ {
		check(event(g, size)) // the newest are still there
	}
	if c.renders.Load() != r {
		t.Errorf("the newest events were rendered again (%d renders)", c.renders.Load()-r)
	}
	if f := c.slots[1].f.Load(); f != nil && f.global == 1 {
		t.Errorf("the oldest event is still held")
	}

	// Too large to keep: rendered each time, right, not held.
	big := event(last+1, int(c.max/8))
	before := held()
	check(big)
	if held() > before+1 || c.renders.Load() != r+2 {
		t.Errorf("an event over max/8: %d renders, held %d bytes then %d", c.renders.Load()-r, before, held())
	}

	// One slot, several events: each its own bytes.
	for range 2 {
		for _, e := range []vigil.Event{
			event(7, 10), event(7+frameSlots, 20), event(7+2*frameSlots, 30),
			{Session: "s2", Seq: 1, Global: 7, At: at, Type: "run.started", Data: []byte(`{}`)},
		} {
			check(e)
		}
	}
}

// TestFrameCacheWriteAllocs: a client writing an event another client
// already rendered copies its frame and allocates nothing, for either
// stream; rendering it (json.Valid, the JSON strings, the time) is once
// per event.
func TestFrameCacheWriteAllocs(t *testing.T) {
	c := newFrameCache(slog.New(slog.DiscardHandler), 4<<20)
	e := vigil.Event{Session: "s1", Seq: 3, Global: 12, At: time.Now(), Type: "run.started", Data: []byte(`{"run":"r1","text":"<hello>"}`)}
	var buf bytes.Buffer
	c.write(&buf, e, true)
	buf.Grow(64 << 10)
	for _, bySeq := range []bool{true, false} {
		allocs := testing.AllocsPerRun(100, func() {
			buf.Reset()
			c.write(&buf, e, bySeq)
		})
		if allocs != 0 {
			t.Errorf("writing a rendered frame (bySeq %v): %v allocations, want 0", bySeq, allocs)
		}
	}
	if r := c.renders.Load(); r != 1 {
		t.Errorf("%d renders of one event, want 1", r)
	}
}
