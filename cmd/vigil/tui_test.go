package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/server"
)

// The terminal client's tests drive it through a real terminal: tmux runs
// the test binary as vigil in a detached session of a given size, keys go
// in with send-keys, and the screen comes back with capture-pane.

// tmuxPane is a tmux server of its own (its own socket) with one pane.
type tmuxPane struct {
	t      *testing.T
	tmux   string
	socket string
}

// startTmux runs vigil args in a w×h terminal. It skips the test loudly
// when tmux is missing, and fails it then under VIGIL_TEST_STRICT=1.
func startTmux(t *testing.T, w, h int, env []string, args ...string) *tmuxPane {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("tmux is needed for the terminal client's tests (VIGIL_TEST_STRICT=1): %v", err)
		}
		t.Skipf("SKIPPED: tmux is not installed, so the terminal client is not tested (apt-get install tmux; .ci/run installs it): %v", err)
	}
	p := &tmuxPane{t: t, tmux: bin, socket: fmt.Sprintf("vigil-test-%d-%d", os.Getpid(), time.Now().UnixNano())}
	cmd := append([]string{"env", "VIGIL_AS_CLI=1", "TERM=xterm-256color"}, env...)
	cmd = append(cmd, os.Args[0])
	cmd = append(cmd, args...)
	// remain-on-exit keeps the pane (and what the client printed last)
	// when it ends.
	p.run("-f", "/dev/null", "new-session", "-d", "-x", strconv.Itoa(w), "-y", strconv.Itoa(h), strings.Join(quoteAll(cmd), " "))
	p.run("set-option", "-g", "remain-on-exit", "on")
	t.Cleanup(func() {
		_ = exec.Command(bin, "-L", p.socket, "kill-server").Run()
	})
	return p
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command(p.tmux, append([]string{"-L", p.socket}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys sends keys as tmux names them ("Enter", "C-t", "y").
func (p *tmuxPane) keys(keys ...string) {
	p.t.Helper()
	p.run(append([]string{"send-keys", "-t", "0"}, keys...)...)
}

// typeText types text literally.
func (p *tmuxPane) typeText(text string) {
	p.t.Helper()
	p.run("send-keys", "-t", "0", "-l", text)
}

func (p *tmuxPane) screen() string {
	p.t.Helper()
	return p.run("capture-pane", "-p", "-t", "0")
}

// waitFor polls the screen until ok accepts it, for up to d; it fails
// the test with the last screen when the deadline passes. Polling an
// outside program's screen is the only way to see it.
func (p *tmuxPane) waitFor(what string, d time.Duration, ok func(screen string) bool) string {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := p.screen()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the screen never showed %s within %s; it shows:\n%s", what, d, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *tmuxPane) waitText(d time.Duration, texts ...string) string {
	p.t.Helper()
	return p.waitFor(fmt.Sprintf("%q", texts), d, func(s string) bool {
		for _, x := range texts {
			if !strings.Contains(s, x) {
				return false
			}
		}
		return true
	})
}

// saveScreen writes the screen to .ci/out/name, for the README and CI.
func saveScreen(t *testing.T, name, screen string) {
	t.Helper()
	dir := filepath.Join("..", "..", ".ci", "out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("cannot keep the screen: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(screen), 0o644); err != nil {
		t.Logf("cannot keep the screen: %v", err)
	}
}

// tuiScenario is the coordinator demo with a file write in the main
// agent's second round: in mode ask it waits for a person's approval.
const tuiScenario = `name: coordinator-tui
agents:
  main:
    turns:
      - say: "Splitting the job across three workers."
        tools:
          - Agent: {name: w1, description: "part one", prompt: "Do part one of: {{.Input}}", run_in_background: true}
          - Agent: {name: w2, description: "part two", prompt: "Do part two of: {{.Input}}", run_in_background: true}
          - Agent: {name: w3, description: "part three", prompt: "Do part three of: {{.Input}}", run_in_background: true}
      - say: "Writing the release plan while they work."
        tools:
          - Write: {file_path: PLAN.md, content: "# Release\n\n1. part one\n2. part two\n3. part three\n"}
      - say: "The workers are running; I will be woken by their **notifications**."
    on:
      notification:
        - say: "{{.Notification.Agent}} reported: {{.Notification.Result}}. Asking w2 to add tests while it finishes."
          tools:
            - SendMessage: {to: w2, message: "Also add tests for the edge cases."}
        - say: "Asking w3 to write the changelog while it finishes."
          tools:
            - SendMessage: {to: w3, message: "Also write the changelog entry."}
        - say: "Both messages wait on the workers' final rounds; the answers come as notifications."
        - say: "{{.Notification.Agent}} reported: {{.Notification.Result}}"
      message:
        - say: "main heard you: {{.Message.Text}}"
  w1:
    turns:
      - delay: 1s
        say: "part one is done"
    on:
      message:
        - delay: 4s
          say: "w1 answers: {{.Message.Text}}, and every edge case of part one is covered by a test now"
  w2:
    turns:
      - delay: 2s
        say: "part two is done"
    on:
      message:
        - delay: 500ms
          say: "tests added, as asked: {{.Message.Text}}"
  w3:
    turns:
      - delay: 3s
        say: "part three is done, and the release notes are drafted for review"
    on:
      message:
        - delay: 500ms
          say: "changelog written, as asked: {{.Message.Text}}"
`

// TestTUICoordinator runs the coordinator scenario in the terminal client
// at 80×24, in this process's runtime: the model's text streams, the
// write waits for an approval answered by a key, the notifications and
// the messages' outcomes show, and the side pane shows the agent tree.
func TestTUICoordinator(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	sc := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(sc, []byte(tuiScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startTmux(t, 80, 24, []string{"VIGIL_DATA=" + filepath.Join(dir, "data")},
		"chat", "--script", sc, "--cwd", work, "--permission-mode", "ask", "Build the release")

	// The write waits for a person: answered here with y (allow once).
	s := p.waitText(20*time.Second, "wants Write", "[y] allow once", "[n] deny", "[a] always")
	if !strings.Contains(s, "needs you") {
		t.Errorf("the status line does not say an approval needs you:\n%s", s)
	}
	saveScreen(t, "tui-80x24-approval.txt", s)
	p.keys("y")
	p.waitText(10*time.Second, "permission p1 allowed by user")
	s = p.waitFor("the session quiescent", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "← notification t3#2") && strings.Contains(s, "quiescent") && !strings.Contains(s, "(streaming)")
	})
	if b, err := os.ReadFile(filepath.Join(work, "PLAN.md")); err != nil || !strings.Contains(string(b), "part three") {
		t.Errorf("the approved write did not happen: %q, %v", b, err)
	}
	if strings.Contains(s, "(streaming)") {
		t.Errorf("live text is still shown after its round committed:\n%s", s)
	}
	// A message to an idle agent: its outcome comes back at once.
	p.typeText("@w1 one more thing")
	p.keys("Enter")
	p.waitText(10*time.Second, "→ w1: resumed")
	// Its model's text streams over its 4 s round, before it commits.
	s = p.waitText(10*time.Second, "w1 (streaming)", "w1 answers: one more")
	if strings.Contains(s, "covered by a test now") && !strings.Contains(s, "▍") {
		t.Errorf("the streaming text ended before its round committed:\n%s", s)
	}
	s = p.waitFor("the committed answer replacing the live text", 15*time.Second, func(s string) bool {
		return strings.Contains(s, "covered by a test now") && !strings.Contains(s, "(streaming)")
	})

	// Scroll back over the conversation, its tool calls unfolded:
	// notifications, the messages' outcomes, the tool calls, the write's
	// diff.
	p.keys("C-o")
	var all strings.Builder
	for s := p.screen(); ; {
		all.WriteString(s)
		if strings.Contains(s, "you › Build the release") {
			break // the top
		}
		p.keys("PPage")
		prev := s
		s = p.waitFor("the conversation scrolled", 5*time.Second, func(s string) bool { return s != prev })
	}
	for _, want := range []string{
		"← notification t1#1 from w1 (completed): part one is done",
		"← notification t2#2 from w2 (completed): tests added, as asked",
		"queued-behind-stop",
		"▾ main Write PLAN.md ✓ +5 -0",
		"+ 3. part three",
		"▾ main SendMessage to w2: Also add tests for the edge cases. ✓",
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the conversation never showed %q; it showed:\n%s", want, all.String())
		}
	}
	p.keys("C-o")
	for s := p.screen(); !strings.Contains(s, "covered by a test now"); {
		p.keys("NPage")
		prev := s
		s = p.waitFor("the conversation scrolled", 5*time.Second, func(s string) bool { return s != prev })
	}

	// At 80 columns the side pane takes the screen when asked for.
	p.keys("C-t")
	s = p.waitText(5*time.Second, "AGENTS", "NOTIFICATIONS")
	for _, want := range []string{"main idle", "  w1 idle", "  w2 idle", "  w3 idle", "t3#2 from w3 (completed)"} {
		if !strings.Contains(s, want) {
			t.Errorf("the side pane does not show %q:\n%s", want, s)
		}
	}
	p.keys("C-t")

	// /hold and /resume, the first by completion.
	p.typeText("/ho")
	p.keys("Tab")
	p.waitText(5*time.Second, "› /hold")
	p.keys("Enter")
	p.waitText(5*time.Second, "HELD")
	p.typeText("/resume")
	p.keys("Enter")
	p.waitFor("the hold released", 5*time.Second, func(s string) bool {
		return strings.Contains(s, "user queue resumed") && !strings.Contains(s, "HELD")
	})

	// Wide, the side pane sits beside the conversation: the README's
	// screenshot.
	p.run("resize-window", "-t", "0", "-x", "132", "-y", "36")
	s = p.waitText(5*time.Second, "AGENTS", "covered by a test now")
	saveScreen(t, "tui.txt", s)
	p.keys("C-c")
}

// TestTUIReconnects attaches the client to a 'vigil serve', restarts the
// server while the session works, and checks that the client says it is
// reconnecting, comes back with Last-Event-ID, and ends with every event
// of the session and no gap.
func TestTUIReconnects(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	token := "tui-test-token-0123456789"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := []string{"VIGIL_DATA=" + data, "VIGIL_TOKEN=" + token}
	serve := func() *child {
		c := startChildEnv(t, env, "serve", "--addr", addr, "--provider", "script")
		for line := range c.lines {
			if strings.HasPrefix(line, "vigil serving on") {
				go func() {
					for range c.lines {
					}
				}()
				return c
			}
		}
		t.Fatalf("vigil serve ended before it served: %v\n%s", <-c.done, c.errb.String())
		return nil
	}
	stop := func(c *child) {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if err := <-c.done; err != nil {
			t.Logf("vigil serve: %v\n%s", err, c.errb.String())
		}
	}
	srv := serve()
	api := func(method, path string, body any) []byte {
		t.Helper()
		var r *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		} else {
			r = bytes.NewReader(nil)
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, r)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b.String())
		}
		return b.Bytes()
	}
	var d vigil.SessionDetail
	if err := json.Unmarshal(api("POST", "/api/sessions", server.CreateSessionRequest{Prompt: "Build the release", Permissions: &vigil.Permissions{Mode: vigil.PermAuto}}), &d); err != nil {
		t.Fatal(err)
	}
	id := string(d.Session.ID)

	p := startTmux(t, 80, 24, env, "attach", "--server", addr, id)
	p.waitText(20*time.Second, "● live", "started subagent w3")
	// Restart the server in the middle of the session's work.
	p.waitText(20*time.Second, "← notification t1#1")
	stop(srv)
	p.waitText(10*time.Second, "reconnecting")
	srv = serve()
	defer stop(srv)
	s := p.waitText(60*time.Second, "● live (reconnected 1×)", "quiescent")
	if err := json.Unmarshal(api("GET", "/api/sessions/"+id, nil), &d); err != nil {
		t.Fatal(err)
	}
	s = p.waitText(10*time.Second, fmt.Sprintf("seq %d ", d.Seq))
	if strings.Contains(s, "MISSED") || strings.Contains(s, "were not received") {
		t.Errorf("the client missed events across the restart:\n%s", s)
	}
	// Every notification of the session reached the screen, once: the
	// side pane lists the last ones.
	p.keys("C-t")
	s = p.waitText(5*time.Second, "NOTIFICATIONS")
	for _, n := range []string{"t2#2", "t3#1", "t3#2"} {
		if c := len(regexp.MustCompile(regexp.QuoteMeta(n)+` from`).FindAllString(s, -1)); c != 1 {
			t.Errorf("notification %s shows %d times in the side pane, want 1:\n%s", n, c, s)
		}
	}
	saveScreen(t, "tui-reconnect.txt", s)
	p.keys("C-c")
}

// tuiControls is a session for the client's controls: a command whose
// long output folds, a background command to stop, a command to deny, and
// a long round to cancel.
const tuiControls = `name: tui-controls
agents:
  main:
    on:
      prompt:
        - say: "Counting first."
          tools:
            - Bash: {command: "seq 1 40", description: "count"}
        - say: "Starting the build in the background."
          tools:
            - Bash: {command: "sleep 120", description: "a long build", run_in_background: true}
        - say: "The build runs in the background."
        - say: "Cleaning up."
          tools:
            - Bash: {command: "rm -rf build"}
        - say: "Left the build directory alone."
        - delay: 120s
          say: "this round is cancelled before it ends"
      notification:
        - say: "The build ended: {{.Notification.Status}}."
`

// TestTUIControls drives the client's controls at 80×24: "always" and
// "deny" answers to permission requests, a command's output folded and
// unfolded, /stop of a background task, Esc cancelling the round in
// flight, and /sessions then /session to open the session again.
func TestTUIControls(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	sc := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(sc, []byte(tuiControls), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startTmux(t, 80, 24, []string{"VIGIL_DATA=" + filepath.Join(dir, "data")},
		"chat", "--script", sc, "--cwd", work, "--permission-mode", "ask", "Build it")

	// "always" for the count: the rule it adds shows, once.
	p.waitText(20*time.Second, "wants Bash", "seq 1 40", "[a] always")
	p.keys("a")
	s := p.waitText(10*time.Second, "permission p1 allowed by user", "allowed from now on: Bash(")
	// Its 40 lines fold to one line; Ctrl+O unfolds them to the first and
	// last eight.
	s = p.waitText(10*time.Second, "▸ main Bash seq 1 40 ✓ 40 lines")
	// The background build asks too: allowed once.
	s = p.waitText(10*time.Second, "wants Bash", "sleep 120")
	p.keys("y")
	s = p.waitText(10*time.Second, "permission p2 allowed by user", "The build runs in the background.")
	p.keys("C-o")
	s = p.waitText(5*time.Second, "    40\n")
	for i := 0; !strings.Contains(s, "▾ main Bash seq 1 40 ✓ 40 lines"); i++ {
		if i == 5 {
			t.Fatalf("scrolling up never showed the unfolded command:\n%s", s)
		}
		prev := p.screen()
		p.keys("PPage")
		s += p.waitFor("the conversation scrolled", 5*time.Second, func(s string) bool { return s != prev })
	}
	if !strings.Contains(s, "… 24 lines folded …") {
		t.Errorf("the unfolded output does not say 24 lines are folded:\n%s", s)
	}
	for _, want := range []string{"    1\n", "    8\n", "    33\n", "    40\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("the unfolded output lacks line %q:\n%s", strings.TrimSpace(want), s)
		}
	}
	if strings.Contains(s, "    20\n") {
		t.Errorf("the unfolded output shows a folded line (20):\n%s", s)
	}
	p.keys("C-o")
	p.keys("NPage")

	// The running task shows in the side pane with its elapsed time;
	// /stop ends it, and its notification wakes main.
	p.keys("C-t")
	s = p.waitFor("the build in the side pane", 10*time.Second, func(s string) bool {
		return regexp.MustCompile(`t1 running \d+s sleep 120`).MatchString(s)
	})
	p.keys("C-t")
	p.typeText("/stop t1")
	p.keys("Enter")
	s = p.waitText(15*time.Second, "task t1 stopping", "The build ended: stopped.")
	if c := strings.Count(s, "task t1 stopping"); c != 1 {
		t.Errorf("the stop shows %d times, want once:\n%s", c, s)
	}

	// A prompt whose command is denied with n.
	p.typeText("clean up")
	p.waitText(5*time.Second, "› clean up")
	p.keys("Enter")
	p.waitText(15*time.Second, "wants Bash", "rm -rf build")
	p.keys("n")
	s = p.waitText(10*time.Second, "permission p3 denied by user", "Left the build directory alone.")

	// A long round, cancelled with Esc while its model call is in flight.
	p.typeText("one more round")
	p.keys("Enter")
	p.waitText(15*time.Second, "main: model call in flight")
	p.keys("Escape")
	s = p.waitFor("the round cancelled", 15*time.Second, func(s string) bool {
		return strings.Contains(s, "cancelling main's round in flight") && strings.Contains(s, "cancelled") && strings.Contains(s, "quiescent")
	})
	if strings.Contains(s, "this round is cancelled before it ends") {
		t.Errorf("the cancelled round's text shows:\n%s", s)
	}
	saveScreen(t, "tui-controls.txt", s)

	// /sessions lists the session; /new then /session opens it again from
	// its first event.
	m := regexp.MustCompile(`(?m)^ ([0-9a-z]{6,}) · `).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("the status line names no session:\n%s", s)
	}
	id := m[1]
	p.typeText("/sessions")
	p.keys("Enter")
	p.waitText(10*time.Second, "sessions (open one with /session ID):", "  "+id+"  open")
	p.typeText("/new")
	p.keys("Enter")
	p.waitText(5*time.Second, "the next prompt starts a new session", "no session yet")
	p.typeText("/session " + id)
	p.keys("Enter")
	last := regexp.MustCompile(` · seq (\d+) · `).FindStringSubmatch(s)
	if last == nil {
		t.Fatalf("the status line shows no seq:\n%s", s)
	}
	// Opened again, it shows the session to its last event.
	s = p.waitText(15*time.Second, "run 4 cancelled", " · seq "+last[1]+" · quiescent")
	p.keys("C-c")
}

// TestTUIConfigPermissions: with no permission flag, a new session of the
// client takes the config file's permissions, as 'vigil run' and 'vigil
// serve' do: its allow rule runs the count without asking, and the mode
// it leaves at ask still asks for the rest.
func TestTUIConfigPermissions(t *testing.T) {
	dir := t.TempDir()
	work, conf := filepath.Join(dir, "work"), filepath.Join(dir, "config")
	for _, d := range []string{work, filepath.Join(conf, "vigil")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(conf, "vigil", "config.yaml"), []byte("allow: [\"Bash(seq *)\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(sc, []byte(`name: tui-config
agents:
  main:
    on:
      prompt:
        - say: "Counting."
          tools:
            - Bash: {command: "seq 1 3"}
        - say: "Cleaning up."
          tools:
            - Bash: {command: "rm -rf build"}
        - say: "Done."
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startTmux(t, 80, 24, []string{"VIGIL_DATA=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + conf, "HOME=" + dir},
		"chat", "--script", sc, "--cwd", work, "Count")
	s := p.waitText(20*time.Second, "wants Bash", "rm -rf build")
	if !strings.Contains(s, "▸ main Bash seq 1 3 ✓ 3 lines") || strings.Contains(s, "permission p1: Bash seq") || strings.Contains(s, "waits for permission p1: Bash seq") {
		t.Errorf("the config's allow rule did not run the count without asking:\n%s", s)
	}
	p.keys("n")
	p.waitText(10*time.Second, "denied by user", "Done.")
	p.keys("C-c")
}
