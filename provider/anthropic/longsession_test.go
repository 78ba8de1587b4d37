package anthropic_test

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
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/providertest"
)

// Tests of what long sessions on real models need: prompt caching, stall
// detection, context-window errors and the compaction purpose.

func TestPromptCacheMarksAndUsage(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Push(providertest.TextAnswer("first answer"), providertest.TextAnswer("second answer"))
	req := &provider.Request{
		CallID: "c1",
		System: strings.Repeat("You are vigil. ", 40),
		Tools: []chat.ToolSpec{
			{Name: "read", Description: "Read a file", InputSchema: []byte(`{"type":"object"}`)},
			{Name: "bash", Description: "Run a command", InputSchema: []byte(`{"type":"object"}`)},
		},
		Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text(strings.Repeat("Read the docs. ", 50))}}},
	}
	r1 := run(context.Background(), h.p, req)
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	got := h.srv.Request(1)
	want := []string{"tools[1]", "system[0]", "messages[0][0]"}
	if marks := markNames(got.CacheMarks); marks != strings.Join(want, " ") {
		t.Errorf("round 1 marks = %s, want %v", marks, want)
	}
	for _, m := range got.CacheMarks {
		if m.Type != "ephemeral" || m.TTL != "" {
			t.Errorf("mark %+v, want type ephemeral and no ttl", m)
		}
	}
	// Round 1 writes the whole prompt to the cache: its last mark ends it.
	whole1 := providertest.PromptTokens(got)
	if u := r1.resp.Usage; u.CacheWriteTokens != whole1 || u.CacheReadTokens != 0 || u.InputTokens != 0 || u.OutputTokens == 0 {
		t.Errorf("round 1 usage = %+v, want %d tokens written", u, whole1)
	}

	// Round 2 repeats round 1 and appends to it: it reads what round 1
	// wrote, through the mark on the user message before the last.
	req.Messages = append(req.Messages,
		chat.Message{Role: chat.RoleAssistant, Content: r1.resp.Content},
		chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text("Now summarise them.")}})
	r2 := run(context.Background(), h.p, req)
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	got = h.srv.Request(2)
	want = []string{"tools[1]", "system[0]", "messages[0][0]", "messages[2][0]"}
	if marks := markNames(got.CacheMarks); marks != strings.Join(want, " ") {
		t.Errorf("round 2 marks = %s, want %v", marks, want)
	}
	whole2 := providertest.PromptTokens(got)
	u := r2.resp.Usage
	if u.CacheReadTokens != whole1 || u.CacheWriteTokens != whole2-whole1 || u.InputTokens != 0 {
		t.Errorf("round 2 usage = %+v, want %d read and %d written", u, whole1, whole2-whole1)
	}
	if total := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens; total != whole2 {
		t.Errorf("round 2 counts %d prompt tokens, the prompt has %d", total, whole2)
	}

	// A prompt without a system prompt or tools gets one mark.
	h.srv.Push(providertest.TextAnswer("third answer"))
	if r := run(context.Background(), h.p, simpleRequest()); r.err != nil {
		t.Fatal(r.err)
	}
	if marks := markNames(h.srv.Request(3).CacheMarks); marks != "messages[0][0]" {
		t.Errorf("marks without system and tools = %s", marks)
	}
}

func markNames(ms []providertest.CacheMark) string {
	var out []string
	for _, m := range ms {
		if m.Part == "messages" {
			out = append(out, fmt.Sprintf("%s[%d][%d]", m.Part, m.Index, m.Block))
		} else {
			out = append(out, fmt.Sprintf("%s[%d]", m.Part, m.Index))
		}
	}
	return strings.Join(out, " ")
}

func TestScriptedUsageIsKeptAndUncachedInputStaysInput(t *testing.T) {
	h := newHarness(t, nil)
	reply := providertest.TextAnswer("ok")
	reply.Usage = chat.Usage{InputTokens: 7, OutputTokens: 3, CacheReadTokens: 900, CacheWriteTokens: 100}
	h.srv.Push(reply)
	r := run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.Usage != reply.Usage {
		t.Errorf("usage = %+v, want %+v", r.resp.Usage, reply.Usage)
	}
	if r.resp.Usage.Total() != 1010 {
		t.Errorf("total = %d", r.resp.Usage.Total())
	}
}

func TestContextWindowIsFailContext(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.SetContextWindow(100)
	h.srv.Push(providertest.TextAnswer("fits"))
	big := &provider.Request{CallID: "big", Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text(strings.Repeat("x", 2000))}}}}
	r := run(context.Background(), h.p, big)
	pe := providerError(t, r.err)
	tokens := h.srv.Request(1).Tokens
	if want := fmt.Sprintf("prompt is too long: %d tokens > 100 maximum", tokens); pe.Kind != provider.ErrBadRequest || pe.Status != 400 ||
		pe.Retryable || pe.Attempts != 1 || !strings.Contains(pe.Message, want) {
		t.Errorf("error = %+v, want a 400 saying %q", pe, want)
	}
	if got := provider.FailureOf(r.err); got != core.FailContext {
		t.Errorf("FailureOf = %s, want %s", got, core.FailContext)
	}
	if !h.srv.Request(1).OverWindow || h.srv.Pending() != 1 {
		t.Errorf("over-window request: OverWindow %v, pending replies %d (want 1: none used)", h.srv.Request(1).OverWindow, h.srv.Pending())
	}
	r = run(context.Background(), h.p, simpleRequest())
	if r.err != nil {
		t.Fatal(r.err)
	}
	if u, n := r.resp.Usage, h.srv.Request(2).Tokens; u.InputTokens+u.CacheReadTokens+u.CacheWriteTokens != n || n == 0 {
		t.Errorf("usage %+v, want the %d prompt tokens counted", u, n)
	}
}

func TestPurposeHeader(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.On(providertest.PurposeIs(provider.PurposeCompact), providertest.TextAnswer("the summary"))
	h.srv.On(providertest.PurposeIs(""), providertest.TextAnswer("a normal answer"))
	req := simpleRequest()
	req.Purpose = provider.PurposeCompact
	r := run(context.Background(), h.p, req)
	if r.err != nil || respText(r.resp) != "the summary" {
		t.Fatalf("compaction: %v %s", r.err, respText(r.resp))
	}
	r = run(context.Background(), h.p, simpleRequest())
	if r.err != nil || respText(r.resp) != "a normal answer" {
		t.Fatalf("normal round: %v %s", r.err, respText(r.resp))
	}
	if p1, p2 := h.srv.Request(1).Header.Get("X-Vigil-Purpose"), h.srv.Request(2).Header.Values("X-Vigil-Purpose"); p1 != "compact" || len(p2) != 0 {
		t.Errorf("X-Vigil-Purpose = %q, then %q", p1, p2)
	}
}

const (
	sseStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hel\"}}\n\n"
	sseEnd = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func memProvider(tr http.RoundTripper, stall time.Duration) *anthropic.Provider {
	return anthropic.New(anthropic.Options{
		BaseURL:    "http://fake.invalid",
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
		if got := provider.FailureOf(r.err); got != core.FailTransient {
			t.Errorf("FailureOf = %s", got)
		}
	})
}

func TestStallDetectionOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &providertest.MemTransport{Bodies: []func(context.Context) io.ReadCloser{providertest.Quiet(sseStart)}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		r := run(ctx, memProvider(tr, -1), simpleRequest())
		pe := providerError(t, r.err)
		if pe.Kind != provider.ErrCanceled || len(r.retry) != 0 {
			t.Errorf("error = %+v, retries %+v: with stall detection off only the caller's deadline ends the call", pe, r.retry)
		}
	})
}

func TestStallOnTheFakeServer(t *testing.T) {
	// Real sockets: the first attempt gets no headers, the second stops
	// halfway through the stream. Only the outcome is asserted.
	h := newHarness(t, func(o *anthropic.Options) {
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
