package claudecode

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// feedLines maps output lines as a process does (control frames aside).
func feedLines(t *testing.T, lines [][]byte) ([]core.Input, *counters) {
	t.Helper()
	var c counters
	m := newMapper(core.MainAgent, slog.New(slog.DiscardHandler), &c)
	var out []core.Input
	for _, l := range lines {
		h, err := decodeHeader(l)
		if err != nil {
			if err != errEmptyLine {
				c.malformed.Add(1)
			}
			continue
		}
		if strings.HasPrefix(h.Type, "control_") {
			continue
		}
		out = append(out, m.feed(h, l)...)
	}
	return append(out, m.finish()...), &c
}

func readTestdata(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	return lines
}

// describe renders an input in one short line.
func describe(in core.Input) string {
	switch in := in.(type) {
	case core.ExternalTurnStarted:
		return "turn-started"
	case core.ExternalTurnEnded:
		return fmt.Sprintf("turn-ended n=%d err=%v wake=%v %q", in.NumTurns, in.IsError, in.Wake, trim(in.Result))
	case core.ExternalMessage:
		who := "main"
		if in.Mirror != "" {
			who = "mirror"
		}
		var parts []string
		for _, b := range in.Message.Content {
			switch b.Type {
			case chat.BlockText:
				parts = append(parts, "text:"+trim(b.Text))
			case chat.BlockToolUse:
				parts = append(parts, "tool_use:"+b.Name)
			case chat.BlockToolResult:
				parts = append(parts, "tool_result:"+trim(b.Content))
			}
		}
		return fmt.Sprintf("msg %s %s %s", who, in.Message.Role, strings.Join(parts, ","))
	case core.ExternalTask:
		return fmt.Sprintf("task %s %s notify=%v %q", in.Kind, in.Status, in.Notify, trim(in.Summary))
	}
	return fmt.Sprintf("%T", in)
}

func trim(s string) string {
	if len(s) > 24 {
		return s[:24]
	}
	return s
}

func feedStrings(t *testing.T, lines ...string) ([]core.Input, *counters) {
	t.Helper()
	var bs [][]byte
	for _, l := range lines {
		bs = append(bs, []byte(l))
	}
	return feedLines(t, bs)
}

func describeAll(ins []core.Input) []string {
	var out []string
	for _, in := range ins {
		out = append(out, describe(in))
	}
	return out
}

func checkSeq(t *testing.T, ins []core.Input, want ...string) {
	t.Helper()
	got := describeAll(ins)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("inputs:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func tasksOf(ins []core.Input) []core.ExternalTask {
	var out []core.ExternalTask
	for _, in := range ins {
		if x, ok := in.(core.ExternalTask); ok {
			out = append(out, x)
		}
	}
	return out
}

// A plain turn recorded from the real CLI.
func TestMapPlainTurn(t *testing.T) {
	ins, c := feedLines(t, readTestdata(t, "plain.jsonl"))
	checkSeq(t, ins, "turn-started", "msg main assistant text:hello from fake", `turn-ended n=1 err=false wake=false "hello from fake"`)
	if s := ins[0].(core.ExternalTurnStarted).Session; s != "f28a0a46-a780-4310-b981-1a04ec7d7e21" {
		t.Fatalf("session %q", s)
	}
	if c.malformed.Load()+c.undecodable.Load()+c.unknownFrames.Load() != 0 {
		t.Fatalf("counters: %+v", c)
	}
}

// A background agent (whose foreground Bash ran over 3 s), then a failing
// background command, recorded from the real CLI.
func TestMapBackgroundWork(t *testing.T) {
	ins, c := feedLines(t, readTestdata(t, "wakes.jsonl"))
	const agent, fg = "a3851caec5228b8d3", "by8epigwz"
	for _, x := range tasksOf(ins) {
		if x.ID == fg {
			t.Fatalf("the subagent's foreground command was mirrored: %+v", x)
		}
	}
	if n := c.filteredTasks.Load(); n != 2 {
		t.Fatalf("filtered %d frames, want 2 (start and notification)", n)
	}
	var started, notified *core.ExternalTask
	for _, x := range tasksOf(ins) {
		if x.ID == agent && x.Status == "running" {
			started = &x
		}
		if x.ID == agent && x.Notify {
			notified = &x
		}
	}
	if started == nil || started.Kind != core.TaskAgent || started.Prompt != "SUBTASK: compute" || !strings.HasSuffix(started.OutputPath, "/tasks/"+agent+".output") {
		t.Fatalf("agent start: %+v", started)
	}
	if notified == nil || notified.Status != "completed" || notified.Summary != "SUBAGENT-RESULT: 42" || notified.Usage.InputTokens != 19 || !strings.HasSuffix(notified.OutputPath, agent+".output") {
		t.Fatalf("agent notification: %+v", notified)
	}
	mirrored := 0
	for _, in := range ins {
		if m, ok := in.(core.ExternalMessage); ok && m.Mirror != "" {
			if m.Mirror != agent {
				t.Fatalf("mirror %q", m.Mirror)
			}
			mirrored++
		}
	}
	if mirrored != 3 {
		t.Fatalf("%d subagent messages, want 3", mirrored)
	}
	var bash *core.ExternalTask
	for _, x := range tasksOf(ins) {
		if x.Kind == core.TaskShell && x.Notify && x.Status == "failed" {
			bash = &x
		}
	}
	if bash == nil || !strings.Contains(bash.Summary, "failed with exit code 3") {
		t.Fatalf("failed command's notification: %+v", bash)
	}
	checkTurns(t, ins)
}

// checkTurns checks turns nest: every end has a start, wake turns are
// flagged.
func checkTurns(t *testing.T, ins []core.Input) {
	t.Helper()
	open := false
	for i, in := range ins {
		switch in.(type) {
		case core.ExternalTurnStarted:
			if open {
				t.Fatalf("input %d: a turn started inside a turn", i)
			}
			open = true
		case core.ExternalTurnEnded:
			if !open {
				t.Fatalf("input %d: a turn ended that did not start", i)
			}
			open = false
		}
	}
}

// The 002 sequence as the real CLI printed it: two notifications, an init
// and an empty num_turns:0 result, then the wake turn that answers both.
// The empty turn is passed over; the wake is one turn.
func TestMapEmptyTurnBeforeWake(t *testing.T) {
	ins, c := feedLines(t, readTestdata(t, "two_bash_empty_result.jsonl"))
	if c.emptyTurns.Load() != 1 {
		t.Fatalf("empty turns %d", c.emptyTurns.Load())
	}
	checkTurns(t, ins)
	got := describeAll(ins)
	tail := got[len(got)-7:]
	want := []string{
		`task shell completed notify=false ""`, `task shell completed notify=true "Background command \"firs"`,
		`task shell completed notify=false ""`, `task shell completed notify=true "Background command \"seco"`,
		"turn-started", "msg main assistant text:MAIN: woke", `turn-ended n=1 err=false wake=true "MAIN: woke"`,
	}
	if strings.Join(tail, "\n") != strings.Join(want, "\n") {
		t.Fatalf("tail:\n  %s", strings.Join(tail, "\n  "))
	}
	// A result with num_turns:0 whose init was already passed on still
	// ends the turn (the core drops it when no run is open).
	ins, _ = feedStrings(t,
		`{"type":"system","subtype":"init","session_id":"s"}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"x"}]},"parent_tool_use_id":null}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":0,"result":""}`)
	checkSeq(t, ins, "turn-started", "msg main assistant text:x", `turn-ended n=0 err=false wake=false ""`)
}

// After --resume, the CLI reports the tasks the killed process left, as
// stopped, then runs an empty turn; vigil ended those tasks lost when the
// process exited, so both are passed over.
func TestMapResumedAfterKill(t *testing.T) {
	ins, c := feedLines(t, readTestdata(t, "resumed_after_kill.jsonl"))
	checkSeq(t, ins, "turn-started", "msg main assistant text:main ok", `turn-ended n=1 err=false wake=false "main ok"`)
	if c.emptyTurns.Load() != 1 || c.staleTasks.Load() != 1 {
		t.Fatalf("empty turns %d, stale tasks %d", c.emptyTurns.Load(), c.staleTasks.Load())
	}
}

// An interrupted turn ends with an error result; a stopped command is
// reported killed, then stopped.
func TestMapInterruptAndStop(t *testing.T) {
	ins, _ := feedLines(t, readTestdata(t, "interrupt_stop_task.jsonl"))
	end := ins[2].(core.ExternalTurnEnded)
	if !end.IsError || !strings.Contains(end.Result, "aborted_streaming") {
		t.Fatalf("interrupted turn: %+v", end)
	}
	got := describeAll(ins)
	if got[len(got)-2] != `task shell killed notify=false ""` || got[len(got)-1] != `task shell stopped notify=true "long sleep"` {
		t.Fatalf("stop: %q", got[len(got)-2:])
	}
}

// The frames quoted in claude-code-observed.md, scenario a (stream-json),
// b (exit code 3), the empty result of f_two and a subagent's foreground
// command.
func TestMapObservedDocFrames(t *testing.T) {
	ins, c := feedStrings(t,
		`{"type":"system","subtype":"init","session_id":"f4c876a3"}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_fake_THKN","name":"Agent","input":{"description":"compute answer","prompt":"SUBTASK: compute the answer","subagent_type":"general-purpose","run_in_background":true}}]},"parent_tool_use_id":null}`,
		`{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"a249d3eb40c144d56","run_id":"0mx27qo0f-5266d651","task_type":"local_agent","subagent_type":"general-purpose","description":"compute answer"}]}`,
		`{"type":"system","subtype":"task_started","task_id":"a249d3eb40c144d56","run_id":"0mx27qo0f-5266d651","tool_use_id":"toolu_fake_THKN","description":"compute answer","subagent_type":"general-purpose","is_backgrounded":true,"spawn_depth":1,"task_type":"local_agent","prompt":"SUBTASK: compute the answer"}`,
		`{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_fake_THKN","type":"tool_result","content":[{"type":"text","text":"Async agent launched successfully.\nagentId: a249d3eb40c144d56\noutput_file: /tmp/claude-0/-w/f4c876a3/tasks/a249d3eb40c144d56.output\n"}]}]},"parent_tool_use_id":null,"tool_use_result":{"isAsync":true,"status":"async_launched","agentId":"a249d3eb40c144d56","canContinueAgent":true}}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"MAIN: agent launched, ending turn."}]},"parent_tool_use_id":null}`,
		`{"type":"result","subtype":"success","num_turns":2,"result":"MAIN: agent launched, ending turn.","origin":null,"result_index":0,"terminal_reason":"completed"}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"SUBAGENT-RESULT: the answer is 42"}]},"parent_tool_use_id":"toolu_fake_THKN","agent_id":"a249d3eb40c144d56","subagent_type":"general-purpose","task_description":"compute answer"}`,
		`{"type":"system","subtype":"task_started","task_id":"b92iv40fo","owned_by_subagent":true,"is_backgrounded":false,"parent_task_id":"a249d3eb40c144d56","task_type":"local_bash","description":"fg sleep"}`,
		`{"type":"system","subtype":"task_progress","task_id":"a249d3eb40c144d56","usage":{"total_tokens":2,"tool_uses":1,"duration_ms":90}}`,
		`{"type":"system","subtype":"task_notification","task_id":"b92iv40fo","status":"completed","output_file":"","summary":"fg sleep"}`,
		`{"type":"system","subtype":"task_updated","task_id":"a249d3eb40c144d56","run_id":"0mx27qo0f-5266d651","patch":{"status":"completed","end_time":1795979364215}}`,
		`{"type":"system","subtype":"task_notification","task_id":"a249d3eb40c144d56","run_id":"0mx27qo0f-5266d651","tool_use_id":"toolu_fake_THKN","status":"completed","output_file":"/tmp/claude-0/-w/f4c876a3/tasks/a249d3eb40c144d56.output","summary":"SUBAGENT-RESULT: the answer is 42","summary_is_report":true,"usage":{"total_tokens":20,"tool_uses":0,"duration_ms":3210}}`,
		`{"type":"system","subtype":"background_tasks_changed","tasks":[]}`,
		`{"type":"system","subtype":"init","session_id":"f4c876a3"}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"MAIN: woke up"}]},"parent_tool_use_id":null}`,
		`{"type":"result","subtype":"success","num_turns":1,"result":"MAIN: woke up","origin":{"kind":"task-notification","producer":"session-task","runId":"0mx27qo0f-5266d651"},"result_index":1}`,
		// b: a background command that exits 3.
		`{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"bham510ut","run_id":"0mx27qwz2-919127f5","task_type":"local_bash","description":"Sleep then print"}]}`,
		`{"type":"system","subtype":"task_started","task_id":"bham510ut","run_id":"0mx27qwz2-919127f5","tool_use_id":"toolu_fake_dJWU","description":"Sleep then print","is_backgrounded":true,"task_type":"local_bash"}`,
		`{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_fake_dJWU","type":"tool_result","content":"Command running in background with ID: bham510ut. Output is being written to: /tmp/claude-0/-w/a88d1398/tasks/bham510ut.output. You will be notified when it completes."}]},"parent_tool_use_id":null}`,
		`{"type":"system","subtype":"task_updated","task_id":"bham510ut","run_id":"0mx27qwz2-919127f5","patch":{"status":"failed"}}`,
		`{"type":"system","subtype":"task_notification","task_id":"bham510ut","run_id":"0mx27qwz2-919127f5","tool_use_id":"toolu_fake_dJWU","status":"failed","output_file":"/tmp/claude-0/-w/a88d1398/tasks/bham510ut.output","summary":"Background command \"Sleep then print\" failed with exit code 3"}`,
		`{"type":"system","subtype":"background_tasks_changed","tasks":[]}`,
		// f_two: the empty result before the wake turn.
		`{"type":"system","subtype":"init","session_id":"f4c876a3"}`,
		`{"type":"result","subtype":"success","num_turns":0,"result":"","origin":{"kind":"task-notification","producer":"session-task","runId":"0mx27qwz2-919127f5"},"terminal_reason":null}`,
	)
	checkSeq(t, ins,
		"turn-started",
		"msg main assistant tool_use:Agent",
		`task agent running notify=false ""`,
		"msg main user tool_result:Async agent launched suc",
		"msg main assistant text:MAIN: agent launched, en",
		`turn-ended n=2 err=false wake=false "MAIN: agent launched, en"`,
		"msg mirror assistant text:SUBAGENT-RESULT: the ans",
		`task agent completed notify=false ""`,
		`task agent completed notify=true "SUBAGENT-RESULT: the ans"`,
		"turn-started",
		"msg main assistant text:MAIN: woke up",
		`turn-ended n=1 err=false wake=true "MAIN: woke up"`,
		`task shell running notify=false ""`,
		"msg main user tool_result:Command running in backg",
		`task shell failed notify=false ""`,
		`task shell failed notify=true "Background command \"Slee"`,
	)
	ts := tasksOf(ins)
	if ts[0].OutputPath != "/tmp/claude-0/-w/f4c876a3/tasks/a249d3eb40c144d56.output" || ts[3].OutputPath != "/tmp/claude-0/-w/a88d1398/tasks/bham510ut.output" {
		t.Fatalf("output paths from the tool results: %q %q", ts[0].OutputPath, ts[3].OutputPath)
	}
	if c.filteredTasks.Load() != 2 || c.emptyTurns.Load() != 1 {
		t.Fatalf("filtered %d, empty turns %d", c.filteredTasks.Load(), c.emptyTurns.Load())
	}
}

// Unknown frames and fields are ignored; a line that is not JSON, or a
// frame with a field of the wrong type, is dropped and counted.
func TestMapTolerance(t *testing.T) {
	ins, c := feedStrings(t,
		`{"type":"system","subtype":"init","session_id":"s","some_new_field":{"deep":[1,2]}}`,
		`{"type":"hologram","subtype":"x"}`,
		`{"type":"system","subtype":"session_state_changed","state":"busy"}`,
		`{"type":"stream_event","event":{}}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"x"}}]},"parent_tool_use_id":null,"new":true}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"tool_reference","tool_name":"SendMessage"},{"type":"text","text":"Tool loaded."}],"is_error":false}]},"parent_tool_use_id":null}`,
		`{"type":"user","message":{"role":"user","content":"plain string"},"parent_tool_use_id":null}`,
		`not json`,
		`{"no_type":true}`,
		`{"type":"result","num_turns":"two"}`,
		`{"type":"system","subtype":"task_started","task_id":"zzz","task_type":""}`,
		``,
		`{"type":"result","subtype":"success","num_turns":1,"result":"done","is_error":false,"usage":{"input_tokens":5,"output_tokens":7,"cache_read_input_tokens":1,"cache_creation_input_tokens":2}}`,
	)
	checkSeq(t, ins,
		"turn-started",
		"msg main assistant text:hi,tool_use:Read",
		"msg main user tool_result:[tool_reference SendMess",
		"msg main user text:plain string",
		`turn-ended n=1 err=false wake=false "done"`)
	if u := ins[len(ins)-1].(core.ExternalTurnEnded).Usage; u != (chat.Usage{InputTokens: 5, OutputTokens: 7, CacheReadTokens: 1, CacheWriteTokens: 2}) {
		t.Fatalf("usage %+v", u)
	}
	if c.malformed.Load() != 2 || c.undecodable.Load() != 2 || c.unknownFrames.Load() != 1 || c.ignoredFrames.Load() != 2 {
		t.Fatalf("malformed %d undecodable %d unknown %d ignored %d", c.malformed.Load(), c.undecodable.Load(), c.unknownFrames.Load(), c.ignoredFrames.Load())
	}
}

// A live task the CLI lists but never reports started is mirrored as
// running; one whose task_started follows is mirrored once, from it.
func TestMapUnseenLiveTask(t *testing.T) {
	ins, _ := feedStrings(t,
		`{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"b11111111","task_type":"local_bash","description":"orphan"},{"task_id":"a2222222222222222","task_type":"local_agent","description":"helper"}]}`,
		`{"type":"system","subtype":"task_started","task_id":"a2222222222222222","task_type":"local_agent","description":"helper","prompt":"do it"}`,
		`{"type":"system","subtype":"status","status":"x"}`,
	)
	ts := tasksOf(ins)
	slices.SortFunc(ts, func(a, b core.ExternalTask) int { return strings.Compare(a.ID, b.ID) })
	if len(ts) != 2 || ts[0].ID != "a2222222222222222" || ts[0].Prompt != "do it" || ts[1].ID != "b11111111" || ts[1].Kind != core.TaskShell || ts[1].Status != "running" {
		t.Fatalf("tasks: %+v", ts)
	}
}

// Once the driver ends the process, the notifications the CLI prints on
// its way out only update the status: no turn will deliver them, so the
// exit ends the tasks lost and tells their owner.
func TestMapNotificationWhileEnding(t *testing.T) {
	var c counters
	m := newMapper(core.MainAgent, slog.New(slog.DiscardHandler), &c)
	var ins []core.Input
	for i, l := range []string{
		`{"type":"system","subtype":"task_started","task_id":"b12345678","task_type":"local_bash","description":"x"}`,
		`{"type":"system","subtype":"task_notification","task_id":"b12345678","status":"stopped","summary":"x"}`,
	} {
		m.ending = i == 1
		h, _ := decodeHeader([]byte(l))
		ins = append(ins, m.feed(h, []byte(l))...)
	}
	checkSeq(t, ins, `task shell running notify=false ""`, `task shell stopped notify=false ""`)
}
