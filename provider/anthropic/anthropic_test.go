package anthropic_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/providertest"
)

// TestConformance runs the suite every provider adapter passes: streaming,
// tool calls, usage, retries, cut streams, 429 and 529 with retry-after,
// client errors, stalls, cancellation and key redaction. The tests below
// are what is particular to the Messages API.
func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Wire: providertest.WireAnthropic,
		New: func(t *testing.T, c providertest.Config) provider.Provider {
			return anthropic.New(anthropic.Options{BaseURL: c.BaseURL, HTTPClient: c.HTTPClient, APIKey: c.APIKey, Retry: c.Retry, Logger: c.Logger})
		},
	})
}

const apiKey = "sk-ant-test-SECRET-0123456789"

type harness struct {
	srv *providertest.Server
	p   *anthropic.Provider
}

func newHarness(t *testing.T, mod func(*anthropic.Options)) *harness {
	t.Helper()
	h := &harness{srv: providertest.NewAnthropic(t)}
	opts := anthropic.Options{
		APIKey:  apiKey,
		BaseURL: h.srv.BaseURL(),
		Retry:   provider.RetryPolicy{MaxAttempts: 1},
	}
	if mod != nil {
		mod(&opts)
	}
	h.p = anthropic.New(opts)
	return h
}

func simpleRequest() *provider.Request {
	return &provider.Request{
		CallID:   "call-1",
		Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text("list the files")}}},
	}
}

func TestRequestShape(t *testing.T) {
	t.Parallel()
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
	if r := providertest.Drain(context.Background(), h.p, req); r.Err != nil {
		t.Fatal(r.Err)
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
	t.Parallel()
	h := newHarness(t, func(o *anthropic.Options) { o.Model = "model-a"; o.MaxTokens = 1000 })
	h.srv.Push(providertest.TextAnswer("a"), providertest.TextAnswer("b"))
	if r := providertest.Drain(context.Background(), h.p, simpleRequest()); r.Err != nil {
		t.Fatal(r.Err)
	}
	req := simpleRequest()
	req.Model, req.MaxTokens = "model-b", 50
	if r := providertest.Drain(context.Background(), h.p, req); r.Err != nil {
		t.Fatal(r.Err)
	}
	if g := h.srv.Request(1); g.Model != "model-a" || g.MaxTokens != 1000 {
		t.Errorf("request 1: model %q max_tokens %d", g.Model, g.MaxTokens)
	}
	if g := h.srv.Request(2); g.Model != "model-b" || g.MaxTokens != 50 {
		t.Errorf("request 2: model %q max_tokens %d", g.Model, g.MaxTokens)
	}
}

func TestAssistantToolResultMovesToUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.srv.Push(providertest.TextAnswer("ok"))
	req := &provider.Request{Messages: []chat.Message{
		{Role: chat.RoleUser, Content: []chat.Block{chat.Text("go")}},
		{Role: chat.RoleAssistant, Content: []chat.Block{
			{Type: chat.BlockToolUse, ID: "t1", Name: "x"},
			chat.ToolResult("t1", "done", false),
		}},
	}}
	if r := providertest.Drain(context.Background(), h.p, req); r.Err != nil {
		t.Fatal(r.Err)
	}
	msgs := h.srv.Request(1).Messages
	if len(msgs) != 3 || msgs[1].Role != chat.RoleAssistant || msgs[2].Role != chat.RoleUser ||
		msgs[2].Content[0].Type != chat.BlockToolResult || string(msgs[1].Content[0].Input) != "{}" {
		t.Errorf("messages = %+v", msgs)
	}
}

func TestMalformedFrames(t *testing.T) {
	t.Parallel()
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
			pe := providertest.ErrorOf(t, providertest.Drain(context.Background(), h.p, simpleRequest()).Err)
			if pe.Kind != provider.ErrMalformed || pe.Attempts != 1 {
				t.Errorf("error = %+v", pe)
			}
		})
	}
}

func TestNoEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	srv := providertest.NewAnthropic(t)
	srv.Push(providertest.TextAnswer("ok"))
	p := anthropic.New(anthropic.Options{BaseURL: srv.BaseURL()})
	if r := providertest.Drain(context.Background(), p, simpleRequest()); r.Err != nil {
		t.Fatal(r.Err)
	}
	h := srv.Request(1).Header
	if h.Get("x-api-key") != "" || h.Get("Authorization") != "" {
		t.Errorf("credentials from the environment were sent: %v", h)
	}
}
