package vigilstore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/claudecode"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/sqlite"
)

// claudeCLI returns the Claude Code CLI to drive: $VIGIL_CLAUDE, else
// claude on PATH; without one the test is skipped loudly, or fails when
// VIGIL_TEST_STRICT=1.
func claudeCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VIGIL_CLAUDE"); p != "" {
		return p
	}
	if p, err := exec.LookPath("claude"); err == nil {
		return p
	}
	msg := "SKIP: Claude Code CLI not found; run .ci/claude.sh and set VIGIL_CLAUDE"
	if os.Getenv("VIGIL_TEST_STRICT") == "1" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
	return ""
}

// TestClaudeCodeSessionIsClean drives the real Claude Code CLI (through the
// fake Messages API) as a vigil session's agent on SQLite: a background
// subagent that finishes while the main agent is idle, so the CLI wakes
// itself (a provider wake, a continuation gate), and a background Bash
// task. doctor finds nothing in the store.
func TestClaudeCodeSessionIsClean(t *testing.T) {
	cli := claudeCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := providertest.NewAnthropic(t)
	release := make(chan struct{})
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		last := r.LastUserText()
		switch {
		case r.Header.Get("x-claude-code-agent-id") != "":
			return providertest.Reply{Blocks: []chat.Block{chat.Text("SUBAGENT-RESULT: the answer is 42")}, Hold: release}, true
		case strings.Contains(last, "<task-notification>"):
			return providertest.TextAnswer("MAIN: woke: " + strings.Join(strings.Fields(last), " ")[:40]), true
		case lastIsToolResult(r):
			return providertest.TextAnswer("MAIN: launched"), true
		case strings.Contains(last, "start the work"):
			return providertest.Answer(
				providertest.ToolUse("", "Agent", `{"description":"compute answer","prompt":"SUBTASK: compute the answer","subagent_type":"general-purpose","run_in_background":true}`),
				providertest.ToolUse("", "Bash", `{"command":"sleep 0.2; echo BASH-DONE","description":"short job","run_in_background":true}`),
			), true
		}
		return providertest.Reply{}, false
	})
	home, tmp, cwd, dir := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	drv := claudecode.New(claudecode.Options{
		Path: cli,
		Env: []string{
			"HOME=" + home, "TMPDIR=" + tmp, "ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=sk-test-dummy",
			"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	path := filepath.Join(dir, "vigil.db")
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := vigil.Open(ctx, vigil.Options{
		Store: st, Drivers: map[string]provider.SessionDriver{claudecode.Name: drv}, DefaultProvider: claudecode.Name,
		DataDir: dir, Node: "doctor-test", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "start the work", Provider: claudecode.Name, Cwd: cwd,
		Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, rt, sess.ID, "main's first run to end", func(evs []vigil.Event) bool {
		return mainRunEndedAfter(evs, 0)
	})
	close(release) // the subagent finishes while main is idle
	// Both completions are written, and a run of main ends after them:
	// the session saw them. (WaitQuiescent alone does not wait for that:
	// a notification the CLI delivers itself is in no inbox.)
	waitFor(t, ctx, rt, sess.ID, "main to run after both completions", func(evs []vigil.Event) bool {
		last, n := 0, 0
		for i, ev := range evs {
			if ev.Type == "notification.written" {
				last, n = i, n+1
			}
		}
		return n == 2 && mainRunEndedAfter(evs, last)
	})
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if err := rt.CloseSession(ctx, sess.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := drv.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := sqlite.OpenReader(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	recs, err := ro.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	wakes := 0
	for _, r := range recs {
		count[r.Type]++
		if e, ok := decode(t, r).(*core.RunStarted); ok && e.Agent == core.MainAgent && e.Kind == core.RunProviderWake {
			wakes++
		}
	}
	t.Logf("%d events: %v", len(recs), count)
	for _, r := range recs {
		switch r.Type {
		case "notification.dropped", "dropped", "task.started", "task.updated", "run.started", "run.ended", "notification.written":
			t.Logf("  %d %s %s", r.Seq, r.Type, shorten(string(r.Data), 200))
		}
	}
	if count["task.started"] < 2 || wakes == 0 {
		t.Fatalf("the session lacks what the checks look at: %d provider wake run(s), %v", wakes, count)
	}
	rep, err := Scan(ctx, ro, Options{Name: path})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 || len(rep.Warnings) != 0 {
		t.Fatalf("a real Claude Code session:\n%s", text(t, rep))
	}
}

func lastIsToolResult(r *providertest.Request) bool {
	for _, b := range r.LastUser().Content {
		if b.Type == chat.BlockToolResult {
			return true
		}
	}
	return false
}

// waitFor waits until done accepts the session's log so far.
func waitFor(t *testing.T, ctx context.Context, rt *vigil.Runtime, id vigil.SessionID, what string, done func([]vigil.Event) bool) {
	t.Helper()
	sub, err := rt.Subscribe(ctx, &vigil.SubscribeParams{Session: id})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var evs []vigil.Event
	for ev := range sub.C {
		evs = append(evs, ev)
		if done(evs) {
			return
		}
	}
	t.Fatalf("waiting for %s: %v", what, ctx.Err())
}

// mainRunEndedAfter reports whether a run of main ended after evs[i].
func mainRunEndedAfter(evs []vigil.Event, i int) bool {
	for _, ev := range evs[i:] {
		if ev.Type == "run.ended" && strings.Contains(string(ev.Data), `"agent":"a0"`) {
			return true
		}
	}
	return false
}
