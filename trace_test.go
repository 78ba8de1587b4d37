package vigil

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// memTracing is a TracerProvider that keeps the spans it ends in memory.
func memTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(TraceIDGenerator()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrStr(s tracetest.SpanStub, key string) string {
	v, _ := attrOf(s, key)
	return v.Emit()
}

// spanLabel names a span for messages: "invoke_agent w1 #1".
func spanLabel(s tracetest.SpanStub) string {
	if r := attrStr(s, "vigil.run"); r != "" && strings.HasPrefix(s.Name, "invoke_agent") {
		return s.Name + " #" + r
	}
	return s.Name + " " + attrStr(s, "vigil.agent") + " " + attrStr(s, "gen_ai.tool.call.id") + attrStr(s, "vigil.call")
}

// coordinatorAcrossRestart runs the coordinator scenario, stops its
// runtime while the three workers' model calls are in flight (nothing of
// what is in flight is ended: as after kill -9, only a takeover can end
// it), and lets a second runtime on the same store take the session over
// and finish it. It returns the spans each life exported, the session and
// when the restart happened.
func coordinatorAcrossRestart(t *testing.T, content bool) (first, second []tracetest.SpanStub, id SessionID, restart time.Time, s *core.State) {
	sc, err := script.Load("internal/examples/coordinator.yaml")
	must(t, err)
	st := memstore.New()
	ctx := context.Background()
	tp1, exp1 := memTracing(t)
	rt1 := openWith(t, st, sc, func(o *Options) { o.TracerProvider, o.TraceContent = tp1, content })
	sess, err := rt1.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	time.Sleep(500 * time.Millisecond) // the workers' rounds (1 s, 2 s, 3 s) are in flight
	synctest.Wait()
	restart = time.Now()
	must(t, rt1.Close())
	first = exp1.GetSpans()

	tp2, exp2 := memTracing(t)
	rt2 := openWith(t, st, sc, func(o *Options) { o.TracerProvider, o.TraceContent = tp2, content })
	must(t, rt2.WaitQuiescent(ctx, sess.ID))
	s, err = rt2.State(ctx, sess.ID)
	must(t, err)
	checkDelivered(t, s)
	return first, exp2.GetSpans(), sess.ID, restart, s
}

func TestTraceCoordinatorAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, second, id, restart, s := coordinatorAcrossRestart(t, false)
		if s.Incarnation != 1 {
			t.Fatalf("incarnation %d, want 1: the session was not taken over", s.Incarnation)
		}
		all := append(append([]tracetest.SpanStub{}, first...), second...)
		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, sp := range all {
			if sp.SpanContext.TraceID() != traceIDOf(core.SessionID(id)) {
				t.Errorf("%s: trace %s, want the session's %s", spanLabel(sp), sp.SpanContext.TraceID(), traceIDOf(core.SessionID(id)))
			}
			if prev, dup := byID[sp.SpanContext.SpanID()]; dup {
				t.Errorf("span %s exported twice: %s and %s", sp.SpanContext.SpanID(), spanLabel(prev), spanLabel(sp))
			}
			byID[sp.SpanContext.SpanID()] = sp
		}
		// runs: "agent#seq" -> span.
		runs := map[string]tracetest.SpanStub{}
		for _, sp := range all {
			if attrStr(sp, "gen_ai.operation.name") == "invoke_agent" {
				runs[attrStr(sp, "gen_ai.agent.id")+"#"+attrStr(sp, "vigil.run")] = sp
			}
		}
		// One span per run of the session, none missing.
		var want []string
		for _, aid := range s.Order {
			for _, r := range s.Agents[aid].Runs {
				k := fmt.Sprintf("%s#%d", aid, r.Seq)
				want = append(want, k)
				sp, ok := runs[k]
				if !ok {
					t.Errorf("no span for run %s", k)
					continue
				}
				if !sp.StartTime.Equal(r.Started) || !sp.EndTime.Equal(r.Ended) {
					t.Errorf("run %s: span %s..%s, want %s..%s", k, sp.StartTime, sp.EndTime, r.Started, r.Ended)
				}
				if got := attrStr(sp, "vigil.run.status"); got != string(r.Status) {
					t.Errorf("run %s: vigil.run.status %q, want %q", k, got, r.Status)
				}
			}
		}
		if len(runs) != len(want) {
			t.Errorf("%d run spans, want %d (%v)", len(runs), len(want), want)
		}
		// The workers' first runs began before the restart and ended after
		// it: one span each, exported by the second life, with its true
		// start, parented to the Agent tool call of the first life.
		spawned := map[string]tracetest.SpanStub{}
		for _, sp := range first {
			if v := attrStr(sp, "vigil.spawned"); v != "" {
				spawned[v] = sp
			}
		}
		for _, w := range []string{"a1", "a2", "a3"} {
			r1 := runs[w+"#1"]
			if !r1.StartTime.Before(restart) || !r1.EndTime.After(restart) {
				t.Errorf("run %s#1: %s..%s, want it to span the restart at %s", w, r1.StartTime, r1.EndTime, restart)
			}
			tool, ok := spawned[w]
			if !ok {
				t.Fatalf("no Agent tool call span spawned %s in the first life", w)
			}
			if tool.Parent.SpanID() != runs[string(core.MainAgent)+"#1"].SpanContext.SpanID() {
				t.Errorf("Agent tool call of %s: parent %s, want main's run 1", w, tool.Parent.SpanID())
			}
			for _, sp := range all {
				if attrStr(sp, "gen_ai.agent.id") == w && attrStr(sp, "gen_ai.operation.name") == "invoke_agent" &&
					sp.Parent.SpanID() != tool.SpanContext.SpanID() {
					t.Errorf("%s: parent %s, want the Agent tool call %s that spawned %s", spanLabel(sp), sp.Parent.SpanID(), tool.SpanContext.SpanID(), w)
				}
			}
		}
		// Every model and tool call is a child of its run; no parent is
		// missing from what was exported.
		var models int
		for _, sp := range all {
			op := attrStr(sp, "gen_ai.operation.name")
			if op == "chat" || op == "execute_tool" {
				run, ok := runs[attrStr(sp, "gen_ai.agent.id")+"#"+attrStr(sp, "vigil.run")]
				if !ok || sp.Parent.SpanID() != run.SpanContext.SpanID() {
					t.Errorf("%s: parent %s, want its run's span %s", spanLabel(sp), sp.Parent.SpanID(), run.SpanContext.SpanID())
				}
			}
			if sp.Parent.IsValid() {
				if _, ok := byID[sp.Parent.SpanID()]; !ok {
					t.Errorf("%s: parent %s was never exported", spanLabel(sp), sp.Parent.SpanID())
				}
			}
			if op == "chat" {
				models++
				for _, k := range []string{"gen_ai.provider.name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
					if _, ok := attrOf(sp, k); !ok {
						t.Errorf("%s: no %s", spanLabel(sp), k)
					}
				}
				if got := attrStr(sp, "gen_ai.provider.name"); got != "script" {
					t.Errorf("%s: gen_ai.provider.name %q, want script", spanLabel(sp), got)
				}
				if v, _ := attrOf(sp, "gen_ai.usage.input_tokens"); v.AsInt64() <= 0 {
					t.Errorf("%s: gen_ai.usage.input_tokens %d", spanLabel(sp), v.AsInt64())
				}
			}
			if op == "execute_tool" && (attrStr(sp, "gen_ai.tool.name") == "" || attrStr(sp, "gen_ai.tool.call.id") == "") {
				t.Errorf("%s: no gen_ai.tool.name or gen_ai.tool.call.id", spanLabel(sp))
			}
		}
		if models == 0 {
			t.Error("no model call spans")
		}
		// A run that took notifications in links to the runs that wrote
		// them, which carry the notification's key.
		var linked int
		for _, aid := range s.Order {
			for _, r := range s.Agents[aid].Runs {
				sp := runs[fmt.Sprintf("%s#%d", aid, r.Seq)]
				var got []string
				for _, l := range sp.Links {
					if w, ok := byID[l.SpanContext.SpanID()]; ok && attrStr(w, "vigil.notification.key") != "" {
						got = append(got, attrStr(w, "vigil.notification.key"))
					} else {
						t.Errorf("%s: link to %s, not an exported run that wrote a notification", spanLabel(sp), l.SpanContext.SpanID())
					}
				}
				var wantKeys []string
				for _, n := range notes(s) {
					if n.Owner == aid && n.DeliveredRun == r.Seq && n.Agent != "" {
						wantKeys = append(wantKeys, n.Key.String())
					}
				}
				sort.Strings(got)
				sort.Strings(wantKeys)
				if strings.Join(got, ",") != strings.Join(wantKeys, ",") {
					t.Errorf("%s: links to the runs of notifications %v, want %v", spanLabel(sp), got, wantKeys)
				}
				linked += len(got)
			}
		}
		if linked != 5 {
			t.Errorf("%d notification links, want 5", linked)
		}
		// The takeover is a span linked to the spans of the earlier life.
		var rec []tracetest.SpanStub
		for _, sp := range second {
			if sp.Name == "vigil.recover" {
				rec = append(rec, sp)
			}
		}
		if len(rec) != 1 {
			t.Fatalf("%d recovery spans, want 1", len(rec))
		}
		earlier := map[trace.SpanID]bool{}
		for _, l := range rec[0].Links {
			earlier[l.SpanContext.SpanID()] = true
		}
		for _, k := range []string{string(core.MainAgent) + "#1", "a1#1", "a2#1", "a3#1"} {
			if !earlier[runs[k].SpanContext.SpanID()] {
				t.Errorf("the recovery span does not link to run %s of the earlier life", k)
			}
		}
		// A message's outcome is an event of its recipient's run.
		var outcomes []string
		for _, sp := range all {
			for _, ev := range sp.Events {
				if ev.Name == "vigil.message" {
					for _, kv := range ev.Attributes {
						if kv.Key == "vigil.message.outcome" {
							outcomes = append(outcomes, spanLabel(sp)+" "+kv.Value.Emit())
						}
					}
				}
			}
		}
		sort.Strings(outcomes)
		if got := strings.Join(outcomes, ", "); got != "invoke_agent w2 #1 queued-behind-stop, invoke_agent w3 #1 queued-behind-stop" {
			t.Errorf("message outcomes on runs: %s", got)
		}
		t.Logf("span tree (start, duration):\n%s", spanTree(all, runs[string(core.MainAgent)+"#1"].StartTime))
		// No text of the conversation by default.
		for _, sp := range all {
			for _, kv := range sp.Attributes {
				v := kv.Value.Emit()
				for _, text := range []string{"Build the release", "part one is done", "Also add tests"} {
					if strings.Contains(v, text) {
						t.Errorf("%s: %s holds conversation text %q", spanLabel(sp), kv.Key, text)
					}
				}
			}
		}
	})
}

func TestTraceContentOptIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, second, _, _, _ := coordinatorAcrossRestart(t, true)
		found := map[string]bool{}
		for _, sp := range append(first, second...) {
			for _, kv := range sp.Attributes {
				for _, text := range []string{"Build the release", "part one is done", "Also add tests"} {
					if strings.Contains(kv.Value.Emit(), text) {
						found[text+" in "+string(kv.Key)] = true
					}
				}
			}
		}
		for _, want := range []string{
			"Build the release in gen_ai.input.messages",
			"part one is done in gen_ai.output.messages",
			"Also add tests in gen_ai.tool.call.arguments",
		} {
			if !found[want] {
				t.Errorf("with TraceContent, no %s (found %v)", want, found)
			}
		}
	})
}

// TestTraceOff: without a TracerProvider no actor carries tracing.
func TestTraceOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, _ := openScript(t, "internal/examples/coordinator.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hi", Permissions: Permissions{Mode: PermBypass}})
		must(t, err)
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		rt.mu.Lock()
		a := rt.actors[core.SessionID(sess.ID)]
		rt.mu.Unlock()
		if rt.tracer != nil || a == nil || a.trace != nil {
			t.Fatalf("tracing is on without a TracerProvider (tracer %v)", rt.tracer)
		}
	})
}

// spanTree renders spans as an indented tree by start time, with the
// links of each span, for logs and the README.
func spanTree(spans []tracetest.SpanStub, t0 time.Time) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, sp := range spans {
		ids[sp.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, sp := range spans {
		if sp.Parent.IsValid() && ids[sp.Parent.SpanID()] {
			children[sp.Parent.SpanID()] = append(children[sp.Parent.SpanID()], sp)
		} else {
			roots = append(roots, sp)
		}
	}
	byStart := func(s []tracetest.SpanStub) {
		sort.SliceStable(s, func(i, j int) bool { return s[i].StartTime.Before(s[j].StartTime) })
	}
	label := map[trace.SpanID]string{}
	for _, sp := range spans {
		label[sp.SpanContext.SpanID()] = spanLabel(sp)
	}
	var b strings.Builder
	var walk func(sp tracetest.SpanStub, depth int)
	walk = func(sp tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%7.3fs %7.3fs  %s%s", sp.StartTime.Sub(t0).Seconds(), sp.EndTime.Sub(sp.StartTime).Seconds(), strings.Repeat("  ", depth), strings.TrimSpace(spanLabel(sp)))
		for _, l := range sp.Links {
			fmt.Fprintf(&b, "  → %s", strings.TrimSpace(label[l.SpanContext.SpanID()]))
		}
		b.WriteString("\n")
		kids := children[sp.SpanContext.SpanID()]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	byStart(roots)
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// TestTraceForeignProvider: a TracerProvider built without
// TraceIDGenerator still gets spans, nested within the process's life, and
// the runtime says once that spans crossing a restart lose their parents.
func TestTraceForeignProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		var logs strings.Builder
		var mu sync.Mutex
		sc, err := script.Load("internal/examples/coordinator.yaml")
		must(t, err)
		rt := openWith(t, memstore.New(), sc, func(o *Options) {
			o.TracerProvider = tp
			o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		must(t, err)
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		spans := exp.GetSpans()
		ids := map[trace.SpanID]tracetest.SpanStub{}
		for _, sp := range spans {
			ids[sp.SpanContext.SpanID()] = sp
		}
		var nested int
		for _, sp := range spans {
			if attrStr(sp, "gen_ai.operation.name") == "chat" {
				if p, ok := ids[sp.Parent.SpanID()]; !ok || attrStr(p, "gen_ai.operation.name") != "invoke_agent" {
					t.Errorf("%s: parent %s is not an exported run", spanLabel(sp), sp.Parent.SpanID())
				}
				nested++
			}
		}
		if nested == 0 {
			t.Error("no model call spans")
		}
		mu.Lock()
		defer mu.Unlock()
		if n := strings.Count(logs.String(), "does not use vigil.TraceIDGenerator"); n != 1 {
			t.Errorf("%d warnings about the ID generator, want 1:\n%s", n, logs.String())
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestTraceToolErrorText: a failed tool call's span says it failed, but
// its result (here an error naming the file the model asked for) goes
// into no attribute, event or status unless content is opted in.
func TestTraceToolErrorText(t *testing.T) {
	const secret = "secret-plan-4711"
	work := t.TempDir()
	sc, err := script.Parse([]byte(`name: tool-error
agents:
  main:
    turns:
      - say: "Reading it."
        tools:
          - Read: {file_path: "` + filepath.Join(work, secret+".txt") + `"}
      - say: "It is not there."
`))
	must(t, err)
	for _, content := range []bool{false, true} {
		tp, exp := memTracing(t)
		rt := openWith(t, memstore.New(), sc, func(o *Options) { o.TracerProvider, o.TraceContent = tp, content })
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "read the plan", Cwd: work, Permissions: Permissions{Mode: PermBypass}})
		must(t, err)
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		var failed, leaks int
		for _, sp := range exp.GetSpans() {
			if sp.Name == "execute_tool Read" && sp.Status.Code == codes.Error {
				failed++
			}
			texts := []string{sp.Status.Description}
			for _, kv := range sp.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
			for _, ev := range sp.Events {
				for _, kv := range ev.Attributes {
					texts = append(texts, kv.Value.Emit())
				}
			}
			for _, x := range texts {
				if strings.Contains(x, secret) {
					leaks++
				}
			}
		}
		switch {
		case failed != 1:
			t.Errorf("content %v: %d failed Read spans, want 1", content, failed)
		case !content && leaks > 0:
			t.Errorf("without content, the tool's input or result is in %d places of the trace", leaks)
		case content && leaks == 0:
			t.Errorf("with content, the tool's input and result are nowhere in the trace")
		}
		must(t, rt.Close())
	}
}
