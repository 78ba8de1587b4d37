package mcpserver_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/mcptest"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/server"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/sqlite"
)

const testToken = "test-token"

// testLogger writes warnings and above to the test log (everything with
// VIGIL_TEST_LOG=debug).
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("VIGIL_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// openRuntime opens a runtime with opts (its store and data directory)
// and the scripted agents of testdata/agents.yaml.
func openRuntime(t testing.TB, ctx context.Context, opts vigil.Options) *vigil.Runtime {
	t.Helper()
	sc, err := script.Load("testdata/agents.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts.Providers = map[string]provider.Provider{"script": script.New(sc, nil)}
	opts.DefaultProvider, opts.Logger = "script", testLogger(t)
	rt, err := vigil.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connectStdio serves one in-memory connection (as stdio would be) and
// returns a client on it.
func connectStdio(t testing.TB, ctx context.Context, srv *mcpserver.Server) *mcp.ClientSession {
	t.Helper()
	ct, stt := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, stt) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		if err := <-done; err != nil && !strings.Contains(err.Error(), "server is closing") {
			t.Errorf("server run: %v", err)
		}
	})
	return cs
}

// httpVigil is the real server (API and /mcp) on a loopback port.
type httpVigil struct {
	URL    string
	rt     *vigil.Runtime
	mcpSrv *mcpserver.Server
	cancel context.CancelFunc
	done   chan error
}

func startHTTP(t testing.TB, rt *vigil.Runtime, addr string) *httpVigil {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ms := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t)})
	srv := server.New(rt, server.Options{Token: testToken, Logger: testLogger(t), MCP: ms.Handler(), ShutdownTimeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	h := &httpVigil{URL: "http://" + ln.Addr().String(), rt: rt, mcpSrv: ms, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(h.stop)
	return h
}

// stop shuts the server down (the MCP waits first, as vigil serve does).
func (h *httpVigil) stop() {
	if h.cancel == nil {
		return
	}
	h.mcpSrv.Close()
	h.cancel()
	<-h.done
	h.cancel = nil
}

// authTransport adds a token and an owner key to every request.
type authTransport struct{ token, owner string }

func (a authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if a.token != "" {
		r.Header.Set("Authorization", "Bearer "+a.token)
	}
	if a.owner != "" {
		r.Header.Set(mcpserver.OwnerHeader, a.owner)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func connectHTTP(t testing.TB, ctx context.Context, url, token, owner string) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: authTransport{token, owner}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// TestExactlyOnceOverHTTPWithRestart runs the exactly-once scenario over
// streamable HTTP against the real server, restarting the server and the
// runtime on the same SQLite store in the middle; the client reconnects
// with the same owner (the Vigil-Owner header).
func TestExactlyOnceOverHTTPWithRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "vigil.db")
	st, err := sqlite.Open(ctx, dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := openRuntime(t, ctx, vigil.Options{Store: st, DataDir: dir})
	h := startHTTP(t, rt, "127.0.0.1:0")
	const owner = "owner-http"
	cs, err := connectHTTP(t, ctx, h.URL, testToken, owner)
	if err != nil {
		t.Fatal(err)
	}
	res := mcptest.ExactlyOnce(ctx, t, mcptest.Scenario{
		Client: &mcptest.Client{CS: cs},
		Restart: func() *mcptest.Client {
			addr := strings.TrimPrefix(h.URL, "http://")
			h.stop()
			cs.Close()
			rt.Close()
			st.Close()
			if st, err = sqlite.Open(ctx, dbPath, nil); err != nil {
				t.Fatal(err)
			}
			rt = openRuntime(t, ctx, vigil.Options{Store: st, DataDir: dir})
			h = startHTTP(t, rt, addr)
			cs2, err := connectHTTP(t, ctx, h.URL, testToken, owner)
			if err != nil {
				t.Fatal(err)
			}
			return &mcptest.Client{CS: cs2}
		},
	})
	h.stop()
	rt.Close()
	mcptest.CheckStore(ctx, t, st, owner, res.Collector.Keys())
	st.Close()
}

// TestHTTPNeedsToken: /mcp is behind the server's bearer token.
func TestHTTPNeedsToken(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	h := startHTTP(t, rt, "127.0.0.1:0")
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequestWithContext(ctx, "POST", h.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, resp.StatusCode)
		}
	}
	if _, err := connectHTTP(t, ctx, h.URL, "", "someone"); err == nil {
		t.Error("an MCP client without the token connected")
	}
	cs, err := connectHTTP(t, ctx, h.URL, testToken, "someone")
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	var list mcpserver.ListOutput
	if err := (&mcptest.Client{CS: cs}).Call(ctx, mcpserver.ToolList, nil, &list); err != nil || list.OwnerKey != "someone" {
		t.Fatalf("list_tasks: %v %+v", err, list)
	}
}

// TestMCPDisabled: a server without MCP answers 404 at /mcp.
func TestMCPDisabled(t *testing.T) {
	t.Parallel()
	srv := server.New(nil, server.Options{Token: testToken})
	req, _ := http.NewRequest("POST", "/mcp", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+testToken)
	w := &recorder{header: http.Header{}}
	srv.ServeHTTP(w, req)
	if w.status != http.StatusNotFound {
		t.Fatalf("status %d", w.status)
	}
}

type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return len(b), nil
}
func (r *recorder) WriteHeader(code int) { r.status = code }

// TestScoping: caller B can neither see nor touch caller A's tasks, and
// what it is told does not reveal that they exist.
func TestScoping(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	h := startHTTP(t, rt, "127.0.0.1:0")
	csA, err := connectHTTP(t, ctx, h.URL, testToken, "key-A")
	if err != nil {
		t.Fatal(err)
	}
	csB, err := connectHTTP(t, ctx, h.URL, testToken, "key-B")
	if err != nil {
		t.Fatal(err)
	}
	a, b := &mcptest.Client{CS: csA}, &mcptest.Client{CS: csB}
	sp, err := a.Spawn(ctx, "slow", "A's work")
	if err != nil {
		t.Fatal(err)
	}
	task := sp.Task
	sess := sp.Session
	var list mcpserver.ListOutput
	if err := b.Call(ctx, mcpserver.ToolList, map[string]any{"include_closed": true}, &list); err != nil || len(list.Tasks) != 0 {
		t.Fatalf("B lists %+v (%v)", list.Tasks, err)
	}
	// Every tool refuses A's ids to B, exactly as it refuses ids that do
	// not exist.
	missing := sess + "x/t1"
	cases := []struct {
		tool string
		args func(id string) map[string]any
	}{
		{mcpserver.ToolStatus, func(id string) map[string]any { return map[string]any{"task": id} }},
		{mcpserver.ToolOutput, func(id string) map[string]any { return map[string]any{"task": id} }},
		{mcpserver.ToolStop, func(id string) map[string]any { return map[string]any{"task": id} }},
		{mcpserver.ToolClose, func(id string) map[string]any { return map[string]any{"task": id} }},
		{mcpserver.ToolSend, func(id string) map[string]any { return map[string]any{"task": id, "message": "hi"} }},
		{mcpserver.ToolWait, func(id string) map[string]any { return map[string]any{"tasks": []string{id}, "timeout_seconds": 0} }},
		{mcpserver.ToolHold, func(id string) map[string]any { return map[string]any{"task": id} }},
		{mcpserver.ToolResume, func(id string) map[string]any { return map[string]any{"task": id} }},
		{mcpserver.ToolQueue, func(id string) map[string]any { return map[string]any{"task": id} }},
	}
	for _, c := range cases {
		errA := b.Call(ctx, c.tool, c.args(task), nil)
		errX := b.Call(ctx, c.tool, c.args(missing), nil)
		if !mcptest.IsToolError(errA, "no such task") || !mcptest.IsToolError(errX, "no such task") {
			t.Errorf("%s: B on A's task: %v; on a missing one: %v", c.tool, errA, errX)
			continue
		}
		if strings.ReplaceAll(errA.Error(), task, "ID") != strings.ReplaceAll(errX.Error(), missing, "ID") {
			t.Errorf("%s: the error on A's task differs from a missing one's: %q vs %q", c.tool, errA, errX)
		}
	}
	if err := b.Call(ctx, mcpserver.ToolSend, map[string]any{"agent": "slow", "message": "hi"}, nil); !mcptest.IsToolError(err, "no such task") {
		t.Errorf("B messages A's agent by name: %v", err)
	}
	if err := b.Call(ctx, mcpserver.ToolQueueCancel, map[string]any{"item": sess + "/i1"}, nil); !mcptest.IsToolError(err, "no such task") {
		t.Errorf("B cancels A's item: %v", err)
	}
	// A's notification cannot be acknowledged by B (it would be lost to A).
	col := mcptest.NewCollector()
	out, err := col.Wait(ctx, a, []string{task}, 30)
	if err != nil || len(out.Notifications) != 1 {
		t.Fatalf("A waits: %v %+v", err, out)
	}
	if err := b.Call(ctx, mcpserver.ToolAck, map[string]any{"ids": []string{out.Notifications[0].ID}}, nil); !mcptest.IsToolError(err, "no such notification") {
		t.Errorf("B acknowledges A's notification: %v", err)
	}
	var again mcpserver.WaitOutput
	if err := a.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 0}, &again); err != nil || len(again.Notifications) != 1 || !again.Notifications[0].Repeat {
		t.Errorf("A's notification after B's attempts: %v %+v", err, again)
	}
	// B's wait over all its tasks returns at once: it has none.
	var bw mcpserver.WaitOutput
	if err := b.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 60}, &bw); err != nil || len(bw.Notifications)+len(bw.Running) != 0 {
		t.Errorf("B's wait: %v %+v", err, bw)
	}
	// An explicit owner key is the identity: with A's key, B is A.
	b.OwnerKey = "key-A"
	var st mcpserver.TaskStatusOutput
	if err := b.Call(ctx, mcpserver.ToolStatus, map[string]any{"task": task}, &st); err != nil || st.Task != task {
		t.Errorf("with A's key: %v %+v", err, st)
	}
}

// TestSessionIdentity: without an owner key, an HTTP MCP session and a
// stdio connection are each their own caller.
func TestSessionIdentity(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	h := startHTTP(t, rt, "127.0.0.1:0")
	cs1, err := connectHTTP(t, ctx, h.URL, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	cs2, err := connectHTTP(t, ctx, h.URL, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := &mcptest.Client{CS: cs1}, &mcptest.Client{CS: cs2}
	sp, err := c1.Spawn(ctx, "", "work")
	if err != nil {
		t.Fatal(err)
	}
	if sp.OwnerKey != cs1.ID() || sp.Agent != sp.Session {
		t.Errorf("owner %q (session %q), agent %q", sp.OwnerKey, cs1.ID(), sp.Agent)
	}
	var l1, l2 mcpserver.ListOutput
	if err := c1.Call(ctx, mcpserver.ToolList, nil, &l1); err != nil || len(l1.Tasks) != 1 {
		t.Errorf("the spawning session lists %v (%v)", l1.Tasks, err)
	}
	if err := c2.Call(ctx, mcpserver.ToolList, nil, &l2); err != nil || len(l2.Tasks) != 0 {
		t.Errorf("another session lists %v (%v)", l2.Tasks, err)
	}
	srv := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t)})
	t.Cleanup(func() { srv.Close() })
	s1, s2 := &mcptest.Client{CS: connectStdio(t, ctx, srv)}, &mcptest.Client{CS: connectStdio(t, ctx, srv)}
	if _, err := s1.Spawn(ctx, "", "work"); err != nil {
		t.Fatal(err)
	}
	if err := s1.Call(ctx, mcpserver.ToolList, nil, &l1); err != nil || len(l1.Tasks) != 1 || !strings.HasPrefix(l1.OwnerKey, "mcp-") {
		t.Errorf("stdio connection 1 lists %+v (%v)", l1, err)
	}
	if err := s2.Call(ctx, mcpserver.ToolList, nil, &l2); err != nil || len(l2.Tasks) != 0 || l2.OwnerKey == l1.OwnerKey {
		t.Errorf("stdio connection 2 lists %+v (%v)", l2, err)
	}
}

// TestTools exercises each tool's semantics and errors on one stdio
// connection.
func TestTools(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	srv := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t), Owner: "me"})
	t.Cleanup(func() { srv.Close() })
	c := &mcptest.Client{CS: connectStdio(t, ctx, srv)}

	// The tool list and its schemas.
	var names []string
	for tool, err := range c.CS.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	want := "vigil_ack vigil_approvals vigil_approve vigil_close vigil_hold vigil_list vigil_output vigil_queue vigil_queue_cancel vigil_resume vigil_send vigil_spawn vigil_status vigil_stop vigil_wait"
	slices.Sort(names)
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tools: %s, want %s", got, want)
	}

	// Nothing spawned: wait returns at once, whatever its timeout.
	var w mcpserver.WaitOutput
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 3600}, &w); err != nil || len(w.Notifications)+len(w.Running) != 0 || w.TimedOut {
		t.Fatalf("empty wait: %v %+v", err, w)
	}
	sp, err := c.Spawn(ctx, "slow", "the job")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(sp.Task, "/t1") || sp.OwnerKey != "me" || sp.Agent != "slow" {
		t.Fatalf("spawn: %+v", sp)
	}
	if _, err := c.Spawn(ctx, "slow", "again"); !mcptest.IsToolError(err, "named \"slow\" is still live") {
		t.Errorf("a second slow: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolSpawn, map[string]any{"prompt": ""}, nil); !mcptest.IsToolError(err, "prompt") {
		t.Errorf("empty prompt: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolSpawn, map[string]any{"prompt": "x", "provider": "nope"}, nil); !mcptest.IsToolError(err, "unknown provider") {
		t.Errorf("unknown provider: %v", err)
	}
	// timeout 0: returns at once, with slow running.
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 0}, &w); err != nil || len(w.Running) != 1 || !w.TimedOut || w.Running[0].State != "running" {
		t.Fatalf("wait 0: %v %+v", err, w)
	}
	// Blocks until slow's run ends (its round takes 2s).
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"tasks": []string{sp.Task}, "timeout_seconds": 60}, &w); err != nil || len(w.Notifications) != 1 {
		t.Fatalf("blocking wait: %v %+v", err, w)
	}
	n := w.Notifications[0]
	if n.ID != sp.Task+"#1" || n.Key != n.ID || n.Kind != "notification" || n.Status != "completed" || n.Reply != "slow: done with the job" || n.Agent != "slow" || n.Repeat {
		t.Errorf("notification: %+v", n)
	}
	// Not acknowledged: it comes again, marked.
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 0}, &w); err != nil || len(w.Notifications) != 1 || !w.Notifications[0].Repeat || len(w.Running) != 0 {
		t.Fatalf("repeat: %v %+v", err, w)
	}
	var st mcpserver.TaskStatusOutput
	if err := c.Call(ctx, mcpserver.ToolStatus, map[string]any{"task": sp.Task}, &st); err != nil || st.Pending != 1 || len(st.Notifications) != 1 || st.Notifications[0].Acknowledged || st.State != "idle" {
		t.Fatalf("status: %v %+v", err, st)
	}
	// What each agent does: the caller's inbox waits for the caller, slow
	// is idle; the queued notification reads as its summary.
	if len(st.Agents) != 2 || st.Agents[0].Agent != "you" || st.Agents[0].Kind != "caller" ||
		st.Agents[0].Text != "waiting for the outside caller to read 1 notification (t1#1)" ||
		len(st.Agents[0].HoldsUp) != 1 || !strings.HasPrefix(st.Agents[0].HoldsUp[0], sp.Session+"/i") ||
		st.Agents[1].Agent != "slow" || st.Agents[1].Task != sp.Task || st.Agents[1].Kind != "idle" || st.Agents[1].Text != "idle" || st.Agents[1].NeedsYou {
		t.Errorf("status's agents: %+v", st.Agents)
	}
	if len(st.Queue) != 1 || st.Queue[0].Text != "notification "+n.ID+": slow run 1 completed: slow: done with the job" {
		t.Errorf("status's queue: %+v", st.Queue)
	}
	if err := c.Call(ctx, mcpserver.ToolAck, map[string]any{"ids": []string{n.ID, "bogus"}}, nil); !mcptest.IsToolError(err, "bad notification id") {
		t.Errorf("ack with a bad id: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolAck, map[string]any{"ids": []string{sp.Session + "/t9#1"}}, nil); !mcptest.IsToolError(err, "no such notification") {
		t.Errorf("ack of a notification that does not exist: %v", err)
	}
	for range 2 { // twice is harmless
		if err := c.Call(ctx, mcpserver.ToolAck, map[string]any{"ids": []string{n.ID}}, nil); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 0}, &w); err != nil || len(w.Notifications) != 0 {
		t.Fatalf("after ack: %v %+v", err, w)
	}
	if err := c.Call(ctx, mcpserver.ToolStatus, map[string]any{"task": sp.Task}, &st); err != nil || !st.Notifications[0].Acknowledged || len(st.Runs) != 1 {
		t.Fatalf("status after ack: %v %+v", err, st)
	}
	// A message to the idle agent resumes it; by name.
	var m mcpserver.SendOutput
	if err := c.Call(ctx, mcpserver.ToolSend, map[string]any{"agent": "slow", "message": "and more"}, &m); err != nil ||
		m.Outcome != "resumed" || m.Run != 2 || len(m.Notifications) != 1 || m.Notifications[0] != sp.Task+"#2" {
		t.Fatalf("resume: %v %+v", err, m)
	}
	if err := c.Call(ctx, mcpserver.ToolSend, map[string]any{"task": sp.Task, "message": "x", "priority": "soon"}, nil); !mcptest.IsToolError(err, "priority") {
		t.Errorf("bad priority: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolSend, map[string]any{"task": sp.Task, "agent": "slow", "message": "x"}, nil); !mcptest.IsToolError(err, "not both") {
		t.Errorf("task and agent: %v", err)
	}
	// Stop the run in progress: it ends cancelled, with its notification.
	var so mcpserver.StopOutput
	if err := c.Call(ctx, mcpserver.ToolStop, map[string]any{"task": sp.Task}, &so); err != nil || so.Outcome != "stopped" {
		t.Fatalf("stop: %v %+v", err, so)
	}
	col := mcptest.NewCollector()
	if w, err = col.Wait(ctx, c, nil, 30); err != nil || len(w.Notifications) != 1 || w.Notifications[0].Status != "cancelled" {
		t.Fatalf("the stop's notification: %v %+v", err, w)
	}
	if err := col.Flush(ctx, c); err != nil {
		t.Fatal(err)
	}
	var out mcpserver.OutputOutput
	if err := c.Call(ctx, mcpserver.ToolOutput, map[string]any{"task": sp.Task, "limit": 10}, &out); err != nil || out.Kind != "agent" || len(out.Data) != 10 || out.Next != 10 || out.EOF {
		t.Fatalf("task_output: %v %+v", err, out)
	}
	if err := c.Call(ctx, mcpserver.ToolOutput, map[string]any{"task": sp.Task, "offset": 10, "limit": 1 << 20}, &out); err != nil || !out.EOF || !strings.Contains(out.Data, "slow: done with the job") {
		t.Fatalf("task_output rest: %v %+v", err, out)
	}
	var q mcpserver.QueueOutput
	if err := c.Call(ctx, mcpserver.ToolQueue, nil, &q); err != nil || len(q.Items) != 0 {
		t.Fatalf("queue_list: %v %+v", err, q)
	}
	if err := c.Call(ctx, mcpserver.ToolHold, map[string]any{"task": sp.Task, "reason": "lunch"}, nil); err != nil {
		t.Fatalf("hold: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolQueue, map[string]any{"task": sp.Task}, &q); err != nil || len(q.Held) != 1 {
		t.Fatalf("queue_list held: %v %+v", err, q)
	}
	if err := c.Call(ctx, mcpserver.ToolResume, map[string]any{"task": sp.Task}, nil); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolQueueCancel, map[string]any{"item": sp.Session + "/i99"}, nil); !mcptest.IsToolError(err, "no queued item") {
		t.Errorf("cancel a missing item: %v", err)
	}
	if err := c.Call(ctx, mcpserver.ToolStop, map[string]any{"task": sp.Task}, &so); err != nil || so.Outcome != "not-running" {
		t.Fatalf("stop an idle task: %v %+v", err, so)
	}
	var co mcpserver.CloseOutput
	if err := c.Call(ctx, mcpserver.ToolClose, map[string]any{"task": sp.Task}, &co); err != nil || co.Outcome != "closed" || len(co.Notifications) != 0 || co.Stopped {
		t.Fatalf("close: %v %+v", err, co)
	}
	if err := c.Call(ctx, mcpserver.ToolClose, map[string]any{"task": sp.Task}, &co); err != nil || co.Outcome != "already-closed" {
		t.Fatalf("close twice: %v %+v", err, co)
	}
	var l mcpserver.ListOutput
	if err := c.Call(ctx, mcpserver.ToolList, nil, &l); err != nil || len(l.Tasks) != 0 {
		t.Fatalf("list after close: %v %+v", err, l)
	}
	if err := c.Call(ctx, mcpserver.ToolList, map[string]any{"include_closed": true}, &l); err != nil || len(l.Tasks) != 1 || l.Tasks[0].State != "closed" {
		t.Fatalf("list closed: %v %+v", err, l)
	}
	if err := c.Call(ctx, mcpserver.ToolSend, map[string]any{"task": sp.Task, "message": "x"}, &m); err != nil || m.Outcome != "rejected" {
		t.Errorf("message to a closed task: %v %+v", err, m)
	}
	for _, bad := range []string{"nope", "/t1", "s/"} {
		if err := c.Call(ctx, mcpserver.ToolStatus, map[string]any{"task": bad}, nil); !mcptest.IsToolError(err, "bad task id") {
			t.Errorf("task %q: %v", bad, err)
		}
	}
	if err := c.Call(ctx, mcpserver.ToolStatus, map[string]any{"task": sp.Task, "extra": 1}, nil); err == nil {
		t.Error("an unknown argument was accepted")
	}
}

// TestWaitEndsAtClose: a wait in flight answers at once when the server
// closes, with an error that says nothing was lost.
func TestWaitEndsAtClose(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	srv := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t), Owner: "me"})
	c := &mcptest.Client{CS: connectStdio(t, ctx, srv)}
	if _, err := c.Spawn(ctx, "slow", "x"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 3600}, nil) }()
	// Close once the wait is blocked: it is blocked when the server has
	// subscribed, which we cannot see; closing before is fine too (the
	// call then fails the same way or finds the session closed).
	srv.Close()
	err := <-errc
	t.Logf("wait at close: %v", err)
	var te *mcptest.ToolError
	// Depending on where the close lands, the wait answers with a tool
	// error, finds the session closed, or sees the connection end: it
	// never hangs.
	if err == nil || (!errors.As(err, &te) && !strings.Contains(err.Error(), "closed") && !strings.Contains(err.Error(), "EOF")) {
		t.Fatalf("wait at close: %v", err)
	}
}

// A spawned agent's permission request reaches the caller: pending_approvals
// lists it, approve always runs it and adds the session rule.
func TestApprovalsOverMCP(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	srv := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t), Owner: "me", Cwd: t.TempDir(), Permissions: vigil.Permissions{Mode: vigil.PermAsk}})
	t.Cleanup(func() { srv.Close() })
	c := &mcptest.Client{CS: connectStdio(t, ctx, srv)}
	sp, err := c.Spawn(ctx, "builder", "build it")
	if err != nil {
		t.Fatal(err)
	}
	var pend mcpserver.PendingApprovalsOutput
	for range 200 {
		if err := c.Call(ctx, mcpserver.ToolApprovals, map[string]any{}, &pend); err != nil {
			t.Fatal(err)
		}
		if len(pend.Approvals) > 0 {
			break
		}
		var w mcpserver.WaitOutput
		_ = c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 0.05}, &w)
	}
	if len(pend.Approvals) != 1 || pend.Approvals[0].Call != "Bash(echo built)" || pend.Approvals[0].Task != sp.Task ||
		pend.Approvals[0].Agent != "builder" || pend.Approvals[0].Grants == "" {
		t.Fatalf("pending approvals: %+v", pend)
	}
	var ans mcpserver.ApproveOutput
	if err := c.Call(ctx, mcpserver.ToolApprove, map[string]any{"approval": pend.Approvals[0].ID, "answer": "always"}, &ans); err != nil ||
		ans.Rule != "Bash(echo built)" || ans.Grants != pend.Approvals[0].Grants {
		t.Fatalf("approve: %+v %v", ans, err)
	}
	if err := c.Call(ctx, mcpserver.ToolApprove, map[string]any{"approval": pend.Approvals[0].ID, "answer": "deny"}, &ans); err == nil {
		t.Fatal("a request was answered twice")
	}
	var w mcpserver.WaitOutput
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 10}, &w); err != nil || len(w.Notifications) != 1 || !strings.Contains(w.Notifications[0].Reply, "builder:") {
		t.Fatalf("wait after approve: %+v %v", w, err)
	}
}

// TestWaitOnTimer: an agent whose run ended with a wakeup set is still
// working: wait lists it as running and blocks until the wakeup's run
// reports.
func TestWaitOnTimer(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rt := openRuntime(t, ctx, vigil.Options{Store: memstore.New(), DataDir: t.TempDir()})
	t.Cleanup(func() { rt.Close() })
	srv := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t), Owner: "me"})
	t.Cleanup(func() { srv.Close() })
	c := &mcptest.Client{CS: connectStdio(t, ctx, srv)}
	sp, err := c.Spawn(ctx, "sleeper", "nap")
	if err != nil {
		t.Fatal(err)
	}
	col := mcptest.NewCollector()
	w, err := col.Wait(ctx, c, nil, 30)
	if err != nil || len(w.Notifications) != 1 || w.Notifications[0].Reply != "sleeper: a wakeup is set" {
		t.Fatalf("first wait: %v %+v", err, w)
	}
	if len(w.Running) != 1 || w.Running[0].Task != sp.Task || w.Running[0].State != "waiting" {
		t.Errorf("with its wakeup set, the task is not waiting: %+v", w.Running)
	}
	if w, err = col.Wait(ctx, c, nil, 30); err != nil || len(w.Notifications) != 1 || w.Notifications[0].ID != sp.Task+"#2" ||
		!strings.HasPrefix(w.Notifications[0].Reply, "sleeper woke:") || !strings.Contains(w.Notifications[0].Reply, "wake up") {
		t.Fatalf("the wakeup's run: %v %+v", err, w)
	}
	if err := col.Flush(ctx, c); err != nil {
		t.Fatal(err)
	}
	var l mcpserver.ListOutput
	if err := c.Call(ctx, mcpserver.ToolList, nil, &l); err != nil || len(l.Tasks) != 1 || l.Tasks[0].State != "idle" || l.Tasks[0].Run != 2 || l.Tasks[0].LastStatus != "completed" {
		t.Fatalf("list after the wakeup: %v %+v", err, l)
	}
}
