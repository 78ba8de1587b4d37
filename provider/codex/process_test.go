package codex

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	vigil "github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
)

// fakeRig is a rig whose driver runs the test binary as a fake app-server
// (see fakeAppServer) recording into the returned directory.
func fakeRig(t *testing.T) (*rig, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return rigWith(t, Options{Path: exe, APIKey: testKey, Env: []string{"FAKE_CODEX=1", "FAKE_DIR=" + dir}}), dir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A run the process never began (it died at turn/start, before
// turn/started) is handed to a new process, which resumes the agent's
// thread with thread/resume; the first process's exit status and stderr
// are in the record.
func TestRedeliveredToNewProcess(t *testing.T) {
	t.Setenv("VIGIL_SECRET_FOR_TEST", "must-not-leak")
	r, dir := fakeRig(t)
	r.start("first")
	r.waitRunEnded(core.MainAgent, "fake 1: first")
	if _, err := r.rt.Prompt(r.ctx, vigil.SessionID(r.sess), &vigil.PromptParams{Text: "second"}); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "fake 2: second")
	s := r.waitQuiet()
	r.settled(s)
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 || main.Runs[1].Status != core.RunCompleted {
		t.Fatalf("main runs: %+v", main.Runs)
	}
	if main.ExternalSession != "thread-fake" {
		t.Errorf("external session %q", main.ExternalSession)
	}
	calls := readFile(t, filepath.Join(dir, "calls-2"))
	if !strings.Contains(calls, `thread/resume {`) || !strings.Contains(calls, `"threadId":"thread-fake"`) || strings.Contains(calls, "thread/start") {
		t.Errorf("the second process did not resume the thread: %s", calls)
	}
	if !strings.Contains(r.logs.String(), "fake: dying before the turn") || !strings.Contains(r.logs.String(), "exit status 3") {
		t.Errorf("the first process's end is not explained in the logs")
	}

	// The environment: the allowlist, the key under its variable, the
	// session marker, no VIGIL_ setting of vigil's; the key is kept out
	// of Codex's commands.
	args := strings.Split(readFile(t, filepath.Join(dir, "args-1")), "\n")
	i := slices.Index(args, "--env--")
	if i < 0 {
		t.Fatal("no record of the command line")
	}
	cmdline, env := args[:i], args[i+1:]
	if want := []string{"app-server", "--listen", "stdio://", "-c", "shell_environment_policy.ignore_default_excludes=false",
		"-c", `shell_environment_policy.exclude=["OPENAI_API_KEY"]`}; !slices.Equal(cmdline, want) {
		t.Errorf("command line %q, want %q", cmdline, want)
	}
	if !slices.Contains(env, "OPENAI_API_KEY="+testKey) || !slices.Contains(env, SessionEnv+"="+r.sess) {
		t.Errorf("environment lacks the key or the session marker: %q", env)
	}
	for _, v := range env {
		if strings.HasPrefix(v, "VIGIL_") && v != SessionEnv+"="+r.sess {
			t.Errorf("the environment holds %s", v)
		}
	}
}

// A request Codex sends its client (an approval) is answered at once with
// an error, so that Codex never waits on vigil.
func TestRequestsOfCodexRefused(t *testing.T) {
	r, _ := fakeRig(t)
	r.start("ask")
	r.waitRunEnded(core.MainAgent, "fake 1: refused: vigil does not answer item/commandExecution/requestApproval")
	r.settled(r.waitQuiet())
	if got := r.drv.Stats().RefusedRequests; got != 1 {
		t.Errorf("refused requests: %d, want 1", got)
	}
}

// Input delivered while a turn is in progress joins it: turn/steer with
// the turn's id, not a second turn/start.
func TestDeliverJoinsTurnInProgress(t *testing.T) {
	r, dir := fakeRig(t)
	inputs := make(chan core.Input, 100)
	p, err := r.drv.Start(r.ctx, &provider.SessionStart{Session: "steer", Agent: core.MainAgent, Cwd: r.cwd,
		PermissionMode: core.PermBypass, Emit: func(in core.Input) { inputs <- in }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Deliver("hold", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	if err := p.Deliver("more", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case in := <-inputs:
			if end, ok := in.(core.ExternalTurnEnded); ok {
				if end.Result != "fake 1: steered more" {
					t.Fatalf("turn ended with %q", end.Result)
				}
				calls := readFile(t, filepath.Join(dir, "calls-1"))
				if strings.Count(calls, "turn/start ") != 1 || !strings.Contains(calls, `turn/steer {"expectedTurnId":"turn-1"`) {
					t.Errorf("calls:\n%s", calls)
				}
				return
			}
		case <-r.ctx.Done():
			t.Fatal("the turn never ended")
		}
	}
}

// Lines that are not JSON-RPC messages, and notifications whose fields
// have unexpected types, are dropped and counted; nothing panics.
func TestMalformedOutput(t *testing.T) {
	c := &counters{}
	m := newMapper(core.MainAgent, slog.New(slog.DiscardHandler), c)
	m.setMain("thread-1")
	for _, line := range []string{`{"method":"turn/started","params":{"threadId":7}}`, `{"method":"item/completed","params":{"item":"x"}}`,
		`{"method":"turn/completed","params":[]}`, `{"method":"thread/tokenUsage/updated","params":{"tokenUsage":{"last":{"inputTokens":"many"}}}}`} {
		msg, err := decodeMessage([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if ins, wakes := m.feed(msg.Method, msg.Params); ins != nil || wakes != nil {
			t.Errorf("%s mapped to %v %v", line, ins, wakes)
		}
	}
	if got := c.undecodable.Load(); got != 4 {
		t.Errorf("undecodable: %d, want 4", got)
	}
	for _, line := range []string{"not json", `{"result":{}}`, `[1,2]`} {
		if _, err := decodeMessage([]byte(line)); err == nil {
			t.Errorf("%q decoded", line)
		}
	}
	if _, err := decodeMessage([]byte("  ")); err != errEmptyLine {
		t.Errorf("an empty line: %v", err)
	}
}
