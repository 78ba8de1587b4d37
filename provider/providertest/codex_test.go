package providertest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

// codexCLI returns the Codex CLI that VIGIL_CODEX names (bash .ci/codex.sh
// installs it and prints its path), or skips the test saying so, or fails
// it when VIGIL_TEST_STRICT=1.
func codexCLI(t *testing.T) string {
	t.Helper()
	p := os.Getenv("VIGIL_CODEX")
	if p == "" {
		msg := "the Codex CLI is not installed: set VIGIL_CODEX=\"$(bash .ci/codex.sh)\" to run Codex against the fake Responses API"
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(msg + " (VIGIL_TEST_STRICT=1 forbids skipping)")
		}
		t.Skip("SKIPPED: " + msg)
	}
	return p
}

// codexExec runs codex exec with prompt against srv, in a fresh CODEX_HOME
// whose config.toml makes srv the model provider, with no approvals, no
// sandbox, no analytics and no plugins (whose sync would reach out to the
// network), plus extra (TOML tables), and returns its JSONL events.
func codexExec(t *testing.T, srv *providertest.Server, extra, prompt string) []map[string]any {
	t.Helper()
	cli := codexCLI(t)
	home, work := t.TempDir(), t.TempDir()
	config := providertest.CodexConfig(srv) + extra
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "exec", "--strict-config", "--skip-git-repo-check", "--ephemeral", "--json", "-C", work, prompt)
	// HOME is the test's too: Codex runs commands in login shells, which
	// would read the machine's profile (one that blocks, a pyenv rehash
	// waiting on its lock, stalls the command past its yield).
	cmd.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+home, "FAKE_OPENAI_KEY=sk-test-dummy", "RUST_LOG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("codex stderr:\n%s", stderr.String())
	var events []map[string]any
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			t.Errorf("codex printed a line that is not JSON: %s", sc.Bytes())
			continue
		}
		events = append(events, ev)
	}
	if err != nil {
		t.Fatalf("codex exec: %v\nstdout:\n%s", err, stdout.String())
	}
	return events
}

// TestCodexExec runs the Codex CLI's exec against the fake Responses API:
// the fake has Codex run a shell command through its exec_command tool,
// sees the command's output come back as the call's output, and answers
// "hello", which Codex prints as the turn's final message.
func TestCodexExec(t *testing.T) {
	srv := providertest.NewResponses(t)
	srv.On(providertest.Nth(1), providertest.Answer(providertest.ToolUse("call_1", "exec_command", `{"cmd":"echo vigil-$((6*7))"}`)))
	srv.On(providertest.LastUserContains("vigil-42"), providertest.TextAnswer("hello"))
	events := codexExec(t, srv, "", "say hello")

	var command, message string
	var usage map[string]any
	for _, ev := range events {
		item, _ := ev["item"].(map[string]any)
		switch {
		case ev["type"] == "item.completed" && item["type"] == "command_execution":
			command, _ = item["aggregated_output"].(string)
		case ev["type"] == "item.completed" && item["type"] == "agent_message":
			message, _ = item["text"].(string)
		case ev["type"] == "turn.completed":
			usage, _ = ev["usage"].(map[string]any)
		case ev["type"] == "turn.failed" || ev["type"] == "error":
			t.Errorf("codex: %v", ev)
		}
	}
	if strings.TrimSpace(command) != "vigil-42" || message != "hello" || usage == nil || usage["input_tokens"].(float64) <= 0 {
		t.Errorf("command output %q, final message %q, usage %v; events %v", command, message, usage, events)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the fake saw %d requests, want 2", len(reqs))
	}
	first, second := reqs[0], reqs[1]
	if first.Model != "gpt-test" || !first.Stream || first.Header.Get("Authorization") != "Bearer sk-test-dummy" ||
		!strings.Contains(first.LastUserText(), "say hello") || !strings.Contains(first.System, "Codex") {
		t.Errorf("first request: model %q, stream %v, headers %v, last user %q", first.Model, first.Stream, first.Header, first.LastUserText())
	}
	if !slices.ContainsFunc(first.Tools, func(s chat.ToolSpec) bool { return s.Name == "exec_command" }) {
		t.Errorf("first request's tools lack exec_command: %v", first.Tools)
	}
	last := second.LastUser()
	if len(last.Content) == 0 || last.Content[0].Type != chat.BlockToolResult || last.Content[0].ToolUseID != "call_1" || !strings.Contains(last.Content[0].Content, "vigil-42") {
		t.Errorf("second request's last user message = %+v", last)
	}
}
