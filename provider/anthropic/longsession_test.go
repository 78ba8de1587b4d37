package anthropic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/providertest"
)

// Prompt caching, which long sessions on real models need. Stall
// detection, context-window errors and the compaction purpose are in the
// conformance suite.

func TestPromptCacheMarksAndUsage(t *testing.T) {
	t.Parallel()
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
	r1 := providertest.Drain(context.Background(), h.p, req)
	if r1.Err != nil {
		t.Fatal(r1.Err)
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
	if u := r1.Response.Usage; u.CacheWriteTokens != whole1 || u.CacheReadTokens != 0 || u.InputTokens != 0 || u.OutputTokens == 0 {
		t.Errorf("round 1 usage = %+v, want %d tokens written", u, whole1)
	}

	// Round 2 repeats round 1 and appends to it: it reads what round 1
	// wrote, through the mark on the user message before the last.
	req.Messages = append(req.Messages,
		chat.Message{Role: chat.RoleAssistant, Content: r1.Response.Content},
		chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text("Now summarise them.")}})
	r2 := providertest.Drain(context.Background(), h.p, req)
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	got = h.srv.Request(2)
	want = []string{"tools[1]", "system[0]", "messages[0][0]", "messages[2][0]"}
	if marks := markNames(got.CacheMarks); marks != strings.Join(want, " ") {
		t.Errorf("round 2 marks = %s, want %v", marks, want)
	}
	whole2 := providertest.PromptTokens(got)
	u := r2.Response.Usage
	if u.CacheReadTokens != whole1 || u.CacheWriteTokens != whole2-whole1 || u.InputTokens != 0 {
		t.Errorf("round 2 usage = %+v, want %d read and %d written", u, whole1, whole2-whole1)
	}
	if total := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens; total != whole2 {
		t.Errorf("round 2 counts %d prompt tokens, the prompt has %d", total, whole2)
	}

	// A prompt without a system prompt or tools gets one mark.
	h.srv.Push(providertest.TextAnswer("third answer"))
	if r := providertest.Drain(context.Background(), h.p, simpleRequest()); r.Err != nil {
		t.Fatal(r.Err)
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
