package ccwire

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// feed maps bodies as consecutive events a millisecond apart and returns
// every frame, encoded.
func feed(t *testing.T, m *Mapper, bodies ...core.Body) []string {
	t.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []string
	for i, b := range bodies {
		for _, f := range m.Map(core.Event{Seq: int64(i + 1), At: at.Add(time.Duration(i) * time.Millisecond), Body: b}) {
			raw, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(raw))
		}
	}
	return out
}

func newTestMapper() *Mapper {
	n := 0
	return NewMapper("s1", "test-model", "/work", func() string { n++; return fmt.Sprintf("id%d", n) })
}

// decode reads a frame back.
func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func kinds(t *testing.T, frames []string) string {
	var ks []string
	for _, f := range frames {
		m := decode(t, f)
		k := fmt.Sprint(m["type"])
		if s, ok := m["subtype"]; ok {
			k += "/" + fmt.Sprint(s)
		}
		ks = append(ks, k)
	}
	return strings.Join(ks, " ")
}

func TestMapBackgroundAgentAndWake(t *testing.T) {
	m := newTestMapper()
	frames := feed(t, m,
		&core.RunStarted{Agent: core.MainAgent, Seq: 1, Kind: core.RunKind(core.KindPrompt)},
		&core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text("start it")}}},
		&core.ModelCallStarted{Agent: core.MainAgent, Call: "c1", Round: 1},
		&core.ModelCallEnded{Agent: core.MainAgent, Call: "c1", Outcome: "completed", StopReason: "tool_use", Usage: chat.Usage{InputTokens: 10, OutputTokens: 3}, Cost: 1500},
		&core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{{Type: chat.BlockToolUse, ID: "toolu_1", Name: "Agent", Input: json.RawMessage(`{"prompt":"SUB"}`)}}}},
		&core.AgentCreated{Agent: core.Agent{ID: "a1", Name: "helper", Description: "compute answer", Owner: core.MainAgent, Task: "t1"}},
		&core.TaskStarted{Task: core.Task{ID: "t1", Kind: core.TaskAgent, Owner: core.MainAgent, Agent: "a1", Description: "compute answer", Prompt: "SUB", Background: true}},
		&core.ToolCallStarted{Agent: core.MainAgent, Call: core.ToolCall{UseID: "toolu_1", Name: "Agent", Child: "a1"}},
		&core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.ToolResult("toolu_1", "started", false)}}},
		&core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("launched")}}},
		&core.RunEnded{Agent: core.MainAgent, Seq: 1, Status: core.RunCompleted, Reply: "launched"},
		&core.RunStarted{Agent: "a1", Seq: 1, Kind: core.RunKind(core.KindSpawn)},
		&core.TranscriptAppended{Agent: "a1", Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{chat.Text("42")}}},
		&core.RunEnded{Agent: "a1", Seq: 1, Status: core.RunCompleted, Reply: "42"},
		&core.NotificationWritten{Note: core.Note{Key: core.NoteKey{Task: "t1", Run: 1}, Owner: core.MainAgent, Agent: "a1", Kind: core.TaskAgent, Status: "completed", Reply: "42", OutputPath: "tasks/t1.output", Duration: 2 * time.Second}},
		&core.RunStarted{Agent: core.MainAgent, Seq: 2, Kind: core.RunKind(core.KindNotification)},
		&core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text("<task-notification>…")}}},
		&core.RunEnded{Agent: core.MainAgent, Seq: 2, Status: core.RunCompleted, Reply: "woke"},
		&core.RunStarted{Agent: core.MainAgent, Seq: 3, Kind: core.RunKind(core.KindPrompt)},
		&core.RunEnded{Agent: core.MainAgent, Seq: 3, Status: core.RunCancelled},
	)
	want := "system/init assistant system/background_tasks_changed system/task_started user assistant result/success " +
		"assistant system/task_updated system/task_notification system/background_tasks_changed " +
		"system/init result/success system/init user result/error_during_execution"
	if got := kinds(t, frames); got != want {
		t.Fatalf("frames\n  %s\nwant\n  %s", got, want)
	}
	started := decode(t, frames[3])
	if started["task_id"] != "t1" || started["tool_use_id"] != "toolu_1" || started["task_type"] != "local_agent" || started["prompt"] != "SUB" || started["run_id"] != "t1#1" {
		t.Errorf("task_started: %v", started)
	}
	if tasks := decode(t, frames[2])["tasks"].([]any); len(tasks) != 1 {
		t.Errorf("background tasks while the agent runs: %v", tasks)
	}
	first := decode(t, frames[6])
	if first["num_turns"] != 1.0 || first["result"] != "launched" || first["total_cost_usd"] != 0.0015 || first["result_index"] != 0.0 || first["stop_reason"] != "tool_use" {
		t.Errorf("first result: %v", first)
	}
	if u := first["usage"].(map[string]any); u["input_tokens"] != 10.0 || u["output_tokens"] != 3.0 {
		t.Errorf("usage: %v", u)
	}
	if _, ok := first["origin"]; ok {
		t.Errorf("a prompt's result has an origin: %v", first["origin"])
	}
	sub := decode(t, frames[7])
	if sub["parent_tool_use_id"] != "toolu_1" || sub["agent_id"] != "a1" || sub["task_description"] != "compute answer" {
		t.Errorf("subagent message: %v", sub)
	}
	note := decode(t, frames[9])
	if note["status"] != "completed" || note["summary"] != "42" || note["tool_use_id"] != "toolu_1" || note["output_file"] != "tasks/t1.output" {
		t.Errorf("task_notification: %v", note)
	}
	if tasks := decode(t, frames[10])["tasks"].([]any); len(tasks) != 0 {
		t.Errorf("background tasks after the notification: %v", tasks)
	}
	wake := decode(t, frames[12])
	if o, _ := wake["origin"].(map[string]any); o["kind"] != "task-notification" || wake["result_index"] != 1.0 {
		t.Errorf("wake result: %v", wake)
	}
	stopped := decode(t, frames[15])
	if stopped["is_error"] != true || stopped["terminal_reason"] != "aborted_streaming" || stopped["errors"] == nil {
		t.Errorf("interrupted result: %v", stopped)
	}
	if _, ok := stopped["result"]; ok {
		t.Errorf("an error result has a result field")
	}
	if !strings.Contains(frames[14], "[Request interrupted by user]") {
		t.Errorf("interrupt frame: %s", frames[14])
	}
}

// A background shell task can be recorded before its tool call: its
// task_started waits for the call and carries its id.
func TestMapShellTask(t *testing.T) {
	m := newTestMapper()
	code := 3
	frames := feed(t, m,
		&core.TaskStarted{Task: core.Task{ID: "t2", Kind: core.TaskShell, Owner: core.MainAgent, Description: "Sleep then print", Background: true}},
		&core.ToolCallStarted{Agent: core.MainAgent, Call: core.ToolCall{UseID: "toolu_b", Name: "Bash"}},
		&core.ToolCallFinished{Agent: core.MainAgent, UseID: "toolu_b", Result: "started"},
		&core.NotificationWritten{Note: core.Note{Key: core.NoteKey{Task: "t2"}, Owner: core.MainAgent, Kind: core.TaskShell, Status: "failed", ExitCode: &code}},
	)
	if got, want := kinds(t, frames), "system/background_tasks_changed system/task_started system/task_updated system/task_notification system/background_tasks_changed"; got != want {
		t.Fatalf("frames %s, want %s", got, want)
	}
	s := decode(t, frames[1])
	if s["tool_use_id"] != "toolu_b" || s["task_type"] != "local_bash" || s["run_id"] != "t2#exit" {
		t.Errorf("task_started: %v", s)
	}
	n := decode(t, frames[3])
	if n["summary"] != `Background command "Sleep then print" failed with exit code 3` || n["status"] != "failed" {
		t.Errorf("task_notification: %v", n)
	}
	if p := decode(t, frames[2])["patch"].(map[string]any); p["status"] != "failed" {
		t.Errorf("task_updated patch: %v", p)
	}
}

// A foreground task's notification and the session's own inputs print
// nothing, as in the CLI.
func TestMapQuiet(t *testing.T) {
	m := newTestMapper()
	frames := feed(t, m,
		&core.TaskStarted{Task: core.Task{ID: "t1", Kind: core.TaskAgent, Owner: core.MainAgent, Agent: "a1"}},
		&core.NotificationWritten{Note: core.Note{Key: core.NoteKey{Task: "t1", Run: 1}, Kind: core.TaskAgent, Status: "completed"}},
		&core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text("a prompt")}}},
	)
	if len(frames) != 0 {
		t.Fatalf("frames: %q", frames)
	}
}

// A background subagent's tool call prints task_progress with what it
// runs and its usage so far; its notification counts the tool calls.
func TestMapTaskProgress(t *testing.T) {
	m := newTestMapper()
	frames := feed(t, m,
		&core.AgentCreated{Agent: core.Agent{ID: "a1", Name: "helper", Description: "sub work", Owner: core.MainAgent, Task: "t1"}},
		&core.TaskStarted{Task: core.Task{ID: "t1", Kind: core.TaskAgent, Owner: core.MainAgent, Agent: "a1", Description: "sub work", Background: true}},
		&core.ToolCallStarted{Agent: core.MainAgent, Call: core.ToolCall{UseID: "toolu_1", Name: "Agent", Child: "a1"}},
		&core.RunStarted{Agent: "a1", Seq: 1, Kind: core.RunKind(core.KindSpawn)},
		&core.ModelCallEnded{Agent: "a1", Call: "c2", Outcome: "completed", Usage: chat.Usage{InputTokens: 100, OutputTokens: 7}},
		&core.ToolCallStarted{Agent: "a1", Call: core.ToolCall{UseID: "toolu_2", Name: "Bash", Input: json.RawMessage(`{"command":"sleep 4","description":"Sub sleeps"}`)}},
		&core.ToolCallStarted{Agent: "a1", Call: core.ToolCall{UseID: "toolu_3", Name: "Read", Input: json.RawMessage(`{"file_path":"x"}`)}},
		&core.NotificationWritten{Note: core.Note{Key: core.NoteKey{Task: "t1", Run: 1}, Owner: core.MainAgent, Agent: "a1", Kind: core.TaskAgent, Status: "completed", Reply: "done"}},
		// The main agent's tool calls print no progress.
		&core.ToolCallStarted{Agent: core.MainAgent, Call: core.ToolCall{UseID: "toolu_4", Name: "Read"}},
	)
	want := "system/background_tasks_changed system/task_started system/task_progress system/task_progress " +
		"system/task_updated system/task_notification system/background_tasks_changed"
	if got := kinds(t, frames); got != want {
		t.Fatalf("frames\n  %s\nwant\n  %s", got, want)
	}
	p := decode(t, frames[2])
	u := p["usage"].(map[string]any)
	if p["task_id"] != "t1" || p["tool_use_id"] != "toolu_1" || p["description"] != "Running Sub sleeps" || p["last_tool_name"] != "Bash" ||
		p["run_id"] != "t1#1" || u["total_tokens"] != 107.0 || u["tool_uses"] != 1.0 || u["duration_ms"] != 2.0 {
		t.Errorf("task_progress: %v", p)
	}
	if p := decode(t, frames[3]); p["description"] != "Running Read" || p["usage"].(map[string]any)["tool_uses"] != 2.0 {
		t.Errorf("second task_progress: %v", p)
	}
	if u := decode(t, frames[5])["usage"].(map[string]any); u["tool_uses"] != 2.0 {
		t.Errorf("task_notification usage: %v", u)
	}
}

// With Partial, the main agent's live text is stream_event frames as it
// comes; the committed message completes the stream: the text a slow
// reader missed, the tool uses, the stops.
func TestMapPartialMessages(t *testing.T) {
	m := newTestMapper()
	m.Partial = true
	var out []string
	add := func(fs []Frame) {
		for _, f := range fs {
			raw, _ := json.Marshal(f)
			out = append(out, string(raw))
		}
	}
	add(m.Live(LiveText{Agent: "a1", Call: "c9", Text: "a subagent's text is not streamed"}))
	add(m.Live(LiveText{Agent: core.MainAgent, Call: "c1", Text: "Hello th"}))
	add(m.Live(LiveText{Agent: core.MainAgent, Call: "c1", Text: "ere"}))
	add(m.Map(core.Event{Seq: 1, Body: &core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{
		chat.Text("Hello there, friend."), {Type: chat.BlockToolUse, ID: "toolu_1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)},
	}}}}))
	// A message with nothing streamed (tool use only) is streamed whole.
	add(m.Map(core.Event{Seq: 2, Body: &core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{
		{Type: chat.BlockToolUse, ID: "toolu_2", Name: "Read", Input: json.RawMessage(`{"file_path":"x"}`)},
	}}}}))
	var got []string
	for _, f := range out {
		d := decode(t, f)
		if d["type"] != "stream_event" {
			got = append(got, fmt.Sprint(d["type"]))
			continue
		}
		ev := d["event"].(map[string]any)
		s := fmt.Sprint(ev["type"])
		if i, ok := ev["index"]; ok {
			s += fmt.Sprint(i)
		}
		if dl, ok := ev["delta"].(map[string]any); ok {
			s += fmt.Sprintf("(%v%v%v)", dl["text"], dl["partial_json"], dl["stop_reason"])
		}
		got = append(got, s)
	}
	want := []string{
		"message_start", "content_block_start0", "content_block_delta0(Hello th<nil><nil>)", "content_block_delta0(ere<nil><nil>)",
		"content_block_delta0(, friend.<nil><nil>)", "assistant", "content_block_stop0",
		`content_block_start1`, `content_block_delta1(<nil>{"command":"ls"}<nil>)`, "assistant", "content_block_stop1",
		"message_delta(<nil><nil>tool_use)", "message_stop",
		"message_start", "content_block_start0", `content_block_delta0(<nil>{"file_path":"x"}<nil>)`, "assistant", "content_block_stop0",
		"message_delta(<nil><nil>tool_use)", "message_stop",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("frames\n  %s\nwant\n  %s", strings.Join(got, " "), strings.Join(want, " "))
	}
	// The stream's frames and the message carry one message id.
	start := decode(t, out[0])
	msg := decode(t, out[5])["message"].(map[string]any)
	if tool := decode(t, out[9])["message"].(map[string]any); tool["id"] != msg["id"] || len(tool["content"].([]any)) != 1 {
		t.Errorf("the tool use's message %v, want one block of message %v", tool, msg["id"])
	}
	if start["api_message_id"] != msg["id"] || start["event"].(map[string]any)["message"].(map[string]any)["id"] != msg["id"] || start["parent_tool_use_id"] != nil {
		t.Errorf("message_start %v, assistant message id %v", start, msg["id"])
	}
	// Without Partial nothing is streamed.
	m2 := newTestMapper()
	if fs := m2.Live(LiveText{Agent: core.MainAgent, Call: "c1", Text: "x"}); fs != nil {
		t.Fatalf("frames without Partial: %v", fs)
	}
}

// An assistant message of several blocks is one message per block, with
// one message id, as the CLI prints it.
func TestMapMessagePerBlock(t *testing.T) {
	frames := feed(t, newTestMapper(), &core.TranscriptAppended{Agent: core.MainAgent, Message: chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{
		chat.Text("first"), {Type: chat.BlockToolUse, ID: "toolu_1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)},
	}}})
	if len(frames) != 2 {
		t.Fatalf("frames %q", frames)
	}
	a, b := decode(t, frames[0])["message"].(map[string]any), decode(t, frames[1])["message"].(map[string]any)
	if a["id"] != b["id"] || len(a["content"].([]any)) != 1 || len(b["content"].([]any)) != 1 || b["content"].([]any)[0].(map[string]any)["name"] != "Bash" {
		t.Fatalf("messages %v and %v", a, b)
	}
}

// A run its prompt's round bound ended is the CLI's error_max_turns
// result, in the CLI's words and count.
func TestMapMaxTurns(t *testing.T) {
	m := newTestMapper()
	m.MaxTurns = 2
	frames := feed(t, m,
		&core.RunStarted{Agent: core.MainAgent, Seq: 1, Kind: core.RunKind(core.KindPrompt), MaxRounds: 2},
		&core.ModelCallEnded{Agent: core.MainAgent, Call: "c1", Outcome: "completed", StopReason: "tool_use"},
		&core.ModelCallEnded{Agent: core.MainAgent, Call: "c2", Outcome: "completed", StopReason: "tool_use"},
		&core.RunEnded{Agent: core.MainAgent, Seq: 1, Status: core.RunRoundLimit, Error: "reached the most model rounds its prompt allows (2)"},
	)
	r := decode(t, frames[len(frames)-1])
	if r["subtype"] != "error_max_turns" || r["is_error"] != true || r["terminal_reason"] != "max_turns" || r["num_turns"] != 3.0 ||
		fmt.Sprint(r["errors"]) != "[Reached maximum number of turns (2)]" || r["stop_reason"] != "tool_use" {
		t.Fatalf("result %v", r)
	}
	if _, ok := r["result"]; ok {
		t.Fatalf("an error result has a result field: %v", r)
	}
}
