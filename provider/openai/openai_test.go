package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/openai"
	"github.com/vigilrun/vigil/provider/providertest"
)

// TestConformance runs the suite every provider adapter passes: streaming,
// tool calls, usage, retries, cut streams, 429 and 529 with retry-after,
// client errors, stalls, cancellation and key redaction. The tests below
// are what is particular to Chat Completions and the servers that speak
// it.
func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Wire: providertest.WireOpenAI,
		New: func(t *testing.T, c providertest.Config) provider.Provider {
			return openai.New(openai.Options{BaseURL: c.BaseURL, HTTPClient: c.HTTPClient, APIKey: c.APIKey, Retry: c.Retry, Logger: c.Logger, Model: "test-model"})
		},
	})
}

const apiKey = "sk-proj-test-SECRET-0123456789"

type harness struct {
	srv *providertest.Server
	p   *openai.Provider
}

func newHarness(t *testing.T, mod func(*openai.Options)) *harness {
	t.Helper()
	h := &harness{srv: providertest.NewOpenAI(t)}
	opts := openai.Options{
		APIKey:  apiKey,
		BaseURL: h.srv.BaseURL(),
		Model:   "test-model",
		Retry: provider.RetryPolicy{
			MaxAttempts: 3,
			Sleep:       func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		},
	}
	if mod != nil {
		mod(&opts)
	}
	h.p = openai.New(opts)
	return h
}

func simpleRequest() *provider.Request {
	return &provider.Request{
		CallID:   "call-1",
		Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text("list the files")}}},
	}
}

var multiBlock = []chat.Block{
	chat.Text("I'll look at two files — ünïcode too."),
	providertest.ToolUse("call_1", "read", `{"path": "a.go", "lines": [1, 2, 3]}`),
	providertest.ToolUse("call_2", "bash", `{"cmd": "ls -la \"dir\"", "env": {"X": "y"}}`),
}

func TestStopWithToolCallsIsToolUse(t *testing.T) {
	t.Parallel()
	// Ollama says "stop" for an answer with tool calls.
	h := newHarness(t, nil)
	h.srv.Push(providertest.Reply{Blocks: multiBlock[1:2], StopReason: chat.StopEndTurn})
	r := providertest.Drain(context.Background(), h.p, simpleRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Response.StopReason != chat.StopToolUse {
		t.Errorf("stop reason = %s, want tool_use", r.Response.StopReason)
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
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
	if r := providertest.Drain(context.Background(), h.p, req); r.Err != nil {
		t.Fatal(r.Err)
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
	t.Parallel()
	h := newHarness(t, func(o *openai.Options) { o.MaxTokens = 500 })
	h.srv.Push(providertest.TextAnswer("a"), providertest.TextAnswer("b"))
	providertest.Drain(context.Background(), h.p, simpleRequest())
	if b := h.srv.Request(1).JSON(); b["max_tokens"] != float64(500) {
		t.Errorf("body = %v", b)
	}
	h2 := newHarness(t, func(o *openai.Options) { o.MaxCompletionTokens = true })
	h2.srv.Push(providertest.TextAnswer("a"))
	req := simpleRequest()
	req.MaxTokens = 77
	providertest.Drain(context.Background(), h2.p, req)
	if b := h2.srv.Request(1).JSON(); b["max_completion_tokens"] != float64(77) || b["max_tokens"] != nil {
		t.Errorf("body = %v", b)
	}
}

func TestNoModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(o *openai.Options) { o.Model = "" })
	pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), h.p, simpleRequest()).Err)
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

func TestFinishWithoutDoneIsComplete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// Everything but [DONE]: the finish_reason says the answer is whole.
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Cut: true, FaultAfter: chunkCount(t, multiBlock) - 1})
	r := providertest.Drain(context.Background(), h.p, simpleRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Retries) != 0 || len(r.Response.Content) != 3 || r.Response.Usage.OutputTokens == 0 {
		t.Errorf("response = %+v, retries %+v", r.Response, r.Retries)
	}
	// Everything but the usage chunk and [DONE]: cut between the two, so
	// the usage the server was to send is lost. That is a truncation.
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Cut: true, FaultAfter: chunkCount(t, multiBlock) - 2}, providertest.TextAnswer("again"))
	r = providertest.Drain(context.Background(), h.p, simpleRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Retries) != 1 || !strings.Contains(r.Retries[0].Reason, "before the usage chunk") || providertest.ResponseText(r.Response) != "again" {
		t.Errorf("response = %q, retries %+v, want one retry after the truncation", providertest.ResponseText(r.Response), r.Retries)
	}
}

func TestOllamaErrorBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		w.Write([]byte(`{"error":"model \"llama9\" not found, try pulling it first"}`))
	}))
	t.Cleanup(srv.Close)
	p := openai.New(openai.Options{BaseURL: srv.URL + "/v1", Model: "llama9"})
	pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), p, simpleRequest()).Err)
	if pe.Kind != provider.ErrBadRequest || pe.Status != 404 || pe.Message != `model "llama9" not found, try pulling it first` {
		t.Errorf("error = %+v", pe)
	}
}

func TestMalformedFrames(t *testing.T) {
	t.Parallel()
	first := `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`
	for name, events := range map[string][]providertest.Event{
		"bad json":   {{Data: first}, {Data: `{"id":"x","choices":[`}},
		"no name":    {{Data: first}, {Data: `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`}, {Data: "[DONE]"}},
		"not an obj": {{Data: first}, {Data: `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"[1]"}}]},"finish_reason":"tool_calls"}]}`}, {Data: "[DONE]"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.srv.Push(providertest.Reply{Events: events})
			pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), h.p, simpleRequest()).Err)
			if pe.Kind != provider.ErrMalformed || pe.Attempts != 1 {
				t.Errorf("error = %+v", pe)
			}
		})
	}
}

func TestToolCallsWithoutIndexOrID(t *testing.T) {
	t.Parallel()
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
	r := providertest.Drain(context.Background(), h.p, simpleRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := []chat.Block{
		{Type: chat.BlockToolUse, ID: "a", Name: "read", Input: json.RawMessage(`{"p":1}`)},
		{Type: chat.BlockToolUse, ID: "b", Name: "bash", Input: json.RawMessage(`{}`)},
		{Type: chat.BlockToolUse, ID: "call_call-1_2", Name: "ls", Input: json.RawMessage(`{}`)},
	}
	if !reflect.DeepEqual(r.Response.Content, want) || r.Response.StopReason != chat.StopToolUse || r.Response.Model != "llama" {
		t.Errorf("response = %+v", r.Response)
	}
}

func TestNoEnvironmentNoKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	srv := providertest.NewOpenAI(t)
	srv.Push(providertest.TextAnswer("ok"))
	p := openai.New(openai.Options{BaseURL: srv.BaseURL(), Model: "llama3"})
	if r := providertest.Drain(context.Background(), p, simpleRequest()); r.Err != nil {
		t.Fatal(r.Err)
	}
	h := srv.Request(1).Header
	if h.Get("Authorization") != "" || h.Get("OpenAI-Organization") != "" {
		t.Errorf("settings from the environment were sent: %v", h)
	}
}

func TestErrorCodeInMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.srv.Push(providertest.Reply{Status: 400, Error: &providertest.APIError{Type: "invalid_request_error", Message: "maximum context length exceeded", Code: "context_length_exceeded"}})
	pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), h.p, simpleRequest()).Err)
	if want := "invalid_request_error (context_length_exceeded): maximum context length exceeded (request-id req_fake)"; pe.Message != want {
		t.Errorf("message = %q, want %q", pe.Message, want)
	}
}

func TestNumericCodeMidStream(t *testing.T) {
	t.Parallel()
	// OpenRouter reports an upstream failure mid-stream with an HTTP
	// status as its code.
	h := newHarness(t, nil)
	bad := providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "server_error", Message: "Provider disconnected", Code: "502"}}
	h.srv.Push(bad, bad, bad)
	pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), h.p, simpleRequest()).Err)
	if pe.Kind != provider.ErrServer || pe.Attempts != 3 || !pe.Retryable || !strings.Contains(pe.Message, "Provider disconnected") {
		t.Errorf("error = %+v", pe)
	}
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Error: &providertest.APIError{Type: "error", Message: "no such model", Code: "404"}})
	if pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), h.p, simpleRequest()).Err); pe.Kind != provider.ErrBadRequest || pe.Retryable {
		t.Errorf("error = %+v, want a bad request, not retried", pe)
	}
}
