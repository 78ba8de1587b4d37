package codex

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// replay feeds a recording of Codex 0.169.0's output (testdata, written by
// the CLI tests with VIGIL_CODEX_RECORD=1) to a mapper and returns what it
// made of it, one line an input or a wake, and the main thread's id.
func replay(t *testing.T, name string) ([]string, string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := newMapper(core.MainAgent, slog.New(slog.DiscardHandler), &counters{})
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		msg, err := decodeMessage(sc.Bytes())
		if err != nil {
			t.Fatalf("recording line %q: %v", sc.Text(), err)
		}
		if msg.Method == "" {
			var res struct {
				Thread struct {
					ID string `json:"id"`
				} `json:"thread"`
			}
			if json.Unmarshal(msg.Result, &res) == nil && res.Thread.ID != "" && m.main == "" {
				m.setMain(res.Thread.ID)
			}
			continue
		}
		ins, wakes := m.feed(msg.Method, msg.Params)
		for _, in := range ins {
			out = append(out, render(m.main, in))
		}
		for _, w := range wakes {
			var tasks []string
			for _, id := range w.tasks {
				tasks = append(tasks, short(m.main, id))
			}
			out = append(out, fmt.Sprintf("wake %s %v", short(m.main, w.thread), tasks))
		}
	}
	return out, m.main
}

// short names the main thread "main" and any other thread "thread".
func short(main, id string) string {
	switch {
	case id == main:
		return "main"
	case len(id) == 36:
		return "thread"
	}
	return id
}

func render(main string, in core.Input) string {
	switch in := in.(type) {
	case core.ExternalTurnStarted:
		return "turn-started " + short(main, in.Session)
	case core.ExternalTurnEnded:
		return fmt.Sprintf("turn-ended %q error=%v interrupted=%v wake=%v turns=%d usage=%v", in.Result, in.IsError, in.Interrupted, in.Wake, in.NumTurns, in.Usage.InputTokens > 0 && in.Usage.OutputTokens > 0)
	case core.ExternalTask:
		code := ""
		if in.ExitCode != nil {
			code = fmt.Sprintf(" exit=%d", *in.ExitCode)
		}
		return fmt.Sprintf("task %s %s %s owner=%q notify=%v%s %q %q", in.Kind, short(main, in.ID), in.Status, in.Owner, in.Notify, code, in.Description, firstLine(in.Summary))
	case core.ExternalMessage:
		var parts []string
		for _, b := range in.Message.Content {
			switch b.Type {
			case chat.BlockText:
				parts = append(parts, fmt.Sprintf("text %q", firstLine(b.Text)))
			case chat.BlockToolUse:
				parts = append(parts, "tool_use "+b.Name)
			case chat.BlockToolResult:
				f := firstLine(b.Content)
				parts = append(parts, fmt.Sprintf("tool_result %q", f[:min(len(f), 20)]))
			}
		}
		mirror := ""
		if in.Mirror != "" {
			mirror = " of " + short(main, in.Mirror)
		}
		return fmt.Sprintf("%s%s: %s", in.Message.Role, mirror, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%T", in)
}

func checkReplay(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mapping:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A background command, as Codex 0.169.0 reports it: the command is still
// running when the next model response begins, so it is a background
// task; its end comes after its turn's end, ends the task failed with its
// exit code, and the driver wakes main, whose wake turn follows.
func TestMapBackgroundCommand(t *testing.T) {
	got, _ := replay(t, "TestBackgroundCommand")
	checkReplay(t, got, []string{
		"turn-started main",
		"assistant: tool_use exec_command",
		`task shell call_bg_1 running owner="" notify=false "/bin/bash -lc 'sleep 1; echo KEY=${FAKE_OPENAI_KEY:-none}; echo BG-DONE; exit 3'" ""`,
		`user: tool_result "running in the backg"`,
		`assistant: text "MAIN: command launched"`,
		`turn-ended "MAIN: command launched" error=false interrupted=false wake=false turns=2 usage=true`,
		`task shell call_bg_1 failed owner="" notify=true exit=3 "" "exit code 3"`,
		"wake main [call_bg_1]",
		"turn-started main",
		`user: text "Background work you started has ended; its notifications fol"`,
		`assistant: text "MAIN: the command failed"`,
		`turn-ended "MAIN: the command failed" error=false interrupted=false wake=true turns=1 usage=true`,
	})
}

// A sub-agent, as Codex 0.169.0 reports it: its thread's turn is a run of
// a mirrored agent, its items are its transcript, its end is notified and
// wakes main (Codex starts no turn for it).
func TestMapSubagent(t *testing.T) {
	got, _ := replay(t, "TestSubagentWakesOwner")
	checkReplay(t, got, []string{
		"turn-started main",
		"assistant: tool_use spawn_agent",
		`user: tool_result "status completed: {\""`,
		`task agent thread running owner="" notify=false "SUBTASK: compute the answer" ""`,
		`user of thread: text "SUBTASK: compute the answer"`,
		`assistant: text "MAIN: agent spawned"`,
		`turn-ended "MAIN: agent spawned" error=false interrupted=false wake=false turns=2 usage=true`,
		`assistant of thread: text "SUB: the answer is 42"`,
		`task agent thread completed owner="" notify=true "" "SUB: the answer is 42"`,
		"wake main [thread]",
		"turn-started main",
		`user: text "Background work you started has ended; its notifications fol"`,
		`assistant: text "MAIN: woke, the answer is 42"`,
		`turn-ended "MAIN: woke, the answer is 42" error=false interrupted=false wake=true turns=1 usage=true`,
	})
}

// A plain turn maps to a turn, its reply and its end with usage.
func TestMapPlainTurn(t *testing.T) {
	got, _ := replay(t, "TestPlainTurn")
	checkReplay(t, got, []string{
		"turn-started main",
		`assistant: text "hello from the fake model"`,
		`turn-ended "hello from the fake model" error=false interrupted=false wake=false turns=1 usage=true`,
	})
}

// A limit of 0.169.0, measured: a command that outlives its yield (250
// ms here; Codex answered the call "Process running with session ID N")
// but ends before the next model response's first item (that response's
// headers were held 2.5 s) is reported exactly like a command that ended
// within its yield: no item, field or notification tells them apart. The
// driver maps it as a foreground command, its output as its tool result.
func TestMapCommandEndsBeforeNextResponse(t *testing.T) {
	got, _ := replay(t, "CommandEndsBeforeNextResponse")
	checkReplay(t, got, []string{
		"turn-started main",
		"assistant: tool_use exec_command",
		`user: tool_result "EARLY-DONE"`,
		`assistant: text "MAIN: first turn over"`,
		`turn-ended "MAIN: first turn over" error=false interrupted=false wake=false turns=2 usage=true`,
	})
}
