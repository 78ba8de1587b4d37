package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/server"
)

// runWithSleep runs the vigil command in-process against ts, with sleep
// as the client's wait before a retry.
func (ts *testServer) runWithSleep(t *testing.T, sleep func(context.Context, time.Duration) error, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncBuffer
	vars := map[string]string{"VIGIL_SERVER": ts.url, "VIGIL_TOKEN": clientTestToken, "VIGIL_DATA": t.TempDir()}
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }, sleep: sleep}
	code := runMain(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// TestNodesCommand: vigil nodes prints the server's nodes as a table,
// the answering one marked, and --json the API's body.
func TestNodesCommand(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	out := ts.ok(t, "nodes")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NODE") || !strings.Contains(lines[0], "SESSIONS") {
		t.Fatalf("nodes:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 5 || f[0] != "test" || f[1] != "*" || f[2] != "-" || f[3] != "alive" || f[4] != "0" {
		t.Errorf("node row %q", lines[1])
	}
	var list server.NodeList
	if err := json.Unmarshal([]byte(ts.ok(t, "nodes", "--json")), &list); err != nil || len(list.Nodes) != 1 || !list.Nodes[0].Self {
		t.Errorf("nodes --json: %+v %v", list, err)
	}
}

// TestPrintNodes: dead and draining nodes say so.
func TestPrintNodes(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	now := time.Now()
	printNodes(&env{stdout: &out}, []server.Node{
		{ID: "a", Address: "http://10.0.0.1:7777", Alive: true, Self: true, Sessions: 3, Beat: now, Started: now.Add(-time.Hour)},
		{ID: "b", Address: "http://10.0.0.2:7777", Alive: true, Draining: true, Sessions: 1, Beat: now},
		{ID: "c", Address: "http://10.0.0.3:7777", Draining: true, Beat: now.Add(-10 * time.Minute)},
	})
	want := [][]string{
		{"a", "*", "http://10.0.0.1:7777", "alive", "3", "just", "now", "1h00m", "ago"},
		{"b", "http://10.0.0.2:7777", "draining", "1", "just", "now"},
		{"c", "http://10.0.0.3:7777", "dead", "0", "10m", "ago"},
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("table:\n%s", out.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("row %d: %q, want %q", i, got, w)
		}
	}
}

// TestClientRetriesAfter: a 503 with Retry-After is retried after the wait
// it asks for, saying so once on stderr, until the waits would pass 30 s;
// a 503 without it is not retried.
func TestClientRetriesAfter(t *testing.T) {
	t.Parallel()
	var refuse atomic.Int32 // 503s still to answer
	var after atomic.Value  // their Retry-After
	var requests atomic.Int32
	ts := newTestServer(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/sessions" {
				requests.Add(1)
				if refuse.Add(-1) >= 0 {
					if v, _ := after.Load().(string); v != "" {
						w.Header().Set("Retry-After", v)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"the session is between nodes"}}`))
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	var mu sync.Mutex
	var slept []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		slept = append(slept, d)
		return nil
	}
	for _, c := range []struct {
		name    string
		refuse  int32
		after   string
		code    int
		slept   []time.Duration
		asks    int32
		retried bool
	}{
		{"two refusals", 2, "2", 0, []time.Duration{2 * time.Second, 2 * time.Second}, 3, true},
		{"zero is one second", 1, "0", 0, []time.Duration{time.Second}, 2, true},
		{"past the bound", 100, "20", 1, []time.Duration{20 * time.Second}, 2, true},
		{"no Retry-After", 1, "", 1, nil, 1, false},
		{"a date", 1, "Wed, 21 Oct 2015 07:28:00 GMT", 1, nil, 1, false},
	} {
		refuse.Store(c.refuse)
		after.Store(c.after)
		requests.Store(0)
		mu.Lock()
		slept = nil
		mu.Unlock()
		code, out, errs := ts.runWithSleep(t, sleep, "sessions")
		mu.Lock()
		got := slept
		mu.Unlock()
		if code != c.code || requests.Load() != c.asks || len(got) != len(c.slept) {
			t.Errorf("%s: exit %d after %d requests, slept %v; want %d, %d, %v\nstdout: %s\nstderr: %s", c.name, code, requests.Load(), got, c.code, c.asks, c.slept, out, errs)
			continue
		}
		for i := range got {
			if got[i] != c.slept[i] {
				t.Errorf("%s: slept %v, want %v", c.name, got, c.slept)
			}
		}
		if n := strings.Count(errs, "retrying"); (n == 1) != c.retried || n > 1 {
			t.Errorf("%s: stderr tells of retries %d times:\n%s", c.name, n, errs)
		}
		if c.code != 0 && !strings.Contains(errs, "the session is between nodes") {
			t.Errorf("%s: stderr lacks the server's answer:\n%s", c.name, errs)
		}
	}
}
