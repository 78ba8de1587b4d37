package script

import (
	"context"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

const scenario = `
name: t
agents:
  main:
    turns:
      - say: "first {{.Input}}"
        tools:
          - Agent: {name: w1, prompt: "do {{.Input}}", run_in_background: true}
      - say: "second"
    on:
      notification:
        - say: "got {{.Notification.Agent}} {{.Notification.Status}} {{.Notification.Result}} {{.Notification.Task}} {{.Notification.Key}}"
          tools:
            - SendMessage: {to: "{{.Notification.Agent}}", message: "thanks"}
        - say: "after tools"
  "*":
    turns:
      - say: "worker {{.Agent}}"
`

func user(text string) chat.Message {
	return chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text(text)}}
}

func assistant() chat.Message {
	return chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("x")}}
}

func toolResult() chat.Message {
	return chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.ToolResult("u", "ok", false)}}
}

const note = "<task-notification>\n<task-id>t1</task-id>\n<agent>w1 (a1)</agent>\n<run>1</run>\n<key>t1#1</key>\n<status>completed</status>\n<result>42</result>\n</task-notification>"

func answer(t *testing.T, p *Provider, agent string, msgs ...chat.Message) *chat.Response {
	t.Helper()
	resp, err := provider.Collect(p.Stream(context.Background(), &provider.Request{CallID: "c1", AgentName: agent, Messages: msgs}), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestTurnsAndReactions(t *testing.T) {
	sc, err := Parse([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	p := New(sc, nil)
	r := answer(t, p, "main", user("build"))
	if got := r.Content[0].Text; got != "first build" {
		t.Errorf("turn 1 = %q", got)
	}
	if r.StopReason != chat.StopToolUse || r.Content[1].Name != "Agent" || !strings.Contains(string(r.Content[1].Input), `"do build"`) {
		t.Errorf("turn 1 tools = %+v", r.Content)
	}
	r = answer(t, p, "main", user("build"), assistant(), toolResult())
	if got := r.Content[0].Text; got != "second" {
		t.Errorf("turn 2 = %q", got)
	}
	// A notification selects the reactive list; its tool result continues it.
	r = answer(t, p, "main", user("build"), assistant(), toolResult(), assistant(), user(note))
	if got := r.Content[0].Text; got != "got w1 completed 42 t1 t1#1" {
		t.Errorf("notification turn = %q", got)
	}
	if !strings.Contains(string(r.Content[1].Input), `"to":"w1"`) {
		t.Errorf("templated tool input = %s", r.Content[1].Input)
	}
	r = answer(t, p, "main", user("build"), assistant(), toolResult(), assistant(), user(note), assistant(), toolResult())
	if got := r.Content[0].Text; got != "after tools" {
		t.Errorf("continuation of the reactive list = %q", got)
	}
	// Used up: turns end with a note.
	r = answer(t, p, "main", user("build"), assistant(), toolResult(), assistant(), user("again"))
	if got := r.Content[0].Text; !strings.Contains(got, "no turn left") {
		t.Errorf("exhausted = %q", got)
	}
	if got := answer(t, p, "w7", user("x")).Content[0].Text; got != "worker w7" {
		t.Errorf("default agent = %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{
		"agents: {}",
		"agents: {main: {turns: [{tools: [{A: {}, B: {}}]}]}}",
		"agents: {main: {on: {bogus: [{say: x}]}}}",
		"agents: {main: {turns: [{say: '{{.Nope'}]}}",
		"agents: {main: {turns: [{delay: forever}]}}",
		"agents: {main: {turns: [{sya: typo}]}}",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestDelayHonoursContext(t *testing.T) {
	sc, _ := Parse([]byte("agents: {main: {turns: [{delay: 1h, say: x}]}}"))
	p := New(sc, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := provider.Collect(p.Stream(ctx, &provider.Request{AgentName: "main", Messages: []chat.Message{user("x")}}), nil)
	if err == nil {
		t.Fatal("a cancelled delay answered")
	}
}
