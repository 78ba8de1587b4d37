package claudecode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/shell"
)

// FuzzFrames feeds arbitrary bytes to the CLI's output reader as a process
// does: shell.ReadLine splits the stream, decodeHeader reads each line's type,
// and the mapper maps it (the control frames decoded as the process
// decodes them). Nothing may panic, and:
//
//   - shell.ReadLine gives back the stream: the lines, joined by newlines, are
//     the input when none was too long, and no line it returns is longer
//     than its limit;
//   - decodeHeader either fails or gives a type, and a line it accepts is
//     valid JSON;
//   - every input the mapper makes belongs to its agent, and every tool
//     call it passes on has a JSON input;
//   - a result frame that decodes ends the turn, an init that decodes
//     starts one.
func FuzzFrames(f *testing.F) {
	for _, name := range []string{"plain.jsonl", "wakes.jsonl", "interrupt_stop_task.jsonl", "resumed_after_kill.jsonl", "two_bash_empty_result.jsonl"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		// Each line on its own, and runs of three: small seeds, since the
		// fuzzer minimises every new input it finds, at a cost that grows
		// with its size.
		lines := bytes.Split(b, []byte("\n"))
		for i, l := range lines {
			if len(l) > 0 && len(l) < 4096 {
				f.Add(append([]byte(nil), l...))
			}
			if run := bytes.Join(lines[i:min(i+3, len(lines))], []byte("\n")); i%3 == 0 && len(run) < 8192 {
				f.Add(run)
			}
		}
	}
	for _, s := range []string{
		``, "\n", "\n\n\n", `{}`, `null`, `[]`, `"x"`, `{"type":""}`, `{"type":7}`, `{"type":"assistant"`,
		`{"type":"assistant","message":{"content":7}}`,
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Write","input":{"file_path":"src/gitlink/config","content":"[core]\n\thooksPath = /tmp/x"}}]}}`,
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Bash"}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"image"}]}]}}`,
		`{"type":"user","message":{"content":"a\u0000b"},"parent_tool_use_id":"x"}`,
		`{"type":"result","subtype":"error","is_error":true,"errors":[1,{"a":2}],"usage":{"input_tokens":"x"}}`,
		`{"type":"result","num_turns":0,"result":""}`,
		`{"type":"system","subtype":"init","session_id":"s"}`,
		`{"type":"system","subtype":"task_started","task_id":"b12345678","is_backgrounded":true}`,
		`{"type":"system","subtype":"task_notification","task_id":"a0123456789abcdef","status":"completed","summary":"exit code 99999999999999999999"}`,
		`{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":""},{"task_id":"b00000000"}]}`,
		`{"type":"control_request","request_id":"r","request":{"subtype":"can_use_tool","tool_name":"Read","input":{"file_path":"/abs/root/secrets/x"}}}`,
		`{"type":"control_request","request_id":7}`,
		`{"type":"control_response","response":{"subtype":"error","request_id":"c1","error":"no"}}`,
		`{"type":"control_cancel_request","request_id":"r"}`,
		"{\"type\":\"assistant\"}\r\n{\"type\":\"result\"}",
		"\xff\xfe{\"type\":\"x\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 10
		br := bufio.NewReaderSize(bytes.NewReader(data), 16)
		var lines [][]byte
		anyLong := false
		for {
			line, long, err := shell.ReadLine(br, limit)
			if long {
				anyLong = true
				if line != nil {
					t.Fatalf("readLine returned %d bytes of a long line", len(line))
				}
			} else if len(line) > limit {
				t.Fatalf("readLine returned a line of %d bytes, over its limit %d", len(line), limit)
			} else {
				lines = append(lines, line)
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("readLine: %v", err)
				}
				break
			}
		}
		if !anyLong && !bytes.Equal(bytes.Join(lines, []byte("\n")), data) {
			t.Fatalf("readLine lost bytes: %q became %q", data, lines)
		}
		lines = append(lines, data) // the whole input as one line, too

		var c counters
		m := newMapper(core.MainAgent, slog.New(slog.DiscardHandler), &c)
		check := func(ins []core.Input) {
			for _, in := range ins {
				checkInput(t, in)
			}
		}
		for _, line := range lines {
			h, err := decodeHeader(line)
			if err != nil {
				continue
			}
			if h.Type == "" {
				t.Fatalf("decodeHeader accepted %q without a type", line)
			}
			if !json.Valid(line) {
				t.Fatalf("decodeHeader accepted invalid JSON %q", line)
			}
			switch h.Type {
			case "control_request":
				var cr controlRequestFrame
				_ = json.Unmarshal(line, &cr)
				continue
			case "control_response":
				var cr controlResponseFrame
				_ = json.Unmarshal(line, &cr)
				continue
			case "control_cancel_request":
				var cc controlCancelFrame
				_ = json.Unmarshal(line, &cc)
				continue
			}
			check(m.feed(h, line))
			switch {
			case h.Type == "result" && json.Unmarshal(line, new(resultFrame)) == nil:
				if m.inTurn {
					t.Fatalf("a result frame did not end the turn: %q", line)
				}
			case h.Type == "system" && h.Subtype == "init" && json.Unmarshal(line, new(initFrame)) == nil:
				if !m.inTurn {
					t.Fatalf("an init frame did not start a turn: %q", line)
				}
			}
		}
		check(m.finish())
	})
}

// checkInput checks one mapped input: it is the main agent's, and its tool
// calls carry JSON.
func checkInput(t *testing.T, in core.Input) {
	t.Helper()
	var agent core.AgentID
	switch in := in.(type) {
	case core.ExternalTurnStarted:
		agent = in.Agent
	case core.ExternalTurnEnded:
		agent = in.Agent
	case core.ExternalTask:
		agent = in.Agent
		if in.ID == "" {
			t.Fatalf("a task without an id: %+v", in)
		}
	case core.ExternalMessage:
		agent = in.Agent
		if len(in.Message.Content) == 0 {
			t.Fatalf("an empty message: %+v", in)
		}
		for _, b := range in.Message.Content {
			if b.Type == chat.BlockToolUse && !json.Valid(b.Input) {
				t.Fatalf("a tool call with input %q, not JSON", b.Input)
			}
		}
	default:
		t.Fatalf("the mapper made an input of type %T", in)
	}
	if agent != core.MainAgent {
		t.Fatalf("an input for agent %q from the main agent's process: %+v", agent, in)
	}
}
