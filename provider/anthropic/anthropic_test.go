package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/providertest"
)

const apiKey = "sk-ant-test-SECRET-0123456789"

// sleeper records the waits a provider asks for instead of sleeping.
type sleeper struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *sleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeper) Delays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}

type harness struct {
	srv   *providertest.Server
	p     *anthropic.Provider
	sleep *sleeper
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newHarness(t *testing.T, mod func(*anthropic.Options)) *harness {
	t.Helper()
	h := &harness{srv: providertest.NewAnthropic(t), sleep: &sleeper{}, logs: &syncBuffer{}}
	opts := anthropic.Options{
		APIKey:  apiKey,
		BaseURL: h.srv.BaseURL(),
		Retry: provider.RetryPolicy{
			MaxAttempts: 3,
			Sleep:       h.sleep.Sleep,
			Rand:        func() float64 { return 0.5 },
		},
		Logger: slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&opts)
	}
	h.p = anthropic.New(opts)
	return h
}

// result is everything one Stream call produced.
type result struct {
	events []provider.Event
	text   string // EventText deltas joined
	tools  []chat.Block
	retry  []provider.Retry
	resp   *chat.Response
	err    error
}

func run(ctx context.Context, p provider.Provider, req *provider.Request) result {
	var r result
	done := false
	for ev, err := range p.Stream(ctx, req) {
		if done {
			r.err = errors.New("stream went on after its end")
			return r
		}
		if err != nil {
			r.err = err
			done = true
			continue
		}
		r.events = append(r.events, ev)
		switch ev.Type {
		case provider.EventText:
			r.text += ev.Text
		case provider.EventToolUse:
			r.tools = append(r.tools, *ev.Block)
		case provider.EventRetry:
			r.retry = append(r.retry, *ev.Retry)
			r.text, r.tools = "", nil // partial output before a retry is void
		case provider.EventDone:
			r.resp = ev.Response
			done = true
		}
	}
	if !done {
		r.err = errors.New("stream ended without EventDone or an error")
	}
	return r
}

func simpleRequest() *provider.Request {
	return &provider.Request{
		CallID:   "call-1",
		Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text("list the files")}}},
	}
}

func providerError(t *testing.T, err error) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want *provider.Error", err, err)
	}
	return pe
}

var multiBlock = []chat.Block{
	chat.Text("I'll look at two files — ünïcode too."),
	providertest.ToolUse("toolu_1", "read", `{"path": "a.go", "lines": [1, 2, 3]}`),
	providertest.ToolUse("toolu_2", "bash", `{"cmd": "ls -la \"dir\"", "env": {"X": "y"}}`),
}

func TestStreamTextAndTwoToolCalls(t *testing.T) {
	h := newHarness(t, nil)
	reply := providertest.Answer(multiBlock...)
	reply.Usage = chat.Usage{InputTokens: 120, OutputTokens: 45, CacheReadTokens: 1000, CacheWriteTokens: 30}
	reply.ChunkSize = 5
	h.srv.Push(reply)

	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.text != multiBlock[0].Text {
		t.Errorf("text deltas = %q, want %q", r.text, multiBlock[0].Text)
	}
	var nText int
	for _, ev := range r.events {
		if ev.Type == provider.EventText {
			nText++
		}
	}
	if nText < 2 {
		t.Errorf("got %d text events, want the text in several deltas", nText)
	}
	if len(r.tools) != 2 || r.tools[0].ID != "toolu_1" || r.tools[1].ID != "toolu_2" || r.tools[1].Name != "bash" {
		t.Fatalf("tool events = %+v", r.tools)
	}
	if got := string(r.tools[1].Input); got != `{"cmd":"ls -la \"dir\"","env":{"X":"y"}}` {
		t.Errorf("tool input = %s", got)
	}
	// Each tool event comes as soon as its block stops, before EventDone.
	if last := r.events[len(r.events)-1]; last.Type != provider.EventDone {
		t.Errorf("last event = %s, want done", last.Type)
	}
	want := &chat.Response{
		Content: []chat.Block{
			chat.Text(multiBlock[0].Text),
			{Type: chat.BlockToolUse, ID: "toolu_1", Name: "read", Input: json.RawMessage(`{"path":"a.go","lines":[1,2,3]}`)},
			{Type: chat.BlockToolUse, ID: "toolu_2", Name: "bash", Input: json.RawMessage(`{"cmd":"ls -la \"dir\"","env":{"X":"y"}}`)},
		},
		StopReason: chat.StopToolUse,
		Usage:      chat.Usage{InputTokens: 120, OutputTokens: 45, CacheReadTokens: 1000, CacheWriteTokens: 30},
		Model:      anthropic.DefaultModel,
	}
	if !reflect.DeepEqual(r.resp, want) {
		t.Errorf("response\n got %+v\nwant %+v", r.resp, want)
	}
	if n := len(h.srv.Requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestRequestShape(t *testing.T) {
	h := newHarness(t, func(o *anthropic.Options) {
		o.Header = http.Header{"Anthropic-Beta": {"test-beta"}}
	})
	h.srv.Push(providertest.TextAnswer("ok"))
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	req := &provider.Request{
		CallID: "c1",
		System: "You are vigil.",
		Tools:  []chat.ToolSpec{{Name: "read", Description: "Read a file", InputSchema: schema}},
		Messages: []chat.Message{
			{Role: chat.RoleUser, Content: []chat.Block{chat.Text("first")}},
			{Role: chat.RoleUser, Content: []chat.Block{chat.Text("second"), chat.Text("")}},
			{Role: chat.RoleAssistant, Content: []chat.Block{
				chat.Text("reading"),
				{Type: chat.BlockToolUse, ID: "t1", Name: "read", Input: json.RawMessage(`{"path":"a"}`)},
				{Type: chat.BlockToolUse, ID: "t2", Name: "read", Input: json.RawMessage(`{"path":"b"}`)},
			}},
			{Role: chat.RoleUser, Content: []chat.Block{chat.Text("a note"), chat.ToolResult("t1", "contents of a", false)}},
			{Role: chat.RoleUser, Content: []chat.Block{chat.ToolResult("t2", "no such file", true)}},
		},
	}
	if r := run(context.Background(), h.p, req); r.err != nil {
		t.Fatal(r.err)
	}
	got := h.srv.Request(1)
	if got.Header.Get("x-api-key") != apiKey || got.Header.Get("Authorization") != "Bearer "+apiKey {
		t.Errorf("auth headers: x-api-key=%q authorization=%q", got.Header.Get("x-api-key"), got.Header.Get("Authorization"))
	}
	if got.Header.Get("anthropic-version") == "" || got.Header.Get("Anthropic-Beta") != "test-beta" {
		t.Errorf("headers = %v", got.Header)
	}
	body := got.JSON()
	// Prompt caching: the last tool, the last system block, the last block
	// of the last message and of the user message before it are marked.
	ephemeral := map[string]any{"type": "ephemeral"}
	wantBody := map[string]any{
		"model":      anthropic.DefaultModel,
		"max_tokens": float64(8192),
		"stream":     true,
		"system":     []any{map[string]any{"type": "text", "text": "You are vigil.", "cache_control": ephemeral}},
		"tools": []any{map[string]any{
			"name": "read", "description": "Read a file",
			"input_schema":  map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"}},
			"cache_control": ephemeral,
		}},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "first"},
				map[string]any{"type": "text", "text": "second", "cache_control": ephemeral},
			}},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "text", "text": "reading"},
				map[string]any{"type": "tool_use", "id": "t1", "name": "read", "input": map[string]any{"path": "a"}},
				map[string]any{"type": "tool_use", "id": "t2", "name": "read", "input": map[string]any{"path": "b"}},
			}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "t1", "content": []any{map[string]any{"type": "text", "text": "contents of a"}}},
				map[string]any{"type": "tool_result", "tool_use_id": "t2", "is_error": true, "content": []any{map[string]any{"type": "text", "text": "no such file"}}},
				map[string]any{"type": "text", "text": "a note", "cache_control": ephemeral},
			}},
		},
	}
	if !reflect.DeepEqual(body, wantBody) {
		g, _ := json.MarshalIndent(body, "", " ")
		w, _ := json.MarshalIndent(wantBody, "", " ")
		t.Errorf("request body\n got %s\nwant %s", g, w)
	}
}

func TestRequestOverrides(t *testing.T) {
	h := newHarness(t, func(o *anthropic.Options) { o.Model = "model-a"; o.MaxTokens = 1000 })
	h.srv.Push(providertest.TextAnswer("a"), providertest.TextAnswer("b"))
	if r := run(context.Background(), h.p, simpleRequest()); r.err != nil {
		t.Fatal(r.err)
	}
	req := simpleRequest()
	req.Model, req.MaxTokens = "model-b", 50
	if r := run(context.Background(), h.p, req); r.err != nil {
		t.Fatal(r.err)
	}
	if g := h.srv.Request(1); g.Model != "model-a" || g.MaxTokens != 1000 {
		t.Errorf("request 1: model %q max_tokens %d", g.Model, g.MaxTokens)
	}
	if g := h.srv.Request(2); g.Model != "model-b" || g.MaxTokens != 50 {
		t.Errorf("request 2: model %q max_tokens %d", g.Model, g.MaxTokens)
	}
}

func TestAssistantToolResultMovesToUser(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.TextAnswer("ok"))
	req := &provider.Request{Messages: []chat.Message{
		{Role: chat.RoleUser, Content: []chat.Block{chat.Text("go")}},
		{Role: chat.RoleAssistant, Content: []chat.Block{
			{Type: chat.BlockToolUse, ID: "t1", Name: "x"},
			chat.ToolResult("t1", "done", false),
		}},
	}}
	if r := run(context.Background(), h.p, req); r.err != nil {
		t.Fatal(r.err)
	}
	msgs := h.srv.Request(1).Messages
	if len(msgs) != 3 || msgs[1].Role != chat.RoleAssistant || msgs[2].Role != chat.RoleUser ||
		msgs[2].Content[0].Type != chat.BlockToolResult || string(msgs[1].Content[0].Input) != "{}" {
		t.Errorf("messages = %+v", msgs)
	}
}

func TestStreamCutIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(t *testing.T) providertest.Reply
	}{
		{"clean close halfway", func(*testing.T) providertest.Reply {
			return providertest.Reply{Blocks: multiBlock, Cut: true}
		}},
		{"dropped connection", func(*testing.T) providertest.Reply {
			return providertest.Reply{Blocks: multiBlock, Abort: true}
		}},
		{"everything but message_stop", func(t *testing.T) providertest.Reply {
			return providertest.Reply{Blocks: multiBlock, Cut: true, FaultAfter: eventCount(t, multiBlock) - 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.srv.Push(tc.cut(t), providertest.Answer(chat.Text("complete answer")))
			r := run(context.Background(), h.p, simpleRequest())
			if r.err != nil {
				t.Fatal(r.err)
			}
			if len(r.retry) != 1 || r.retry[0].Attempt != 1 || !strings.Contains(r.retry[0].Reason, "truncated") {
				t.Fatalf("retries = %+v", r.retry)
			}
			if respText(r.resp) != "complete answer" || len(r.resp.Content) != 1 {
				t.Errorf("response = %+v", r.resp)
			}
			if r.text != "complete answer" {
				t.Errorf("text after the retry = %q", r.text)
			}
			if got := h.sleep.Delays(); len(got) != 1 || got[0] != 500*time.Millisecond {
				t.Errorf("slept %v, want [500ms] (base 1s, jitter 0.5)", got)
			}
		})
	}
}

// eventCount counts the SSE events the fake sends for blocks.
func eventCount(t *testing.T, blocks []chat.Block) int {
	t.Helper()
	srv := providertest.NewAnthropic(t)
	srv.Push(providertest.Answer(blocks...))
	res, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return strings.Count(b.String(), "\n\n")
}

func TestStreamCutRetriesExhausted(t *testing.T) {
	h := newHarness(t, nil)
	cut := providertest.Reply{Blocks: multiBlock, Cut: true}
	h.srv.Push(cut, cut, cut)
	r := run(context.Background(), h.p, simpleRequest())
	if r.resp != nil {
		t.Fatalf("got a response from cut streams: %+v", r.resp)
	}
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrTruncated || pe.Attempts != 3 || !pe.Retryable || pe.Provider != "anthropic" {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 2 {
		t.Errorf("retries = %+v, want 2", r.retry)
	}
	// provider.Collect agrees: no response from a cut stream.
	h.srv.Push(cut, cut, cut)
	resp, err := provider.Collect(h.p.Stream(context.Background(), simpleRequest()), nil)
	if resp != nil || providerError(t, err).Kind != provider.ErrTruncated {
		t.Errorf("Collect = %v, %v", resp, err)
	}
}

func TestOverloadedThenSuccess(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Overloaded("7"), providertest.TextAnswer("hello"))
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.retry) != 1 {
		t.Fatalf("retries = %+v", r.retry)
	}
	rt := r.retry[0]
	if rt.Attempt != 1 || rt.Delay != 7*time.Second || !strings.Contains(rt.Reason, "529") || !strings.Contains(rt.Reason, "overloaded_error") {
		t.Errorf("retry = %+v", rt)
	}
	if got := h.sleep.Delays(); !reflect.DeepEqual(got, []time.Duration{7 * time.Second}) {
		t.Errorf("slept %v, want [7s]", got)
	}
	if respText(r.resp) != "hello" {
		t.Errorf("response = %+v", r.resp)
	}
	if !strings.Contains(h.logs.String(), "retrying") {
		t.Errorf("the retry was not logged: %s", h.logs)
	}
}

func TestRateLimitedRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"http date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"milliseconds win", http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"no header: jittered backoff", nil, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *anthropic.Options) { o.Retry.Now = func() time.Time { return now } })
			limited := providertest.RateLimited("")
			limited.Header = tc.header
			h.srv.Push(limited, providertest.TextAnswer("ok"))
			r := run(context.Background(), h.p, simpleRequest())
			if r.err != nil {
				t.Fatal(r.err)
			}
			if len(r.retry) != 1 || r.retry[0].Delay != tc.want || !strings.Contains(r.retry[0].Reason, "429") {
				t.Errorf("retries = %+v, want one after %s", r.retry, tc.want)
			}
			if got := h.sleep.Delays(); len(got) != 1 || got[0] != tc.want {
				t.Errorf("slept %v", got)
			}
		})
	}
}

func TestRetryAfterTooLongGivesUp(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.RateLimited("3600"))
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrRateLimited || pe.Attempts != 1 || !pe.Retryable || !strings.Contains(pe.Message, "1h0m0s") {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 0 || len(h.sleep.Delays()) != 0 {
		t.Errorf("retried: %+v", r.retry)
	}
}

func TestServerErrorsExhausted(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.ErrorReply(500, "api_error", "Internal server error"),
		providertest.ErrorReply(503, "", "unavailable"),
		providertest.Overloaded(""))
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrOverloaded || pe.Status != 529 || pe.Attempts != 3 || pe.Message != "overloaded_error: Overloaded (request-id req_fake)" {
		t.Errorf("error = %+v", pe)
	}
	if got := pe.Error(); got != "anthropic: overloaded (HTTP 529): overloaded_error: Overloaded (request-id req_fake) after 3 attempts" {
		t.Errorf("Error() = %q", got)
	}
	// Full jitter around 1s, 2s.
	if got := h.sleep.Delays(); !reflect.DeepEqual(got, []time.Duration{500 * time.Millisecond, time.Second}) {
		t.Errorf("slept %v", got)
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		status int
		kind   provider.ErrorKind
		msg    string
	}{
		{400, provider.ErrBadRequest, "invalid_request_error: max_tokens: must be at most 64000"},
		{401, provider.ErrAuth, "authentication_error: invalid x-api-key"},
		{403, provider.ErrAuth, "permission_error: no access"},
		{404, provider.ErrBadRequest, "not_found_error: model: nope"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			h := newHarness(t, nil)
			typ, msg, _ := strings.Cut(tc.msg, ": ")
			h.srv.Push(providertest.ErrorReply(tc.status, typ, msg), providertest.TextAnswer("must not be used"))
			r := run(context.Background(), h.p, simpleRequest())
			pe := providerError(t, r.err)
			if pe.Kind != tc.kind || pe.Status != tc.status || pe.Attempts != 1 || pe.Retryable ||
				pe.Message != tc.msg+" (request-id req_fake)" {
				t.Errorf("error = %+v", pe)
			}
			if len(r.retry) != 0 || len(h.srv.Requests()) != 1 {
				t.Errorf("retried: %+v", r.retry)
			}
		})
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	h := newHarness(t, func(o *anthropic.Options) { o.Retry.MaxAttempts = 1 })
	h.srv.Fallback(func(*providertest.Request) (providertest.Reply, bool) {
		return providertest.Reply{Status: 502}, true
	})
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrServer || pe.Status != 502 || !pe.Retryable || pe.Attempts != 1 {
		t.Errorf("error = %+v", pe)
	}
}

func TestMalformedToolInput(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Answer(chat.Text("x"), providertest.ToolUse("t1", "read", `{"path": "a`)))
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrMalformed || pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, "t1") {
		t.Errorf("error = %+v", pe)
	}
	if len(r.tools) != 0 {
		t.Errorf("malformed tool call was passed on: %+v", r.tools)
	}
}

func TestToolInputMustBeObject(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Answer(providertest.ToolUse("t1", "read", `["a"]`)))
	pe := providerError(t, run(context.Background(), h.p, simpleRequest()).err)
	if pe.Kind != provider.ErrMalformed {
		t.Errorf("error = %+v", pe)
	}
}

func TestMalformedFrames(t *testing.T) {
	start := `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`
	for name, events := range map[string][]providertest.Event{
		"bad json": {{Name: "message_start", Data: start}, {Name: "content_block_start", Data: `{"type":"content_block_start","index":0,`}},
		"delta without start": {{Name: "message_start", Data: start},
			{Name: "content_block_delta", Data: `{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}`}},
		"json delta for text": {{Name: "message_start", Data: start},
			{Name: "content_block_start", Data: `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{Name: "content_block_delta", Data: `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`}},
		"no message_start": {{Name: "content_block_start", Data: `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.srv.Push(providertest.Reply{Events: events})
			pe := providerError(t, run(context.Background(), h.p, simpleRequest()).err)
			if pe.Kind != provider.ErrMalformed || pe.Attempts != 1 {
				t.Errorf("error = %+v", pe)
			}
		})
	}
}

func TestSSEErrorMidStream(t *testing.T) {
	t.Run("overloaded is retried", func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.Push(
			providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "overloaded_error", Message: "Overloaded"}},
			providertest.Answer(chat.Text("second try")),
		)
		r := run(context.Background(), h.p, simpleRequest())
		if r.err != nil {
			t.Fatal(r.err)
		}
		if len(r.retry) != 1 || !strings.Contains(r.retry[0].Reason, "overloaded_error: Overloaded") {
			t.Errorf("retries = %+v", r.retry)
		}
		if respText(r.resp) != "second try" {
			t.Errorf("response = %+v", r.resp)
		}
	})
	t.Run("overloaded exhausted", func(t *testing.T) {
		h := newHarness(t, nil)
		bad := providertest.Reply{Blocks: multiBlock, FaultAfter: -1, Error: &providertest.APIError{Type: "overloaded_error", Message: "Overloaded"}}
		h.srv.Push(bad, bad, bad)
		pe := providerError(t, run(context.Background(), h.p, simpleRequest()).err)
		if pe.Kind != provider.ErrOverloaded || pe.Attempts != 3 || pe.Status != 0 {
			t.Errorf("error = %+v", pe)
		}
	})
	t.Run("invalid request is not retried", func(t *testing.T) {
		h := newHarness(t, nil)
		h.srv.Push(providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "invalid_request_error", Message: "bad"}})
		pe := providerError(t, run(context.Background(), h.p, simpleRequest()).err)
		if pe.Kind != provider.ErrBadRequest || pe.Attempts != 1 || pe.Retryable {
			t.Errorf("error = %+v", pe)
		}
	})
}

func TestSlowFirstByte(t *testing.T) {
	h := newHarness(t, nil)
	reply := providertest.TextAnswer("slow but fine")
	reply.Delay = 150 * time.Millisecond
	h.srv.Push(reply)
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if respText(r.resp) != "slow but fine" || len(r.retry) != 0 {
		t.Errorf("response = %+v, retries %+v", r.resp, r.retry)
	}
}

func TestDeadlineCancelsCleanly(t *testing.T) {
	h := newHarness(t, nil)
	never := make(chan struct{})
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Hold: never})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r := run(ctx, h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrCanceled || pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, "deadline") {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 0 || r.resp != nil {
		t.Errorf("retries %+v, response %+v", r.retry, r.resp)
	}
}

func TestCancelMidStream(t *testing.T) {
	h := newHarness(t, nil)
	stall := make(chan struct{}) // never closed: the answer stops halfway
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Stall: stall})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	texts := 0
	for ev, e := range h.p.Stream(ctx, simpleRequest()) {
		switch {
		case e != nil:
			err = e
		case ev.Type == provider.EventText:
			texts++
			cancel()
		case ev.Type != provider.EventText:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	pe := providerError(t, err)
	if pe.Kind != provider.ErrCanceled || pe.Attempts != 1 || texts == 0 {
		t.Errorf("error = %+v after %d text events", pe, texts)
	}
}

func TestStallThenResume(t *testing.T) {
	h := newHarness(t, nil)
	stall := make(chan struct{})
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Stall: stall})
	var resp *chat.Response
	resp, err := provider.Collect(h.p.Stream(context.Background(), simpleRequest()), func(ev provider.Event) {
		if ev.Type == provider.EventText && stall != nil {
			close(stall)
			stall = nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 3 {
		t.Errorf("response = %+v", resp)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := newHarness(t, func(o *anthropic.Options) {
		o.Retry.Sleep = func(ctx context.Context, d time.Duration) error {
			cancel()
			return ctx.Err()
		}
	})
	h.srv.Push(providertest.Overloaded(""), providertest.TextAnswer("must not be used"))
	r := run(ctx, h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrCanceled || pe.Attempts != 1 {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 1 || len(h.srv.Requests()) != 1 {
		t.Errorf("retries %+v, requests %d", r.retry, len(h.srv.Requests()))
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := newHarness(t, func(o *anthropic.Options) { o.BaseURL = "http://" + addr })
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrNetwork || !pe.Retryable || pe.Attempts != 3 || !strings.Contains(pe.Message, "refused") {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 2 {
		t.Errorf("retries = %+v", r.retry)
	}
}

func TestConsumerStopsEarly(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Answer(multiBlock...))
	n := 0
	for ev, err := range h.p.Stream(context.Background(), simpleRequest()) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == provider.EventText {
			n++
			break
		}
	}
	if n != 1 {
		t.Errorf("saw %d text events", n)
	}
	// Stopping during a retry announcement does not sleep or retry.
	h.srv.Push(providertest.Overloaded(""), providertest.TextAnswer("unused"))
	for ev := range h.p.Stream(context.Background(), simpleRequest()) {
		if ev.Type == provider.EventRetry {
			break
		}
	}
	if len(h.sleep.Delays()) != 0 || len(h.srv.Requests()) != 2 {
		t.Errorf("slept %v; %d requests", h.sleep.Delays(), len(h.srv.Requests()))
	}
}

func TestAPIKeyNeverLeaks(t *testing.T) {
	h := newHarness(t, nil)
	echo := "invalid x-api-key " + apiKey
	h.srv.Push(
		providertest.Reply{Status: 529, Error: &providertest.APIError{Type: "overloaded_error", Message: echo}},
		providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "overloaded_error", Message: echo}},
		providertest.ErrorReply(401, "authentication_error", echo),
	)
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrAuth {
		t.Errorf("error = %+v", pe)
	}
	for _, s := range []string{r.err.Error(), pe.Message, h.logs.String()} {
		if strings.Contains(s, apiKey) {
			t.Errorf("API key leaked: %s", s)
		}
	}
	for _, rt := range r.retry {
		if strings.Contains(rt.Reason, apiKey) {
			t.Errorf("API key leaked in retry reason: %s", rt.Reason)
		}
	}
	if !strings.Contains(pe.Message, "[redacted]") {
		t.Errorf("message = %q, want the echoed key redacted", pe.Message)
	}
	// The key did go to the server.
	if got := h.srv.Request(1).Header.Get("x-api-key"); got != apiKey {
		t.Errorf("server got x-api-key %q", got)
	}
	// A network error names no key either.
	h2 := newHarness(t, func(o *anthropic.Options) { o.BaseURL = "http://127.0.0.1:1"; o.Retry.MaxAttempts = 1 })
	if err := run(context.Background(), h2.p, simpleRequest()).err; err == nil || strings.Contains(err.Error(), apiKey) {
		t.Errorf("network error = %v", err)
	}
}

func TestNoEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	srv := providertest.NewAnthropic(t)
	srv.Push(providertest.TextAnswer("ok"))
	p := anthropic.New(anthropic.Options{BaseURL: srv.BaseURL()})
	if r := run(context.Background(), p, simpleRequest()); r.err != nil {
		t.Fatal(r.err)
	}
	h := srv.Request(1).Header
	if h.Get("x-api-key") != "" || h.Get("Authorization") != "" {
		t.Errorf("credentials from the environment were sent: %v", h)
	}
}

func TestBadRequestBeforeSending(t *testing.T) {
	h := newHarness(t, nil)
	req := simpleRequest()
	req.Messages = append(req.Messages, chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{
		{Type: chat.BlockToolUse, ID: "t", Name: "x", Input: json.RawMessage(`{bad`)},
	}})
	pe := providerError(t, run(context.Background(), h.p, req).err)
	if pe.Kind != provider.ErrBadRequest || len(h.srv.Requests()) != 0 {
		t.Errorf("error = %+v", pe)
	}
}

func respText(r *chat.Response) string {
	if r == nil {
		return "<no response>"
	}
	return chat.Message{Content: r.Content}.PlainText()
}

func TestJSONInsteadOfStream(t *testing.T) {
	for body, kind := range map[string]provider.ErrorKind{
		`{"id":"msg_1","type":"message","content":[]}`:                                    provider.ErrMalformed,
		`{"type":"error","error":{"type":"invalid_request_error","message":"no stream"}}`: provider.ErrBadRequest,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(body))
		}))
		p := anthropic.New(anthropic.Options{BaseURL: srv.URL, Retry: provider.RetryPolicy{Sleep: (&sleeper{}).Sleep}})
		pe := providerError(t, run(context.Background(), p, simpleRequest()).err)
		if pe.Kind != kind || pe.Attempts != 1 {
			t.Errorf("%s: error = %+v", body, pe)
		}
		srv.Close()
	}
}

func TestConcurrentStreams(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		return providertest.Answer(chat.Text("echo "+r.LastUserText()), providertest.ToolUse("", "t", `{"q":1}`)), true
	})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			q := fmt.Sprintf("question %d", i)
			req := &provider.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text(q)}}}}
			resp, err := provider.Collect(h.p.Stream(context.Background(), req), nil)
			if err != nil {
				errs <- err
				return
			}
			if got := respText(resp); got != "echo "+q || len(resp.Content) != 2 {
				errs <- fmt.Errorf("answer %q to %q", got, q)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
