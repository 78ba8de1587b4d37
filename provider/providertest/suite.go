package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
)

// Harness tells Run how to build the adapter under test. Its functions may
// be called from parallel subtests and from inside testing/synctest
// bubbles: they must not call t.Parallel, t.Run or t.Setenv.
type Harness struct {
	// Wire is the wire format the adapter speaks. For each subtest Run
	// starts a fake server of it (on loopback, or in memory for the
	// subtests about time) and builds the adapter with New. Empty means
	// an adapter that talks to no server, the scripted provider: Run
	// builds it with Answering and runs only the subtests about answers.
	Wire Wire
	// New returns the adapter configured by c. It takes every field of c
	// and may set adapter-specific options (a model name, say).
	New func(t *testing.T, c Config) provider.Provider
	// Answering returns an adapter that answers every request with reply
	// (its Blocks; an adapter without a wire counts its own usage and may
	// choose its own tool call ids). Only for an adapter without a Wire.
	Answering func(t *testing.T, reply Reply) provider.Provider
}

// Config is how Run wants an adapter configured for one subtest.
type Config struct {
	// BaseURL is the fake server's base URL for the adapter's wire, as
	// Server.BaseURL returns it.
	BaseURL string
	// HTTPClient sends the requests; nil means the adapter's default
	// client. An in-memory server is reached only through it.
	HTTPClient *http.Client
	// APIKey is the key to send. Run checks that it never appears in an
	// error or a log line.
	APIKey string
	// Retry is the retry policy: its Sleep and Now are the fake clock of
	// a subtest on loopback, nil (timers, in a bubble's time) in memory.
	Retry provider.RetryPolicy
	// Logger receives the adapter's logs, which Run reads.
	Logger *slog.Logger
}

// suiteKey is the API key of every adapter Run builds.
const suiteKey = "sk-providertest-SECRET-0123456789"

// suiteNow is the clock of the subtests on loopback.
var suiteNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// subtest is one case of the suite.
type subtest struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// Run runs the conformance suite of provider adapters, one parallel
// subtest per case:
//
//   - for every adapter: Text, ToolCalls, EmptyToolInput, Usage,
//     ConsumerStops (in a bubble, for an adapter with a Wire) and
//     Concurrent, about the answers a stream yields;
//   - for an adapter with a Wire, also StopReasons, CountedUsage,
//     CutAnywhere, CutRetriesExhausted, ErrorMidStream, ClientErrors,
//     ProxyErrorPage, ContextWindow, MalformedToolInput, JSONInsteadOfStream,
//     InvalidRequest, ConnectionRefused, Redaction and IdentityHeaders
//     against a fake server on loopback, and Overloaded, RateLimited,
//     RetryAfterTooLong, ServerErrorsExhausted, CancelMidStream,
//     CancelDuringBackoff, Deadline, SlowButAlive, Stall, StallExhausted
//     and StallOff in a testing/synctest bubble against an in-memory
//     fake, where waits are measured on the bubble's clock and a response
//     body left open fails the test.
//
// Each subtest builds its own adapter through h.
func Run(t *testing.T, h Harness) {
	tests := []subtest{
		{"Text", testText},
		{"ToolCalls", testToolCalls},
		{"EmptyToolInput", testEmptyToolInput},
		{"Usage", testUsage},
		{"ConsumerStops", testConsumerStops},
		{"Concurrent", testConcurrent},
	}
	if h.Wire == "" {
		if h.Answering == nil {
			t.Fatal("providertest: a Harness without a Wire needs Answering")
		}
	} else {
		if h.New == nil {
			t.Fatal("providertest: a Harness with a Wire needs New")
		}
		tests = append(tests, []subtest{
			{"StopReasons", testStopReasons},
			{"CountedUsage", testCountedUsage},
			{"CutAnywhere", testCutAnywhere},
			{"CutRetriesExhausted", testCutRetriesExhausted},
			{"ErrorMidStream", testErrorMidStream},
			{"ClientErrors", testClientErrors},
			{"ProxyErrorPage", testProxyErrorPage},
			{"ContextWindow", testContextWindow},
			{"MalformedToolInput", testMalformedToolInput},
			{"JSONInsteadOfStream", testJSONInsteadOfStream},
			{"InvalidRequest", testInvalidRequest},
			{"ConnectionRefused", testConnectionRefused},
			{"Redaction", testRedaction},
			{"IdentityHeaders", testIdentityHeaders},
			{"CancelMidStream", testCancelMidStream},
			{"Overloaded", testOverloaded},
			{"RateLimited", testRateLimited},
			{"RetryAfterTooLong", testRetryAfterTooLong},
			{"ServerErrorsExhausted", testServerErrorsExhausted},
			{"CancelDuringBackoff", testCancelDuringBackoff},
			{"Deadline", testDeadline},
			{"SlowButAlive", testSlowButAlive},
			{"Stall", testStall},
			{"StallExhausted", testStallExhausted},
			{"StallOff", testStallOff},
		}...)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// env is one subtest's fake server and the adapter that talks to it.
type env struct {
	srv   *Server
	p     provider.Provider
	logs  *logBuffer
	slept *sleeps
}

// loopback builds an env on a fake server on loopback, whose retries
// sleep on a fake clock (they return at once and are recorded).
func loopback(t *testing.T, h Harness, mod func(*Config)) *env {
	t.Helper()
	e := &env{srv: NewServer(t, h.Wire), logs: &logBuffer{}, slept: &sleeps{}}
	c := e.config()
	c.Retry.Sleep, c.Retry.Now = e.slept.sleep, func() time.Time { return suiteNow }
	if mod != nil {
		mod(&c)
	}
	e.p = h.New(t, c)
	return e
}

// inMemory runs fn in a testing/synctest bubble, with an env on an
// in-memory fake server, whose retries wait on timers in the bubble's
// time.
func inMemory(t *testing.T, h Harness, mod func(*Config), fn func(t *testing.T, e *env)) {
	synctest.Test(t, func(t *testing.T) {
		e := &env{srv: NewInMemory(t, h.Wire), logs: &logBuffer{}}
		c := e.config()
		c.HTTPClient = e.srv.Client()
		if mod != nil {
			mod(&c)
		}
		e.p = h.New(t, c)
		fn(t, e)
	})
}

func (e *env) config() Config {
	return Config{
		BaseURL: e.srv.BaseURL(),
		APIKey:  suiteKey,
		Retry:   provider.RetryPolicy{MaxAttempts: 3, Rand: func() float64 { return 0.5 }},
		Logger:  slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (e *env) drain(ctx context.Context, req *provider.Request) Result { return Drain(ctx, e.p, req) }

// gap is the time between the server's receipt of requests n-1 and n.
func (e *env) gap(t *testing.T, n int) time.Duration {
	t.Helper()
	a, b := e.srv.Request(n-1), e.srv.Request(n)
	if a == nil || b == nil {
		t.Fatalf("the server saw %d requests, want at least %d", len(e.srv.Requests()), n)
	}
	return b.At.Sub(a.At)
}

// answering returns the adapter under test answering every request with
// reply, and its fake server (nil without a wire).
func answering(t *testing.T, h Harness, reply Reply) (provider.Provider, *Server) {
	t.Helper()
	if h.Wire == "" {
		return h.Answering(t, reply), nil
	}
	e := loopback(t, h, nil)
	e.srv.Fallback(func(*Request) (Reply, bool) { return reply, true })
	return e.p, e.srv
}

// sleeps records the waits of a retry policy instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.d)
}

// logBuffer collects log lines from concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func prompt(text string) *provider.Request {
	return &provider.Request{
		CallID:   "call-1",
		Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text(text)}}},
	}
}

// The answers the suite scripts.
var (
	unicodeText = "I'll look at two files — ünïcode too, and 日本語, \"quoted\" and <tagged> & done."
	toolAnswer  = []chat.Block{
		chat.Text("Reading three things."),
		ToolUse("toolu_1", "read", `{"path": "a.go", "lines": [1, 2, 3]}`),
		ToolUse("toolu_2", "read", `{"path":"b.go"}`),
		ToolUse("toolu_3", "bash", `{"cmd": "ls -la \"dir\"", "env": {"X": "y"}}`),
	}
	scriptedUsage = chat.Usage{InputTokens: 120, OutputTokens: 45, CacheReadTokens: 1000, CacheWriteTokens: 30}
)

// wellFormed checks the events of a stream that succeeded: each carries
// what its type says, and EventDone comes last, once.
func wellFormed(t *testing.T, r Result) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("stream failed: %v", r.Err)
	}
	for i, ev := range r.Events {
		last := i == len(r.Events)-1
		switch {
		case ev.Type == provider.EventDone && (!last || ev.Response == nil):
			t.Errorf("event %d: EventDone at %d of %d events, response %v", i, i+1, len(r.Events), ev.Response)
		case ev.Type == provider.EventText && (ev.Block != nil || ev.Retry != nil || ev.Response != nil):
			t.Errorf("event %d: EventText carries more than text: %+v", i, ev)
		case ev.Type == provider.EventToolUse && (ev.Block == nil || ev.Block.Type != chat.BlockToolUse):
			t.Errorf("event %d: EventToolUse without a tool_use block: %+v", i, ev)
		case ev.Type == provider.EventRetry && ev.Retry == nil:
			t.Errorf("event %d: EventRetry without a Retry", i)
		case last && ev.Type != provider.EventDone:
			t.Errorf("last event is %s, want done", ev.Type)
		case !slices.Contains([]provider.EventType{provider.EventText, provider.EventToolUse, provider.EventRetry, provider.EventDone}, ev.Type):
			t.Errorf("event %d: unknown type %q", i, ev.Type)
		}
	}
}

// sameJSON reports whether a and b hold equal JSON values.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// isCompact reports whether b is JSON without insignificant space.
func isCompact(b []byte) bool {
	var c bytes.Buffer
	return json.Compact(&c, b) == nil && bytes.Equal(c.Bytes(), b)
}

// answerErr describes how resp differs from an answer of blocks, or
// returns "". Without a wire, tool ids are the adapter's own: they must be
// there and differ.
func answerErr(h Harness, resp *chat.Response, blocks []chat.Block) string {
	if resp == nil {
		return "no response"
	}
	if len(resp.Content) != len(blocks) {
		return fmt.Sprintf("%d blocks, want %d: %+v", len(resp.Content), len(blocks), resp.Content)
	}
	ids := map[string]bool{}
	for i, want := range blocks {
		got := resp.Content[i]
		switch {
		case got.Type != want.Type:
			return fmt.Sprintf("block %d is %s, want %s", i, got.Type, want.Type)
		case want.Type == chat.BlockText && got.Text != want.Text:
			return fmt.Sprintf("block %d text %q, want %q", i, got.Text, want.Text)
		case want.Type != chat.BlockToolUse:
		case got.Name != want.Name:
			return fmt.Sprintf("block %d names tool %q, want %q", i, got.Name, want.Name)
		case h.Wire != "" && got.ID != want.ID:
			return fmt.Sprintf("block %d has id %q, want the server's %q", i, got.ID, want.ID)
		case got.ID == "" || ids[got.ID]:
			return fmt.Sprintf("block %d has id %q: empty or repeated", i, got.ID)
		case !sameJSON(got.Input, orEmptyObject(want.Input)):
			return fmt.Sprintf("block %d input %s, want %s", i, got.Input, want.Input)
		case !isCompact(got.Input):
			return fmt.Sprintf("block %d input %s is not compact JSON", i, got.Input)
		}
		ids[got.ID] = true
	}
	return ""
}

func orEmptyObject(b []byte) []byte {
	if len(bytes.TrimSpace(b)) == 0 {
		return []byte("{}")
	}
	return b
}

func testText(t *testing.T, h Harness) {
	reply := TextAnswer(unicodeText)
	reply.ChunkSize = 5
	p, _ := answering(t, h, reply)
	r := Drain(context.Background(), p, prompt("tell me"))
	wellFormed(t, r)
	if r.Text != unicodeText {
		t.Errorf("text deltas join to %q, want %q", r.Text, unicodeText)
	}
	if h.Wire != "" && r.Deltas < 2 {
		t.Errorf("%d text deltas, want the text as it streamed, in several", r.Deltas)
	}
	for _, ev := range r.Events[:len(r.Events)-1] {
		if ev.Type != provider.EventText {
			t.Errorf("event %s in a text answer", ev.Type)
		}
	}
	if msg := answerErr(h, r.Response, reply.Blocks); msg != "" {
		t.Errorf("response: %s", msg)
	}
	if r.Response != nil && r.Response.StopReason != chat.StopEndTurn {
		t.Errorf("stop reason %q, want end_turn", r.Response.StopReason)
	}
}

func testToolCalls(t *testing.T, h Harness) {
	reply := Answer(toolAnswer...)
	reply.ChunkSize = 5
	p, _ := answering(t, h, reply)
	r := Drain(context.Background(), p, prompt("read them"))
	wellFormed(t, r)
	if r.Text != toolAnswer[0].Text {
		t.Errorf("text = %q, want %q", r.Text, toolAnswer[0].Text)
	}
	if len(r.Tools) != 3 {
		t.Fatalf("%d EventToolUse, want 3: %+v", len(r.Tools), r.Tools)
	}
	if msg := answerErr(h, &chat.Response{Content: append([]chat.Block{chat.Text(r.Text)}, r.Tools...)}, toolAnswer); msg != "" {
		t.Errorf("events: %s", msg)
	}
	if msg := answerErr(h, r.Response, toolAnswer); msg != "" {
		t.Fatalf("response: %s", msg)
	}
	for i, b := range r.Tools {
		if got := r.Response.Content[i+1]; got.ID != b.ID || !bytes.Equal(got.Input, b.Input) {
			t.Errorf("EventToolUse %d is %+v, the response's block %+v", i, b, got)
		}
		// The event's block is the caller's: changing it leaves the
		// response alone.
		before := slices.Clone(r.Response.Content[i+1].Input)
		for j := range b.Input {
			b.Input[j] = 'x'
		}
		if !bytes.Equal(r.Response.Content[i+1].Input, before) {
			t.Errorf("changing EventToolUse %d's input changed the response's to %s", i, r.Response.Content[i+1].Input)
		}
	}
	if r.Response.StopReason != chat.StopToolUse {
		t.Errorf("stop reason %q, want tool_use", r.Response.StopReason)
	}
}

func testEmptyToolInput(t *testing.T, h Harness) {
	blocks := []chat.Block{ToolUse("toolu_1", "list", "")}
	p, _ := answering(t, h, Answer(blocks...))
	r := Drain(context.Background(), p, prompt("list"))
	wellFormed(t, r)
	if msg := answerErr(h, r.Response, blocks); msg != "" {
		t.Errorf("response: %s", msg)
	}
	if r.Response != nil && len(r.Response.Content) == 1 && string(r.Response.Content[0].Input) != "{}" {
		t.Errorf("input %s, want {}", r.Response.Content[0].Input)
	}
}

func testUsage(t *testing.T, h Harness) {
	reply := TextAnswer("counted")
	reply.Usage = scriptedUsage
	p, _ := answering(t, h, reply)
	r := Drain(context.Background(), p, prompt("count"))
	wellFormed(t, r)
	u := r.Response.Usage
	if h.Wire == "" {
		if u.InputTokens <= 0 || u.OutputTokens <= 0 {
			t.Errorf("usage = %+v, want the adapter's count of input and output", u)
		}
		return
	}
	if u != scriptedUsage {
		t.Errorf("usage = %+v, want what the server sent: %+v", u, scriptedUsage)
	}
}

func testCountedUsage(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	e.srv.Push(TextAnswer("an answer of some length"))
	req := prompt("count " + strings.Repeat("this ", 100))
	req.System = strings.Repeat("sys ", 100)
	r := e.drain(context.Background(), req)
	wellFormed(t, r)
	n := e.srv.Request(1).Tokens
	if u := r.Response.Usage; u.InputTokens+u.CacheReadTokens+u.CacheWriteTokens != n || u.OutputTokens == 0 {
		t.Errorf("usage = %+v, want the server's count: %d prompt tokens, some output", u, n)
	}
}

func testStopReasons(t *testing.T, h Harness) {
	for _, tc := range []struct {
		reply Reply
		want  chat.StopReason
	}{
		{TextAnswer("x"), chat.StopEndTurn},
		{Answer(toolAnswer[1]), chat.StopToolUse},
		{Reply{Blocks: []chat.Block{chat.Text("cut sh")}, StopReason: chat.StopMaxTokens}, chat.StopMaxTokens},
		{Reply{Blocks: []chat.Block{chat.Text("no")}, StopReason: chat.StopRefusal}, chat.StopRefusal},
	} {
		e := loopback(t, h, nil)
		e.srv.Push(tc.reply)
		r := e.drain(context.Background(), prompt("stop"))
		wellFormed(t, r)
		if r.Response.StopReason != tc.want {
			t.Errorf("stop reason %q, want %q", r.Response.StopReason, tc.want)
		}
	}
}

func testConsumerStops(t *testing.T, h Harness) {
	if h.Wire == "" {
		stopEarly(t, h.Answering(t, Answer(toolAnswer...)))
		return
	}
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Fallback(func(*Request) (Reply, bool) { return Answer(toolAnswer...), true })
		stopEarly(t, e.p)
		if n := len(e.srv.Requests()); n != 2 {
			t.Errorf("the server saw %d requests, want 2: stopping must not retry", n)
		}
		// Stopping at a retry's announcement neither waits nor retries.
		e.srv.Push(Overloaded(""))
		start := time.Now()
		for ev, err := range e.p.Stream(context.Background(), prompt("stop at the retry")) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == provider.EventRetry {
				break
			}
		}
		if n := len(e.srv.Requests()); n != 3 || time.Since(start) != 0 {
			t.Errorf("%d requests, want 3; waited %s, want 0", n, time.Since(start))
		}
	})
}

// stopEarly stops reading two streams after their first event.
func stopEarly(t *testing.T, p provider.Provider) {
	for range 2 {
		n := 0
		for _, err := range p.Stream(context.Background(), prompt("stop early")) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			break // the adapter must not yield again: range would panic
		}
		if n != 1 {
			t.Errorf("saw %d events before stopping", n)
		}
	}
}

func testConcurrent(t *testing.T, h Harness) {
	p, _ := answering(t, h, Answer(toolAnswer...))
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for i := range 16 {
		wg.Go(func() {
			r := Drain(context.Background(), p, prompt(fmt.Sprintf("question %d", i)))
			if r.Err != nil {
				errs <- r.Err.Error()
			} else if msg := answerErr(h, r.Response, toolAnswer); msg != "" {
				errs <- fmt.Sprintf("call %d: %s", i, msg)
			}
		})
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}

func testCutAnywhere(t *testing.T, h Harness) {
	// How many events the fake sends for the answer to an adapter's
	// request.
	e := loopback(t, h, nil)
	whole := Answer(toolAnswer...)
	whole.Usage = scriptedUsage
	e.srv.Push(whole)
	wellFormed(t, e.drain(context.Background(), prompt("count the events")))
	n := len(e.srv.events(e.srv.Request(1), whole))

	for _, abort := range []bool{false, true} {
		for k := range n {
			name := fmt.Sprintf("clean_end_after_%d_of_%d", k, n)
			if abort {
				name = fmt.Sprintf("dropped_after_%d_of_%d", k, n)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := loopback(t, h, nil)
				cut := whole
				cut.Cut, cut.Abort, cut.FaultAfter = !abort, abort, k
				if k == 0 {
					cut.FaultAfter = -1
				}
				e.srv.Push(cut, TextAnswer("complete answer"))
				r := e.drain(context.Background(), prompt("cut"))
				wellFormed(t, r)
				switch len(r.Retries) {
				case 0:
					// Taken as whole: then it must be the whole answer.
					if msg := answerErr(h, r.Response, toolAnswer); msg != "" {
						t.Errorf("a cut stream was taken as a whole answer: %s", msg)
					} else if r.Response.Usage != scriptedUsage || r.Response.StopReason != chat.StopToolUse {
						t.Errorf("a cut stream was taken as a whole answer: usage %+v, stop %q", r.Response.Usage, r.Response.StopReason)
					}
				case 1:
					if rt := r.Retries[0]; rt.Attempt != 1 {
						t.Errorf("retry = %+v, want attempt 1", rt)
					}
					if ResponseText(r.Response) != "complete answer" || r.Text != "complete answer" || len(r.Tools) != 0 {
						t.Errorf("after the retry: response %q, text %q, tools %+v", ResponseText(r.Response), r.Text, r.Tools)
					}
					if got := e.slept.all(); len(got) != 1 || got[0] != 500*time.Millisecond {
						t.Errorf("slept %v, want [500ms] (base 1s, jitter 0.5)", got)
					}
				default:
					t.Errorf("retries = %+v", r.Retries)
				}
			})
		}
	}
}

func testCutRetriesExhausted(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	cut := Reply{Blocks: toolAnswer, Cut: true}
	e.srv.Push(cut, cut, cut)
	r := e.drain(context.Background(), prompt("cut"))
	if r.Response != nil {
		t.Fatalf("a response from cut streams: %+v", r.Response)
	}
	pe := ErrorOf(t, r.Err)
	if pe.Kind != provider.ErrTruncated || pe.Attempts != 3 || !pe.Retryable || pe.Provider != e.p.Name() || len(r.Retries) != 2 {
		t.Errorf("error = %+v after %d retries, want a retryable truncation after 3 attempts", pe, len(r.Retries))
	}
	// provider.Collect agrees: no response from a cut stream.
	e.srv.Push(cut, cut, cut)
	resp, err := provider.Collect(e.p.Stream(context.Background(), prompt("cut")), nil)
	if resp != nil || ErrorOf(t, err).Kind != provider.ErrTruncated {
		t.Errorf("Collect = %v, %v", resp, err)
	}
}

func testErrorMidStream(t *testing.T, h Harness) {
	overloaded := &APIError{Type: "overloaded_error", Message: "Overloaded"}
	t.Run("overloaded_is_retried", func(t *testing.T) {
		t.Parallel()
		e := loopback(t, h, nil)
		e.srv.Push(Reply{Blocks: toolAnswer, Error: overloaded}, TextAnswer("second try"))
		r := e.drain(context.Background(), prompt("x"))
		wellFormed(t, r)
		if len(r.Retries) != 1 || !strings.Contains(r.Retries[0].Reason, "Overloaded") {
			t.Errorf("retries = %+v", r.Retries)
		}
		if ResponseText(r.Response) != "second try" || len(r.Tools) != 0 {
			t.Errorf("response %q, tools %+v", ResponseText(r.Response), r.Tools)
		}
	})
	t.Run("overloaded_exhausted", func(t *testing.T) {
		t.Parallel()
		e := loopback(t, h, nil)
		bad := Reply{Blocks: toolAnswer, FaultAfter: -1, Error: overloaded}
		e.srv.Push(bad, bad, bad)
		pe := ErrorOf(t, e.drain(context.Background(), prompt("x")).Err)
		if pe.Kind != provider.ErrOverloaded || pe.Attempts != 3 || !pe.Retryable || pe.Status != 0 {
			t.Errorf("error = %+v", pe)
		}
	})
	t.Run("invalid_request_is_not_retried", func(t *testing.T) {
		t.Parallel()
		e := loopback(t, h, nil)
		e.srv.Push(Reply{Blocks: toolAnswer, Error: &APIError{Type: "invalid_request_error", Message: "bad tool"}}, TextAnswer("unused"))
		pe := ErrorOf(t, e.drain(context.Background(), prompt("x")).Err)
		if pe.Kind != provider.ErrBadRequest || pe.Attempts != 1 || pe.Retryable || !strings.Contains(pe.Message, "bad tool") {
			t.Errorf("error = %+v", pe)
		}
	})
}

func testClientErrors(t *testing.T, h Harness) {
	for _, tc := range []struct {
		status     int
		typ, msg   string
		kind       provider.ErrorKind
		failure    core.FailureKind
		retryAfter string // asks for a wait, not for a retry
	}{
		{400, "invalid_request_error", "max_tokens: must be at most 64000", provider.ErrBadRequest, core.FailInvalid, ""},
		{401, "authentication_error", "invalid x-api-key", provider.ErrAuth, core.FailAuth, ""},
		{403, "permission_error", "no access to this model", provider.ErrAuth, core.FailAuth, ""},
		{404, "not_found_error", "model: nope", provider.ErrBadRequest, core.FailInvalid, ""},
		{413, "request_too_large", "request exceeds the maximum size", provider.ErrBadRequest, core.FailInvalid, ""},
		{422, "invalid_request_error", "unprocessable", provider.ErrBadRequest, core.FailInvalid, "1"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			e := loopback(t, h, nil)
			reply := ErrorReply(tc.status, tc.typ, tc.msg)
			if tc.retryAfter != "" {
				reply.Header = http.Header{"Retry-After": {tc.retryAfter}}
			}
			e.srv.Push(reply, TextAnswer("must not be used"))
			r := e.drain(context.Background(), prompt("x"))
			pe := ErrorOf(t, r.Err)
			if pe.Kind != tc.kind || pe.Status != tc.status || pe.Attempts != 1 || pe.Retryable || pe.Provider != e.p.Name() {
				t.Errorf("error = %+v, want %s (HTTP %d) after one attempt, not retryable", pe, tc.kind, tc.status)
			}
			if !strings.Contains(pe.Message, tc.msg) || !strings.Contains(r.Err.Error(), tc.msg) {
				t.Errorf("error %q does not hold the server's message %q", r.Err, tc.msg)
			}
			if !strings.Contains(pe.Message, "req_fake") {
				t.Errorf("error %q does not quote the server's request id, req_fake", r.Err)
			}
			if got := provider.FailureOf(r.Err); got != tc.failure {
				t.Errorf("FailureOf = %s, want %s", got, tc.failure)
			}
			if len(r.Retries) != 0 || len(e.srv.Requests()) != 1 || len(e.slept.all()) != 0 {
				t.Errorf("retried: %+v, %d requests", r.Retries, len(e.srv.Requests()))
			}
		})
	}
}

func testProxyErrorPage(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	page := Reply{Status: 502, Body: "<html><body><h1>502 Bad Gateway</h1></body></html>"}
	e.srv.Push(page, page, page)
	r := e.drain(context.Background(), prompt("x"))
	pe := ErrorOf(t, r.Err)
	if pe.Kind != provider.ErrServer || pe.Status != 502 || !pe.Retryable || pe.Attempts != 3 || !strings.Contains(pe.Message, "502 Bad Gateway") {
		t.Errorf("error = %+v, want a retryable server error holding the page's text after 3 attempts", pe)
	}
}

func testContextWindow(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	e.srv.SetContextWindow(100)
	e.srv.Push(TextAnswer("fits"))
	r := e.drain(context.Background(), prompt(strings.Repeat("x", 2000)))
	pe := ErrorOf(t, r.Err)
	got := e.srv.Request(1)
	want := e.srv.overWindow(got.Tokens, 100).Message
	if pe.Kind != provider.ErrBadRequest || pe.Status != 400 || pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, want) {
		t.Errorf("error = %+v, want a 400 saying %q", pe, want)
	}
	if fk := provider.FailureOf(r.Err); fk != core.FailContext {
		t.Errorf("FailureOf = %s, want %s", fk, core.FailContext)
	}
	if !got.OverWindow || e.srv.Pending() != 1 || len(e.srv.Requests()) != 1 {
		t.Errorf("OverWindow %v, %d replies pending (want 1), %d requests", got.OverWindow, e.srv.Pending(), len(e.srv.Requests()))
	}
	if r := e.drain(context.Background(), prompt("small")); r.Err != nil || ResponseText(r.Response) != "fits" {
		t.Errorf("a prompt that fits: %v %q", r.Err, ResponseText(r.Response))
	}
}

func testMalformedToolInput(t *testing.T, h Harness) {
	for _, input := range []string{`{"path": "a`, `["a"]`, `"a"`} {
		e := loopback(t, h, nil)
		e.srv.Push(Answer(chat.Text("x"), ToolUse("toolu_bad", "read", input)), TextAnswer("unused"))
		r := e.drain(context.Background(), prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrMalformed || pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, "toolu_bad") {
			t.Errorf("input %s: error = %+v, want a malformed tool call named in the message, not retried", input, pe)
		}
		if len(r.Tools) != 0 {
			t.Errorf("input %s: the malformed tool call was passed on: %+v", input, r.Tools)
		}
	}
}

func testJSONInsteadOfStream(t *testing.T, h Harness) {
	for _, tc := range []struct {
		reply Reply
		kind  provider.ErrorKind
		msg   string
	}{
		{Reply{Blocks: []chat.Block{chat.Text("not streamed")}, JSON: true}, provider.ErrMalformed, "not streamed"},
		{Reply{JSON: true, Error: &APIError{Type: "invalid_request_error", Message: "streaming is not supported"}}, provider.ErrBadRequest, "streaming is not supported"},
	} {
		e := loopback(t, h, nil)
		e.srv.Push(tc.reply, TextAnswer("unused"))
		pe := ErrorOf(t, e.drain(context.Background(), prompt("x")).Err)
		if pe.Kind != tc.kind || pe.Attempts != 1 || pe.Retryable || !strings.Contains(pe.Message, tc.msg) {
			t.Errorf("error = %+v, want %s holding %q, not retried", pe, tc.kind, tc.msg)
		}
	}
}

func testInvalidRequest(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	req := prompt("x")
	req.Messages = append(req.Messages, chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{
		{Type: chat.BlockToolUse, ID: "t", Name: "x", Input: json.RawMessage(`{bad`)},
	}})
	pe := ErrorOf(t, e.drain(context.Background(), req).Err)
	if pe.Kind != provider.ErrBadRequest || pe.Retryable || len(e.srv.Requests()) != 0 {
		t.Errorf("error = %+v after %d requests, want a bad request refused before sending", pe, len(e.srv.Requests()))
	}
}

func testConnectionRefused(t *testing.T, h Harness) {
	// Port 1 is privileged, so no fake server of a parallel subtest takes
	// it, and nothing listens there.
	url := "http://127.0.0.1:1"
	e := loopback(t, h, func(c *Config) {
		c.BaseURL = url
		if h.Wire == WireOpenAI {
			c.BaseURL += "/v1"
		}
	})
	r := e.drain(context.Background(), prompt("x"))
	pe := ErrorOf(t, r.Err)
	if pe.Kind != provider.ErrNetwork || !pe.Retryable || pe.Attempts != 3 || !strings.Contains(pe.Message, "refused") || len(r.Retries) != 2 {
		t.Errorf("error = %+v after %d retries, want a retryable network error after 3 attempts", pe, len(r.Retries))
	}
	if strings.Contains(r.Err.Error(), suiteKey) || strings.Contains(e.logs.String(), suiteKey) {
		t.Errorf("the API key leaked: %v", r.Err)
	}
}

func testRedaction(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	echo := "invalid x-api-key " + suiteKey + " (Bearer " + suiteKey + ")"
	e.srv.Push(
		Reply{Status: 529, Error: &APIError{Type: "overloaded_error", Message: echo}},
		Reply{Blocks: toolAnswer, Error: &APIError{Type: "overloaded_error", Message: echo}},
		ErrorReply(401, "authentication_error", echo),
	)
	r := e.drain(context.Background(), prompt("x"))
	pe := ErrorOf(t, r.Err)
	if pe.Kind != provider.ErrAuth || len(r.Retries) != 2 {
		t.Errorf("error = %+v after %d retries, want auth after 2", pe, len(r.Retries))
	}
	if !strings.Contains(pe.Message, "[redacted]") {
		t.Errorf("message %q, want the echoed key redacted", pe.Message)
	}
	texts := []string{r.Err.Error(), pe.Message, e.logs.String()}
	for _, rt := range r.Retries {
		texts = append(texts, rt.Reason)
	}
	for _, s := range texts {
		if strings.Contains(s, suiteKey) {
			t.Errorf("the API key leaked: %s", s)
		}
	}
	// The key did go to the server.
	sent := false
	for _, vs := range e.srv.Request(1).Header {
		for _, v := range vs {
			sent = sent || strings.Contains(v, suiteKey)
		}
	}
	if !sent {
		t.Errorf("no request header carried the API key: %v", e.srv.Request(1).Header)
	}
}

func testIdentityHeaders(t *testing.T, h Harness) {
	e := loopback(t, h, nil)
	e.srv.Push(TextAnswer("the summary"), TextAnswer("a normal answer"))
	req := prompt("summarise")
	req.Session, req.AgentName, req.CallID, req.Purpose = "s1", "main", "c-42", provider.PurposeCompact
	if r := e.drain(context.Background(), req); r.Err != nil {
		t.Fatal(r.Err)
	}
	req.Purpose = ""
	if r := e.drain(context.Background(), req); r.Err != nil {
		t.Fatal(r.Err)
	}
	h1, h2 := e.srv.Request(1).Header, e.srv.Request(2).Header
	for k, v := range map[string]string{"X-Vigil-Session": "s1", "X-Vigil-Agent": "main", "X-Vigil-Call": "c-42", "X-Vigil-Purpose": "compact"} {
		if got := h1.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if got := h2.Values("X-Vigil-Purpose"); len(got) != 0 || h2.Get("X-Vigil-Call") != "c-42" {
		t.Errorf("a normal round sent X-Vigil-Purpose %q, X-Vigil-Call %q", got, h2.Get("X-Vigil-Call"))
	}
}

func testCancelMidStream(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Push(Reply{Blocks: toolAnswer, Stall: make(chan struct{})}) // stops halfway, for good
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var err error
		texts := 0
		for ev, serr := range e.p.Stream(ctx, prompt("x")) {
			switch {
			case serr != nil:
				err = serr
			case ev.Type == provider.EventText:
				texts++
				cancel()
			case ev.Type == provider.EventDone || ev.Type == provider.EventRetry:
				t.Errorf("event %s after the caller cancelled", ev.Type)
			}
		}
		pe := ErrorOf(t, err)
		if pe.Kind != provider.ErrCanceled || pe.Retryable || pe.Attempts != 1 || texts == 0 {
			t.Errorf("error = %+v after %d text events, want canceled after the first", pe, texts)
		}
	})
}

func testOverloaded(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Push(Overloaded("7"), TextAnswer("hello"))
		start := time.Now()
		r := e.drain(context.Background(), prompt("x"))
		wellFormed(t, r)
		if len(r.Retries) != 1 {
			t.Fatalf("retries = %+v", r.Retries)
		}
		if rt := r.Retries[0]; rt.Attempt != 1 || rt.Delay != 7*time.Second || !strings.Contains(rt.Reason, "529") {
			t.Errorf("retry = %+v, want attempt 1, 7s, 529", rt)
		}
		if gap := e.gap(t, 2); gap != 7*time.Second {
			t.Errorf("the retry came %s after the 529, want its retry-after, 7s", gap)
		}
		if d := time.Since(start); d != 7*time.Second || ResponseText(r.Response) != "hello" {
			t.Errorf("the call took %s and answered %q", d, ResponseText(r.Response))
		}
		if !strings.Contains(e.logs.String(), "529") {
			t.Errorf("the retry was not logged: %s", e.logs)
		}
	})
}

func testRateLimited(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name   string
		header func(now time.Time) http.Header
		want   time.Duration
	}{
		{"seconds", func(time.Time) http.Header { return http.Header{"Retry-After": {"3"}} }, 3 * time.Second},
		{"http_date", func(now time.Time) http.Header {
			return http.Header{"Retry-After": {now.Add(90 * time.Second).UTC().Format(http.TimeFormat)}}
		}, 90 * time.Second},
		{"milliseconds_win", func(time.Time) http.Header { return http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"1500"}} }, 1500 * time.Millisecond},
		{"none_jittered_backoff", func(time.Time) http.Header { return nil }, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inMemory(t, h, nil, func(t *testing.T, e *env) {
				limited := RateLimited("")
				limited.Header = tc.header(time.Now())
				e.srv.Push(limited, TextAnswer("ok"))
				r := e.drain(context.Background(), prompt("x"))
				wellFormed(t, r)
				if len(r.Retries) != 1 || r.Retries[0].Delay != tc.want || !strings.Contains(r.Retries[0].Reason, "429") {
					t.Errorf("retries = %+v, want one after %s", r.Retries, tc.want)
				}
				if gap := e.gap(t, 2); gap != tc.want {
					t.Errorf("the retry came %s after the 429, want %s", gap, tc.want)
				}
			})
		})
	}
}

func testRetryAfterTooLong(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Push(RateLimited("3600"), TextAnswer("unused"))
		start := time.Now()
		r := e.drain(context.Background(), prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrRateLimited || pe.Attempts != 1 || !pe.Retryable || !strings.Contains(pe.Message, "1h0m0s") {
			t.Errorf("error = %+v, want a retryable rate limit naming the 1h0m0s wait", pe)
		}
		if len(r.Retries) != 0 || time.Since(start) != 0 || len(e.srv.Requests()) != 1 {
			t.Errorf("retried: %+v after %s", r.Retries, time.Since(start))
		}
	})
}

func testServerErrorsExhausted(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Push(ErrorReply(500, "api_error", "Internal server error"), ErrorReply(503, "", "unavailable"), Overloaded(""))
		r := e.drain(context.Background(), prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrOverloaded || pe.Status != 529 || pe.Attempts != 3 || !pe.Retryable || !strings.Contains(pe.Message, "Overloaded") {
			t.Errorf("error = %+v, want the last one, 529, after 3 attempts", pe)
		}
		if !strings.Contains(r.Err.Error(), "after 3 attempts") {
			t.Errorf("Error() = %q, want the attempts counted", r.Err)
		}
		// Full jitter (0.5) of 1s, then of 2s.
		if g2, g3 := e.gap(t, 2), e.gap(t, 3); g2 != 500*time.Millisecond || g3 != time.Second {
			t.Errorf("retries after %s and %s, want 500ms and 1s", g2, g3)
		}
		if got := []string{r.Retries[0].Reason, r.Retries[1].Reason}; !strings.Contains(got[0], "500") || !strings.Contains(got[1], "503") {
			t.Errorf("retry reasons = %q", got)
		}
	})
}

func testCancelDuringBackoff(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Push(Overloaded(""), TextAnswer("must not be used"))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond) // inside the 500ms backoff
		defer cancel()
		start := time.Now()
		r := e.drain(ctx, prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrCanceled || pe.Retryable || pe.Attempts != 1 {
			t.Errorf("error = %+v, want canceled after one attempt", pe)
		}
		if len(r.Retries) != 1 || len(e.srv.Requests()) != 1 || time.Since(start) != 100*time.Millisecond {
			t.Errorf("retries %+v, %d requests, ended after %s", r.Retries, len(e.srv.Requests()), time.Since(start))
		}
	})
}

func testDeadline(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		e.srv.Push(Reply{Blocks: toolAnswer, Hold: make(chan struct{})}) // no headers, ever
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		r := e.drain(ctx, prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrCanceled || pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, "deadline") {
			t.Errorf("error = %+v, want canceled by the deadline after one attempt", pe)
		}
		if len(r.Retries) != 0 || r.Response != nil || time.Since(start) != time.Minute {
			t.Errorf("retries %+v, response %+v, ended after %s", r.Retries, r.Response, time.Since(start))
		}
	})
}

func testSlowButAlive(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		// Headers after 100s, then a pause of 100s halfway: each is
		// shorter than the default stall timeout of 2 minutes.
		pause := make(chan struct{})
		time.AfterFunc(200*time.Second, func() { close(pause) })
		e.srv.Push(Reply{Blocks: toolAnswer, Delay: 100 * time.Second, Stall: pause})
		start := time.Now()
		r := e.drain(context.Background(), prompt("x"))
		wellFormed(t, r)
		if len(r.Retries) != 0 || time.Since(start) != 200*time.Second {
			t.Errorf("retries %+v, ended after %s, want none after 200s", r.Retries, time.Since(start))
		}
		if msg := answerErr(h, r.Response, toolAnswer); msg != "" {
			t.Errorf("response: %s", msg)
		}
	})
}

func testStall(t *testing.T, h Harness) {
	inMemory(t, h, nil, func(t *testing.T, e *env) {
		never := make(chan struct{})
		e.srv.Push(Reply{Blocks: toolAnswer, Hold: never}, Reply{Blocks: toolAnswer, Stall: never}, Answer(toolAnswer...))
		r := e.drain(context.Background(), prompt("x"))
		wellFormed(t, r)
		if len(r.Retries) != 2 || r.Retries[0].Reason != "stalled: no bytes for 2m0s" || r.Retries[1].Reason != "stalled: no bytes for 2m0s" {
			t.Errorf("retries = %+v, want two for stalls of the default 2m0s", r.Retries)
		}
		// The stall timeout, then the backoff.
		if g2, g3 := e.gap(t, 2), e.gap(t, 3); g2 != 2*time.Minute+500*time.Millisecond || g3 != 2*time.Minute+time.Second {
			t.Errorf("retries after %s and %s, want 2m0.5s and 2m1s", g2, g3)
		}
		if msg := answerErr(h, r.Response, toolAnswer); msg != "" {
			t.Errorf("response: %s", msg)
		}
	})
}

func testStallExhausted(t *testing.T, h Harness) {
	inMemory(t, h, func(c *Config) { c.Retry.StallTimeout = 30 * time.Second }, func(t *testing.T, e *env) {
		never := make(chan struct{})
		stall := Reply{Blocks: toolAnswer, Stall: never}
		e.srv.Push(stall, Reply{Blocks: toolAnswer, Stall: never, FaultAfter: -1}, stall)
		r := e.drain(context.Background(), prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrStalled || !pe.Retryable || pe.Attempts != 3 || pe.Message != "no bytes for 30s" {
			t.Errorf("error = %+v, want stalled after 3 attempts", pe)
		}
		if len(r.Retries) != 2 || r.Retries[1].Reason != "stalled: no bytes for 30s" {
			t.Errorf("retries = %+v", r.Retries)
		}
		if fk := provider.FailureOf(r.Err); fk != core.FailTransient {
			t.Errorf("FailureOf = %s, want %s", fk, core.FailTransient)
		}
	})
}

func testStallOff(t *testing.T, h Harness) {
	inMemory(t, h, func(c *Config) { c.Retry.StallTimeout = -1 }, func(t *testing.T, e *env) {
		e.srv.Push(Reply{Blocks: toolAnswer, Stall: make(chan struct{})})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		r := e.drain(ctx, prompt("x"))
		pe := ErrorOf(t, r.Err)
		if pe.Kind != provider.ErrCanceled || len(r.Retries) != 0 || time.Since(start) != time.Hour {
			t.Errorf("error = %+v, retries %+v after %s: with stall detection off only the caller's deadline ends the call", pe, r.Retries, time.Since(start))
		}
	})
}
