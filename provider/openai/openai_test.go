package openai_test

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
	"github.com/vigilrun/vigil/provider/openai"
	"github.com/vigilrun/vigil/provider/providertest"
)

const apiKey = "sk-proj-test-SECRET-0123456789"

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

type harness struct {
	srv   *providertest.Server
	p     *openai.Provider
	sleep *sleeper
	logs  *syncBuffer
}

func newHarness(t *testing.T, mod func(*openai.Options)) *harness {
	t.Helper()
	h := &harness{srv: providertest.NewOpenAI(t), sleep: &sleeper{}, logs: &syncBuffer{}}
	opts := openai.Options{
		APIKey:  apiKey,
		BaseURL: h.srv.BaseURL(),
		Model:   "test-model",
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
	h.p = openai.New(opts)
	return h
}

type result struct {
	events []provider.Event
	text   string
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
			r.text, r.tools = "", nil
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

func respText(r *chat.Response) string {
	if r == nil {
		return "<no response>"
	}
	return chat.Message{Content: r.Content}.PlainText()
}

var multiBlock = []chat.Block{
	chat.Text("I'll look at two files — ünïcode too."),
	providertest.ToolUse("call_1", "read", `{"path": "a.go", "lines": [1, 2, 3]}`),
	providertest.ToolUse("call_2", "bash", `{"cmd": "ls -la \"dir\"", "env": {"X": "y"}}`),
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
		t.Errorf("text deltas = %q", r.text)
	}
	if len(r.tools) != 2 || r.tools[0].ID != "call_1" || r.tools[1].ID != "call_2" || r.tools[1].Name != "bash" {
		t.Fatalf("tool events = %+v", r.tools)
	}
	want := &chat.Response{
		Content: []chat.Block{
			chat.Text(multiBlock[0].Text),
			{Type: chat.BlockToolUse, ID: "call_1", Name: "read", Input: json.RawMessage(`{"path":"a.go","lines":[1,2,3]}`)},
			{Type: chat.BlockToolUse, ID: "call_2", Name: "bash", Input: json.RawMessage(`{"cmd":"ls -la \"dir\"","env":{"X":"y"}}`)},
		},
		StopReason: chat.StopToolUse,
		Usage:      chat.Usage{InputTokens: 120, OutputTokens: 45, CacheReadTokens: 1000, CacheWriteTokens: 30},
		Model:      "test-model",
	}
	if !reflect.DeepEqual(r.resp, want) {
		t.Errorf("response\n got %+v\nwant %+v", r.resp, want)
	}
	if last := r.events[len(r.events)-1]; last.Type != provider.EventDone {
		t.Errorf("last event = %s", last.Type)
	}
}

func TestStopReasons(t *testing.T) {
	for _, tc := range []struct {
		reply providertest.Reply
		want  chat.StopReason
	}{
		{providertest.TextAnswer("x"), chat.StopEndTurn},
		{providertest.Reply{Blocks: []chat.Block{chat.Text("x")}, StopReason: chat.StopMaxTokens}, chat.StopMaxTokens},
		{providertest.Reply{Blocks: []chat.Block{chat.Text("x")}, StopReason: chat.StopRefusal}, chat.StopRefusal},
		// Ollama says "stop" for an answer with tool calls.
		{providertest.Reply{Blocks: multiBlock[1:2], StopReason: chat.StopEndTurn}, chat.StopToolUse},
	} {
		h := newHarness(t, nil)
		h.srv.Push(tc.reply)
		r := run(context.Background(), h.p, simpleRequest())
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.StopReason != tc.want {
			t.Errorf("stop reason = %s, want %s", r.resp.StopReason, tc.want)
		}
	}
}

func TestRequestShape(t *testing.T) {
	h := newHarness(t, func(o *openai.Options) {
		o.Header = http.Header{"Http-Referer": {"https://vigil.run"}}
	})
	h.srv.Push(providertest.TextAnswer("ok"))
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	req := &provider.Request{
		System: "You are vigil.",
		Tools:  []chat.ToolSpec{{Name: "read", Description: "Read a file", InputSchema: schema}},
		Messages: []chat.Message{
			{Role: chat.RoleUser, Content: []chat.Block{chat.Text("first")}},
			{Role: chat.RoleUser, Content: []chat.Block{chat.Text("second"), chat.Text("")}},
			{Role: chat.RoleAssistant, Content: []chat.Block{
				chat.Text("reading"),
				{Type: chat.BlockToolUse, ID: "t1", Name: "read", Input: json.RawMessage(`{"path":"a"}`)},
			}},
			{Role: chat.RoleAssistant, Content: []chat.Block{
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
	if got.Header.Get("Authorization") != "Bearer "+apiKey || got.Header.Get("Http-Referer") != "https://vigil.run" {
		t.Errorf("headers = %v", got.Header)
	}
	wantBody := map[string]any{
		"model":          "test-model",
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"tools": []any{map[string]any{
			"type": "function",
			"function": map[string]any{
				"name": "read", "description": "Read a file",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"}},
			},
		}},
		"messages": []any{
			map[string]any{"role": "system", "content": "You are vigil."},
			map[string]any{"role": "user", "content": "first\nsecond"},
			map[string]any{"role": "assistant", "content": "reading", "tool_calls": []any{
				map[string]any{"id": "t1", "type": "function", "function": map[string]any{"name": "read", "arguments": `{"path":"a"}`}},
				map[string]any{"id": "t2", "type": "function", "function": map[string]any{"name": "read", "arguments": `{"path":"b"}`}},
			}},
			map[string]any{"role": "tool", "tool_call_id": "t1", "content": "contents of a"},
			map[string]any{"role": "tool", "tool_call_id": "t2", "content": "Error: no such file"},
			map[string]any{"role": "user", "content": "a note"},
		},
	}
	if body := got.JSON(); !reflect.DeepEqual(body, wantBody) {
		g, _ := json.MarshalIndent(body, "", " ")
		w, _ := json.MarshalIndent(wantBody, "", " ")
		t.Errorf("request body\n got %s\nwant %s", g, w)
	}
}

func TestMaxTokens(t *testing.T) {
	h := newHarness(t, func(o *openai.Options) { o.MaxTokens = 500 })
	h.srv.Push(providertest.TextAnswer("a"), providertest.TextAnswer("b"))
	run(context.Background(), h.p, simpleRequest())
	if b := h.srv.Request(1).JSON(); b["max_tokens"] != float64(500) {
		t.Errorf("body = %v", b)
	}
	h2 := newHarness(t, func(o *openai.Options) { o.MaxCompletionTokens = true })
	h2.srv.Push(providertest.TextAnswer("a"))
	req := simpleRequest()
	req.MaxTokens = 77
	run(context.Background(), h2.p, req)
	if b := h2.srv.Request(1).JSON(); b["max_completion_tokens"] != float64(77) || b["max_tokens"] != nil {
		t.Errorf("body = %v", b)
	}
}

func TestNoModel(t *testing.T) {
	h := newHarness(t, func(o *openai.Options) { o.Model = "" })
	pe := providerError(t, run(context.Background(), h.p, simpleRequest()).err)
	if pe.Kind != provider.ErrBadRequest || len(h.srv.Requests()) != 0 {
		t.Errorf("error = %+v", pe)
	}
}

// chunkCount counts the SSE events the fake sends for blocks.
func chunkCount(t *testing.T, blocks []chat.Block) int {
	t.Helper()
	srv := providertest.NewOpenAI(t)
	srv.Push(providertest.Answer(blocks...))
	res, err := http.Post(srv.BaseURL()+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return strings.Count(b.String(), "\n\n")
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
		{"everything but the finish chunk", func(t *testing.T) providertest.Reply {
			// finish chunk, usage chunk, [DONE] are the last three.
			return providertest.Reply{Blocks: multiBlock, Cut: true, FaultAfter: chunkCount(t, multiBlock) - 3}
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
			if respText(r.resp) != "complete answer" || len(r.resp.Content) != 1 || r.text != "complete answer" {
				t.Errorf("response = %+v, text %q", r.resp, r.text)
			}
			if got := h.sleep.Delays(); len(got) != 1 || got[0] != 500*time.Millisecond {
				t.Errorf("slept %v", got)
			}
		})
	}
}

func TestFinishWithoutDoneIsComplete(t *testing.T) {
	h := newHarness(t, nil)
	// Everything but [DONE]: the finish_reason says the answer is whole.
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Cut: true, FaultAfter: chunkCount(t, multiBlock) - 1})
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.retry) != 0 || len(r.resp.Content) != 3 {
		t.Errorf("response = %+v, retries %+v", r.resp, r.retry)
	}
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
	if pe.Kind != provider.ErrTruncated || pe.Attempts != 3 || !pe.Retryable || pe.Provider != "openai" {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 2 {
		t.Errorf("retries = %+v", r.retry)
	}
}

func TestOverloadedThenSuccess(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Overloaded("7"), providertest.TextAnswer("hello"))
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.retry) != 1 || r.retry[0].Delay != 7*time.Second || !strings.Contains(r.retry[0].Reason, "529") {
		t.Fatalf("retries = %+v", r.retry)
	}
	if got := h.sleep.Delays(); !reflect.DeepEqual(got, []time.Duration{7 * time.Second}) {
		t.Errorf("slept %v", got)
	}
	if respText(r.resp) != "hello" {
		t.Errorf("response = %+v", r.resp)
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
		{"no header", nil, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *openai.Options) { o.Retry.Now = func() time.Time { return now } })
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
		})
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		reply providertest.Reply
		kind  provider.ErrorKind
		msg   string
	}{
		{providertest.Reply{Status: 400, Error: &providertest.APIError{Type: "invalid_request_error", Message: "maximum context length exceeded", Code: "context_length_exceeded"}},
			provider.ErrBadRequest, "invalid_request_error (context_length_exceeded): maximum context length exceeded"},
		{providertest.ErrorReply(401, "invalid_request_error", "Incorrect API key provided"), provider.ErrAuth, "invalid_request_error: Incorrect API key provided"},
		{providertest.ErrorReply(404, "", "model not found"), provider.ErrBadRequest, "not_found_error: model not found"},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			h := newHarness(t, nil)
			h.srv.Push(tc.reply, providertest.TextAnswer("must not be used"))
			r := run(context.Background(), h.p, simpleRequest())
			pe := providerError(t, r.err)
			if pe.Kind != tc.kind || pe.Status != tc.reply.Status || pe.Attempts != 1 || pe.Retryable || pe.Message != tc.msg {
				t.Errorf("error = %+v", pe)
			}
			if len(r.retry) != 0 || len(h.srv.Requests()) != 1 {
				t.Errorf("retried: %+v", r.retry)
			}
		})
	}
}

func TestOllamaErrorBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		w.Write([]byte(`{"error":"model \"llama9\" not found, try pulling it first"}`))
	}))
	t.Cleanup(srv.Close)
	p := openai.New(openai.Options{BaseURL: srv.URL + "/v1", Model: "llama9"})
	pe := providerError(t, run(context.Background(), p, simpleRequest()).err)
	if pe.Kind != provider.ErrBadRequest || pe.Status != 404 || pe.Message != `model "llama9" not found, try pulling it first` {
		t.Errorf("error = %+v", pe)
	}
}

func TestMalformedToolArguments(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Answer(chat.Text("x"), providertest.ToolUse("c1", "read", `{"path": "a`)))
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrMalformed || pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, "c1") {
		t.Errorf("error = %+v", pe)
	}
	if len(r.tools) != 0 {
		t.Errorf("malformed tool call was passed on: %+v", r.tools)
	}
}

func TestMalformedFrames(t *testing.T) {
	first := `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`
	for name, events := range map[string][]providertest.Event{
		"bad json":   {{Data: first}, {Data: `{"id":"x","choices":[`}},
		"no name":    {{Data: first}, {Data: `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`}, {Data: "[DONE]"}},
		"not an obj": {{Data: first}, {Data: `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"[1]"}}]},"finish_reason":"tool_calls"}]}`}, {Data: "[DONE]"}},
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

func TestToolCallsWithoutIndexOrID(t *testing.T) {
	chunk := func(delta string, finish string) providertest.Event {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return providertest.Event{Data: `{"id":"x","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`}
	}
	h := newHarness(t, nil)
	h.srv.Push(providertest.Reply{Events: []providertest.Event{
		chunk(`{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"read","arguments":"{\"p\":1}"}}]}`, ""),
		chunk(`{"tool_calls":[{"id":"b","function":{"name":"bash","arguments":"{}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":2,"function":{"name":"ls","arguments":""}}]}`, ""),
		chunk(`{}`, "stop"),
		{Data: "[DONE]"},
	}})
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := []chat.Block{
		{Type: chat.BlockToolUse, ID: "a", Name: "read", Input: json.RawMessage(`{"p":1}`)},
		{Type: chat.BlockToolUse, ID: "b", Name: "bash", Input: json.RawMessage(`{}`)},
		{Type: chat.BlockToolUse, ID: "call_call-1_2", Name: "ls", Input: json.RawMessage(`{}`)},
	}
	if !reflect.DeepEqual(r.resp.Content, want) || r.resp.StopReason != chat.StopToolUse || r.resp.Model != "llama" {
		t.Errorf("response = %+v", r.resp)
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
	t.Run("server error exhausted", func(t *testing.T) {
		h := newHarness(t, nil)
		bad := providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "server_error", Message: "Provider disconnected", Code: "502"}}
		h.srv.Push(bad, bad, bad)
		pe := providerError(t, run(context.Background(), h.p, simpleRequest()).err)
		if pe.Kind != provider.ErrServer || pe.Attempts != 3 || !strings.Contains(pe.Message, "Provider disconnected") {
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
		t.Errorf("response = %+v", r.resp)
	}
}

func TestDeadlineCancelsCleanly(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Hold: make(chan struct{})})
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
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Stall: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	for ev, e := range h.p.Stream(ctx, simpleRequest()) {
		if e != nil {
			err = e
		} else if ev.Type == provider.EventText {
			cancel()
		} else {
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	if pe := providerError(t, err); pe.Kind != provider.ErrCanceled || pe.Attempts != 1 {
		t.Errorf("error = %+v", pe)
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := newHarness(t, func(o *openai.Options) { o.BaseURL = "http://" + addr + "/v1" })
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
	for ev, err := range h.p.Stream(context.Background(), simpleRequest()) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == provider.EventText {
			break
		}
	}
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
	echo := "Incorrect API key provided: " + apiKey
	h.srv.Push(
		providertest.Reply{Status: 529, Error: &providertest.APIError{Type: "overloaded_error", Message: echo}},
		providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "server_error", Message: echo}},
		providertest.ErrorReply(401, "invalid_request_error", echo),
	)
	r := run(context.Background(), h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrAuth || !strings.Contains(pe.Message, "[redacted]") {
		t.Errorf("error = %+v", pe)
	}
	for _, s := range []string{r.err.Error(), h.logs.String()} {
		if strings.Contains(s, apiKey) {
			t.Errorf("API key leaked: %s", s)
		}
	}
	for _, rt := range r.retry {
		if strings.Contains(rt.Reason, apiKey) {
			t.Errorf("API key leaked in retry reason: %s", rt.Reason)
		}
	}
	if got := h.srv.Request(1).Header.Get("Authorization"); got != "Bearer "+apiKey {
		t.Errorf("server got Authorization %q", got)
	}
}

func TestNoEnvironmentNoKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	srv := providertest.NewOpenAI(t)
	srv.Push(providertest.TextAnswer("ok"))
	p := openai.New(openai.Options{BaseURL: srv.BaseURL(), Model: "llama3"})
	if r := run(context.Background(), p, simpleRequest()); r.err != nil {
		t.Fatal(r.err)
	}
	h := srv.Request(1).Header
	if h.Get("Authorization") != "" || h.Get("OpenAI-Organization") != "" {
		t.Errorf("settings from the environment were sent: %v", h)
	}
}

func TestJSONInsteadOfStream(t *testing.T) {
	for body, kind := range map[string]provider.ErrorKind{
		`{"id":"c","object":"chat.completion","choices":[]}`:                           provider.ErrMalformed,
		`{"error":{"message":"streaming unsupported","type":"invalid_request_error"}}`: provider.ErrBadRequest,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(body))
		}))
		p := openai.New(openai.Options{BaseURL: srv.URL, Model: "m", Retry: provider.RetryPolicy{Sleep: (&sleeper{}).Sleep}})
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
