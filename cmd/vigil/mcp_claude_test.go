package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

const claudeSkip = "SKIP: the Claude Code end-to-end MCP test needs the real CLI: run .ci/claude.sh and set VIGIL_CLAUDE to the path it prints"

// claudeCLI returns $VIGIL_CLAUDE, or skips the test loudly (fails it
// under VIGIL_TEST_STRICT=1).
func claudeCLI(t *testing.T) string {
	t.Helper()
	p := os.Getenv("VIGIL_CLAUDE")
	if p == "" {
		fmt.Fprintln(os.Stderr, "\n**********\n"+claudeSkip+"\n**********")
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(claudeSkip)
		}
		t.Skip(claudeSkip)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("VIGIL_CLAUDE=%s: %v", p, err)
	}
	return p
}

// toolNames lists a request's tools.
func toolNames(r *providertest.Request) []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Name)
	}
	return out
}

// lastToolResult returns the content of the last user message's tool
// result for the tool call id, or "".
func lastToolResult(r *providertest.Request, id string) (string, bool) {
	for _, b := range r.LastUser().Content {
		if b.Type == chat.BlockToolResult && b.ToolUseID == id {
			return b.Content, true
		}
	}
	return "", false
}

// TestMCPClaudeCode gives the real Claude Code CLI vigil as an MCP server
// (--mcp-config naming 'vigil mcp --data DIR'); a fake Anthropic API makes
// the CLI's model call spawn_agent, then wait, and the reply of the vigil
// agent (scripted) must come back into the Claude Code conversation: the
// fake's next request holds it.
func TestMCPClaudeCode(t *testing.T) {
	cli := claudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir, home, work := t.TempDir(), t.TempDir(), t.TempDir()
	srv := providertest.NewAnthropic(t)

	cfg := map[string]any{"mcpServers": map[string]any{"vigil": map[string]any{
		"type": "stdio", "command": os.Args[0],
		"args": []string{"mcp", "--data", dir, "--provider", "script", "--script", mcpScenario(t), "--owner", "claude-test"},
		"env":  map[string]string{"VIGIL_AS_CLI": "1", "HOME": home, "ANTHROPIC_API_KEY": ""},
	}}}
	cfgPath := filepath.Join(t.TempDir(), "mcp.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	// The fake model: spawn_agent, then wait on the task it returns, then
	// end the turn. Requests of other kinds (titles, subagents) get a
	// short text.
	const spawnID, waitID, searchID = "toolu_vigil_spawn", "toolu_vigil_wait", "toolu_vigil_search"
	var mu sync.Mutex
	var taskID string
	var sawReply bool
	taskRe := regexp.MustCompile(`"task":"([^"]+)"`)
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("x-claude-code-agent-id") != "" || len(r.Tools) == 0 {
			return providertest.TextAnswer("ok"), true
		}
		t.Logf("main request %d: %d tools: %v", r.N, len(r.Tools), toolNames(r))
		has := func(name string) bool {
			for _, tl := range r.Tools {
				if tl.Name == name {
					return true
				}
			}
			return false
		}
		if res, ok := lastToolResult(r, waitID); ok {
			sawReply = strings.Contains(res, "w1: done with count the lines")
			t.Logf("wait's result in the conversation: %s", res)
			return providertest.TextAnswer("The vigil agent reported back."), true
		}
		if res, ok := lastToolResult(r, spawnID); ok {
			m := taskRe.FindStringSubmatch(strings.ReplaceAll(res, " ", ""))
			if m == nil {
				t.Errorf("spawn_agent's result holds no task id: %s", res)
				return providertest.TextAnswer("no task"), true
			}
			taskID = m[1]
			in, _ := json.Marshal(map[string]any{"tasks": []string{taskID}, "timeout_seconds": 60})
			return providertest.Answer(providertest.ToolUse(waitID, "mcp__vigil__wait", string(in))), true
		}
		if _, ok := lastToolResult(r, searchID); ok || has("mcp__vigil__spawn_agent") {
			return providertest.Answer(providertest.ToolUse(spawnID, "mcp__vigil__spawn_agent", `{"name":"w1","prompt":"count the lines"}`)), true
		}
		if has("ToolSearch") {
			// vigil's tools are deferred: load them first.
			return providertest.Answer(providertest.ToolUse(searchID, "ToolSearch", `{"query":"select:mcp__vigil__spawn_agent,mcp__vigil__wait"}`)), true
		}
		t.Errorf("the CLI offers neither vigil's tools nor ToolSearch: %v", toolNames(r))
		return providertest.TextAnswer("stuck"), true
	})

	cmd := exec.CommandContext(ctx, cli, "-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json",
		"--dangerously-skip-permissions", "--mcp-config", cfgPath, "--strict-mcp-config")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "IS_SANDBOX=1", "HOME="+home, "TMPDIR="+t.TempDir(), "ANTHROPIC_BASE_URL="+srv.URL,
		"ANTHROPIC_API_KEY=sk-test-dummy", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "VIGIL_AS_CLI=")
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
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("claude stderr:\n%s", stderr.String())
		}
	}()
	prompt, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": "Count the lines of the project in the background with vigil, and tell me when it is done."}})
	if _, err := fmt.Fprintf(stdin, "%s\n", prompt); err != nil {
		t.Fatal(err)
	}
	var result map[string]any
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev["type"] {
		case "system":
			if ev["subtype"] == "init" {
				t.Logf("init: mcp_servers %v", ev["mcp_servers"])
			}
		case "result":
			result = ev
		}
		if result != nil {
			break
		}
	}
	if result == nil {
		t.Fatalf("no result from the CLI (%v)", sc.Err())
	}
	t.Logf("result: %v", result["result"])
	mu.Lock()
	defer mu.Unlock()
	if taskID == "" {
		t.Fatal("the CLI never called spawn_agent")
	}
	if !sawReply {
		t.Fatal("the vigil agent's reply did not come back into the conversation")
	}
	if s, _ := result["result"].(string); !strings.Contains(s, "reported back") {
		t.Errorf("final result %q", s)
	}
}
