package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/openai"
	"github.com/vigilrun/vigil/provider/providertest"
)

// Tests of what long sessions on real models need: cached-token usage,
// stall detection, context-window errors and the compaction purpose.

func TestCachedTokensAreNotInput(t *testing.T) {
	// OpenAI's own usage shape: prompt_tokens counts the cached tokens,
	// prompt_tokens_details.cached_tokens says how many were cached.
	h := newHarness(t, nil)
	h.srv.Push(providertest.Reply{Events: []providertest.Event{
		{Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`},
		{Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
		{Data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`},
		{Data: `[DONE]`},
	}})
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := chat.Usage{InputTokens: 86, OutputTokens: 300, CacheReadTokens: 1920}
	if r.resp.Usage != want {
		t.Errorf("usage = %+v, want %+v", r.resp.Usage, want)
	}
}

func TestCountedUsage(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.TextAnswer("an answer of some length"))
	req := simpleRequest()
	req.System = strings.Repeat("sys ", 100)
	r := run(context.Background(), h.p, req)
	if r.err != nil {
		t.Fatal(r.err)
	}
	n := providertest.PromptTokens(h.srv.Request(1))
	if u := r.resp.Usage; u.InputTokens != n || n < 100 || u.OutputTokens == 0 || u.CacheReadTokens != 0 {
		t.Errorf("usage = %+v, want %d input tokens", u, n)
	}
}

func TestContextWindowIsFailContext(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.SetContextWindow(100)
	h.srv.Push(providertest.TextAnswer("unused"))
	big := &provider.Request{CallID: "big", Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text(strings.Repeat("x", 2000))}}}}
	r := run(context.Background(), h.p, big)
	pe := providerError(t, r.err)
	tokens := h.srv.Request(1).Tokens
	want := fmt.Sprintf("This model's maximum context length is 100 tokens. However, your messages resulted in %d tokens.", tokens)
	if pe.Kind != provider.ErrBadRequest || pe.Status != 400 || pe.Retryable || pe.Attempts != 1 ||
		!strings.Contains(pe.Message, want) || !strings.Contains(pe.Message, "context_length_exceeded") {
		t.Errorf("error = %+v, want a 400 saying %q", pe, want)
	}
	if got := provider.FailureOf(r.err); got != core.FailContext {
		t.Errorf("FailureOf = %s, want %s", got, core.FailContext)
	}
	if !h.srv.Request(1).OverWindow || h.srv.Pending() != 1 || len(h.srv.Requests()) != 1 {
		t.Errorf("OverWindow %v, pending %d, requests %d", h.srv.Request(1).OverWindow, h.srv.Pending(), len(h.srv.Requests()))
	}
}

func TestPurposeHeader(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.On(providertest.PurposeIs(provider.PurposeCompact), providertest.TextAnswer("the summary"))
	req := simpleRequest()
	req.Purpose = provider.PurposeCompact
	r := run(context.Background(), h.p, req)
	if r.err != nil || respText(r.resp) != "the summary" {
		t.Fatalf("compaction: %v %s", r.err, respText(r.resp))
	}
	if got := h.srv.Request(1); got.Purpose != "compact" || got.Header.Get("X-Vigil-Purpose") != "compact" {
		t.Errorf("purpose = %q", got.Purpose)
	}
}

const (
	sseStart = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hel"},"finish_reason":null}]}` + "\n\n"
	sseEnd   = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		"data: [DONE]\n\n"
)

func memProvider(tr http.RoundTripper, stall time.Duration) *openai.Provider {
	return openai.New(openai.Options{
		BaseURL:    "http://fake.invalid/v1",
		Model:      "m",
		HTTPClient: &http.Client{Transport: tr},
		Retry:      provider.RetryPolicy{MaxAttempts: 3, Rand: func() float64 { return 0 }, StallTimeout: stall},
	})
}

func TestStalledStreamIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &providertest.MemTransport{Bodies: []func(context.Context) io.ReadCloser{providertest.Quiet(sseStart), providertest.Whole(sseStart + sseEnd)}}
		start := time.Now()
		r := run(context.Background(), memProvider(tr, 0), simpleRequest())
		if r.err != nil {
			t.Fatal(r.err)
		}
		if len(r.retry) != 1 || r.retry[0].Reason != "stalled: no bytes for 2m0s" || r.retry[0].Attempt != 1 {
			t.Errorf("retries = %+v, want one for the stall", r.retry)
		}
		if respText(r.resp) != "hello" || r.text != "hello" {
			t.Errorf("response %q, text after the retry %q", respText(r.resp), r.text)
		}
		if d := time.Since(start); d != 2*time.Minute {
			t.Errorf("the stall was noticed after %s, want the default 2m0s", d)
		}
	})
}

func TestStalledStreamRetriesExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &providertest.MemTransport{Bodies: []func(context.Context) io.ReadCloser{providertest.Quiet(sseStart), providertest.Quiet(""), providertest.Quiet(sseStart)}}
		r := run(context.Background(), memProvider(tr, 30*time.Second), simpleRequest())
		pe := providerError(t, r.err)
		if pe.Kind != provider.ErrStalled || !pe.Retryable || pe.Attempts != 3 || pe.Message != "no bytes for 30s" {
			t.Errorf("error = %+v", pe)
		}
		if len(r.retry) != 2 || r.retry[1].Reason != "stalled: no bytes for 30s" {
			t.Errorf("retries = %+v", r.retry)
		}
	})
}

func TestStallOnTheFakeServer(t *testing.T) {
	// Real sockets: the first attempt gets no headers, the second stops
	// halfway through the stream. Only the outcome is asserted.
	h := newHarness(t, func(o *openai.Options) {
		o.Retry.MaxAttempts = 2
		o.Retry.StallTimeout = 50 * time.Millisecond
	})
	never := make(chan struct{})
	h.srv.Push(providertest.Reply{Blocks: multiBlock, Hold: never}, providertest.Reply{Blocks: multiBlock, Stall: never})
	// The deadline only keeps a broken stall detector from hanging the
	// test: it ends the call with ErrCanceled, which fails it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := run(ctx, h.p, simpleRequest())
	pe := providerError(t, r.err)
	if pe.Kind != provider.ErrStalled || pe.Attempts != 2 || !pe.Retryable {
		t.Errorf("error = %+v", pe)
	}
	if len(r.retry) != 1 || r.retry[0].Reason != "stalled: no bytes for 50ms" {
		t.Errorf("retries = %+v", r.retry)
	}
}
