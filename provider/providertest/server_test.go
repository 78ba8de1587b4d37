package providertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

func post(t *testing.T, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func userBody(text string, stream bool) string {
	return fmt.Sprintf(`{"model":"m","max_tokens":10,"stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, text)
}

func TestRulesAnswerInOrder(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	srv.On(providertest.LastUserContains("weather"), providertest.TextAnswer("sunny"))
	srv.On(providertest.Nth(2), providertest.TextAnswer("second"))
	srv.Push(providertest.TextAnswer("any 1"), providertest.TextAnswer("any 2"))

	url := srv.URL + "/v1/messages?beta=true"
	var got []string
	for _, q := range []string{"hello", "hello", "what's the weather", "hello"} {
		_, body := post(t, url, userBody(q, false))
		var m struct {
			Content []struct{ Text string } `json:"content"`
		}
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err, body)
		}
		got = append(got, m.Content[0].Text)
	}
	want := []string{"any 1", "second", "sunny", "any 2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answers = %v, want %v", got, want)
	}
	if srv.Pending() != 0 || len(srv.Requests()) != 4 || srv.Request(3).LastUserText() != "what's the weather" {
		t.Errorf("pending %d, requests %d", srv.Pending(), len(srv.Requests()))
	}
}

func TestParseAnthropicCLIShapes(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	srv.Push(providertest.TextAnswer("ok"))
	body := `{"model":"claude-x","max_tokens":32000,"stream":true,
		"system":[{"type":"text","text":"You are Claude Code."},{"type":"text","text":"Be brief."}],
		"tools":[{"name":"Bash","description":"run","input_schema":{"type":"object"}}],
		"messages":[
			{"role":"user","content":"do it"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a.go"}]},{"type":"text","text":"<task-notification>done</task-notification>"}]}
		]}`
	status, resp := post(t, srv.URL+"/v1/messages?beta=true", body, "X-Claude-Code-Session-Id", "s1")
	if status != 200 || !strings.Contains(resp, "event: message_stop") {
		t.Fatalf("status %d: %s", status, resp)
	}
	r := srv.Request(1)
	if r.Model != "claude-x" || r.MaxTokens != 32000 || !r.Stream || r.System != "You are Claude Code.\nBe brief." ||
		len(r.Tools) != 1 || r.Tools[0].Name != "Bash" || r.Query != "beta=true" || r.Header.Get("X-Claude-Code-Session-Id") != "s1" {
		t.Errorf("request = %+v", r)
	}
	if len(r.Messages) != 3 || r.Messages[1].Content[1].ID != "t1" || string(r.Messages[1].Content[1].Input) != `{"command":"ls"}` {
		t.Errorf("messages = %+v", r.Messages)
	}
	if got := r.LastUserText(); got != "a.go\n<task-notification>done</task-notification>" {
		t.Errorf("last user text = %q", got)
	}
	if !providertest.HeaderContains("X-Claude-Code-Session-Id", "s1")(r) {
		t.Error("HeaderContains did not match")
	}
}

func TestCountTokensIsNotScripted(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	status, body := post(t, srv.URL+"/v1/messages/count_tokens", userBody("hi", false))
	if status != 200 || !strings.Contains(body, "input_tokens") || len(srv.Requests()) != 0 {
		t.Errorf("status %d body %s", status, body)
	}
}

func TestParseOpenAI(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	srv.Push(providertest.Answer(chat.Text("ok"), providertest.ToolUse("", "f", `{"a":1}`)))
	body := `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,
		"messages":[
			{"role":"system","content":"sys"},
			{"role":"user","content":[{"type":"text","text":"hi"}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"result"},
			{"role":"user","content":"more"}
		]}`
	status, resp := post(t, srv.BaseURL()+"/chat/completions", body)
	if status != 200 || !strings.HasSuffix(resp, "data: [DONE]\n\n") || !strings.Contains(resp, `"usage"`) ||
		!strings.Contains(resp, `"id":"call_fake_1_1"`) {
		t.Fatalf("status %d: %s", status, resp)
	}
	r := srv.Request(1)
	if r.System != "sys" || r.MaxTokens != 5 || !r.IncludeUsage || len(r.Messages) != 3 {
		t.Fatalf("request = %+v", r)
	}
	last := r.Messages[2]
	if last.Role != chat.RoleUser || last.Content[0].Type != chat.BlockToolResult || last.Content[0].ToolUseID != "c1" || r.LastUserText() != "result\nmore" {
		t.Errorf("last = %+v", last)
	}
}

func TestErrorReplies(t *testing.T) {
	a := providertest.NewAnthropic(t)
	a.Push(providertest.Overloaded("3"))
	status, body := post(t, a.URL+"/v1/messages", userBody("x", true))
	if status != 529 || body != `{"error":{"message":"Overloaded","type":"overloaded_error"},"request_id":"req_fake","type":"error"}` {
		t.Errorf("anthropic: %d %s", status, body)
	}
	o := providertest.NewOpenAI(t)
	o.Push(providertest.Reply{Status: 400, Error: &providertest.APIError{Type: "invalid_request_error", Message: "bad", Code: "c"}})
	status, body = post(t, o.BaseURL()+"/chat/completions", userBody("x", true))
	if status != 400 || body != `{"error":{"code":"c","message":"bad","param":null,"type":"invalid_request_error"}}` {
		t.Errorf("openai: %d %s", status, body)
	}
}

// recorder is a testing.TB that keeps failures and cleanups to itself.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	cleanups []func()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func TestUnansweredRequestFailsTheTest(t *testing.T) {
	rec := &recorder{TB: t}
	srv := providertest.NewAnthropic(rec)
	status, _ := post(t, srv.URL+"/v1/messages", userBody("nobody answers", true))
	for i := len(rec.cleanups) - 1; i >= 0; i-- {
		rec.cleanups[i]()
	}
	if status != 400 || len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "nobody answers") {
		t.Errorf("status %d, errors %q", status, rec.errors)
	}
	srv.Close() // twice is fine
}

func TestFallback(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		return providertest.TextAnswer("echo: " + r.LastUserText()), true
	})
	_, body := post(t, srv.BaseURL()+"/chat/completions", userBody("ping", false))
	if !strings.Contains(body, `"content":"echo: ping"`) {
		t.Errorf("body = %s", body)
	}
}

func TestContextWindow(t *testing.T) {
	big := strings.Repeat("word ", 400) // 2000 bytes
	for _, tc := range []struct {
		name string
		srv  *providertest.Server
		url  func(*providertest.Server) string
		want string
	}{
		{"anthropic", providertest.NewAnthropic(t), func(s *providertest.Server) string { return s.URL + "/v1/messages" },
			`{"error":{"message":"prompt is too long: %d tokens > 100 maximum","type":"invalid_request_error"},"request_id":"req_fake","type":"error"}`},
		{"openai", providertest.NewOpenAI(t), func(s *providertest.Server) string { return s.BaseURL() + "/chat/completions" },
			`{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 100 tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.","param":"messages","type":"invalid_request_error"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.srv
			srv.SetContextWindow(100)
			srv.On(providertest.Nth(2), providertest.TextAnswer("second"))
			status, body := post(t, tc.url(srv), userBody(big, false))
			r := srv.Request(1)
			if want := fmt.Sprintf(tc.want, r.Tokens); status != 400 || body != want {
				t.Errorf("over the window: %d %s\nwant 400 %s", status, body, want)
			}
			if r.Tokens != providertest.PromptTokens(r) || r.Tokens <= 100 || !r.OverWindow {
				t.Errorf("request 1: tokens %d, over window %v", r.Tokens, r.OverWindow)
			}
			// The refused request is numbered and recorded; it used no reply.
			status, body = post(t, tc.url(srv), userBody("small", false))
			if status != 200 || !strings.Contains(body, "second") || len(srv.Requests()) != 2 || srv.Request(2).OverWindow {
				t.Errorf("under the window: %d %s", status, body)
			}
			srv.SetContextWindow(0)
			srv.Push(providertest.TextAnswer("no window"))
			if status, _ := post(t, tc.url(srv), userBody(big, false)); status != 200 {
				t.Errorf("without a window: %d", status)
			}
		})
	}
}

func TestPromptTokens(t *testing.T) {
	r := &providertest.Request{
		System:   strings.Repeat("s", 400),
		Tools:    []chat.ToolSpec{{Name: "t", InputSchema: json.RawMessage(`{}`)}},
		Messages: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text(strings.Repeat("m", 80))}}},
	}
	tools, _ := json.Marshal(r.Tools)
	want := chat.EstimateTokens(r.Messages) + 100 + int64(len(tools)/4)
	if got := providertest.PromptTokens(r); got != want {
		t.Errorf("PromptTokens = %d, want %d", got, want)
	}
	srv := providertest.NewAnthropic(t)
	_, body := post(t, srv.URL+"/v1/messages/count_tokens", userBody("hello there", false))
	if want := fmt.Sprintf(`{"input_tokens":%d}`, chat.EstimateTokens([]chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text("hello there")}}})); body != want {
		t.Errorf("count_tokens = %s, want %s", body, want)
	}
}

// usageOf reads the usage of a non-streamed Anthropic answer.
func usageOf(t *testing.T, body string) chat.Usage {
	t.Helper()
	var m struct {
		Usage struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
			Read   int64 `json:"cache_read_input_tokens"`
			Write  int64 `json:"cache_creation_input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err, body)
	}
	return chat.Usage{InputTokens: m.Usage.Input, OutputTokens: m.Usage.Output, CacheReadTokens: m.Usage.Read, CacheWriteTokens: m.Usage.Write}
}

func TestPromptCache(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	srv.Fallback(func(*providertest.Request) (providertest.Reply, bool) { return providertest.TextAnswer("ok"), true })
	url := srv.URL + "/v1/messages"
	const cc = `"cache_control":{"type":"ephemeral"}`
	sys := `[{"type":"text","text":"` + strings.Repeat("system ", 60) + `",` + cc + `}]`
	body := func(model, sys, msgs string) string {
		return `{"model":"` + model + `","max_tokens":10,"system":` + sys + `,"messages":[` + msgs + `]}`
	}
	u1 := `{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("question ", 40) + `",` + cc + `}]}`
	a1 := `{"role":"assistant","content":[{"type":"text","text":"answer"}]}`
	u2 := `{"role":"user","content":[{"type":"text","text":"more"},{"type":"text","text":"and more",` + cc + `}]}`

	// First request: both marked prefixes are written, nothing is read.
	_, resp := post(t, url, body("m", sys, u1))
	r1 := srv.Request(1)
	if len(r1.CacheMarks) != 2 || r1.CacheMarks[0].Part != "system" || r1.CacheMarks[1].Part != "messages" ||
		r1.CacheMarks[1].Tokens != r1.Tokens || r1.CacheMarks[0].Tokens != 420/4 {
		t.Fatalf("marks = %+v (prompt %d tokens)", r1.CacheMarks, r1.Tokens)
	}
	if u := usageOf(t, resp); u.CacheWriteTokens != r1.Tokens || u.CacheReadTokens != 0 || u.InputTokens != 0 || u.OutputTokens == 0 {
		t.Errorf("request 1 usage = %+v, want %d written", u, r1.Tokens)
	}

	// The same prompt again, its last mark moved off the user message: the
	// system prefix is read, the rest is uncached input.
	plain := strings.Replace(u1, ","+cc, "", 1)
	_, resp = post(t, url, body("m", sys, plain))
	r2 := srv.Request(2)
	if u := usageOf(t, resp); u.CacheReadTokens != 105 || u.CacheWriteTokens != 0 || u.InputTokens != r2.Tokens-105 {
		t.Errorf("request 2 usage = %+v, want 105 read and %d input", u, r2.Tokens-105)
	}

	// The conversation goes on, marked at its end and where request 1
	// ended: request 1's whole prompt is read, the new part written.
	_, resp = post(t, url, body("m", sys, u1+","+a1+","+u2))
	r3 := srv.Request(3)
	if m := r3.CacheMarks[len(r3.CacheMarks)-1]; m.Index != 2 || m.Block != 1 || m.Tokens != r3.Tokens {
		t.Errorf("last mark = %+v", m)
	}
	if u := usageOf(t, resp); u.CacheReadTokens != r1.Tokens || u.CacheWriteTokens != r3.Tokens-r1.Tokens || u.InputTokens != 0 {
		t.Errorf("request 3 usage = %+v, want %d read, %d written", u, r1.Tokens, r3.Tokens-r1.Tokens)
	}

	// Another model has its own cache.
	_, resp = post(t, url, body("other", sys, u1))
	if u := usageOf(t, resp); u.CacheReadTokens != 0 || u.CacheWriteTokens != r1.Tokens {
		t.Errorf("other model's usage = %+v, want a miss", u)
	}

	// A reply that scripts its usage reports it; the cache still fills.
	srv.Push(providertest.Reply{Blocks: []chat.Block{chat.Text("x")}, Usage: chat.Usage{InputTokens: 1, OutputTokens: 2}})
	u9 := strings.Replace(u1, "question", "other question", 1)
	_, resp = post(t, url, body("m", sys, u9))
	if u := usageOf(t, resp); u != (chat.Usage{InputTokens: 1, OutputTokens: 2}) {
		t.Errorf("scripted usage = %+v", u)
	}
	_, resp = post(t, url, body("m", sys, u9))
	if u, n := usageOf(t, resp), srv.Request(6).Tokens; u.CacheReadTokens != n || u.CacheWriteTokens != 0 {
		t.Errorf("after a scripted reply, usage = %+v, want %d read", u, n)
	}
}

func TestPurposeIs(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	srv.On(providertest.PurposeIs("compact"), providertest.TextAnswer("summary"))
	srv.On(providertest.PurposeIs(""), providertest.TextAnswer("normal"))
	_, body := post(t, srv.BaseURL()+"/chat/completions", userBody("x", false))
	_, body2 := post(t, srv.BaseURL()+"/chat/completions", userBody("x", false), "X-Vigil-Purpose", "compact")
	if !strings.Contains(body, `"normal"`) || !strings.Contains(body2, `"summary"`) || srv.Request(2).Purpose != "compact" {
		t.Errorf("answers %s / %s", body, body2)
	}
}

func TestInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{TB: t}
		srv := providertest.NewInMemory(rec, providertest.WireAnthropic)
		c := srv.Client()
		do := func(ctx context.Context, stream bool) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.BaseURL()+"/v1/messages", strings.NewReader(userBody("x", stream)))
			return c.Do(req)
		}
		// A whole answer, after its Delay in the bubble's time.
		srv.Push(providertest.Reply{Blocks: []chat.Block{chat.Text("hi")}, Delay: time.Minute})
		start := time.Now()
		res, err := do(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || !strings.Contains(string(body), "message_stop") || time.Since(start) != time.Minute {
			t.Errorf("answer after %s: %v %s", time.Since(start), err, body)
		}
		// A connection dropped mid-stream, and before the headers.
		srv.Push(providertest.Reply{Blocks: []chat.Block{chat.Text("hi")}, Abort: true}, providertest.Reply{Abort: true})
		res, err = do(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(res.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("read of a dropped stream: %v", err)
		}
		res.Body.Close()
		if _, err := do(context.Background(), false); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("request dropped before its headers: %v", err)
		}
		// A deadline ends a request whose headers never come, and its
		// handler: the bubble would not end otherwise.
		srv.Push(providertest.Reply{Hold: make(chan struct{})})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := do(ctx, true); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("held request: %v", err)
		}
		// A body left open fails the test.
		srv.Push(providertest.TextAnswer("never read"))
		if _, err := do(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		for i := len(rec.cleanups) - 1; i >= 0; i-- {
			rec.cleanups[i]()
		}
		if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "never closed") {
			t.Errorf("errors %q, want one for the body left open", rec.errors)
		}
	})
}
