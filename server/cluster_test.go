package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestRetryAfterAnswer: an error of the runtime with RetryAfter is 503
// with Retry-After in whole seconds, rounded up, at least 1, whatever its
// code and however it is wrapped; one without is answered as before.
func TestRetryAfterAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
		header string
		code   string
	}{
		{&vigil.Error{Code: vigil.CodeUnavailable, Message: "between nodes", RetryAfter: 1500 * time.Millisecond}, 503, "2", "unavailable"},
		{fmt.Errorf("prompt: %w", &vigil.Error{Code: vigil.CodeMoved, Message: "between nodes", RetryAfter: 3 * time.Second}), 503, "3", "moved"},
		{&vigil.Error{Code: vigil.CodeRecovering, RetryAfter: time.Millisecond}, 503, "1", "recovering"},
		{&vigil.Error{Code: vigil.CodeMoved, Message: "moved"}, 409, "", "moved"},
		{&vigil.Error{Code: vigil.CodeUnavailable, Message: "store down"}, 503, "", "unavailable"},
	} {
		w := httptest.NewRecorder()
		writeError(w, c.err)
		var body ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %q: %v", c.err, w.Body, err)
		}
		if w.Code != c.status || w.Header().Get("Retry-After") != c.header || body.Error.Code != c.code {
			t.Errorf("%v: %d Retry-After %q code %q, want %d %q %q", c.err, w.Code, w.Header().Get("Retry-After"), body.Error.Code, c.status, c.header, c.code)
		}
	}
}

// TestNodesSingle: a server alone lists itself, alive, with its tag.
func TestNodesSingle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(CreateSessionRequest{Prompt: "hello"})
	var list NodeList
	h.must("GET", "/api/nodes", nil, 200, &list)
	if len(list.Nodes) != 1 {
		t.Fatalf("nodes: %+v", list)
	}
	n := list.Nodes[0]
	if n.ID != "test" || n.Tag != NodeTag("test") || !n.Self || !n.Alive || n.Draining {
		t.Errorf("node: %+v", n)
	}
	if code, _ := h.callToken("GET", "/api/nodes", nil, ""); code != 401 {
		t.Errorf("nodes without a token: %d", code)
	}
}

// TestPeerRoute: /api/internal/call reaches Options.Peer behind the
// token, and answers 404 on a server that is no member of a cluster.
func TestPeerRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.mustErr("POST", "/api/internal/call", `{}`, 404, "not_found")

	var got atomic.Int32
	hp := newHarness(t, func(o *Options) {
		o.Peer = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.Add(1)
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"echo":%s}`, b)
		})
	})
	code, b := hp.call("POST", "/api/internal/call", `{"method":"x"}`)
	if code != 200 || strings.TrimSpace(string(b)) != `{"echo":{"method":"x"}}` {
		t.Errorf("peer call: %d %s", code, b)
	}
	if code, _ := hp.callToken("POST", "/api/internal/call", `{}`, "wrong"); code != 401 {
		t.Errorf("peer call with a wrong token: %d", code)
	}
	if code, _ := hp.call("GET", "/api/internal/call", nil); code != 405 {
		t.Errorf("GET peer call: %d", code)
	}
	if got.Load() != 1 {
		t.Errorf("the peer handler ran %d times, want 1", got.Load())
	}
}

// clusterNode is one node of a test cluster: a runtime, its MCP server
// and its API server on an httptest server whose URL it advertises.
type clusterNode struct {
	rt  *vigil.Runtime
	ts  *httptest.Server
	srv *Server
	tag string
	// forwarded counts the /mcp requests another node sent on to it;
	// sent counts those it sent on.
	forwarded, sent atomic.Int32
	// arrived is sent a value for each request another node sent on.
	arrived chan struct{}
}

// startClusterNode opens a cluster member on st.
func startClusterNode(t *testing.T, st store.Store, name string) *clusterNode {
	t.Helper()
	n := &clusterNode{}
	var mu sync.RWMutex
	var h http.Handler = http.NotFoundHandler()
	n.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			if r.Header.Get(vigil.ForwardedHeader) != "" {
				n.forwarded.Add(1)
				select {
				case n.arrived <- struct{}{}:
				default:
				}
			} else if tag, ok := mcpSessionTag(r.Header.Get(mcpSessionHeader)); ok && tag != n.tag {
				n.sent.Add(1)
			}
		}
		mu.RLock()
		defer mu.RUnlock()
		h.ServeHTTP(w, r)
	}))
	logger := slog.New(slog.NewTextHandler(logWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := vigil.Open(context.Background(), vigil.Options{
		Store: st, Providers: testProviders(t), DefaultProvider: "echo", DataDir: t.TempDir(), Node: name, Logger: logger,
		Cluster: &vigil.ClusterOptions{Advertise: n.ts.URL, Token: testToken, Heartbeat: 50 * time.Millisecond, DeadAfter: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.rt, n.tag = rt, NodeTag(rt.NodeID())
	n.arrived = make(chan struct{}, 16)
	ms := mcpserver.New(rt, &mcpserver.Options{Logger: logger, SessionTag: n.tag, Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
	srv := New(rt, Options{Token: testToken, Logger: logger, MCP: ms.Handler(), Peer: rt.PeerHandler()})
	n.srv = srv
	mu.Lock()
	h = srv
	mu.Unlock()
	t.Cleanup(func() {
		ms.Close()
		srv.Close()
		n.ts.Close()
		rt.Close()
	})
	return n
}

// roundRobin is a load balancer without stickiness: each request goes to
// the next node.
func roundRobin(t *testing.T, nodes ...*clusterNode) *httptest.Server {
	t.Helper()
	var next atomic.Int64
	proxies := make([]*httputil.ReverseProxy, len(nodes))
	for i, n := range nodes {
		u, err := url.Parse(n.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		proxies[i] = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[int(next.Add(1)-1)%len(proxies)].ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// bearer adds the token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPAcrossNodes: an MCP client behind a round-robin balancer over
// two nodes on one store keeps its session wherever its requests land:
// the node that did not make it sends them on to the one that did. It
// spawns an agent and waits for it; an id no live node made is 404, and
// a request already sent on once is not sent on again.
func TestMCPAcrossNodes(t *testing.T) {
	t.Parallel()
	for kind, open := range map[string]func(t *testing.T) store.Store{
		"memory":   func(t *testing.T) store.Store { return memstore.New() },
		"postgres": func(t *testing.T) store.Store { return postgresStore(t) },
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			if st == nil {
				return // said why, loudly
			}
			t.Cleanup(func() { st.Close() })
			a := startClusterNode(t, st, "node-a")
			b := startClusterNode(t, st, "node-b")
			if a.tag == b.tag {
				t.Fatalf("both nodes have tag %s", a.tag)
			}
			lb := roundRobin(t, a, b)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			tr := &mcp.StreamableClientTransport{Endpoint: lb.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{testToken}}, MaxRetries: -1}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			home := a
			if strings.HasPrefix(cs.ID(), b.tag+".") {
				home = b
			} else if !strings.HasPrefix(cs.ID(), a.tag+".") {
				t.Fatalf("session id %q begins with neither node's tag (%s, %s)", cs.ID(), a.tag, b.tag)
			}
			for i := range 4 {
				if _, err := cs.ListTools(ctx, nil); err != nil {
					t.Fatalf("list tools #%d: %v", i, err)
				}
			}
			call := func(name string, args any) map[string]any {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if res.IsError {
					t.Fatalf("%s: tool error %+v", name, res.Content)
				}
				b, _ := json.Marshal(res.StructuredContent)
				var out map[string]any
				if err := json.Unmarshal(b, &out); err != nil {
					t.Fatalf("%s: %s: %v", name, b, err)
				}
				return out
			}
			spawned := call("vigil_spawn", map[string]any{"prompt": "count the files", "name": "w1", "cwd": t.TempDir()})
			task, _ := spawned["task"].(string)
			if task == "" {
				t.Fatalf("spawn: %v", spawned)
			}
			var got []any
			for len(got) == 0 && ctx.Err() == nil {
				w := call("vigil_wait", map[string]any{"timeout_seconds": 20})
				got, _ = w["notifications"].([]any)
			}
			if len(got) != 1 {
				t.Fatalf("wait: %v", got)
			}
			call("vigil_list", map[string]any{})

			other := a
			if home == a {
				other = b
			}
			if other.sent.Load() == 0 || home.forwarded.Load() == 0 {
				t.Errorf("no request was sent on: %d sent by the other node, %d received by the session's", other.sent.Load(), home.forwarded.Load())
			}
			t.Logf("session %s on %s: %d requests sent on by the other node", cs.ID(), home.rt.NodeID(), other.sent.Load())

			post := func(base, session string, hdr map[string]string) int {
				t.Helper()
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
				req.Header.Set("Authorization", "Bearer "+testToken)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set(mcpSessionHeader, session)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			// A tag of no node, on either node: 404, the client starts over.
			for _, n := range []*clusterNode{a, b} {
				if code := post(n.ts.URL, NodeTag("gone")+".abc", nil); code != 404 {
					t.Errorf("%s: session of no node: %d", n.rt.NodeID(), code)
				}
			}
			// Sent on once already: not sent on again.
			if code := post(other.ts.URL, cs.ID(), map[string]string{vigil.ForwardedHeader: "node-x"}); code != 404 {
				t.Errorf("a forwarded request for another node's session: %d, want 404", code)
			}
			// The wrong token is refused before any forwarding.
			req, _ := http.NewRequestWithContext(ctx, "POST", other.ts.URL+"/mcp", strings.NewReader(`{}`))
			req.Header.Set(mcpSessionHeader, cs.ID())
			req.Header.Set("Authorization", "Bearer wrong")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("wrong token: %d", resp.StatusCode)
			}
			if err := cs.Close(); err != nil && !errors.Is(err, io.EOF) {
				t.Logf("close: %v", err)
			}
		})
	}
}

// TestNodesCluster: GET /api/nodes on either node lists both, alive, the
// answering one as self.
func TestNodesCluster(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	a := startClusterNode(t, st, "node-a")
	b := startClusterNode(t, st, "node-b")
	for _, n := range []*clusterNode{a, b} {
		req, _ := http.NewRequest("GET", n.ts.URL+"/api/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		// Each node beat once as it joined: both rows are there.
		var list NodeList
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Nodes) != 2 {
			t.Fatalf("%s: nodes %+v", n.rt.NodeID(), list)
		}
		for _, m := range list.Nodes {
			if !m.Alive || m.Self != (m.ID == n.rt.NodeID()) || m.Tag != NodeTag(m.ID) || m.Address == "" {
				t.Errorf("%s sees %+v", n.rt.NodeID(), m)
			}
		}
	}
}

// TestForwardEndsAtShutdown: a request a node sent on to another (an MCP
// wait, which may last long) ends when the node that sent it shuts down,
// rather than holding its graceful shutdown.
func TestForwardEndsAtShutdown(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	a := startClusterNode(t, st, "node-a")
	b := startClusterNode(t, st, "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: a.ts.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{testToken}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "vigil_spawn", Arguments: map[string]any{"prompt": "wait long", "provider": "slow", "cwd": t.TempDir()}}); err != nil {
		t.Fatal(err)
	}
	// A wait for the slow agent, sent to node b, which sends it on to a.
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"vigil_wait","arguments":{"timeout_seconds":3600}}}`
	req, _ := http.NewRequestWithContext(ctx, "POST", b.ts.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcpSessionHeader, cs.ID())
	req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	type answer struct {
		status int
		body   string
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{status: resp.StatusCode, body: string(b), err: err}
	}()
	select {
	case <-a.arrived:
	case ans := <-done:
		t.Fatalf("the wait ended before it reached node a: %+v", ans)
	}
	if err := b.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ans := <-done
	if strings.Contains(ans.body, `"result"`) {
		t.Fatalf("the wait answered a result, not cut by the shutdown: %d %s", ans.status, ans.body)
	}
	t.Logf("forwarded wait at shutdown: status %d, err %v, body %q", ans.status, ans.err, ans.body)
}

// TestForwardToGoneNode: a request for an MCP session of a node that
// still beats but refuses connections (its server stopped: its MCP
// sessions are gone) is 404, so that the client starts a new session.
func TestForwardToGoneNode(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	a := startClusterNode(t, st, "node-a")
	b := startClusterNode(t, st, "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: a.ts.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{testToken}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := cs.ID()
	cs.Close()
	a.ts.Close() // a's runtime still beats
	req, _ := http.NewRequestWithContext(ctx, "POST", b.ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcpSessionHeader, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("session of a node that refuses connections: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(string(body), "refuses connections") {
		t.Errorf("404 not for the refused connection: %s", body)
	}
}
