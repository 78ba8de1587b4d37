package main

import (
	"context"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/sqlite"
)

// slowWorkerScript is a main agent with one background worker whose round
// takes long enough to kill vigil during it.
const slowWorkerScript = `name: slow-worker
agents:
  main:
    turns:
      - say: "Starting a worker."
        tools:
          - Agent: {name: w1, description: "one", prompt: "Do part one", run_in_background: true}
      - say: "Waiting for it."
    on:
      notification:
        - say: "{{.Notification.Agent}} reported: {{.Notification.Result}}"
  w1:
    turns:
      - delay: 2s
        say: "part one is done"
`

// spansOf returns every span the receiver decoded so far.
func (r *otlpReceiver) spansOf() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, req := range r.requests {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

// TestTraceAcrossKill9: 'vigil run' exporting OTLP/HTTP is killed with
// SIGKILL while its worker's run is in flight; 'vigil run --resume' takes
// the session over. The worker's run arrives once, from the second
// process, with its true start (before the kill), as a child of the Agent
// tool call the first process exported; the takeover's span links to it,
// and the main agent's run that its notification woke links to it too.
func TestTraceAcrossKill9(t *testing.T) {
	recv := &otlpReceiver{notify: make(chan struct{}, 1)}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	dir := t.TempDir()
	sc := filepath.Join(dir, "slow.yaml")
	if err := os.WriteFile(sc, []byte(slowWorkerScript), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	vars := map[string]string{
		"HOME":                        dir,
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_SERVICE_NAME":           "vigil-kill-test",
		// The SDK's batch processor reads this from the process: export
		// each span within 10 ms of its end.
		"OTEL_BSP_SCHEDULE_DELAY": "10",
	}
	var childEnv []string
	for k, v := range vars {
		childEnv = append(childEnv, k+"="+v)
	}
	c := startChildEnv(t, childEnv, "run", "--data", data, "--script", sc, "Build the release")
	deadline := time.After(2 * time.Minute)
	// Wait until the worker's round is in flight and the first process
	// exported main's first run and the Agent tool call.
	for seen := false; !seen; {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("vigil run ended before the kill: %v\n%s", <-c.done, c.errb)
			}
			seen = strings.Contains(l, "started subagent w1")
		case <-deadline:
			t.Fatalf("no subagent started\n%s", c.errb)
		}
	}
	for {
		names := map[string]bool{}
		for _, s := range recv.spansOf() {
			names[s.Name] = true
		}
		if names["invoke_agent main"] && names["execute_tool Agent"] {
			break
		}
		select {
		case <-recv.notify:
		case <-deadline:
			t.Fatalf("the first process exported %v, not main's run and the Agent call", names)
		}
	}
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.done
	killed := time.Now()
	first := recv.spansOf()

	st, err := sqlite.Open(context.Background(), filepath.Join(data, "vigil.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.SessionList(context.Background(), &store.SessionListParams{Open: true})
	_ = st.Close()
	if err != nil || len(rows) != 1 {
		t.Fatalf("sessions left open: %v, %v", rows, err)
	}
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	if code := runMain(context.Background(), e, []string{"run", "--data", data, "--resume", rows[0].ID}); code != 0 {
		t.Fatalf("vigil run --resume exited %d\n%s\n%s", code, out.String(), errb.String())
	}

	all := recv.spansOf()
	byID := map[string]*tracepb.Span{}
	for _, s := range all {
		id := hex.EncodeToString(s.SpanId)
		if byID[id] != nil {
			t.Errorf("span %s (%s) arrived twice", id, s.Name)
		}
		byID[id] = s
	}
	var w1 []*tracepb.Span
	var rec, mainWoken *tracepb.Span
	for _, s := range all {
		a := kvs(s.Attributes)
		switch {
		case s.Name == "invoke_agent w1":
			w1 = append(w1, s)
		case s.Name == "vigil.recover":
			rec = s
		case s.Name == "invoke_agent main" && a["vigil.run.kind"] == "notification":
			mainWoken = s
		}
	}
	if len(w1) != 1 {
		t.Fatalf("%d spans of w1's runs, want 1", len(w1))
	}
	run := w1[0]
	w1ID := hex.EncodeToString(run.SpanId)
	for _, s := range first {
		if hex.EncodeToString(s.SpanId) == w1ID {
			t.Errorf("w1's run was exported by the killed process")
		}
	}
	start, end := time.Unix(0, int64(run.StartTimeUnixNano)), time.Unix(0, int64(run.EndTimeUnixNano))
	if !start.Before(killed) || !end.After(killed) {
		t.Errorf("w1's run %s..%s does not span the kill at %s", start, end, killed)
	}
	parent := byID[hex.EncodeToString(run.ParentSpanId)]
	var parentFromFirst bool
	for _, s := range first {
		if parent != nil && hex.EncodeToString(s.SpanId) == hex.EncodeToString(parent.SpanId) {
			parentFromFirst = true
		}
	}
	if parent == nil || parent.Name != "execute_tool Agent" || !parentFromFirst {
		t.Errorf("w1's run: parent %x is not the Agent tool call the first process exported", run.ParentSpanId)
	}
	linksTo := func(s *tracepb.Span, id string) bool {
		for _, l := range s.GetLinks() {
			if hex.EncodeToString(l.SpanId) == id {
				return true
			}
		}
		return false
	}
	if rec == nil || !linksTo(rec, w1ID) {
		t.Errorf("the takeover's span %v does not link to w1's run of the earlier life", rec)
	}
	if mainWoken == nil || !linksTo(mainWoken, w1ID) {
		t.Errorf("main's run woken by w1's notification does not link to w1's run")
	}
	for _, s := range all {
		if len(s.ParentSpanId) > 0 && byID[hex.EncodeToString(s.ParentSpanId)] == nil {
			t.Errorf("%s: parent %x never arrived", s.Name, s.ParentSpanId)
		}
	}
	t.Logf("first process: %d spans; after the takeover: %d; w1's run %s..%s, killed at %s", len(first), len(all)-len(first), start.Format("15:04:05.000"), end.Format("15:04:05.000"), killed.Format("15:04:05.000"))
}
