package script

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
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

const windowed = `
name: w
context_window: 200
agents:
  main:
    turns:
      - say: "one"
      - say: "two"
      - say: "three"
  small:
    context_window: 50
    turns:
      - say: "small one"
`

func TestContextWindow(t *testing.T) {
	sc, err := Parse([]byte(windowed))
	if err != nil {
		t.Fatal(err)
	}
	p := New(sc, nil)
	if w := p.ContextWindow("any-model"); w != 200 {
		t.Errorf("ContextWindow = %d, want the scenario's 200", w)
	}
	long := user(strings.Repeat("y", 400)) // about 100 tokens
	// Under main's window: answered, and the usage counts the whole prompt.
	req := &provider.Request{AgentName: "main", System: strings.Repeat("s", 40), Messages: []chat.Message{long}}
	resp, err := provider.Collect(p.Stream(context.Background(), req), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := chat.EstimateTokens(req.Messages) + 10; resp.Usage.InputTokens != want || resp.Usage.OutputTokens == 0 {
		t.Errorf("usage = %+v, want %d input tokens", resp.Usage, want)
	}
	// Over the small agent's own window: the Anthropic API's refusal.
	_, err = provider.Collect(p.Stream(context.Background(), &provider.Request{AgentName: "small", Messages: []chat.Message{long}}), nil)
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v, want a *provider.Error", err)
	}
	n := chat.EstimateTokens([]chat.Message{long})
	if want := fmt.Sprintf("prompt is too long: %d tokens > 50 maximum", n); pe.Kind != provider.ErrBadRequest || pe.Status != 400 || pe.Retryable || pe.Message != want {
		t.Errorf("error = %+v, want %q", pe, want)
	}
	if got := provider.FailureOf(err); got != core.FailContext {
		t.Errorf("FailureOf = %s, want %s", got, core.FailContext)
	}
	// Over main's window too, and the refusal used no turn.
	huge := user(strings.Repeat("z", 1000))
	if _, err := provider.Collect(p.Stream(context.Background(), &provider.Request{AgentName: "main", Messages: []chat.Message{huge}}), nil); provider.FailureOf(err) != core.FailContext {
		t.Errorf("main over its window: %v", err)
	}
	if got := answer(t, p, "main", user("short")).Content[0].Text; got != "one" {
		t.Errorf("after a refusal the first turn is %q, want one", got)
	}

	// Agents' windows are enforced, not reported.
	sc, _ = Parse([]byte("agents: {main: {context_window: 900, turns: [{say: x}]}}"))
	if w := New(sc, nil).ContextWindow(""); w != 0 {
		t.Errorf("ContextWindow with only an agent's window = %d, want 0", w)
	}
	for _, bad := range []string{"context_window: -1\nagents: {main: {}}", "agents: {main: {context_window: -5}}"} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("Parse(%q) = %v, want a negative window refused", bad, err)
		}
	}
}

func compactReq(agent string, msgs ...chat.Message) *provider.Request {
	msgs = append(msgs, user("Summarise the conversation so far."))
	return &provider.Request{AgentName: agent, Purpose: provider.PurposeCompact, Messages: msgs}
}

func TestCompaction(t *testing.T) {
	sc, err := Parse([]byte(windowed))
	if err != nil {
		t.Fatal(err)
	}
	p := New(sc, nil)
	one := chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("one\nwith a second line")}}
	two := chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("two")}}
	older := []chat.Message{user("build it"), one, user("and test it"), two}

	req := compactReq("main", older...)
	resp, err := provider.Collect(p.Stream(context.Background(), req), nil)
	if err != nil {
		t.Fatal(err)
	}
	summary := resp.Content[0].Text
	wantHead := "Summary of the earlier conversation (5 messages): user: build it / assistant: one / user: and test it / assistant: two / user: Summarise the conversation so far."
	if first, state, _ := strings.Cut(summary, "\n"); first != wantHead || state != `<script-state>{"used":{"":2},"last":""}</script-state>` {
		t.Errorf("summary =\n%s\nwant first line\n%s", summary, wantHead)
	}
	if resp.StopReason != chat.StopEndTurn || len(resp.Content) != 1 || resp.Usage.InputTokens != chat.EstimateTokens(req.Messages) || resp.Usage.OutputTokens == 0 {
		t.Errorf("response = %+v", resp)
	}
	again, _ := provider.Collect(p.Stream(context.Background(), compactReq("main", older...)), nil)
	if again.Content[0].Text != summary {
		t.Error("the summary is not deterministic")
	}
	// The compaction used no turn: the conversation goes on with turn 3.
	if got := answer(t, p, "main", append(older, user("ship it"))...).Content[0].Text; got != "three" {
		t.Errorf("after compaction the next turn is %q, want three", got)
	}
	// With the older turns replaced by the summary, the script keeps its
	// place: turn 3, not turn 1 again.
	compacted := []chat.Message{user(summary), user("ship it")}
	if got := answer(t, p, "main", compacted...).Content[0].Text; got != "three" {
		t.Errorf("after the summary replaced the older turns the next turn is %q, want three", got)
	}
	// A second compaction carries the place on.
	resp, _ = provider.Collect(p.Stream(context.Background(), compactReq("main", append(compacted, chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("three")}})...)), nil)
	if !strings.HasSuffix(resp.Content[0].Text, `<script-state>{"used":{"":3},"last":""}</script-state>`) {
		t.Errorf("second summary = %s", resp.Content[0].Text)
	}
	// The summary stays short however long the conversation.
	var many []chat.Message
	for range 200 {
		many = append(many, user(strings.Repeat("long line ", 30)), assistant())
	}
	unbounded, _ := Parse([]byte(scenario))
	resp, err = provider.Collect(New(unbounded, nil).Stream(context.Background(), &provider.Request{AgentName: "nobody", Purpose: provider.PurposeCompact, Messages: many}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Content[0].Text); n > 1300 {
		t.Errorf("summary of 400 messages is %d bytes", n)
	}
}

func TestCompactionHonoursTheWindow(t *testing.T) {
	sc, _ := Parse([]byte(windowed))
	_, err := provider.Collect(New(sc, nil).Stream(context.Background(), compactReq("small", user(strings.Repeat("q", 400)))), nil)
	if provider.FailureOf(err) != core.FailContext {
		t.Errorf("compaction over the window: %v", err)
	}
}

func TestCompactionKeepsTheReactiveList(t *testing.T) {
	sc, err := Parse([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	p := New(sc, nil)
	// The notification's turn called a tool; the summary is cut there, and
	// the tool's result must continue the notification list.
	older := []chat.Message{user("build"), assistant(), toolResult(), assistant(), user(note), assistant()}
	resp, err := provider.Collect(p.Stream(context.Background(), compactReq("main", older...)), nil)
	if err != nil {
		t.Fatal(err)
	}
	summary := resp.Content[0].Text
	if !strings.HasSuffix(summary, `<script-state>{"used":{"":2,"notification":1},"last":"notification"}</script-state>`) {
		t.Errorf("summary = %s", summary)
	}
	if got := answer(t, p, "main", user(summary), toolResult()).Content[0].Text; got != "after tools" {
		t.Errorf("tool result after the summary = %q, want the notification list's next turn", got)
	}
	// The place may also come in the system prompt.
	req := &provider.Request{AgentName: "main", System: "You are main.\n" + summary, Messages: []chat.Message{user("again")}}
	r, err := provider.Collect(p.Stream(context.Background(), req), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Content[0].Text; !strings.Contains(got, "no turn left") {
		t.Errorf("a new prompt after the summary in system = %q, want turns used up", got)
	}
}

// A turn whose call was cancelled before it answered is not used up: the
// conversation holds no answer of it, so the next call gets that turn.
func TestCancelledTurnIsNotUsedUp(t *testing.T) {
	sc, err := Parse([]byte("name: t\nagents:\n  main:\n    turns:\n      - say: one\n      - say: two\n      - say: three\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := New(sc, nil)
	// "b" was asked and its call cancelled; "c" follows with no answer
	// between them.
	if got := answer(t, p, "main", user("a"), assistant(), user("b"), user("c")).Content[0].Text; got != "two" {
		t.Fatalf("after a cancelled call: %q, want the cancelled turn, two", got)
	}
	if got := answer(t, p, "main", user("a"), assistant(), user("b"), assistant(), user("c")).Content[0].Text; got != "three" {
		t.Fatalf("after an answered call: %q", got)
	}
}
