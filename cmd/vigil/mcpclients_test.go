package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/mcptest"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/provider/providertest"
)

// The end-to-end tests of real MCP clients (Claude Code, Codex, the SDK's
// generic stdio client) with vigil: each uses the README's snippet for its
// client verbatim, with 'vigil' on PATH (this test binary), and a fake
// model API for the client's model and another for vigil's agents.

// readmeSnippet returns the fenced block that follows the README's
// "<!-- test: name -->" marker.
func readmeSnippet(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- test: "+name+" -->\n")
	if !ok {
		t.Fatalf("README.md has no snippet %q", name)
	}
	m := regexp.MustCompile("(?s)^```[a-z]*\n(.*?)\n```").FindStringSubmatch(rest)
	if m == nil {
		t.Fatalf("README.md's snippet %q is not a fenced block", name)
	}
	return m[1]
}

// binDir returns a directory to put first on PATH, holding 'vigil' (this
// test binary as the vigil command: a script, since a client passes an
// MCP server only some of its environment) and the given links.
func binDir(t *testing.T, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nVIGIL_AS_CLI=1 exec %q \"$@\"\n", os.Args[0])
	if err := os.WriteFile(filepath.Join(dir, "vigil"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// step is one action of a client's model in a turn: a call of a vigil
// tool, with arguments made from the results of the calls before it, or,
// with no tool, the turn's final text.
type step struct {
	tool string
	args func(results []string) map[string]any
	text string
}

// driver plays a client's model: each turn's plan is found by a marker in
// its first user message, and the next step is the one after the vigil
// tool calls the conversation already holds. It records every vigil tool
// result it sees, and whether the client reported one as an error.
type driver struct {
	t *testing.T
	// name maps a vigil tool to what the client calls it.
	name  func(tool string) string
	plans map[string][]step

	mu      sync.Mutex
	results map[string][]toolResult // marker -> the results of its turn
	// onCall, when set, is told each call the model makes, once.
	onCall func(marker, tool string)
	called map[string]bool
}

// toolResult is the result of a vigil tool call as the client's model saw
// it.
type toolResult struct {
	tool, content string
	isError       bool
}

func newDriver(t *testing.T, name func(string) string, plans map[string][]step) *driver {
	return &driver{t: t, name: name, plans: plans, results: map[string][]toolResult{}, called: map[string]bool{}}
}

// turn returns a turn's marker and plan, from the conversation's first
// user text.
func (d *driver) turn(msgs []chat.Message) (string, []step, bool) {
	for _, m := range msgs {
		if m.Role != chat.RoleUser {
			continue
		}
		for _, b := range m.Content {
			for marker, plan := range d.plans {
				if b.Type == chat.BlockText && strings.Contains(b.Text, marker) {
					return marker, plan, true
				}
			}
		}
	}
	return "", nil, false
}

// vigilResults returns the results of the driver's own calls in a
// conversation, in order.
func vigilResults(msgs []chat.Message) []toolResult {
	calls := map[string]string{}
	var out []toolResult
	for _, m := range msgs {
		for _, b := range m.Content {
			switch {
			case b.Type == chat.BlockToolUse && strings.HasPrefix(b.ID, driverCallPrefix):
				calls[b.ID] = b.Name
			case b.Type == chat.BlockToolResult && calls[b.ToolUseID] != "":
				out = append(out, toolResult{tool: calls[b.ToolUseID], content: b.Content, isError: b.IsError})
			}
		}
	}
	return out
}

// driverCallPrefix starts the ids of the driver's tool calls.
const driverCallPrefix = "call_vigil_"

// next returns the model's next answer in a turn, or false when the
// request is not one of the driver's turns.
func (d *driver) next(msgs []chat.Message) (providertest.Reply, bool) {
	marker, plan, ok := d.turn(msgs)
	if !ok {
		return providertest.Reply{}, false
	}
	res := vigilResults(msgs)
	d.mu.Lock()
	d.results[marker] = res
	d.mu.Unlock()
	n := len(res)
	if n >= len(plan) {
		return providertest.TextAnswer("done"), true
	}
	st := plan[n]
	if st.tool == "" {
		return providertest.TextAnswer(st.text), true
	}
	contents := make([]string, n)
	for i, r := range res {
		contents[i] = r.content
	}
	var args map[string]any
	if st.args != nil {
		args = st.args(contents)
	}
	if args == nil {
		args = map[string]any{}
	}
	b, _ := json.Marshal(args)
	id := fmt.Sprintf("%s%s_%d", driverCallPrefix, strings.TrimPrefix(marker, "#"), n)
	d.mu.Lock()
	first, onCall := !d.called[id], d.onCall
	d.called[id] = true
	d.mu.Unlock()
	if first && onCall != nil {
		onCall(marker, st.tool)
	}
	return providertest.Answer(providertest.ToolUse(id, d.name(st.tool), string(b))), true
}

// resultsOf returns the results a turn's model saw.
func (d *driver) resultsOf(marker string) []toolResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.results[marker]
}

// field returns a string field of a tool result's JSON (jsonPart).
func field(content, key string) string {
	var m map[string]any
	if json.Unmarshal([]byte(jsonPart(content)), &m) != nil {
		return ""
	}
	s, _ := m[key].(string)
	return s
}

// agentModel answers vigil's agents on their own fake API: an agent whose
// prompt says "sleep N" runs `sleep N` with its Bash tool first; every
// agent then ends its run with "done: <its prompt>".
func agentModel(r *providertest.Request) (providertest.Reply, bool) {
	prompt := ""
	for _, m := range r.Messages {
		if m.Role == chat.RoleUser {
			for _, b := range m.Content {
				if b.Type == chat.BlockText && prompt == "" {
					prompt = b.Text
				}
			}
		}
	}
	for _, line := range strings.Split(prompt, "\n") {
		secs, ok := strings.CutPrefix(strings.TrimSpace(line), "sleep ")
		if !ok {
			continue
		}
		if res := r.LastUser(); len(res.Content) == 0 || res.Content[0].Type != chat.BlockToolResult {
			n, _ := strconv.Atoi(secs)
			return providertest.Answer(providertest.ToolUse("toolu_sleep", "Bash", fmt.Sprintf(`{"command":"sleep %d","timeout":%d}`, n, (n+60)*1000))), true
		}
		break
	}
	return providertest.TextAnswer("done: " + lastLine(prompt)), true
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// vigilConfig writes a vigil config into home that allows the agents'
// `sleep` commands.
func vigilConfig(t *testing.T, home string) {
	t.Helper()
	dir := filepath.Join(home, ".config", "vigil")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("allow: [\"Bash(sleep *)\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMCPGenericStdio starts vigil as the README's generic stdio snippet
// configures it, as a client does (its command and args, its env over the
// client's environment), with the SDK's client: spawn, wait, reply, close.
func TestMCPGenericStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(readmeSnippet(t, "generic-stdio")), &cfg); err != nil {
		t.Fatalf("the README's generic snippet: %v", err)
	}
	srv, ok := cfg.MCPServers["vigil"]
	if !ok {
		t.Fatal("the README's generic snippet has no vigil server")
	}
	api := providertest.NewAnthropic(t)
	api.Fallback(agentModel)
	home, project := t.TempDir(), t.TempDir()
	data := filepath.Join(home, ".local", "share", "vigil")
	t.Cleanup(func() { stopDaemon(t, data) })
	bin := binDir(t, nil)
	cmd := exec.Command(filepath.Join(bin, srv.Command), srv.Args...) // as the client's PATH finds it
	cmd.Dir = project
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "HOME="+home, "XDG_CONFIG_HOME=", "XDG_DATA_HOME=", "VIGIL_DATA=", "VIGIL_OWNER=",
		"VIGIL_AS_CLI=", "OPENAI_API_KEY=", "ANTHROPIC_BASE_URL="+api.URL)
	for k, v := range srv.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr := &lockedBuf{}
	cmd.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "some-ide", Version: "1.0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start %s %v: %v\n%s", srv.Command, srv.Args, err, stderr.String())
	}
	c := &mcptest.Client{CS: cs}
	if ir := cs.InitializeResult(); ir == nil || !strings.Contains(ir.Instructions, mcpserver.ProjectKey(project)) {
		t.Errorf("the instructions do not name the project's owner key %s", mcpserver.ProjectKey(project))
	}
	sp, err := c.Spawn(ctx, "w1", "count the lines")
	if err != nil {
		t.Fatal(err)
	}
	var w mcpserver.WaitOutput
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"tasks": []string{sp.Task}, "timeout_seconds": 60}, &w); err != nil ||
		len(w.Notifications) != 1 || !strings.Contains(w.Notifications[0].Reply, "done: count the lines") {
		t.Fatalf("wait: %v %+v", err, w)
	}
	var co mcpserver.CloseOutput
	if err := c.Call(ctx, mcpserver.ToolClose, map[string]any{"task": sp.Task}, &co); err != nil || co.Outcome != "closed" || len(co.Notifications) != 1 {
		t.Fatalf("close: %v %+v", err, co)
	}
	// An unknown client is given the safe default limit.
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == mcpserver.ToolWait && !strings.Contains(tool.Description, fmt.Sprintf("at most %d seconds", int(mcpserver.DefaultClientWait.Seconds()))) {
			t.Errorf("an unknown client's wait: %s", tool.Description)
		}
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close the client: %v", err)
	}
	if s := stderr.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") {
		t.Errorf("vigil mcp logged warnings or errors on a normal exit:\n%s", s)
	}
}

const codexSkip = "SKIP: the Codex end-to-end MCP test needs the real CLI: run .ci/codex.sh and set VIGIL_CODEX to the path it prints"

// codexCLI returns $VIGIL_CODEX, or skips the test loudly (fails it under
// VIGIL_TEST_STRICT=1).
func codexCLI(t *testing.T) string { return externalCLI(t, "VIGIL_CODEX", codexSkip) }

// TestMCPCodex gives the real Codex CLI vigil as the README's config.toml
// snippet configures it (verbatim, after the fake model provider's
// section), and runs three 'codex exec' turns in one project:
//
//  1. the model spawns a worker on a 400-second job and ends its turn;
//     Codex exits, and the worker goes on in vigil's background server;
//  2. the next run waits for it across Codex's 300 s tool-call limit: its
//     first wait (asked for 400 s) returns at vigil's 270 s as a normal
//     result that says to wait again, and its second returns the reply;
//     the model sees no error;
//  3. it closes the worker and spawns a new "worker" under the freed name.
func TestMCPCodex(t *testing.T) {
	t.Parallel()
	cli := codexCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	home, project, codexHome := t.TempDir(), t.TempDir(), t.TempDir()
	data := filepath.Join(home, ".local", "share", "vigil")
	t.Cleanup(func() {
		stopDaemon(t, data)
		if t.Failed() {
			t.Logf("daemon.log:\n%s", fileTail(filepath.Join(data, "daemon.log"), 8000))
		}
	})
	vigilConfig(t, home)
	bin := binDir(t, nil)
	agents := providertest.NewAnthropic(t)
	agents.Fallback(agentModel)
	wait := func(res []string) map[string]any { return map[string]any{"timeout_seconds": 400} }
	drv := newDriver(t, func(tool string) string { return "mcp__vigil__" + tool }, map[string][]step{
		"#c1": {
			{tool: mcpserver.ToolSpawn, args: func([]string) map[string]any {
				return map[string]any{"name": "worker", "prompt": "sleep 400\nthe long job"}
			}},
			{text: "The worker is on it."},
		},
		"#c2": {
			{tool: mcpserver.ToolWait, args: wait},
			{tool: mcpserver.ToolWait, args: wait},
			{text: "The worker reported back."},
		},
		"#c3": {
			{tool: mcpserver.ToolList},
			{tool: mcpserver.ToolClose, args: func(res []string) map[string]any {
				var l mcpserver.ListOutput
				_ = json.Unmarshal([]byte(jsonPart(res[0])), &l)
				if len(l.Tasks) == 0 {
					return map[string]any{"task": "none"}
				}
				return map[string]any{"task": l.Tasks[0].Task}
			}},
			{tool: mcpserver.ToolSpawn, args: func([]string) map[string]any { return map[string]any{"name": "worker", "prompt": "the next job"} }},
			{text: "A new worker is on it."},
		},
	})
	api := providertest.NewResponses(t)
	api.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		if reply, ok := drv.next(r.Messages); ok {
			return reply, true
		}
		return providertest.TextAnswer("ok"), true
	})
	config := providertest.CodexConfig(api) + "\n" + readmeSnippet(t, "codex-config") + "\n"
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(marker, prompt string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, cli, "exec", "--skip-git-repo-check", "--ephemeral", "--json", "-C", project, marker+" "+prompt)
		cmd.Dir = project
		cmd.Env = append(os.Environ(), "CODEX_HOME="+codexHome, "FAKE_OPENAI_KEY=sk-test-dummy", "HOME="+home, "PATH="+bin+":"+os.Getenv("PATH"),
			"XDG_CONFIG_HOME=", "XDG_DATA_HOME=", "VIGIL_DATA=", "VIGIL_OWNER=", "VIGIL_AS_CLI=",
			"ANTHROPIC_API_KEY=sk-test-dummy", "ANTHROPIC_BASE_URL="+agents.URL, "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("codex exec %s: %v\n%s", marker, err, out)
		}
		t.Logf("codex exec %s: %d bytes of output", marker, len(out))
	}
	noErrors := func(marker string, want int) []toolResult {
		t.Helper()
		res := drv.resultsOf(marker)
		if len(res) != want {
			t.Fatalf("%s: %d tool results, want %d: %+v", marker, len(res), want, res)
		}
		for i, r := range res {
			if r.isError || strings.Contains(r.content, "timed out awaiting") {
				t.Fatalf("%s: call %d (%s) failed as the model sees it: %s", marker, i, r.tool, r.content)
			}
		}
		return res
	}

	// 1. Spawn the 400-second job; Codex exits.
	run("#c1", "Run the long job in the background with vigil.")
	r1 := noErrors("#c1", 1)
	worker := field(jsonPart(r1[0].content), "task")
	if worker == "" || field(jsonPart(r1[0].content), "owner_key") != mcpserver.ProjectKey(project) {
		t.Fatalf("run 1's spawn: %s", r1[0].content)
	}
	if rec, err := readServeRecord(data); err != nil || syscall.Kill(rec.PID, 0) != nil {
		t.Fatalf("no background server after Codex exited: %v", err)
	}

	// 2. Wait for it across Codex's limit.
	start := time.Now()
	run("#c2", "Wait for the worker and tell me what it found.")
	r2 := noErrors("#c2", 2)
	var w1, w2 mcpserver.WaitOutput
	if err := json.Unmarshal([]byte(jsonPart(r2[0].content)), &w1); err != nil || !w1.TimedOut || !w1.Capped || w1.Waited != 270 || len(w1.Running) != 1 {
		t.Fatalf("the first wait: %v %s", err, r2[0].content)
	}
	if !strings.Contains(w1.Detail, "call "+mcpserver.ToolWait+" again") {
		t.Errorf("the first wait does not tell the model to wait again: %q", w1.Detail)
	}
	if err := json.Unmarshal([]byte(jsonPart(r2[1].content)), &w2); err != nil || len(w2.Notifications) != 1 || !strings.Contains(w2.Notifications[0].Reply, "done: the long job") {
		t.Fatalf("the second wait: %v %s", err, r2[1].content)
	}
	t.Logf("run 2 waited %s in two waits", time.Since(start).Round(time.Second))

	// 3. Close, and reuse the name.
	run("#c3", "Close the worker and start a new one.")
	r3 := noErrors("#c3", 3)
	if field(jsonPart(r3[1].content), "outcome") != "closed" || field(jsonPart(r3[1].content), "task") != worker {
		t.Errorf("run 3's close: %s", r3[1].content)
	}
	if field(jsonPart(r3[2].content), "agent") != "worker" {
		t.Errorf("run 3's spawn under the freed name: %s", r3[2].content)
	}
	if log := fileTail(filepath.Join(data, "daemon.log"), 1<<20); strings.Contains(log, "level=ERROR") || strings.Contains(log, "owner died") {
		t.Errorf("the background server logged errors in normal use:\n%s", log)
	}
}

// jsonPart returns the first JSON object of a tool result as a client
// shows it to its model (Codex wraps it in text).
func jsonPart(content string) string {
	i := strings.Index(content, "{")
	if i < 0 {
		return content
	}
	dec := json.NewDecoder(strings.NewReader(content[i:]))
	var raw json.RawMessage
	if dec.Decode(&raw) != nil {
		return content
	}
	return string(raw)
}
