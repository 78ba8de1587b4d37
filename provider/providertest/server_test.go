package providertest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

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
