package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each
// ExportTraceServiceRequest it is sent.
type otlpReceiver struct {
	mu       sync.Mutex
	requests []*coltracepb.ExportTraceServiceRequest
	headers  []http.Header
	errs     []string
	// notify, when set, gets a signal after each request decoded.
	notify chan struct{}
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.errs = append(r.errs, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	var m coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &m)
	}
	if err != nil {
		r.errs = append(r.errs, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.requests = append(r.requests, &m)
	r.headers = append(r.headers, req.Header.Clone())
	if r.notify != nil {
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return ""
}

func kvs(attrs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range attrs {
		m[kv.Key] = anyString(kv.Value)
	}
	return m
}

// workersScript is a main agent that starts two background workers and is
// woken by their notifications, with no delays.
const workersScript = `name: workers
agents:
  main:
    turns:
      - say: "Starting two workers."
        tools:
          - Agent: {name: w1, description: "one", prompt: "Do part one", run_in_background: true}
          - Agent: {name: w2, description: "two", prompt: "Do part two", run_in_background: true}
      - say: "Waiting for them."
    on:
      notification:
        - say: "{{.Notification.Agent}} reported: {{.Notification.Result}}"
        - say: "{{.Notification.Agent}} reported: {{.Notification.Result}}"
  w1:
    turns:
      - say: "part one is done"
  w2:
    turns:
      - say: "part two is done"
`

// TestRunExportsOTLPHTTP runs 'vigil run' with the standard OTEL_*
// variables pointing at a local OTLP/HTTP receiver, and decodes what
// arrived: one trace, the resource the variables describe, the span tree
// and its GenAI attributes, the header, and no prompt text.
func TestRunExportsOTLPHTTP(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	sc := filepath.Join(t.TempDir(), "workers.yaml")
	if err := os.WriteFile(sc, []byte(workersScript), 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	vars := map[string]string{
		"HOME":                        home,
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-vigil-test=yes%20indeed",
		"OTEL_SERVICE_NAME":           "vigil-otlp-test",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test,service.name=overridden",
	}
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	if code := runMain(context.Background(), e, []string{"run", "--memory", "--script", sc, "Build the release"}); code != 0 {
		t.Fatalf("vigil run exited %d\n%s\n%s", code, out.String(), errb.String())
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.errs) > 0 {
		t.Fatalf("the receiver refused: %v", recv.errs)
	}
	if len(recv.requests) == 0 {
		t.Fatalf("nothing arrived at the receiver\n%s", errb.String())
	}
	if got := recv.headers[0].Get("x-vigil-test"); got != "yes indeed" {
		t.Errorf("header x-vigil-test = %q, want the OTEL_EXPORTER_OTLP_HEADERS value", got)
	}
	var spans []*tracepb.Span
	for _, req := range recv.requests {
		for _, rs := range req.ResourceSpans {
			res := kvs(rs.Resource.GetAttributes())
			if res["service.name"] != "vigil-otlp-test" || res["deployment.environment.name"] != "test" || res["telemetry.sdk.language"] != "go" {
				t.Errorf("resource %v: want OTEL_SERVICE_NAME over OTEL_RESOURCE_ATTRIBUTES, and the SDK", res)
			}
			for _, ss := range rs.ScopeSpans {
				if ss.Scope.GetName() != "github.com/vigilrun/vigil" {
					t.Errorf("scope %q", ss.Scope.GetName())
				}
				spans = append(spans, ss.Spans...)
			}
		}
	}
	byID := map[string]*tracepb.Span{}
	traces := map[string]bool{}
	for _, s := range spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		traces[hex.EncodeToString(s.TraceId)] = true
	}
	if len(traces) != 1 {
		t.Errorf("%d traces, want one for the session", len(traces))
	}
	var names []string
	find := func(name, agent string) *tracepb.Span {
		for _, s := range spans {
			if s.Name == name && (agent == "" || kvs(s.Attributes)["vigil.agent"] == agent) {
				return s
			}
		}
		return nil
	}
	for _, s := range spans {
		names = append(names, s.Name)
		a := kvs(s.Attributes)
		for k, v := range a {
			if strings.Contains(v, "Build the release") || strings.Contains(v, "part one is done") {
				t.Errorf("%s: %s carries conversation text without opting in: %q", s.Name, k, v)
			}
		}
		if len(s.ParentSpanId) > 0 && byID[hex.EncodeToString(s.ParentSpanId)] == nil {
			t.Errorf("%s: parent %x never arrived", s.Name, s.ParentSpanId)
		}
		if s.Name == "chat" || strings.HasPrefix(s.Name, "chat ") {
			if a["gen_ai.operation.name"] != "chat" || a["gen_ai.provider.name"] != "script" || a["gen_ai.usage.input_tokens"] == "" {
				t.Errorf("%s: GenAI attributes %v", s.Name, a)
			}
		}
	}
	mainRun := find("invoke_agent main", "main")
	w1 := find("invoke_agent w1", "w1")
	if mainRun == nil || w1 == nil {
		t.Fatalf("no run spans of main and w1 among %v", names)
	}
	if len(mainRun.ParentSpanId) != 0 {
		t.Errorf("main's run has a parent %x", mainRun.ParentSpanId)
	}
	spawn := byID[hex.EncodeToString(w1.ParentSpanId)]
	if spawn == nil || spawn.Name != "execute_tool Agent" || kvs(spawn.Attributes)["vigil.spawned"] != "a1" {
		t.Fatalf("w1's run is not a child of the Agent tool call that spawned it: parent %v", spawn)
	}
	if hex.EncodeToString(spawn.ParentSpanId) != hex.EncodeToString(mainRun.SpanId) && kvs(byID[hex.EncodeToString(spawn.ParentSpanId)].GetAttributes())["vigil.agent"] != "main" {
		t.Errorf("the Agent tool call is not a child of a run of main")
	}
	var linked int
	for _, s := range spans {
		for _, l := range s.Links {
			key := kvs(l.Attributes)["vigil.notification.key"]
			to := byID[hex.EncodeToString(l.SpanId)]
			if to == nil || key == "" || kvs(to.Attributes)["vigil.notification.key"] != key {
				t.Errorf("%s: link %x (notification %q) is not to the run that wrote that notification", s.Name, l.SpanId, key)
				continue
			}
			linked++
		}
	}
	if linked != 2 {
		t.Errorf("%d notification links arrived, want 2 (one per worker)", linked)
	}
	t.Logf("%d spans in %d requests: %v", len(spans), len(recv.requests), names)
}

// TestTracingConfig: what the OTEL_* variables turn on and off.
func TestTracingConfig(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		vars map[string]string
		on   bool
		err  string
	}{
		{name: "unset", vars: nil},
		{name: "endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "otlp exporter", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "grpc", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "none", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "disabled", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "unknown exporter", vars: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "zipkin"},
		{name: "json", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: "http/json"},
		{name: "bad attributes", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "novalue"}, err: "OTEL_RESOURCE_ATTRIBUTES"},
		{name: "content", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}, on: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := setupTracing(ctx, func(k string) string { return c.vars[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.shutdown()
			if on := tr.tracerProvider() != nil; on != c.on {
				t.Fatalf("tracing on = %v, want %v", on, c.on)
			}
			if want := c.name == "content"; tr.content != want {
				t.Errorf("content = %v, want %v", tr.content, want)
			}
		})
	}
}
