package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/provider/providertest"
)

const claudeSkip = "SKIP: the Claude Code end-to-end MCP test needs the real CLI: run .ci/claude.sh and set VIGIL_CLAUDE to the path it prints"

// claudeCLI returns $VIGIL_CLAUDE, or skips the test loudly (fails it
// under VIGIL_TEST_STRICT=1).
func claudeCLI(t *testing.T) string { return externalCLI(t, "VIGIL_CLAUDE", claudeSkip) }

// externalCLI returns the path the environment variable names, or skips
// the test loudly with why (fails it under VIGIL_TEST_STRICT=1).
func externalCLI(t *testing.T, variable, why string) string {
	t.Helper()
	p := os.Getenv(variable)
	if p == "" {
		fmt.Fprintln(os.Stderr, "\n**********\n"+why+"\n**********")
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s=%s: %v", variable, p, err)
	}
	return p
}

// claudeEnv is what a Claude Code run is given: vigil first on PATH, its
// own home, and one fake Anthropic API for its model and for vigil's
// agents (which it passes on to the MCP server).
type claudeEnv struct {
	cli, home, project, bin, data string
	api                           *providertest.Server
	drv                           *driver
}

// newClaudeEnv sets up a home and a project for Claude Code; the fake API
// answers Claude Code's requests with the driver's plans and vigil's
// agents with agentModel.
func newClaudeEnv(t *testing.T, plans map[string][]step) *claudeEnv {
	t.Helper()
	ce := &claudeEnv{cli: claudeCLI(t), home: t.TempDir(), project: t.TempDir(), api: providertest.NewAnthropic(t)}
	ce.bin = binDir(t, map[string]string{"claude": ce.cli})
	ce.data = filepath.Join(ce.home, ".local", "share", "vigil")
	t.Cleanup(func() {
		stopDaemon(t, ce.data)
		if t.Failed() {
			t.Logf("daemon.log:\n%s", fileTail(filepath.Join(ce.data, "daemon.log"), 8000))
		}
	})
	vigilConfig(t, ce.home)
	ce.drv = newDriver(t, func(tool string) string { return "mcp__vigil__" + tool }, plans)
	var tools []string
	for _, plan := range plans {
		for _, st := range plan {
			if st.tool != "" {
				tools = append(tools, "mcp__vigil__"+st.tool)
			}
		}
	}
	ce.api.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		if !strings.HasPrefix(r.Header.Get("User-Agent"), "claude-cli") {
			return agentModel(r) // one of vigil's agents
		}
		if r.Header.Get("x-claude-code-agent-id") != "" || len(r.Tools) == 0 {
			return providertest.TextAnswer("ok"), true // titles, summaries
		}
		if !hasTool(r, "mcp__vigil__"+mcpserver.ToolSpawn) && hasTool(r, "ToolSearch") {
			// vigil's tools are deferred: load them first.
			if _, ok := lastToolResult(r, "toolu_search"); !ok {
				return providertest.Answer(providertest.ToolUse("toolu_search", "ToolSearch", `{"query":"select:`+strings.Join(tools, ",")+`"}`)), true
			}
		}
		if reply, ok := ce.drv.next(r.Messages); ok {
			return reply, true
		}
		t.Errorf("a Claude Code request of no turn: %s", r.LastUserText())
		return providertest.TextAnswer("lost"), true
	})
	return ce
}

// hasTool reports whether a request offers the tool.
func hasTool(r *providertest.Request, name string) bool {
	for _, tl := range r.Tools {
		if tl.Name == name {
			return true
		}
	}
	return false
}

// lastToolResult returns the content of the last user message's tool
// result for the tool call id.
func lastToolResult(r *providertest.Request, id string) (string, bool) {
	for _, m := range r.Messages {
		for _, b := range m.Content {
			if b.Type == "tool_result" && b.ToolUseID == id {
				return b.Content, true
			}
		}
	}
	return "", false
}

// env returns a Claude Code run's environment.
func (ce *claudeEnv) env() []string {
	return append(os.Environ(), "PATH="+ce.bin+":"+os.Getenv("PATH"), "IS_SANDBOX=1", "HOME="+ce.home, "XDG_CONFIG_HOME=", "XDG_DATA_HOME=",
		"VIGIL_DATA=", "VIGIL_OWNER=", "VIGIL_AS_CLI=", "TMPDIR="+os.TempDir(), "ANTHROPIC_BASE_URL="+ce.api.URL,
		"ANTHROPIC_API_KEY=sk-test-dummy", "OPENAI_API_KEY=", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
}

// run runs one 'claude -p' turn in the project with the prompt and
// returns its final result text.
func (ce *claudeEnv) run(t *testing.T, ctx context.Context, prompt string, extra ...string) string {
	t.Helper()
	args := append([]string{"-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json", "--dangerously-skip-permissions"}, extra...)
	cmd := exec.CommandContext(ctx, ce.cli, args...)
	cmd.Dir, cmd.Env = ce.project, ce.env()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuf{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	msg, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": prompt}})
	if _, err := fmt.Fprintf(stdin, "%s\n", msg); err != nil {
		t.Fatal(err)
	}
	var result map[string]any
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for result == nil && sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch {
		case ev["type"] == "system" && ev["subtype"] == "init":
			t.Logf("claude init: mcp_servers %v", ev["mcp_servers"])
		case ev["type"] == "result":
			result = ev
		}
	}
	stdin.Close() // the client exits: as a user's 'claude -p' does
	_ = cmd.Wait()
	if result == nil {
		t.Fatalf("no result from Claude Code (%v); stderr:\n%s", sc.Err(), stderr.String())
	}
	s, _ := result["result"].(string)
	return s
}

// waitNotified waits until the background server holds a notification of
// the session: the agent finished while no client ran.
func waitNotified(t *testing.T, ctx context.Context, data, task string) {
	t.Helper()
	rec, err := readServeRecord(data)
	if err != nil {
		t.Fatalf("no background server: %v", err)
	}
	token := readToken(t, data)
	session, _, _ := strings.Cut(task, "/")
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rec.URL+"/api/sessions/"+session, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("read the session from the server: %v", err)
		}
		var d struct {
			Notifications int `json:"notifications"`
		}
		err = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if d.Notifications > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the agent did not finish while no client ran")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestMCPClaudeCode gives the real Claude Code CLI vigil as configured by
// the README's 'claude mcp add' line, and runs three 'claude -p' turns in
// one project over a fake model API:
//
//  1. the model spawns a worker and ends its turn; Claude Code exits while
//     the worker still works, and the worker finishes in vigil's
//     background server meanwhile;
//  2. the next run's wait (no owner key anywhere: the project's) gets the
//     worker's reply, closes it, and spawns a new "worker" under the freed
//     name;
//  3. the background server is killed with SIGKILL while a wait blocks:
//     the wait still returns the agent's reply, with no error the model
//     sees.
func TestMCPClaudeCode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	task := func(res []string, i int) string { return field(res[i], "task") }
	ids := func(res string) []string {
		var w mcpserver.WaitOutput
		_ = json.Unmarshal([]byte(res), &w)
		var out []string
		for _, n := range w.Notifications {
			out = append(out, n.ID)
		}
		return out
	}
	plans := map[string][]step{
		"#r1": {
			{tool: mcpserver.ToolSpawn, args: func([]string) map[string]any {
				return map[string]any{"name": "worker", "prompt": "sleep 3\ncount the lines"}
			}},
			{text: "The worker is counting in the background."},
		},
		"#r2": {
			{tool: mcpserver.ToolWait, args: func([]string) map[string]any { return map[string]any{"timeout_seconds": 60} }},
			{tool: mcpserver.ToolList},
			{tool: mcpserver.ToolClose, args: func(res []string) map[string]any {
				var l mcpserver.ListOutput
				_ = json.Unmarshal([]byte(res[1]), &l)
				if len(l.Tasks) == 0 {
					return map[string]any{"task": "none"}
				}
				return map[string]any{"task": l.Tasks[0].Task}
			}},
			{tool: mcpserver.ToolSpawn, args: func([]string) map[string]any { return map[string]any{"name": "worker", "prompt": "the second job"} }},
			{text: "The worker reported back."},
		},
		"#r3": {
			{tool: mcpserver.ToolSpawn, args: func([]string) map[string]any { return map[string]any{"name": "sleeper", "prompt": "sleep 6\nnap"} }},
			{tool: mcpserver.ToolWait, args: func(res []string) map[string]any {
				return map[string]any{"tasks": []string{task(res, 0)}, "timeout_seconds": 120}
			}},
			{text: "The sleeper reported back."},
		},
	}
	ce := newClaudeEnv(t, plans)

	// The README's line, as a user runs it in the project.
	add := exec.CommandContext(ctx, "sh", "-c", readmeSnippet(t, "claude-mcp-add"))
	add.Dir, add.Env = ce.project, ce.env()
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", readmeSnippet(t, "claude-mcp-add"), err, out)
	}

	// 1. Spawn, and exit while the worker works.
	if res := ce.run(t, ctx, "#r1 Count the lines in the background with vigil."); !strings.Contains(res, "in the background") {
		t.Fatalf("run 1's result: %q", res)
	}
	r1 := ce.drv.resultsOf("#r1")
	if len(r1) != 1 || r1[0].isError {
		t.Fatalf("run 1's spawn: %+v", r1)
	}
	worker := field(r1[0].content, "task")
	if key := field(r1[0].content, "owner_key"); key != mcpserver.ProjectKey(ce.project) {
		t.Errorf("owner key %q, want the project's %q", key, mcpserver.ProjectKey(ce.project))
	}
	waitNotified(t, ctx, ce.data, worker)
	// Claude Code was listed the wait that fits it: an hour.
	listed := false
	for _, r := range ce.api.Requests() {
		for _, tl := range r.Tools {
			if tl.Name == "mcp__vigil__"+mcpserver.ToolWait {
				listed = true
				if !strings.Contains(tl.Description, "at most 3600 seconds") {
					t.Errorf("Claude Code's vigil_wait does not fit it: %s", tl.Description)
				}
			}
		}
	}
	if !listed {
		t.Error("Claude Code was never listed vigil_wait")
	}

	// 2. The next run in the project gets the reply, closes the worker and
	// reuses its name.
	if res := ce.run(t, ctx, "#r2 Did the worker finish?"); !strings.Contains(res, "reported back") {
		t.Fatalf("run 2's result: %q", res)
	}
	r2 := ce.drv.resultsOf("#r2")
	if len(r2) != 4 {
		t.Fatalf("run 2's calls: %+v", r2)
	}
	for i, r := range r2 {
		if r.isError {
			t.Fatalf("run 2's call %d (%s) failed: %s", i, r.tool, r.content)
		}
	}
	if !strings.Contains(r2[0].content, "done: count the lines") || len(ids(r2[0].content)) != 1 {
		t.Errorf("run 2's wait did not return the worker's reply: %s", r2[0].content)
	}
	if field(r2[2].content, "outcome") != "closed" || field(r2[2].content, "task") != worker {
		t.Errorf("run 2's close: %s", r2[2].content)
	}
	if field(r2[3].content, "agent") != "worker" {
		t.Errorf("run 2's spawn under the freed name: %s", r2[3].content)
	}
	log := fileTail(filepath.Join(ce.data, "daemon.log"), 1<<20)
	if strings.Contains(log, "level=ERROR") || strings.Contains(log, "owner died") {
		t.Errorf("the background server logged errors in normal use:\n%s", log)
	}
	if token := readToken(t, ce.data); strings.Contains(log, token) {
		t.Error("the background server's log holds its API token")
	}

	// 3. Kill the background server while the wait blocks.
	before, err := readServeRecord(ce.data)
	if err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	ce.drv.onCall = func(marker, tool string) {
		if marker != "#r3" || tool != mcpserver.ToolWait {
			return
		}
		go func() {
			defer close(killed)
			// The answer reaches the client, which calls the tool, and the
			// wait blocks in the server: then kill it.
			time.Sleep(time.Second)
			if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
				t.Errorf("kill the background server: %v", err)
			}
		}()
	}
	res := ce.run(t, ctx, "#r3 Take a nap in the background and tell me when it is over.")
	<-killed
	r3 := ce.drv.resultsOf("#r3")
	if len(r3) != 2 || r3[1].isError || !strings.Contains(r3[1].content, "done: nap") {
		t.Fatalf("run 3's wait across the kill: %+v (result %q)", r3, res)
	}
	after, err := readServeRecord(ce.data)
	if err != nil || after.PID == before.PID {
		t.Fatalf("the server was not started again: %v %+v", err, after)
	}
}

// TestMCPClaudeCodeProjectFile runs Claude Code with the README's
// .mcp.json verbatim: a spawn, then a wait, and the agent's reply comes
// back into the conversation.
func TestMCPClaudeCodeProjectFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ce := newClaudeEnv(t, map[string][]step{
		"#p1": {
			{tool: mcpserver.ToolSpawn, args: func([]string) map[string]any { return map[string]any{"name": "w1", "prompt": "count the lines"} }},
			{tool: mcpserver.ToolWait, args: func(res []string) map[string]any {
				return map[string]any{"tasks": []string{field(res[0], "task")}, "timeout_seconds": 60}
			}},
			{text: "The vigil agent reported back."},
		},
	})
	cfg := filepath.Join(ce.project, ".mcp.json")
	if err := os.WriteFile(cfg, []byte(readmeSnippet(t, "claude-mcp-json")), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := ce.run(t, ctx, "#p1 Count the lines of the project in the background with vigil, and tell me when it is done.",
		"--mcp-config", cfg, "--strict-mcp-config"); !strings.Contains(res, "reported back") {
		t.Fatalf("result %q", res)
	}
	r := ce.drv.resultsOf("#p1")
	if len(r) != 2 || r[1].isError || !strings.Contains(r[1].content, "done: count the lines") {
		t.Fatalf("the agent's reply did not come back into the conversation: %+v", r)
	}
}
