package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/store"
)

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	id, event string
	data      vigil.Event
	raw       string // the data as sent
}

// sseStream is a client connection to an event stream.
type sseStream struct {
	t      testing.TB
	resp   *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc

	keepLive    bool // next returns live text frames too
	skippedLive int  // live text frames next skipped
}

// openSSE connects to path; lastID, when set, is sent as Last-Event-ID.
func openSSE(t testing.TB, base, path, lastID string) *sseStream {
	t.Helper()
	return openSSEWith(t, http.DefaultClient, base, path, lastID)
}

// openSSEWith is openSSE with a client of the test's.
func openSSEWith(t testing.TB, client *http.Client, base, path, lastID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	s := &sseStream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

// next reads the next event, skipping comments and retry lines, and live
// text frames unless the stream's keepLive is set: they have no id and
// no place in the order the other tests check, so it counts them in
// skippedLive instead.
func (s *sseStream) next() (sseEvent, error) {
	for {
		ev, err := s.frame()
		if err != nil || s.keepLive || !ev.data.Live {
			return ev, err
		}
		s.skippedLive++
	}
}

// frame reads the next event frame, whatever it is.
func (s *sseStream) frame() (sseEvent, error) {
	var ev sseEvent
	var data string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data == "" {
				continue // the end of a comment or retry block
			}
			ev.raw = data
			if err := json.Unmarshal([]byte(data), &ev.data); err != nil {
				return ev, fmt.Errorf("event data %q: %w", data, err)
			}
			return ev, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data += line[6:]
		}
	}
}

// start reads the stream's first frame and returns its id: where the
// stream starts.
func (s *sseStream) start() int64 {
	s.t.Helper()
	id := int64(-1)
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			s.t.Fatalf("first frame: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				s.t.Fatalf("first frame id %q", v)
			}
			id = n
		}
	}
	if id < 0 {
		s.t.Fatal("the first frame has no id")
	}
	return id
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// TestSSEReconnectNoGapNoDuplicate reads part of a session's stream while
// the session works, drops the connection mid-stream, reconnects with
// Last-Event-ID and checks the events against the store: every one, in
// order, none twice, with the right id, type and data.
func TestSSEReconnectNoGapNoDuplicate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "coord", Prompt: "Build the release", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	path := "/api/sessions/" + id + "/events"

	var got []sseEvent
	s1 := openSSE(t, h.ts.URL, path+"?after=0", "")
	for len(got) < 7 {
		ev, err := s1.next()
		if err != nil {
			t.Fatalf("first connection: %v", err)
		}
		got = append(got, ev)
	}
	s1.close() // drop the connection mid-stream
	h.quiet(id)
	last, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if last <= int64(len(got)) {
		t.Fatalf("the session had only %d events; the test needs more after the disconnect", last)
	}
	s2 := openSSE(t, h.ts.URL, path, got[len(got)-1].id)
	for got[len(got)-1].data.Seq < last {
		ev, err := s2.next()
		if err != nil {
			t.Fatalf("second connection: %v", err)
		}
		got = append(got, ev)
	}
	recs, err := h.st.EventList(context.Background(), &store.EventListParams{Session: id})
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, got, recs, func(r store.Record) int64 { return r.Seq })

	// ?after= does the same for clients that cannot set headers, and the
	// header wins over it.
	s3 := openSSE(t, h.ts.URL, path+"?after=3", "")
	if ev, err := s3.next(); err != nil || ev.data.Seq != 4 {
		t.Fatalf("after=3: first event %+v, %v", ev, err)
	}
	s4 := openSSE(t, h.ts.URL, path+"?after=3", "5")
	if ev, err := s4.next(); err != nil || ev.data.Seq != 6 {
		t.Fatalf("Last-Event-ID 5 with after=3: first event %+v, %v", ev, err)
	}
}

// TestSSEAllSessions streams every session's events by Global position and
// resumes across a disconnect.
func TestSSEAllSessions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.create(CreateSessionRequest{Provider: "echo", Prompt: "first"})
	s1 := openSSE(t, h.ts.URL, "/api/events?after=0", "")
	var got []sseEvent
	for len(got) < 3 {
		ev, err := s1.next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	s1.close()
	b := h.create(CreateSessionRequest{Provider: "echo", Prompt: "second"})
	h.quiet(a)
	h.quiet(b)
	all, err := h.st.EventListAll(context.Background(), &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1].Global
	s2 := openSSE(t, h.ts.URL, "/api/events", got[len(got)-1].id)
	for got[len(got)-1].data.Global < last {
		ev, err := s2.next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	checkAgainstStore(t, got, all, func(r store.Record) int64 { return r.Global })
	sessions := map[string]bool{}
	for _, ev := range got {
		sessions[string(ev.data.Session)] = true
	}
	if !sessions[a] || !sessions[b] {
		t.Errorf("stream of all sessions saw %v, want %s and %s", sessions, a, b)
	}
}

func checkAgainstStore(t *testing.T, got []sseEvent, recs []store.Record, pos func(store.Record) int64) {
	t.Helper()
	if len(got) != len(recs) {
		t.Errorf("received %d events, the store holds %d", len(got), len(recs))
	}
	for i := range min(len(got), len(recs)) {
		ev, rec := got[i], recs[i]
		if ev.id != strconv.FormatInt(pos(rec), 10) || ev.event != rec.Type || ev.data.Seq != rec.Seq ||
			string(ev.data.Session) != rec.Session || ev.data.Type != rec.Type || !ev.data.At.Equal(rec.At) {
			t.Fatalf("event %d: got id %s %s seq %d, store has %d %s seq %d (gap or duplicate)", i, ev.id, ev.event, ev.data.Seq, pos(rec), rec.Type, rec.Seq)
		}
		var a, b any
		if json.Unmarshal(ev.data.Data, &a) != nil || json.Unmarshal(rec.Data, &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("event %d: data differs from the store", i)
		}
	}
}

// TestWriteEventKeepsOneDataLine: stored data that is pretty-printed is
// compacted, and data that is not JSON is sent as null, so every event is
// one data line of valid JSON; a session's stream has the Seq for id, the
// stream of every session the Global.
func TestWriteEventKeepsOneDataLine(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{Token: "x"})
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for i, c := range []struct{ in, want string }{
		{`{"a":1}`, `{"a":1}`},
		{"{\n  \"a\": [1,\n 2]\n}", `{"a":[1,2]}`},
		{`not json`, `null`},
	} {
		for _, bySeq := range []bool{true, false} {
			e := vigil.Event{Session: "s\"1", Seq: 7, Global: 9 + int64(i), At: at, Type: "run.started", Data: []byte(c.in)}
			wantID := "id: " + strconv.FormatInt(e.Global, 10)
			if bySeq {
				wantID = "id: 7"
			}
			var buf bytes.Buffer
			s.frames.write(&buf, e, bySeq)
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n\n"), "\n")
			if len(lines) != 3 || lines[0] != wantID || lines[1] != "event: run.started" || !strings.HasPrefix(lines[2], "data: ") {
				t.Fatalf("event %q", buf.String())
			}
			var ev vigil.Event
			if err := json.Unmarshal([]byte(lines[2][6:]), &ev); err != nil {
				t.Fatalf("data %q: %v", lines[2], err)
			}
			if ev.Session != "s\"1" || ev.Seq != 7 || ev.Global != e.Global || !ev.At.Equal(at) || ev.Type != "run.started" || string(ev.Data) != c.want {
				t.Errorf("decoded %+v, data %s, want %s", ev, ev.Data, c.want)
			}
		}
	}
}
