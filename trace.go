package vigil

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigilrun/vigil/core"
)

// Tracing turns a session's committed events into OpenTelemetry spans, at
// the edge of the runtime as observe.go turns them into metrics: the core
// knows nothing of it. One session is one trace; a run is a span, each model
// call and each tool call a child of its run; a subagent's runs are children
// of the Agent tool call that spawned it; a run that took notifications in
// links to the runs that wrote them; a takeover (a restart, another node)
// is a span linking to the spans of the earlier life.
//
// Spans export only when they end, and a run may start before a crash and
// end after it. So no ID is random: the trace ID is a hash of the session ID
// and each span ID a hash of the session and the entity (the run, the model
// call, the tool call). A new process that takes the session over opens the
// spans of what was in flight, with their true start times, under the same
// IDs, and nothing needs to be stored. The IDs come from TraceIDGenerator,
// which a TracerProvider must use for this to hold (see
// Options.TracerProvider).

// tracerName is the instrumentation scope of vigil's spans.
const tracerName = "github.com/vigilrun/vigil"

// wantIDs carries the IDs a span must get through the context to the ID
// generator.
type wantIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

type wantIDsKey struct{}

// idGenerator gives a span the IDs vigil asked for in the context, and
// random ones to spans vigil did not start.
type idGenerator struct{}

// TraceIDGenerator returns the ID generator a TracerProvider given to
// Options.TracerProvider must be built with
// (sdktrace.WithIDGenerator(vigil.TraceIDGenerator())): it gives vigil's
// spans their deterministic IDs, so that a span that began before a crash
// and ends after it is one span, and every other span (not started by vigil)
// random IDs.
func TraceIDGenerator() sdktrace.IDGenerator { return idGenerator{} }

// NewIDs implements sdktrace.IDGenerator.
func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantIDsKey{}).(wantIDs); ok {
		return w.trace, w.span
	}
	var t trace.TraceID
	var s trace.SpanID
	for !t.IsValid() {
		_, _ = rand.Read(t[:])
	}
	for !s.IsValid() {
		_, _ = rand.Read(s[:])
	}
	return t, s
}

// NewSpanID implements sdktrace.IDGenerator.
func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantIDsKey{}).(wantIDs); ok {
		return w.span
	}
	var s trace.SpanID
	for !s.IsValid() {
		_, _ = rand.Read(s[:])
	}
	return s
}

// traceIDOf is the trace ID of a session.
func traceIDOf(session core.SessionID) trace.TraceID {
	sum := sha256.Sum256([]byte("vigil trace\x00" + string(session)))
	var t trace.TraceID
	copy(t[:], sum[:])
	if !t.IsValid() {
		t[15] = 1
	}
	return t
}

// spanIDOf is the span ID of an entity of a session, named by its parts.
func spanIDOf(session core.SessionID, parts ...string) trace.SpanID {
	sum := sha256.Sum256([]byte("vigil span\x00" + string(session) + "\x00" + strings.Join(parts, "\x00")))
	var s trace.SpanID
	copy(s[:], sum[:])
	if !s.IsValid() {
		s[7] = 1
	}
	return s
}

// tracer is the runtime's tracing, nil when it is off.
type tracer struct {
	t       trace.Tracer
	content bool
	log     *slog.Logger
	// warned is set once a span got other IDs than vigil asked for.
	warned atomic.Bool
}

func newTracer(tp trace.TracerProvider, content bool, log *slog.Logger) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{t: tp.Tracer(tracerName), content: content, log: log}
}

// spanKey names an open span of a session.
type spanKey struct {
	kind  byte // 'r' run, 'm' model call, 't' tool call
	agent core.AgentID
	id    string // run seq, call id or tool use id
}

type openSpan struct {
	span trace.Span
	run  int // the run of a model or tool call
}

// sessionTrace is the tracing of one session, used on its actor's
// goroutine only.
type sessionTrace struct {
	tr    *tracer
	id    core.SessionID
	trace trace.TraceID
	open  map[spanKey]*openSpan
	// runs is each agent's current run, as the events said.
	runs map[core.AgentID]int
	// earlier are the spans a takeover found in flight: the new life's
	// recovery span links to them.
	earlier []trace.SpanContext
}

func (tr *tracer) session(id core.SessionID) *sessionTrace {
	if tr == nil {
		return nil
	}
	return &sessionTrace{tr: tr, id: id, trace: traceIDOf(id), open: map[spanKey]*openSpan{}, runs: map[core.AgentID]int{}}
}

func runKey(agent core.AgentID, seq int) spanKey {
	return spanKey{'r', agent, strconv.Itoa(seq)}
}

// sc is the span context of a span ID of the session's trace.
func (st *sessionTrace) sc(span trace.SpanID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: st.trace, SpanID: span, TraceFlags: trace.FlagsSampled})
}

// runSC is the span context of a run: the open span's when this process
// has it, else the one its deterministic ID names.
func (st *sessionTrace) runSC(agent core.AgentID, seq int) trace.SpanContext {
	if o := st.open[runKey(agent, seq)]; o != nil {
		return o.span.SpanContext()
	}
	return st.sc(spanIDOf(st.id, "run", string(agent), strconv.Itoa(seq)))
}

// toolSpanID is a tool call's span ID. The call that spawned a subagent is
// named by the subagent, so that its runs find their parent in any life.
func (st *sessionTrace) toolSpanID(agent core.AgentID, tc *core.ToolCall) trace.SpanID {
	if tc.Child != "" {
		return spanIDOf(st.id, "spawn", string(tc.Child))
	}
	return spanIDOf(st.id, "tool", string(agent), tc.UseID)
}

// start starts a span with the given IDs under parent (invalid: a root of
// the session's trace).
func (st *sessionTrace) start(name string, span trace.SpanID, parent trace.SpanContext, at time.Time, kind trace.SpanKind, attrs []attribute.KeyValue, links []trace.Link) trace.Span {
	ctx := context.WithValue(context.Background(), wantIDsKey{}, wantIDs{trace: st.trace, span: span})
	opts := []trace.SpanStartOption{trace.WithTimestamp(at), trace.WithSpanKind(kind), trace.WithAttributes(attrs...), trace.WithLinks(links...)}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	_, sp := st.tr.t.Start(ctx, name, opts...)
	if got := sp.SpanContext(); got.IsValid() && (got.SpanID() != span || got.TraceID() != st.trace) && st.tr.warned.CompareAndSwap(false, true) {
		st.tr.log.Warn("the TracerProvider does not use vigil.TraceIDGenerator: spans that cross a restart lose their parents, and a session's runs may spread over several traces", "session", st.id)
	}
	return sp
}

// modelOf is the model and provider an agent's calls go to.
func modelOf(s *core.State, a *core.Agent) (model, prov string) {
	model, prov = a.Model, a.Provider
	if model == "" {
		model = s.Session.Model
	}
	if prov == "" {
		prov = s.Session.Provider
	}
	return model, prov
}

// startRun opens the span of an agent's run.
func (st *sessionTrace) startRun(s *core.State, a *core.Agent, seq int, kind core.RunKind, at time.Time, notes []core.NoteKey) {
	k := runKey(a.ID, seq)
	st.runs[a.ID] = seq
	if st.open[k] != nil {
		return
	}
	var parent trace.SpanContext
	if a.Owner != "" {
		parent = st.sc(spanIDOf(st.id, "spawn", string(a.ID)))
	}
	model, prov := modelOf(s, a)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.id", string(a.ID)),
		attribute.String("gen_ai.agent.name", a.Name),
		attribute.String("gen_ai.conversation.id", string(st.id)),
		attribute.String("gen_ai.provider.name", prov),
		attribute.String("vigil.session", string(st.id)),
		attribute.String("vigil.agent", a.Name),
		attribute.Int("vigil.run", seq),
		attribute.String("vigil.run.kind", string(kind)),
	}
	if model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", model))
	}
	if a.Task != "" {
		attrs = append(attrs, attribute.String("vigil.task", string(a.Task)))
	}
	if a.Owner != "" {
		attrs = append(attrs, attribute.String("vigil.agent.owner", string(a.Owner)))
	}
	if b := a.Budget; !b.IsZero() {
		if b.Tokens > 0 {
			attrs = append(attrs, attribute.Int64("vigil.budget.tokens", b.Tokens))
		}
		if b.Rounds > 0 {
			attrs = append(attrs, attribute.Int("vigil.budget.rounds", b.Rounds))
		}
		if b.Wall > 0 {
			attrs = append(attrs, attribute.Float64("vigil.budget.wall_seconds", b.Wall.Seconds()))
		}
		if b.Cost > 0 {
			attrs = append(attrs, attribute.Int64("vigil.budget.cost_micros", b.Cost))
		}
	}
	if st.tr.content && a.Run != nil && a.Run.Seq == seq {
		if in := inputText(a); in != "" {
			attrs = append(attrs, attribute.String("gen_ai.input.messages", messagesJSON("user", in)))
		}
	}
	sp := st.start("invoke_agent "+a.Name, spanIDOf(st.id, "run", string(a.ID), strconv.Itoa(seq)), parent, at, trace.SpanKindInternal, attrs, st.noteLinks(s, notes))
	st.open[k] = &openSpan{span: sp, run: seq}
}

// inputText is the text the current run took in: the transcript from where
// its items begin.
func inputText(a *core.Agent) string {
	var b strings.Builder
	for i := a.Run.UnseenAt.Msg; i >= 0 && i < len(a.Transcript); i++ {
		for _, bl := range a.Transcript[i].Content {
			if bl.Type == "text" && bl.Text != "" {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				b.WriteString(bl.Text)
			}
		}
	}
	return b.String()
}

// messagesJSON is one message in the GenAI conventions' message form.
func messagesJSON(role, text string) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type msg struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	b, _ := json.Marshal([]msg{{Role: role, Parts: []part{{Type: "text", Content: text}}}})
	return string(b)
}

// noteLinks are the links from a run to the runs that wrote the
// notifications it took in: an agent task's notification key names the
// run of its agent that wrote it.
func (st *sessionTrace) noteLinks(s *core.State, keys []core.NoteKey) []trace.Link {
	var links []trace.Link
	for _, key := range keys {
		n := s.Note(key)
		if n == nil {
			continue
		}
		attrs := []attribute.KeyValue{attribute.String("vigil.notification.key", key.String()), attribute.String("vigil.notification.status", n.Status)}
		if n.Agent == "" || key.Run <= 0 {
			continue // a shell task's notification: no run wrote it
		}
		links = append(links, trace.Link{SpanContext: st.runSC(n.Agent, key.Run), Attributes: attrs})
	}
	return links
}

// startModel opens the span of a model call of an agent's current run.
func (st *sessionTrace) startModel(s *core.State, a *core.Agent, call core.CallID, round int, purpose string, at time.Time) {
	k := spanKey{'m', a.ID, string(call)}
	if st.open[k] != nil {
		return
	}
	seq := st.runs[a.ID]
	model, prov := modelOf(s, a)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", prov),
		attribute.String("gen_ai.conversation.id", string(st.id)),
		attribute.String("gen_ai.agent.id", string(a.ID)),
		attribute.String("vigil.session", string(st.id)),
		attribute.String("vigil.agent", a.Name),
		attribute.Int("vigil.run", seq),
		attribute.String("vigil.call", string(call)),
		attribute.Int("vigil.round", round),
	}
	if purpose != "" {
		attrs = append(attrs, attribute.String("vigil.call.purpose", purpose))
	}
	name := "chat"
	if model != "" {
		name += " " + model
		attrs = append(attrs, attribute.String("gen_ai.request.model", model))
	}
	sp := st.start(name, spanIDOf(st.id, "model", string(a.ID), string(call)), st.runSC(a.ID, seq), at, trace.SpanKindClient, attrs, nil)
	st.open[k] = &openSpan{span: sp, run: seq}
}

// startTool opens the span of a tool call of an agent's current run.
func (st *sessionTrace) startTool(a *core.Agent, tc *core.ToolCall, at time.Time) {
	k := spanKey{'t', a.ID, tc.UseID}
	if st.open[k] != nil {
		return
	}
	seq := st.runs[a.ID]
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tc.Name),
		attribute.String("gen_ai.tool.call.id", tc.UseID),
		attribute.String("gen_ai.agent.id", string(a.ID)),
		attribute.String("vigil.session", string(st.id)),
		attribute.String("vigil.agent", a.Name),
		attribute.Int("vigil.run", seq),
	}
	if tc.Child != "" {
		attrs = append(attrs, attribute.String("vigil.spawned", string(tc.Child)))
	}
	if st.tr.content && len(tc.Input) > 0 {
		attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", string(tc.Input)))
	}
	sp := st.start("execute_tool "+tc.Name, st.toolSpanID(a.ID, tc), st.runSC(a.ID, seq), at, trace.SpanKindInternal, attrs, nil)
	st.open[k] = &openSpan{span: sp, run: seq}
}

// end ends an open span at at, if this process has it.
func (st *sessionTrace) end(k spanKey, at time.Time, attrs ...attribute.KeyValue) trace.Span {
	o := st.open[k]
	if o == nil {
		return nil
	}
	delete(st.open, k)
	o.span.SetAttributes(attrs...)
	o.span.End(trace.WithTimestamp(at))
	return o.span
}

// resume opens the spans of what a session loaded for a takeover had in
// flight, before its recovery step, with their true start times: they end
// in this life, under the IDs the earlier life gave their children.
func (st *sessionTrace) resume(s *core.State) {
	if st == nil {
		return
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Run == nil {
			if n := len(a.Runs); n > 0 {
				st.earlier = append(st.earlier, st.runSC(a.ID, a.Runs[n-1].Seq))
			}
			continue
		}
		r := a.Run
		st.startRun(s, a, r.Seq, r.Kind, r.Started, nil)
		st.earlier = append(st.earlier, st.runSC(a.ID, r.Seq))
		if c := r.Call; c != nil {
			st.startModel(s, a, c.ID, c.Round, c.Purpose, c.Started)
		}
		for _, tc := range r.Tools {
			if !tc.Done {
				st.startTool(a, tc, tc.Started)
			}
		}
	}
}

// observe turns a committed batch into spans; s is the state after it.
func (st *sessionTrace) observe(s *core.State, events []core.Event) {
	// A run's notification is written in the batch that ends the run.
	written := map[core.AgentID]core.NoteKey{}
	for _, e := range events {
		if b, ok := e.Body.(*core.NotificationWritten); ok && b.Note.Agent != "" {
			written[b.Note.Agent] = b.Note.Key
		}
	}
	// A message's outcome is an event of the recipient's run it names,
	// recorded before a run that ends in this batch ends, or after one
	// that starts in it started.
	var later []msgOutcome
	for _, e := range events {
		var m msgOutcome
		switch b := e.Body.(type) {
		case *core.MessageSent:
			if b.Msg.Outcome == core.OutcomePending {
				continue
			}
			m = msgOutcome{id: b.Msg.ID, outcome: string(b.Msg.Outcome), at: e.At}
		case *core.MessageResolved:
			m = msgOutcome{id: b.Msg, outcome: string(b.Outcome), at: e.At}
		default:
			continue
		}
		if msg := s.Msgs[m.id]; msg != nil {
			m.to, m.run = msg.To, msg.Run
		}
		if !st.message(m) {
			later = append(later, m)
		}
	}
	for _, e := range events {
		switch b := e.Body.(type) {
		case *core.RunStarted:
			if a := s.Agents[b.Agent]; a != nil {
				st.startRun(s, a, b.Seq, b.Kind, e.At, b.Notes)
			}
		case *core.ItemsJoined:
			if o := st.open[runKey(b.Agent, b.Seq)]; o != nil {
				for _, l := range st.noteLinks(s, b.Notes) {
					o.span.AddLink(l)
				}
			}
		case *core.ModelCallStarted:
			if a := s.Agents[b.Agent]; a != nil {
				st.startModel(s, a, b.Call, b.Round, b.Purpose, e.At)
			}
		case *core.ModelCallEnded:
			attrs := []attribute.KeyValue{
				attribute.Int64("gen_ai.usage.input_tokens", b.Usage.InputTokens+b.Usage.CacheReadTokens+b.Usage.CacheWriteTokens),
				attribute.Int64("gen_ai.usage.output_tokens", b.Usage.OutputTokens),
				attribute.String("vigil.call.outcome", b.Outcome),
			}
			if b.Usage.CacheReadTokens > 0 {
				attrs = append(attrs, attribute.Int64("gen_ai.usage.cache_read.input_tokens", b.Usage.CacheReadTokens))
			}
			if b.Usage.CacheWriteTokens > 0 {
				attrs = append(attrs, attribute.Int64("gen_ai.usage.cache_creation.input_tokens", b.Usage.CacheWriteTokens))
			}
			if b.StopReason != "" {
				attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", []string{string(b.StopReason)}))
			}
			if b.Cost > 0 {
				attrs = append(attrs, attribute.Int64("vigil.cost_micros", b.Cost))
			}
			k := spanKey{'m', b.Agent, string(b.Call)}
			if o := st.open[k]; o != nil && b.Outcome == "failed" {
				o.span.SetStatus(codes.Error, b.Error)
			}
			st.end(k, e.At, attrs...)
		case *core.ToolCallStarted:
			if a := s.Agents[b.Agent]; a != nil {
				tc := b.Call
				st.startTool(a, &tc, e.At)
			}
		case *core.ToolCallFinished:
			k := spanKey{'t', b.Agent, b.UseID}
			if o := st.open[k]; o != nil {
				if b.IsError {
					// A tool's result is conversation content: its text
					// goes in only when the user opted in.
					why := "the tool call failed"
					if st.tr.content {
						why = firstLine(b.Result)
					}
					o.span.SetStatus(codes.Error, why)
				}
				if st.tr.content {
					o.span.SetAttributes(attribute.String("gen_ai.tool.call.result", b.Result))
				}
			}
			st.end(k, e.At)
		case *core.RunEnded:
			k := runKey(b.Agent, b.Seq)
			// Calls the run left open (cancelled, interrupted) end with it.
			for ck, o := range st.open {
				if ck.kind != 'r' && ck.agent == b.Agent && o.run == b.Seq {
					st.end(ck, e.At, attribute.String("vigil.ended_by", "run-end"))
				}
			}
			o := st.open[k]
			if o == nil {
				break
			}
			attrs := []attribute.KeyValue{attribute.String("vigil.run.status", string(b.Status))}
			if key, ok := written[b.Agent]; ok {
				attrs = append(attrs, attribute.String("vigil.notification.key", key.String()))
			}
			if a := s.Agents[b.Agent]; a != nil && len(a.Runs) > 0 && a.Runs[len(a.Runs)-1].Seq == b.Seq {
				u := a.Runs[len(a.Runs)-1].Usage
				attrs = append(attrs,
					attribute.Int64("gen_ai.usage.input_tokens", u.InputTokens+u.CacheReadTokens+u.CacheWriteTokens),
					attribute.Int64("gen_ai.usage.output_tokens", u.OutputTokens))
			}
			if st.tr.content && b.Reply != "" {
				attrs = append(attrs, attribute.String("gen_ai.output.messages", messagesJSON("assistant", b.Reply)))
			}
			if b.Status != core.RunCompleted {
				o.span.SetStatus(codes.Error, firstLine(string(b.Status)+": "+b.Error))
			}
			st.end(k, e.At, attrs...)
			if st.runs[b.Agent] == b.Seq {
				delete(st.runs, b.Agent)
			}
		case *core.Recovered:
			st.recovered(b.Incarnation, e.At)
		case *core.SessionClosed:
			for k := range st.open {
				st.end(k, e.At, attribute.String("vigil.ended_by", "session-closed"))
			}
		}
	}
	for _, m := range later {
		st.message(m)
	}
}

// msgOutcome is a message's outcome and the recipient's run it names.
type msgOutcome struct {
	id      core.MsgID
	to      core.AgentID
	run     int
	outcome string
	at      time.Time
}

// message records a message's outcome as an event of the recipient's run
// it names (its current run when it names none); false when that run's
// span is not open.
func (st *sessionTrace) message(m msgOutcome) bool {
	seq := m.run
	if seq == 0 {
		cur, ok := st.runs[m.to]
		if !ok {
			return false
		}
		seq = cur
	}
	o := st.open[runKey(m.to, seq)]
	if o == nil {
		return false
	}
	o.span.AddEvent("vigil.message", trace.WithTimestamp(m.at), trace.WithAttributes(
		attribute.String("vigil.message", string(m.id)), attribute.String("vigil.message.outcome", m.outcome)))
	return true
}

// recovered records a takeover: a span of no length, linked to the spans
// of the earlier life (those in flight, which this life ends, and each
// agent's last run) and to the previous takeover's.
func (st *sessionTrace) recovered(incarnation int64, at time.Time) {
	links := make([]trace.Link, 0, len(st.earlier)+1)
	for _, sc := range st.earlier {
		links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("vigil.link", "earlier-life")}})
	}
	if incarnation > 1 {
		links = append(links, trace.Link{SpanContext: st.sc(spanIDOf(st.id, "recovered", strconv.FormatInt(incarnation-1, 10))),
			Attributes: []attribute.KeyValue{attribute.String("vigil.link", "previous-takeover")}})
	}
	st.earlier = nil
	sp := st.start("vigil.recover", spanIDOf(st.id, "recovered", strconv.FormatInt(incarnation, 10)), trace.SpanContext{}, at, trace.SpanKindInternal,
		[]attribute.KeyValue{attribute.String("vigil.session", string(st.id)), attribute.Int64("vigil.incarnation", incarnation)}, links)
	sp.End(trace.WithTimestamp(at))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
