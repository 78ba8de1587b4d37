package claudecode

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

const skipMessage = "SKIP: Claude Code CLI not found; run .ci/claude.sh and set VIGIL_CLAUDE"

// findCLI returns the CLI to run: $VIGIL_CLAUDE, else claude on PATH.
func findCLI() string {
	if p := os.Getenv("VIGIL_CLAUDE"); p != "" {
		return p
	}
	if p, err := exec.LookPath("claude"); err == nil {
		return p
	}
	return ""
}

// cliPath returns the CLI or skips the test loudly (fails it when
// VIGIL_TEST_STRICT=1).
func cliPath(t *testing.T) string {
	t.Helper()
	p := findCLI()
	if p == "" {
		fmt.Fprintln(os.Stderr, "\n**********\n"+skipMessage+"\n**********")
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(skipMessage)
		}
		t.Skip(skipMessage)
	}
	return p
}

var taskIDTag = regexp.MustCompile(`<task-id>([^<]+)</task-id>`)

// cliSession is what one scripted run of the real CLI left on disk.
type cliSession struct {
	projects string // $HOME/.claude/projects
	main     string // the main session's JSONL
	agent    string // the background subagent's id
	bash     string // the background Bash task's id
}

// runCLISession runs the real Claude Code CLI in stream-json mode against a
// fake Anthropic server, scripted so that the main agent starts a
// background subagent and a background Bash command and ends its turn; the
// Bash command's notification wakes it; then the subagent finishes and its
// notification wakes it again; in that wake turn it sends the finished
// subagent a message (SendMessage), which resumes it in a follow-on run;
// the follow-on's notification wakes the main agent a third time. The CLI
// writes its session files under a temporary HOME.
func runCLISession(t *testing.T) cliSession {
	t.Helper()
	path := cliPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	srv := providertest.NewAnthropic(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var agentID, bashID string
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		last := r.LastUserText()
		if id := r.Header.Get("x-claude-code-agent-id"); id != "" {
			mu.Lock()
			agentID = id
			mu.Unlock()
			if strings.Contains(last, "MSG2") {
				return providertest.TextAnswer("SUB-FOLLOWON: got MSG2; the number is 7"), true
			}
			return providertest.Reply{Blocks: []chat.Block{chat.Text("SUB-FIRST: the answer is 42")}, Hold: release}, true
		}
		switch {
		case strings.Contains(last, "<result>SUB-FOLLOWON"):
			return providertest.TextAnswer("MAIN: got the follow-on reply"), true
		case strings.Contains(last, "<result>SUB-FIRST"):
			ids := taskIDTag.FindStringSubmatch(last)
			return providertest.Answer(providertest.ToolUse("", "SendMessage",
				fmt.Sprintf(`{"to":%q,"summary":"one more question","message":"MSG2: one more thing, please"}`, ids[1]))), true
		case strings.Contains(last, "<task-notification>"):
			ids := taskIDTag.FindStringSubmatch(last)
			mu.Lock()
			bashID = ids[1]
			mu.Unlock()
			return providertest.TextAnswer("MAIN: the command is done"), true
		case strings.Contains(last, "Resuming agent") || strings.Contains(last, `"success":true`):
			return providertest.TextAnswer("MAIN: follow-up sent, waiting"), true
		case strings.Contains(last, "Command running in background") || strings.Contains(last, "Async agent launched"):
			return providertest.TextAnswer("MAIN: both started, ending turn"), true
		case strings.Contains(last, "start the doctor scenario"):
			return providertest.Answer(
				providertest.ToolUse("", "Agent", `{"description":"compute answer","prompt":"SUBTASK: compute the answer","subagent_type":"general-purpose","run_in_background":true}`),
				providertest.ToolUse("", "Bash", `{"command":"sleep 2; echo BASH-DONE","description":"Sleep then print","run_in_background":true}`),
			), true
		}
		return providertest.Reply{}, false
	})

	home, tmp, cwd := t.TempDir(), t.TempDir(), t.TempDir()
	cmd := exec.CommandContext(ctx, path, "-p", "--output-format", "stream-json", "--verbose",
		"--input-format", "stream-json", "--dangerously-skip-permissions")
	cmd.Dir = cwd
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp,
		"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=sk-test-dummy",
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "IS_SANDBOX=1",
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the CLI: %v", err)
	}
	results := make(chan string, 16)
	go func() {
		defer close(results)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var l struct {
				Type   string `json:"type"`
				Result string `json:"result"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == "result" && l.Result != "" {
				results <- l.Result
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	wait := func(want string) {
		t.Helper()
		for {
			select {
			case r, ok := <-results:
				if !ok {
					t.Fatalf("the CLI ended before the result %q; stderr:\n%s", want, stderr.String())
				}
				if strings.Contains(r, want) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no result %q: %v; stderr:\n%s", want, ctx.Err(), stderr.String())
			}
		}
	}
	fmt.Fprintln(stdin, `{"type":"user","message":{"role":"user","content":"start the doctor scenario"}}`)
	wait("MAIN: both started")
	wait("MAIN: the command is done")
	close(release) // the subagent finishes while the main agent is idle
	wait("MAIN: follow-up sent")
	wait("MAIN: got the follow-on reply")
	stdin.Close()
	for range results {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the CLI: %v; stderr:\n%s", err, stderr.String())
	}

	projects := filepath.Join(home, ".claude", "projects")
	mains, _ := filepath.Glob(filepath.Join(projects, "*", "*.jsonl"))
	if len(mains) != 1 {
		t.Fatalf("want one main session file under %s, got %v", projects, mains)
	}
	mu.Lock()
	defer mu.Unlock()
	return cliSession{projects: projects, main: mains[0], agent: agentID, bash: bashID}
}

// TestCLISession runs the real CLI, then doctor on its unmodified session
// (nothing to find) and on copies with each failure put back.
func TestCLISession(t *testing.T) {
	s := runCLISession(t)
	now := func() time.Time { return time.Now().Add(time.Hour) }
	rep, err := Scan(s.projects, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 1 || len(rep.Read) != 3 {
		t.Fatalf("read %d sessions, files %v; want 1 session: main, subagent transcript, subagent meta", rep.Sessions, rep.Read)
	}
	expect(t, "unmodified", rep)
	checkReplay(t, s.main, s)

	orig := readFiles(t, s.projects)
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			fs := orig.clone()
			changed := m.edit(t, fs, ids{agent: s.agent, bash: s.bash})
			t.Logf("%s", strings.Join(changed, "\n"))
			dir := t.TempDir()
			fs.write(t, dir)
			rep, err := Scan(dir, Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			expect(t, m.name, rep)
		})
	}
	// The bare enqueue deleted, the rest of the turn left: still found.
	for _, c := range []struct {
		kind, result string
	}{{"stranded-reply", "<result>SUB-FOLLOWON"}, {"stuck-subagent", "<result>SUB-FIRST"}} {
		t.Run(c.kind+"/enqueue-only", func(t *testing.T) {
			fs := orig.clone()
			t.Log(fs.deleteMain(fs.find(t, 0, "the notification", isEnqueueOf(c.result))))
			dir := t.TempDir()
			fs.write(t, dir)
			rep, err := Scan(dir, Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			expect(t, c.kind, rep)
		})
	}
}

// checkReplay checks the queue replay of the unmodified session: three
// notifications, each taken by a dequeue, the first two queued while the
// session was idle.
func checkReplay(t *testing.T, main string, s cliSession) {
	t.Helper()
	entries, warns, err := readFile(main, 1<<26)
	if err != nil || len(warns) > 0 {
		t.Fatalf("read %s: %v %v", main, err, warns)
	}
	q := replayQueue(entries)
	var notes []*item
	for _, it := range q.items {
		if it.pending() {
			t.Errorf("item of line %d never taken", it.enq.line)
		}
		if it.isNote {
			notes = append(notes, it)
		}
	}
	if len(notes) != 3 || notes[0].note.Task != s.bash || notes[1].note.Task != s.agent || notes[2].note.Task != s.agent {
		t.Fatalf("notifications: %+v", notes)
	}
	if notes[0].busy || notes[1].busy {
		t.Errorf("the Bash and the first agent notification should find the session idle: %v %v", notes[0].busy, notes[1].busy)
	}
}

// TestRegenerateFixtures writes testdata/cli from a fresh run of the real
// CLI (VIGIL_DOCTOR_REGEN=1): the session, trimmed of its request bodies,
// and one copy per failure put back, each with a CHANGES.txt.
func TestRegenerateFixtures(t *testing.T) {
	if os.Getenv("VIGIL_DOCTOR_REGEN") != "1" {
		t.Skip("set VIGIL_DOCTOR_REGEN=1 to rewrite testdata/cli from the real CLI")
	}
	s := runCLISession(t)
	fs := readFiles(t, s.projects)
	// One level less: the fixtures hold the session files themselves.
	rel, _ := filepath.Rel(s.projects, filepath.Dir(s.main))
	small := &files{lines: map[string][]string{}}
	for k, v := range fs.lines {
		r, _ := filepath.Rel(rel, k)
		small.lines[r] = v
		if k == fs.main {
			small.main = r
		}
	}
	small.trim()
	root := filepath.Join("testdata", "cli")
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	small.write(t, filepath.Join(root, "unmodified"))
	writeNote(t, filepath.Join(root, "unmodified"), []string{
		"A session the real Claude Code CLI " + cliVersion(t) + " wrote in TestRegenerateFixtures (runCLISession),",
		"with these lines removed to keep it small (doctor reads none of them): " + trimmed + ". Nothing else changed.",
	})
	for _, m := range mutations {
		c := small.clone()
		changed := m.edit(t, c, idsOf(t, c))
		dir := filepath.Join(root, m.name)
		c.write(t, dir)
		writeNote(t, dir, append([]string{"testdata/cli/unmodified with this change (mutations[" + m.name + "] in mutate_test.go):"}, changed...))
	}
}

func writeNote(t *testing.T, dir string, lines []string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "CHANGES.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func cliVersion(t *testing.T) string {
	out, err := exec.Command(cliPath(t), "--version").Output()
	if err != nil {
		t.Fatalf("claude --version: %v", err)
	}
	return strings.Fields(string(out))[0]
}
