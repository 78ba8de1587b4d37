package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/server"
	"github.com/vigilrun/vigil/store/memstore"
)

const clientTestToken = "client-test-token"

var clientScenarios = map[string]string{
	"echo": `
name: echo
agents:
  "*":
    turns: [{say: "echo: {{.Input}}"}]
    on:
      prompt: [{say: "echo: {{.Input}}"}]
      message: [{say: "answer: {{.Message.Text}}"}]
`,
	"shell": `
name: shell
agents:
  main:
    turns: [{say: "started"}]
    on:
      prompt:
        - say: "starting"
          tools:
            - Bash: {command: "{{.Input}}", description: "test task", run_in_background: true}
      notification: [{say: "done"}]
`,
	// why: a background worker with a long name asks to run a command.
	"why": `
name: why
agents:
  main:
    turns:
      - say: "starting the worker"
        tools:
          - Agent: {name: long-named-worker, prompt: "clean the build", run_in_background: true}
      - say: "the worker runs"
    on:
      notification: [{say: "noted"}]
  long-named-worker:
    turns:
      - say: "cleaning"
        tools:
          - Bash: {command: "rm -rf build"}
      - say: "cleaned"
`,
}

// testServer is a real server on a loopback port.
type testServer struct {
	url string
	rt  *vigil.Runtime
	st  *memstore.Store
}

func newTestServer(t *testing.T, wrap func(http.Handler) http.Handler) *testServer {
	t.Helper()
	provs := map[string]provider.Provider{}
	for name, src := range clientScenarios {
		sc, err := script.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		provs[name] = script.New(sc, nil)
	}
	st := memstore.New()
	logger := slog.New(slog.DiscardHandler)
	rt, err := vigil.Open(context.Background(), vigil.Options{Store: st, Providers: provs, DefaultProvider: "echo", DataDir: t.TempDir(), Node: "test", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(rt, server.Options{Token: clientTestToken, Logger: logger})
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
		rt.Close()
		st.Close()
	})
	return &testServer{url: ts.URL, rt: rt, st: st}
}

// syncBuffer is a buffer that is safe to write from one goroutine while
// another reads it, and tells when a string appears.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	found chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.found != nil && strings.Contains(b.buf.String(), b.want) {
		close(b.found)
		b.found = nil
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor returns a channel closed when s has been written.
func (b *syncBuffer) waitFor(s string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(b.buf.String(), s) {
		close(ch)
		return ch
	}
	b.want, b.found = s, ch
	return ch
}

// vigilCLI runs the vigil command in-process.
func (ts *testServer) vigilCLI(t *testing.T, overrides map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return ts.vigilCtx(t, context.Background(), overrides, nil, args...)
}

func (ts *testServer) vigilCtx(t *testing.T, ctx context.Context, overrides map[string]string, out *syncBuffer, args ...string) (int, string, string) {
	t.Helper()
	if out == nil {
		out = &syncBuffer{}
	}
	var errb syncBuffer
	vars := map[string]string{"VIGIL_SERVER": ts.url, "VIGIL_TOKEN": clientTestToken, "VIGIL_DATA": t.TempDir()}
	for k, v := range overrides {
		vars[k] = v
	}
	e := &env{stdout: out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code := runMain(ctx, e, args)
	return code, out.String(), errb.String()
}

// ok runs a command that must succeed and returns its stdout.
func (ts *testServer) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := ts.vigilCLI(t, nil, args...)
	if code != 0 {
		t.Fatalf("vigil %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func (ts *testServer) quiet(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.rt.WaitQuiescent(ctx, vigil.SessionID(id)); err != nil {
		t.Fatal(err)
	}
}

func TestClientCommands(t *testing.T) {
	ts := newTestServer(t, nil)
	id := strings.TrimSpace(ts.ok(t, "new", "hello there", "--provider", "echo", "--permission-mode", "bypass"))
	if id == "" || strings.Contains(id, " ") {
		t.Fatalf("new printed %q, want the session id", id)
	}
	ts.quiet(t, id)

	if out := ts.ok(t, "sessions"); !strings.Contains(out, id) || !strings.Contains(out, "hello there") {
		t.Errorf("sessions:\n%s", out)
	}
	var list server.SessionList
	if err := json.Unmarshal([]byte(ts.ok(t, "sessions", "--json")), &list); err != nil || len(list.Sessions) != 1 {
		t.Errorf("sessions --json: %v %+v", err, list)
	}
	if out := ts.ok(t, "show", id); !strings.Contains(out, "main") || !strings.Contains(out, "idle") || !strings.Contains(out, "quiescent") {
		t.Errorf("show:\n%s", out)
	}
	var d vigil.SessionDetail
	if err := json.Unmarshal([]byte(ts.ok(t, "show", id, "--json")), &d); err != nil || string(d.Session.ID) != id {
		t.Errorf("show --json: %v", err)
	}

	// Hold, queue a prompt (flags after the arguments), see why it waits,
	// resume.
	if out := ts.ok(t, "hold", id, "--reason", "reviewing"); !strings.Contains(out, "HELD") || !strings.Contains(out, "reviewing") {
		t.Errorf("hold:\n%s", out)
	}
	if out := ts.ok(t, "send", id, "second prompt", "--priority", "later"); !strings.Contains(out, "queued i2") {
		t.Errorf("send:\n%s", out)
	}
	if out := ts.ok(t, "status", id); !strings.Contains(out, "1 held") || !strings.Contains(out, "not draining") {
		t.Errorf("status while held:\n%s", out)
	}
	if out := ts.ok(t, "resume", id); strings.Contains(out, "HELD") {
		t.Errorf("resume:\n%s", out)
	}
	ts.quiet(t, id)
	if out := ts.ok(t, "status", id); !strings.Contains(out, "quiescent") || !strings.Contains(out, "every inbox is empty") || !strings.Contains(out, "commands: sandbox ") {
		t.Errorf("status after resume:\n%s", out)
	}

	if out := ts.ok(t, "message", id, "main", "are you there?"); !strings.Contains(out, "resumed") {
		t.Errorf("message:\n%s", out)
	}
	code, out, errs := ts.vigilCLI(t, nil, "message", id, "ghost", "hello?")
	if code == 0 || !strings.Contains(errs, "rejected") || !strings.Contains(errs, `no agent "ghost"`) {
		t.Errorf("message to an unknown agent: exit %d\n%s\n%s", code, out, errs)
	}
	ts.quiet(t, id)

	// logs prints the timeline up to now and stops.
	out = ts.ok(t, "logs", id)
	for _, want := range []string{"session " + id + " created", "run 1 started (prompt)", "run 1 completed: echo: hello there", "user queue held", "message m2 → ghost: rejected"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(ts.ok(t, "logs", id, "--json")), "\n")
	last, err := ts.st.LastSeq(context.Background(), id)
	if err != nil || int64(len(lines)) != last {
		t.Errorf("logs --json printed %d events, the store holds %d (%v)", len(lines), last, err)
	}
}

func TestClientTasksAndStop(t *testing.T) {
	ts := newTestServer(t, nil)
	id := strings.TrimSpace(ts.ok(t, "new", "sleep 30", "--provider", "shell", "--permission-mode", "bypass"))
	waitEvent(t, ts.rt, id, func(e core.Event) bool { b, ok := e.Body.(*core.TaskProcess); return ok && b.Task == "t1" })
	if out := ts.ok(t, "tasks", id); !strings.Contains(out, "t1") || !strings.Contains(out, "running") || !strings.Contains(out, "sleep 30") {
		t.Errorf("tasks:\n%s", out)
	}
	if out := ts.ok(t, "stop", id+"/t1"); !strings.Contains(out, "task t1:") {
		t.Errorf("stop:\n%s", out)
	}
	waitEvent(t, ts.rt, id, func(e core.Event) bool { b, ok := e.Body.(*core.TaskUpdated); return ok && b.Task == "t1" && b.Ended })
	code, _, errs := ts.vigilCLI(t, nil, "stop", "t1", "--session", id)
	if code != 1 || !strings.Contains(errs, "already ended") {
		t.Errorf("stop of an ended task: exit %d: %s", code, errs)
	}
	code, _, errs = ts.vigilCLI(t, nil, "stop", id+"/t9")
	if code != 1 || !strings.Contains(errs, `no task "t9"`) {
		t.Errorf("stop of an unknown task: exit %d: %s", code, errs)
	}
	// A permission request answered from the command line.
	asked := strings.TrimSpace(ts.ok(t, "new", "echo asked", "--provider", "shell", "--permission-mode", "ask"))
	waitEvent(t, ts.rt, asked, func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })
	if out := ts.ok(t, "show", asked); !strings.Contains(out, "p1") || !strings.Contains(out, "Bash") {
		t.Errorf("show with a permission request:\n%s", out)
	}
	if out := ts.ok(t, "approve", asked, "p1", "--reason", "fine"); !strings.Contains(out, "allowed p1; 0 request(s)") {
		t.Errorf("approve:\n%s", out)
	}
	waitEvent(t, ts.rt, asked, func(e core.Event) bool { b, ok := e.Body.(*core.TaskUpdated); return ok && b.Task == "t1" && b.Ended })
	code, _, errs = ts.vigilCLI(t, nil, "approve", asked, "p1")
	if code != 1 || !strings.Contains(errs, "p1") {
		t.Errorf("approve twice: exit %d: %s", code, errs)
	}
	// The mode changed from the command line answers a pending request;
	// an updated input is refused with --deny and when it is not JSON.
	second := strings.TrimSpace(ts.ok(t, "new", "echo second", "--provider", "shell", "--permission-mode", "ask"))
	waitEvent(t, ts.rt, second, func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })
	if code, _, errs := ts.vigilCLI(t, nil, "approve", second, "p1", "--deny", "--input", `{"command":"ls"}`); code != 2 || !strings.Contains(errs, "--input goes with") {
		t.Errorf("approve --deny --input: exit %d: %s", code, errs)
	}
	if code, _, errs := ts.vigilCLI(t, nil, "approve", second, "p1", "--input", "ls"); code != 2 || !strings.Contains(errs, "not JSON") {
		t.Errorf("approve --input ls: exit %d: %s", code, errs)
	}
	if code, _, errs := ts.vigilCLI(t, nil, "mode", second, "yolo"); code != 1 || !strings.Contains(errs, "yolo") {
		t.Errorf("mode yolo: exit %d: %s", code, errs)
	}
	if out := ts.ok(t, "mode", second, "bypass"); !strings.Contains(out, "permission mode bypass") {
		t.Errorf("mode:\n%s", out)
	}
	waitEvent(t, ts.rt, second, func(e core.Event) bool { b, ok := e.Body.(*core.TaskUpdated); return ok && b.Task == "t1" && b.Ended })
	code, _, errs = ts.vigilCLI(t, nil, "show", "nope")
	if code != 1 || !strings.Contains(errs, "no such session") {
		t.Errorf("show of an unknown session: exit %d: %s", code, errs)
	}
}

// TestClientAddressAndToken: flags win over the environment, the token
// file is the last resort, and a wrong token prints the server's message.
func TestClientAddressAndToken(t *testing.T) {
	ts := newTestServer(t, nil)
	code, _, errs := ts.vigilCLI(t, nil, "sessions", "--token", "wrong")
	if code != 1 || !strings.Contains(errs, "bearer token") {
		t.Errorf("wrong token: exit %d: %s", code, errs)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(clientTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := ts.vigilCLI(t, map[string]string{"VIGIL_TOKEN": "", "VIGIL_DATA": dir}, "sessions")
	if code != 0 || !strings.Contains(out, "no sessions") {
		t.Errorf("token from the data directory: exit %d: %s %s", code, out, errs)
	}
	code, _, errs = ts.vigilCLI(t, map[string]string{"VIGIL_TOKEN": ""}, "sessions")
	if code != 2 || !strings.Contains(errs, "no token") {
		t.Errorf("no token anywhere: exit %d: %s", code, errs)
	}
	code, _, errs = ts.vigilCLI(t, map[string]string{"VIGIL_SERVER": "127.0.0.1:1"}, "sessions", "--server", strings.TrimPrefix(ts.url, "http://"))
	if code != 0 {
		t.Errorf("--server over VIGIL_SERVER: exit %d: %s", code, errs)
	}
	code, _, errs = ts.vigilCLI(t, map[string]string{"VIGIL_SERVER": "127.0.0.1:1"}, "sessions")
	if code != 1 || !strings.Contains(errs, "cannot reach") {
		t.Errorf("no server: exit %d: %s", code, errs)
	}
	code, _, _ = ts.vigilCLI(t, nil, "send", "only-one-arg")
	if code != 2 {
		t.Errorf("send with one argument: exit %d, want 2", code)
	}
}

// dropFirstStream cuts the first event stream of a session after n events
// and records the Last-Event-ID of every stream request.
type dropFirstStream struct {
	next http.Handler
	n    int

	mu      sync.Mutex
	streams int
	lastIDs []string
}

func (d *dropFirstStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/events") {
		d.next.ServeHTTP(w, r)
		return
	}
	d.mu.Lock()
	d.streams++
	first := d.streams == 1
	d.lastIDs = append(d.lastIDs, r.Header.Get("Last-Event-ID"))
	d.mu.Unlock()
	if !first {
		d.next.ServeHTTP(w, r)
		return
	}
	d.next.ServeHTTP(&cutWriter{ResponseWriter: w, left: d.n}, r)
}

// cutWriter passes left events through, then drops the connection.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		chunk := b
		if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
			chunk = b[:i+2]
		}
		n, err := c.ResponseWriter.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
		b = b[len(chunk):]
		if bytes.HasPrefix(chunk, []byte("id: ")) {
			if c.left--; c.left == 0 {
				c.Flush()
				panic(http.ErrAbortHandler) // drops the connection mid-stream
			}
		}
	}
	return written, nil
}

func (c *cutWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestClientLogsFollowReconnects: logs -f survives a dropped connection,
// resumes with Last-Event-ID, and prints every event once.
func TestClientLogsFollowReconnects(t *testing.T) {
	var drop *dropFirstStream
	ts := newTestServer(t, func(h http.Handler) http.Handler {
		drop = &dropFirstStream{next: h, n: 3}
		return drop
	})
	id := strings.TrimSpace(ts.ok(t, "new", "hello", "--provider", "echo"))
	ts.quiet(t, id)
	last, err := ts.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	seen := out.waitFor(`"seq":` + itoa64(last) + `,`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var code int
	var errs string
	go func() {
		defer close(done)
		code, _, errs = ts.vigilCtx(t, ctx, nil, out, "logs", "-f", id, "--json")
	}()
	select {
	case <-seen:
	case <-time.After(20 * time.Second):
		t.Fatalf("logs -f did not print the last event:\n%s", out.String())
	}
	cancel()
	<-done
	if code != 0 {
		t.Errorf("logs -f exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "reconnecting after event 3") {
		t.Errorf("stderr does not report the reconnect: %q", errs)
	}
	var seqs []int64
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev vigil.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		seqs = append(seqs, ev.Seq)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("printed seqs %v: gap or duplicate at %d", seqs, i)
		}
	}
	if int64(len(seqs)) != last {
		t.Errorf("printed %d events, the store holds %d", len(seqs), last)
	}
	drop.mu.Lock()
	defer drop.mu.Unlock()
	if len(drop.lastIDs) < 2 || drop.lastIDs[0] != "" || drop.lastIDs[1] != "3" {
		t.Errorf("Last-Event-ID of the stream requests: %q, want [\"\" \"3\" ...]", drop.lastIDs)
	}
}

func itoa64(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// waitEvent waits for the first event of a session matching pred.
func waitEvent(t *testing.T, rt *vigil.Runtime, session string, pred func(core.Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := rt.Subscribe(ctx, &vigil.SubscribeParams{Session: vigil.SessionID(session)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for ev := range sub.C {
		if ev.Live {
			continue // streamed model text: no event of the session's
		}
		body, err := core.DecodeBody(ev.Type, ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		if pred(core.Event{Seq: ev.Seq, At: ev.At, Body: body}) {
			return
		}
	}
	t.Fatalf("session %s: the awaited event never came", session)
}
