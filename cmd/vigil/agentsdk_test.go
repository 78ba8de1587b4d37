package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

// The Agent SDK tests run testdata/agentsdk/program.mjs, a program written
// for Claude Code with the real @anthropic-ai/claude-agent-sdk (installed
// by .ci/agent-sdk.sh), against vigil run as a Claude Code-compatible
// executable (internal/ccwire) on the scripted provider, and against the
// real Claude Code CLI over a fake Anthropic API, and compare what the
// program saw.

const sdkSkip = "SKIP: the Agent SDK test needs node and the SDK (run .ci/agent-sdk.sh and set VIGIL_AGENT_SDK to the directory it prints)"

// agentSDK returns node and the SDK's install directory, or skips (fails
// with VIGIL_TEST_STRICT=1).
func agentSDK(t *testing.T) (node, dir string) {
	t.Helper()
	miss := func(why string) {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(sdkSkip + ": " + why)
		}
		t.Skip(sdkSkip + ": " + why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		miss("node not found")
	}
	dir = os.Getenv("VIGIL_AGENT_SDK")
	if dir == "" {
		miss("VIGIL_AGENT_SDK is not set")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@anthropic-ai", "claude-agent-sdk", "package.json")); err != nil {
		miss(err.Error())
	}
	return node, dir
}

// sdkRun is one run of program.mjs.
type sdkRun struct {
	cmd   *exec.Cmd
	lines chan map[string]any
	errb  *strings.Builder
	done  chan error
}

// startProgram runs testdata/agentsdk/program.mjs with exe as
// pathToClaudeCodeExecutable.
func startProgram(t *testing.T, ctx context.Context, node, sdkDir, exe string, env []string) *sdkRun {
	t.Helper()
	return startScript(t, ctx, node, sdkDir, "program.mjs", exe, t.TempDir(), env)
}

// startScript runs testdata/agentsdk/<name> with exe, dir and args as its
// arguments. The program is copied next to a node_modules link to the
// SDK, so that its import resolves.
func startScript(t *testing.T, ctx context.Context, node, sdkDir, name, exe, work string, env []string, args ...string) *sdkRun {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata/agentsdk", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(sdkDir, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(dir, name), exe, work}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &sdkRun{cmd: cmd, lines: make(chan map[string]any, 256), errb: &strings.Builder{}, done: make(chan error, 1)}
	cmd.Stderr = r.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsed": sc.Text()}
			}
			r.lines <- m
		}
		close(r.lines)
		r.done <- cmd.Wait()
	}()
	return r
}

// collect reads the program's lines until it exits; onLine sees each.
func (r *sdkRun) collect(t *testing.T, onLine func(map[string]any)) []map[string]any {
	t.Helper()
	var all []map[string]any
	for m := range r.lines {
		all = append(all, m)
		if onLine != nil {
			onLine(m)
		}
	}
	if err := <-r.done; err != nil {
		t.Fatalf("program: %v\nstderr:\n%s\nlines: %v", err, r.errb.String(), all)
	}
	return all
}

// scriptedEnv is the environment of vigil run by an SDK program on the
// scripted provider playing scenario (a path under testdata/agentsdk),
// with its own data directory and no key.
func scriptedEnv(t *testing.T, scenario string) []string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata/agentsdk", scenario))
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		"VIGIL_DATA=" + t.TempDir(), "VIGIL_SCRIPT=" + path, "XDG_CONFIG_HOME=" + t.TempDir(),
		"ANTHROPIC_API_KEY=", "OPENAI_API_KEY=", "HOME=" + t.TempDir(),
	}
}

// cliEnv is the environment of the real Claude Code CLI run by an SDK
// program against the fake Anthropic API at url.
func cliEnv(t *testing.T, url string) []string {
	return []string{
		"HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=sk-test-dummy",
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
}

// dumpLines renders what a program saw, a line each, for a failure.
func dumpLines(lines []map[string]any) string {
	var b strings.Builder
	for _, m := range lines {
		raw, _ := json.Marshal(m)
		b.WriteString("\n  " + string(raw))
	}
	return b.String()
}

// vigilExe writes an executable that runs this test binary as vigil.
func vigilExe(t *testing.T) string {
	t.Helper()
	return vigilExePID(t, "/dev/null")
}

// vigilExePID is vigilExe that also appends each process's pid to pidFile.
func vigilExePID(t *testing.T, pidFile string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "vigil")
	script := fmt.Sprintf("#!/bin/sh\necho $$ >> %q\nVIGIL_AS_CLI=1 exec %q \"$@\"\n", pidFile, self)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// sdkStep is one message of the sequence compared: its kind and, for some,
// what it carries.
func sdkStep(m map[string]any) string {
	if c, ok := m["callback"].(string); ok {
		if c == "canUseTool" {
			return fmt.Sprintf("canUseTool(%v)", m["tool"])
		}
		return c
	}
	if _, ok := m["done"]; ok {
		return "done"
	}
	s, _ := m["type"].(string)
	if sub, ok := m["subtype"].(string); ok {
		s += "/" + sub
	}
	switch m["type"] {
	case "assistant", "user":
		var parts []string
		blocks, _ := m["blocks"].([]any)
		for _, b := range blocks {
			bm, _ := b.(map[string]any)
			p, _ := bm["type"].(string)
			if n, ok := bm["name"].(string); ok {
				p += ":" + n
			}
			parts = append(parts, p)
		}
		s += "[" + strings.Join(parts, ",") + "]"
		if m["subagent"] == true {
			s = "subagent " + s
		}
	case "result":
		s += fmt.Sprintf(" error=%v wake=%v usage=%v %q", m["is_error"], m["wake"], m["has_usage"], m["result"])
	}
	if sum, ok := m["summary"].(string); ok {
		s += fmt.Sprintf(" %q", sum)
	}
	if tt, ok := m["task_type"].(string); ok {
		s += " " + tt
	}
	if st, ok := m["status"].(string); ok {
		s += " " + st
	}
	return s
}

func sdkSteps(lines []map[string]any) []string {
	out := make([]string, 0, len(lines))
	for _, m := range lines {
		out = append(out, sdkStep(m))
	}
	return out
}

// wantSteps is what program.mjs must see from vigil, in order.
var wantSteps = []string{
	"system/init",
	"assistant[tool_use:Agent]",
	"system/background_tasks_changed",
	"system/task_started local_agent",
	"user[tool_result]",
	"assistant[text]",
	"result/success error=false wake=false usage=true \"MAIN: agent launched, ending turn.\"",
	"subagent assistant[text]",
	"system/task_updated",
	"system/task_notification \"SUBAGENT-RESULT: the answer is 42\" completed",
	"system/background_tasks_changed",
	"system/init",
	"assistant[text]",
	"result/success error=false wake=true usage=true \"MAIN: woke up: SUBAGENT-RESULT: the answer is 42\"",
	"system/init",
	"assistant[tool_use:Bash]",
	"canUseTool(Bash)",
	"user[tool_result]",
	"assistant[text]",
	"result/success error=false wake=false usage=true \"MAIN: the command printed APPROVED-RAN\\n\"",
	"system/init",
	"assistant[tool_use:Bash]",
	"canUseTool(Bash)",
	"interrupt",
	"user[tool_result]",
	"user[text]",
	"result/error_during_execution error=true wake=false usage=true %!q(<nil>)",
	"system/init",
	"assistant[text]",
	"result/success error=false wake=false usage=true \"MAIN: goodbye\"",
	"done",
}

// runOnVigil runs program.mjs against vigil on the scripted provider.
func runOnVigil(t *testing.T, ctx context.Context, node, sdk string) []map[string]any {
	t.Helper()
	return startProgram(t, ctx, node, sdk, vigilExe(t), scriptedEnv(t, "scenario.yaml")).collect(t, nil)
}

// TestAgentSDKDrivesVigil: the real Agent SDK drives vigil through a
// background subagent and its wake turn, a follow-up prompt with a
// canUseTool approval, and an interrupt.
func TestAgentSDKDrivesVigil(t *testing.T) {
	node, sdk := agentSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lines := runOnVigil(t, ctx, node, sdk)
	got := sdkSteps(lines)
	if !slices.Equal(got, wantSteps) {
		t.Fatalf("the program saw:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(wantSteps, "\n  "))
	}
	// What the turns said.
	var results []string
	for _, m := range lines {
		if m["type"] == "result" {
			results = append(results, fmt.Sprint(m["result"]))
		}
	}
	want := []string{"MAIN: agent launched, ending turn.", "MAIN: woke up: SUBAGENT-RESULT: the answer is 42", "MAIN: the command printed APPROVED-RAN\n", "<nil>", "MAIN: goodbye"}
	if !slices.Equal(results, want) {
		t.Fatalf("results %q, want %q", results, want)
	}
}

// TestAgentSDKResumeAfterKill: a program starts a background subagent
// through vigil, vigil is killed with SIGKILL while the subagent's round
// runs, and the program's second half resumes the session (query() with
// resume: the session id) and gets the subagent's result and the wake
// turn it starts.
func TestAgentSDKResumeAfterKill(t *testing.T) {
	node, sdk := agentSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pids := filepath.Join(t.TempDir(), "pids")
	exe := vigilExePID(t, pids)
	env := scriptedEnv(t, "resume.yaml")
	work := t.TempDir()
	first := startScript(t, ctx, node, sdk, "resume.mjs", exe, work, env, "start")
	session := ""
	killed := false
	lines := first.collect(t, func(m map[string]any) {
		if id, ok := m["session_id"].(string); ok && session == "" {
			session = id
		}
		if m["type"] == "result" && !killed {
			// The first turn is over; the subagent's round has 3s to go.
			killed = true
			b, err := os.ReadFile(pids)
			if err != nil {
				t.Fatal(err)
			}
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	})
	steps := sdkSteps(lines)
	if !killed || session == "" || !strings.Contains(fmt.Sprint(lines[len(lines)-1]["error"]), "SIGKILL") {
		t.Fatalf("first half: session %q, killed %v, saw %q", session, killed, steps)
	}
	for _, s := range steps {
		if strings.HasPrefix(s, "system/task_notification") {
			t.Fatalf("the subagent finished before the kill: %q", steps)
		}
	}

	second := startScript(t, ctx, node, sdk, "resume.mjs", exe, work, env, "resume", session)
	lines = second.collect(t, nil)
	var summary, wake string
	for _, m := range lines {
		if id, ok := m["session_id"].(string); ok && id != session {
			t.Errorf("resumed as session %q, not %q", id, session)
		}
		if m["subtype"] == "task_notification" {
			summary = fmt.Sprint(m["summary"])
		}
		if m["type"] == "result" && m["wake"] == true {
			wake = fmt.Sprint(m["result"])
		}
	}
	if summary != "SUBAGENT-RESULT: the answer is 42" || wake != "MAIN: woke up: SUBAGENT-RESULT: the answer is 42" || lines[len(lines)-1]["done"] != true {
		t.Fatalf("after the resume: notification %q, wake %q, saw %q", summary, wake, sdkSteps(lines))
	}
}

// cliSkip is the message of a comparison without the real CLI.
const cliSkip = "SKIP: the comparison with Claude Code needs the real CLI; run .ci/claude.sh and set VIGIL_CLAUDE"

// comparedCLI returns the real Claude Code CLI a comparison runs, or
// skips loudly (fails under VIGIL_TEST_STRICT=1).
func comparedCLI(t *testing.T) string { return externalCLI(t, "VIGIL_CLAUDE", cliSkip) }

// TestAgentSDKSameAsClaudeCode runs program.mjs against vigil and against
// the real Claude Code CLI over a fake Anthropic API that answers as the
// scenario does, and compares the two message sequences. Differences not
// in allowedDiffs fail the test; the test logs every difference.
func TestAgentSDKSameAsClaudeCode(t *testing.T) {
	node, sdk := agentSDK(t)
	cli := comparedCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	vigilLines := runOnVigil(t, ctx, node, sdk)
	onVigil := sdkSteps(vigilLines)

	srv := providertest.NewAnthropic(t)
	release := make(chan struct{})
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		last := r.LastUserText()
		switch {
		case r.Header.Get("x-claude-code-agent-id") != "":
			return providertest.Reply{Blocks: []chat.Block{chat.Text("SUBAGENT-RESULT: the answer is 42")}, Hold: release}, true
		case strings.Contains(last, "Say goodbye"):
			return providertest.TextAnswer("MAIN: goodbye"), true
		case strings.Contains(last, "<task-notification>"):
			return providertest.TextAnswer("MAIN: woke up: SUBAGENT-RESULT: the answer is 42"), true
		case sdkToolResult(r) && strings.Contains(last, "APPROVED-RAN"):
			return providertest.TextAnswer("MAIN: the command printed APPROVED-RAN\n"), true
		case sdkToolResult(r):
			return providertest.TextAnswer("MAIN: agent launched, ending turn."), true
		case strings.Contains(last, "Start a background agent"):
			return providertest.Answer(providertest.ToolUse("", "Agent", `{"description":"compute answer","prompt":"SUBTASK: compute the answer","subagent_type":"general-purpose","run_in_background":true}`)), true
		case strings.Contains(last, "APPROVED-RAN to approved.txt"):
			return providertest.Answer(providertest.ToolUse("", "Bash", `{"command":"echo APPROVED-RAN | tee approved.txt","description":"Print a word to a file"}`)), true

		case strings.Contains(last, "Take your time"):
			return providertest.Answer(providertest.ToolUse("", "Bash", `{"command":"echo SLOW | tee stop.txt","description":"Write a word to a file"}`)), true
		}
		return providertest.TextAnswer("ok"), true // the CLI's side requests (titles, summaries)
	})
	run := startProgram(t, ctx, node, sdk, cli, cliEnv(t, srv.URL))
	results := 0
	released := false
	cliLines := run.collect(t, func(m map[string]any) {
		// The subagent answers once the first turn's result is out, as
		// the scripted one does a second after it started.
		if m["type"] == "result" {
			results++
		}
		if results == 1 && !released {
			released = true
			close(release)
		}
	})
	onCLI := sdkSteps(cliLines)
	t.Logf("claude code:\n  %s", strings.Join(onCLI, "\n  "))
	diffs := diffSteps(onCLI, onVigil)
	if len(diffs) == 0 {
		// The same sequence: compare the fields of each message.
		diffs = diffKeys(cliLines, vigilLines)
	}
	t.Logf("%d difference(s)", len(diffs))
	for _, d := range diffs {
		t.Logf("difference: %s", d)
	}
	for _, d := range diffs {
		if !allowedDiff(d) {
			t.Errorf("difference not allowed: %s\nclaude code:\n  %s\nvigil:\n  %s", d, strings.Join(onCLI, "\n  "), strings.Join(onVigil, "\n  "))
		}
	}
}

func sdkToolResult(r *providertest.Request) bool {
	for _, b := range r.LastUser().Content {
		if b.Type == chat.BlockToolResult {
			return true
		}
	}
	return false
}

// allowedDiffs are the documented differences between what a program sees
// from Claude Code 2.1.328 and from vigil (see internal/ccwire's package
// documentation), as diffKeys words them: fields the CLI sends that vigil
// does not. Every other difference, and any field only vigil sends, fails
// the test.
var allowedDiffs = []string{
	// what vigil does not have: fast mode, ultrathink, effort, view modes, feedback and analytics switches, memory paths, the messaging socket, extra directories, terminal slash commands.
	"system/init: keys.additional_directories only in claude code",
	"system/init: keys.analytics_disabled only in claude code",
	"system/init: keys.capabilities only in claude code",
	"system/init: keys.fast_mode_disabled_reason only in claude code",
	"system/init: keys.fast_mode_state only in claude code",
	"system/init: keys.memory_paths only in claude code",
	"system/init: keys.messaging_socket_path only in claude code",
	"system/init: keys.original_cwd only in claude code",
	"system/init: keys.per_turn_effort_active only in claude code",
	"system/init: keys.product_feedback_disabled only in claude code",
	"system/init: keys.terminal_slash_commands only in claude code",
	"system/init: keys.ultrathink_available only in claude code",
	"system/init: keys.ultrathink_typed_raises only in claude code",
	"system/init: keys.view_mode only in claude code",
	// the API's request id and context-management block: vigil's providers do not pass them on.
	"assistant[tool_use:Agent]: keys.request_id only in claude code",
	"assistant[tool_use:Agent]: message_keys.context_management only in claude code",
	"assistant[text]: keys.request_id only in claude code",
	"assistant[text]: message_keys.context_management only in claude code",
	"subagent assistant[text]: keys.request_id only in claude code",
	"subagent assistant[text]: message_keys.context_management only in claude code",
	"assistant[tool_use:Bash]: keys.request_id only in claude code",
	"assistant[tool_use:Bash]: message_keys.context_management only in claude code",
	// the CLI's structured tool results (tool_use_result): vigil's tools answer with text only.
	"user[tool_result]: keys.tool_result_meta only in claude code",
	"user[tool_result]: keys.tool_use_result only in claude code",
	// the CLI's timing, fast-mode and statistics fields of a result.
	"result/success: keys.api_error_status only in claude code",
	"result/success: keys.fast_mode_disabled_reason only in claude code",
	"result/success: keys.fast_mode_state only in claude code",
	"result/success: keys.first_content_frame_ms only in claude code",
	"result/success: keys.model_usage_since_last_result only in claude code",
	"result/success: keys.queued_turn_count only in claude code",
	"result/success: keys.safety_stops only in claude code",
	"result/success: keys.subagent_stats only in claude code",
	"result/success: keys.time_to_request_ms only in claude code",
	"result/success: keys.ttft_ms only in claude code",
	"result/success: keys.ttft_stream_ms only in claude code",
	"result/error_during_execution: keys.fast_mode_disabled_reason only in claude code",
	"result/error_during_execution: keys.fast_mode_state only in claude code",
	"result/error_during_execution: keys.model_usage_since_last_result only in claude code",
	"result/error_during_execution: keys.queued_turn_count only in claude code",
	"result/error_during_execution: keys.safety_stops only in claude code",
	"result/error_during_execution: keys.subagent_stats only in claude code",
}

func allowedDiff(d string) bool { return slices.Contains(allowedDiffs, d) }

// diffKeys lists, for two runs with the same steps, the fields of each
// message (and of its message object) that only one of them has, once per
// step kind and field.
func diffKeys(cli, vig []map[string]any) []string {
	seen := map[string]bool{}
	var out []string
	keys := func(m map[string]any, field string) []string {
		var ks []string
		l, _ := m[field].([]any)
		for _, k := range l {
			ks = append(ks, fmt.Sprint(k))
		}
		return ks
	}
	for i := range cli {
		kind := strings.SplitN(sdkStep(cli[i]), " ", 2)[0]
		if strings.HasPrefix(kind, "subagent") {
			kind = "subagent " + strings.SplitN(sdkStep(cli[i]), " ", 3)[1]
		}
		for _, field := range []string{"keys", "message_keys"} {
			a, b := keys(cli[i], field), keys(vig[i], field)
			for _, k := range a {
				if d := fmt.Sprintf("%s: %s.%s only in claude code", kind, field, k); !slices.Contains(b, k) && !seen[d] {
					seen[d] = true
					out = append(out, d)
				}
			}
			for _, k := range b {
				if d := fmt.Sprintf("%s: %s.%s only in vigil", kind, field, k); !slices.Contains(a, k) && !seen[d] {
					seen[d] = true
					out = append(out, d)
				}
			}
		}
	}
	return out
}

// diffSteps lists the differences between two sequences, as an edit
// script: "only claude code: X" and "only vigil: X" lines (a longest
// common subsequence).
func diffSteps(a, b []string) []string {
	n, m := len(a), len(b)
	l := make([][]int, n+1)
	for i := range l {
		l[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			i++
			j++
		case j < m && (i == n || l[i][j+1] >= l[i+1][j]):
			out = append(out, "only vigil: "+b[j])
			j++
		default:
			out = append(out, "only claude code: "+a[i])
			i++
		}
	}
	return out
}

// TestAgentSDKControls: the real Agent SDK uses its controls on vigil:
// partial messages stream the main agent's text, canUseTool's
// updatedInput is the command that runs, setPermissionMode refuses a mode
// vigil has not and takes one it has (the next turn runs in it), and a
// background subagent's command prints task_progress.
func TestAgentSDKControls(t *testing.T) {
	node, sdk := agentSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	work := t.TempDir()
	lines := startScript(t, ctx, node, sdk, "controls.mjs", vigilExe(t), work, scriptedEnv(t, "controls.yaml")).collect(t, nil)
	dump := func() string { return dumpLines(lines) }
	t.Logf("the program saw:%s", dump())
	checkControls(t, lines, work, false, dump)
}

// checkControls checks what controls.mjs saw. planOK says the executable
// takes permission mode plan (the CLI does, vigil does not). Texts are
// compared without their trailing newline: the CLI trims a command's
// output, vigil's tools keep it.
func checkControls(t *testing.T, lines []map[string]any, work string, planOK bool, dump func() string) {
	t.Helper()
	// The first message streamed before it was whole.
	var streamed strings.Builder
	var events []string
	for _, m := range lines {
		if m["type"] == "assistant" {
			break
		}
		if m["type"] == "stream_event" {
			events = append(events, fmt.Sprint(m["event"]))
			if m["event"] == "content_block_delta" {
				if d, ok := m["delta"].(string); ok && !strings.HasPrefix(d, "{") {
					streamed.WriteString(d)
				}
			}
		}
	}
	deltas := 0
	for _, e := range events {
		if e == "content_block_delta" {
			deltas++
		}
	}
	if len(events) < 3 || events[0] != "message_start" || deltas < 2 || streamed.String() != "MAIN: streaming these words a few at a time before the command." {
		t.Errorf("stream events before the first message %q, text %q%s", events, streamed.String(), dump())
	}
	b, err := os.ReadFile(filepath.Join(work, "out.txt"))
	if err != nil || string(b) != "UPDATED\n" {
		t.Errorf("out.txt holds %q (%v): the updated input did not run%s", b, err, dump())
	}
	var results, modes, inits, progress, notes []string
	for _, m := range lines {
		switch {
		case m["type"] == "result" && m["subtype"] == "error_max_turns":
			results = append(results, fmt.Sprintf("max turns: %v, num_turns %v", m["errors"], m["num_turns"]))
		case m["type"] == "result":
			results = append(results, strings.TrimSpace(fmt.Sprint(m["result"])))
		case m["control"] == "setPermissionMode":
			modes = append(modes, fmt.Sprintf("%v:%v", m["mode"], m["ok"]))
		case m["subtype"] == "init":
			inits = append(inits, fmt.Sprint(m["permissionMode"]))
		case m["subtype"] == "task_progress":
			progress = append(progress, fmt.Sprintf("%v/%v/%v", m["description"], m["last_tool_name"], m["tool_uses"]))
		case m["subtype"] == "task_notification":
			notes = append(notes, strings.TrimSpace(fmt.Sprint(m["summary"])))
		}
	}
	want := []string{"MAIN: the command printed UPDATED", "MAIN: agent launched.", "MAIN: woke up: SUBAGENT: done after SUB-RAN",
		"max turns: [Reached maximum number of turns (2)], num_turns 3"}
	if !slices.Equal(results, want) {
		t.Errorf("results %q, want %q%s", results, want, dump())
	}
	if !slices.Equal(modes, []string{fmt.Sprintf("plan:%v", planOK), "acceptEdits:true"}) {
		t.Errorf("setPermissionMode answers %q%s", modes, dump())
	}
	if len(inits) < 2 || inits[0] != "default" || inits[1] != "acceptEdits" {
		t.Errorf("system/init permission modes %q%s", inits, dump())
	}
	if !slices.Equal(progress, []string{"Running Sub runs/Bash/1"}) {
		t.Errorf("task_progress %q%s", progress, dump())
	}
	if !slices.Equal(notes, []string{"SUBAGENT: done after SUB-RAN"}) {
		t.Errorf("notifications %q%s", notes, dump())
	}
	if n := len(lines); n < 2 || lines[n-1]["done"] != true || lines[n-2]["thrown"] != "Claude Code returned an error result: Reached maximum number of turns (2)" {
		t.Errorf("the program did not end with the SDK's error for the last result%s", dump())
	}
}

// TestAgentSDKControlsSameAsClaudeCode runs controls.mjs against the real
// Claude Code CLI over a fake Anthropic API that answers as
// controls.yaml does, and checks the program saw from the CLI what it sees
// from vigil, but for the one documented difference: the CLI takes
// permission mode plan, which vigil refuses.
func TestAgentSDKControlsSameAsClaudeCode(t *testing.T) {
	node, sdk := agentSDK(t)
	cli := comparedCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := providertest.NewAnthropic(t)
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		last := r.LastUserText()
		if r.Header.Get("x-claude-code-agent-id") != "" {
			if sdkToolResult(r) {
				return providertest.TextAnswer("SUBAGENT: done after " + last), true
			}
			return providertest.Answer(providertest.ToolUse("", "Bash", `{"command":"echo SUB-RAN","description":"Sub runs"}`)), true
		}
		switch {
		case strings.Contains(last, "<task-notification>"):
			return providertest.TextAnswer("MAIN: woke up: SUBAGENT: done after SUB-RAN\n"), true
		case strings.Contains(last, "Keep running commands") || sdkToolResult(r) && strings.Contains(last, "LOOP"):
			return providertest.Answer(providertest.ToolUse("", "Bash", `{"command":"echo LOOP","description":"Loop"}`)), true
		case sdkToolResult(r) && strings.Contains(last, "UPDATED"):
			return providertest.TextAnswer("MAIN: the command printed UPDATED\n"), true
		case sdkToolResult(r):
			return providertest.TextAnswer("MAIN: agent launched."), true
		case strings.Contains(last, "write ORIGINAL"):
			return providertest.Answer(chat.Text("MAIN: streaming these words a few at a time before the command."),
				providertest.ToolUse("", "Bash", `{"command":"echo ORIGINAL | tee out.txt","description":"Write a word to a file"}`)), true
		case strings.Contains(last, "Start a background agent"):
			return providertest.Answer(providertest.ToolUse("", "Agent", `{"description":"sub work","prompt":"SUBTASK: run a command","subagent_type":"general-purpose","run_in_background":true}`)), true
		}
		return providertest.TextAnswer("ok"), true // the CLI's side requests
	})
	work := t.TempDir()
	lines := startScript(t, ctx, node, sdk, "controls.mjs", cli, work, cliEnv(t, srv.URL)).collect(t, nil)
	dump := func() string { return dumpLines(lines) }
	t.Logf("claude code:%s", dump())
	checkControls(t, lines, work, true, dump)
	// The two sequences, side by side: every difference is listed.
	vig := startScript(t, ctx, node, sdk, "controls.mjs", vigilExe(t), t.TempDir(), scriptedEnv(t, "controls.yaml")).collect(t, nil)
	diffs := diffSteps(controlSteps(lines), controlSteps(vig))
	t.Logf("%d difference(s) in the sequences", len(diffs))
	for _, d := range diffs {
		t.Logf("difference: %s", d)
	}
}

// controlSteps is controls.mjs's sequence, one kind per message; stream
// events by their event, text deltas once per run of them.
func controlSteps(lines []map[string]any) []string {
	var out []string
	for _, m := range lines {
		s := sdkStep(m)
		if m["type"] == "stream_event" {
			s = "stream " + fmt.Sprint(m["event"])
			if len(out) > 0 && out[len(out)-1] == s && s == "stream content_block_delta" {
				continue
			}
		}
		if c, ok := m["control"]; ok {
			s = fmt.Sprintf("%v(%v)", c, m["mode"])
		}
		out = append(out, strings.ReplaceAll(s, `\n"`, `"`)) // the CLI trims a command's output
	}
	return out
}
