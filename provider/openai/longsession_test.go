package openai_test

import (
	"context"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

// Cached-token usage, which long sessions on real models need. Stall
// detection, context-window errors and the compaction purpose are in the
// conformance suite.

func TestCachedTokensAreNotInput(t *testing.T) {
	t.Parallel()
	// OpenAI's own usage shape: prompt_tokens counts the cached tokens,
	// prompt_tokens_details.cached_tokens says how many were cached.
	h := newHarness(t, nil)
	h.srv.Push(providertest.Reply{Events: []providertest.Event{
		{Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`},
		{Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
		{Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`},
		{Data: `[DONE]`},
	}})
	r := providertest.Drain(context.Background(), h.p, simpleRequest())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := chat.Usage{InputTokens: 86, OutputTokens: 300, CacheReadTokens: 1920}
	if r.Response.Usage != want {
		t.Errorf("usage = %+v, want %+v", r.Response.Usage, want)
	}
}
