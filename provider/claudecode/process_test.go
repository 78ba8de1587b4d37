package claudecode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
)

// fake starts the test binary as a fake CLI (see fakeCLI).
type fake struct {
	t      *testing.T
	drv    *Driver
	proc   provider.SessionProcess
	ins    chan core.Input
	args   string
	script string
}

func startFake(t *testing.T, st provider.SessionStart, tune func(*Options), script ...string) *fake {
	t.Helper()
	dir := t.TempDir()
	f := &fake{t: t, ins: make(chan core.Input, 1000), args: filepath.Join(dir, "args"), script: filepath.Join(dir, "script.jsonl")}
	if err := os.WriteFile(f.script, []byte(strings.Join(script, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Path:   os.Args[0],
		Env:    []string{"GORACE=atexit_sleep_ms=0", "FAKE_CLAUDE=1", "FAKE_ARGS=" + f.args, "FAKE_SCRIPT=" + f.script, "ANTHROPIC_API_KEY=sk-secret"},
		Logger: testLogger(t),
	}
	if tune != nil {
		tune(&opts)
	}
	f.drv = New(opts)
	if st.Session == "" {
		st.Session = "s1"
	}
	st.Agent = core.MainAgent
	st.Emit = func(in core.Input) { f.ins <- in }
	p, err := f.drv.Start(context.Background(), &st)
	if err != nil {
		t.Fatal(err)
	}
	f.proc = p
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.drv.Close(ctx)
	})
	return f
}

// until collects inputs up to and including the first that stop accepts.
func (f *fake) until(what string, stop func(core.Input) bool) []core.Input {
	f.t.Helper()
	var got []core.Input
	timeout := time.After(10 * time.Second)
	for {
		select {
		case in := <-f.ins:
			got = append(got, in)
			if stop(in) {
				return got
			}
		case <-timeout:
			f.t.Fatalf("no %s; got %d inputs: %v", what, len(got), got)
		}
	}
}

func isExit(in core.Input) bool { _, ok := in.(core.ProviderExited); return ok }

func isTurnEnd(in core.Input) bool { _, ok := in.(core.ExternalTurnEnded); return ok }

// exitReasonOf waits for ProviderExited and checks nothing follows it.
func (f *fake) exit() (before []core.Input, reason string) {
	f.t.Helper()
	got := f.until("ProviderExited", isExit)
	select {
	case in := <-f.ins:
		f.t.Fatalf("input after ProviderExited: %#v", in)
	case <-time.After(50 * time.Millisecond):
	}
	return got[:len(got)-1], got[len(got)-1].(core.ProviderExited).Reason
}

// Every frame read is emitted before exactly one ProviderExited, whose
// reason carries the exit status and the tail of stderr; a malformed line
// and an unknown frame are skipped and counted.
func TestProcessFramesThenExit(t *testing.T) {
	lines := readTestdata(t, "plain.jsonl")
	script := []string{string(lines[0]), "this is not json", `{"type":"brand_new_frame","x":1}`, string(lines[1]), string(lines[2])}
	f := startFake(t, provider.SessionStart{}, nil, script...)
	if f.proc.PID() <= 0 || f.proc.StartTicks() == 0 {
		t.Fatalf("pid %d ticks %d", f.proc.PID(), f.proc.StartTicks())
	}
	if err := f.proc.Deliver("replay", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	got := f.until("the turn's end", isTurnEnd)
	var kinds []string
	for _, in := range got {
		kinds = append(kinds, describe(in))
	}
	want := []string{"turn-started", "msg main assistant text:hello from fake", `turn-ended n=1 err=false wake=false "hello from fake"`}
	if !slices.Equal(kinds, want) {
		t.Fatalf("inputs:\n%q\nwant\n%q", kinds, want)
	}
	if st := f.drv.Stats(); st.MalformedLines != 1 || st.UnknownFrames != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if err := f.proc.Interrupt(); err != nil {
		t.Fatalf("interrupt: %v", err)
	}
	if err := f.proc.StopTask("b12345678"); err != nil {
		t.Fatalf("stop task: %v", err)
	}
	if err := f.proc.Deliver("crash", core.PriorityNow); err != nil {
		t.Fatal(err)
	}
	before, reason := f.exit()
	if len(before) != 0 {
		t.Fatalf("inputs before the exit: %v", before)
	}
	if !strings.Contains(reason, "exit status 3") || !strings.Contains(reason, "fatal: something broke") {
		t.Fatalf("reason %q", reason)
	}
	if err := f.proc.Deliver("late", core.PriorityNext); !errors.Is(err, ErrEnded) {
		t.Fatalf("deliver after exit: %v", err)
	}
	if err := f.proc.Interrupt(); !errors.Is(err, ErrEnded) {
		t.Fatalf("interrupt after exit: %v", err)
	}
	if err := f.proc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.proc.Close(); err != nil {
		t.Fatal(err)
	}
}

// Frames still held when the output ends (a live task listed but never
// started, an init with no content) are emitted before ProviderExited.
func TestProcessFlushesHeldFramesOnExit(t *testing.T) {
	f := startFake(t, provider.SessionStart{}, nil,
		`{"type":"system","subtype":"init","session_id":"cli-1"}`,
		`{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"b00000001","task_type":"local_bash","description":"orphan"}]}`)
	if err := f.proc.Deliver("replay", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	if err := f.proc.Deliver("crash", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	before, _ := f.exit()
	var kinds []string
	for _, in := range before {
		kinds = append(kinds, describe(in))
	}
	want := []string{`task shell running notify=false ""`, "turn-started"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("inputs %q, want %q", kinds, want)
	}
}

// The command line and environment follow the SessionStart.
func TestProcessArgsAndEnv(t *testing.T) {
	f := startFake(t, provider.SessionStart{Session: "s9", Resume: "cli-session-1", Model: "claude-test", PermissionMode: core.PermBypass},
		func(o *Options) { o.Args = []string{"--extra"} })
	if err := f.proc.Close(); err != nil {
		t.Fatal(err)
	}
	_, reason := f.exit()
	if reason != "closed by vigil (exit status 0)" {
		t.Fatalf("reason %q", reason)
	}
	b, err := os.ReadFile(f.args)
	if err != nil {
		t.Fatal(err)
	}
	args, env, _ := strings.Cut(string(b), "--env--")
	for _, want := range []string{"-p\n", "--input-format\nstream-json\n", "--output-format\nstream-json\n", "--verbose\n",
		"--resume\ncli-session-1\n", "--model\nclaude-test\n", "--dangerously-skip-permissions\n--extra"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if !strings.Contains(env, "\n"+SessionEnv+"=s9") {
		t.Errorf("no session marker in the environment")
	}
	if os.Geteuid() == 0 && !strings.Contains(env, "\nIS_SANDBOX=1") {
		t.Errorf("bypass as root without IS_SANDBOX=1")
	}
	d := New(Options{})
	// Where the CLI would ask a person, it asks vigil (stdio control
	// requests).
	for mode, want := range map[core.PermissionMode]string{
		core.PermAcceptEdits: "--permission-mode acceptEdits --permission-prompt-tool stdio",
		core.PermAuto:        "--permission-mode auto",
		core.PermAsk:         "--verbose --permission-prompt-tool stdio",
	} {
		got := strings.Join(d.args(&provider.SessionStart{PermissionMode: mode}), " ")
		if !strings.Contains(got, want) || mode == core.PermAuto && strings.Contains(got, "prompt-tool") {
			t.Errorf("mode %s: args %q", mode, got)
		}
	}
}

// A CLI that ignores the end of stdin and SIGTERM is killed after the
// grace periods.
func TestProcessCloseEscalates(t *testing.T) {
	f := startFake(t, provider.SessionStart{}, func(o *Options) { o.CloseGrace = 100 * time.Millisecond })
	if err := f.proc.Deliver("stubborn", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	f.until("the stubborn reply", isTurnEnd)
	start := time.Now()
	if err := f.proc.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("closed after %s, before the grace periods", d)
	}
	_, reason := f.exit()
	if !strings.Contains(reason, "closed by vigil (signal: killed)") {
		t.Fatalf("reason %q", reason)
	}
}

// Whatever the CLI started ends with it, even a process that left its
// process group and session (setsid): the CLI runs in a cgroup of its own,
// killed whole when it exits.
func TestProcessCgroupEndsDetached(t *testing.T) {
	base, err := shell.CgroupBase()
	if err != nil {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("no writable cgroup v2 here: %v", err)
		}
		t.Skipf("SKIP: no writable cgroup v2 here (%v)", err)
	}
	cg := filepath.Join(base, fmt.Sprintf("vigil-test-%d", rand.Uint64()))
	t.Cleanup(func() { shell.KillCgroup(cg, 10*time.Second) })
	nonce := fmt.Sprintf("300.%06d", rand.IntN(1_000_000))
	f := startFake(t, provider.SessionStart{Cgroup: cg}, nil)
	if err := f.proc.Deliver("detach "+nonce, core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	f.until("the detach reply", isTurnEnd)
	pids, err := shell.CgroupProcs(cg)
	if err != nil || len(pids) < 2 {
		t.Fatalf("the CLI's cgroup holds %v (%v); want the CLI and the detached sleep", pids, err)
	}
	if err := f.proc.Close(); err != nil {
		t.Fatal(err)
	}
	f.exit()
	// ProviderExited came after the group was killed and removed.
	if left, _ := shell.CgroupProcs(cg); len(left) > 0 {
		t.Fatalf("processes %v outlived the CLI", left)
	}
	if _, err := os.Stat(cg); err == nil {
		t.Fatalf("the CLI's cgroup %s is left", cg)
	}
}

// A permission request of the CLI (can_use_tool) reaches vigil as an
// ExternalPermission, and the answer goes back as a control response; a
// control request vigil does not serve is answered with an error, so the
// CLI never waits for a host that is not there.
func TestProcessControlRequests(t *testing.T) {
	f := startFake(t, provider.SessionStart{}, nil)
	if err := f.proc.Deliver("ask", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	got := f.until("the permission request", func(in core.Input) bool { _, ok := in.(core.ExternalPermission); return ok })
	ask := got[len(got)-1].(core.ExternalPermission)
	if ask.Request != "cli-1" || ask.Tool != "Bash" || ask.Agent != core.MainAgent {
		t.Fatalf("request %+v", ask)
	}
	if err := f.proc.AnswerPermission("cli-9", true, "", nil); err == nil {
		t.Fatal("an answer to a request the CLI never made was sent")
	}
	if err := f.proc.AnswerPermission("cli-1", false, "denied by test", nil); err != nil {
		t.Fatal(err)
	}
	got = f.until("the fake's report", isTurnEnd)
	if end := got[len(got)-1].(core.ExternalTurnEnded); end.Result != "answer: " {
		t.Fatalf("result %q: the CLI did not get a success response", end.Result)
	}
	if err := f.proc.AnswerPermission("cli-1", true, "", nil); err == nil {
		t.Fatal("a request was answered twice")
	}
	// Anything else is refused.
	if err := f.proc.Deliver("ask-other", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	got = f.until("the refusal", isTurnEnd)
	if end := got[len(got)-1].(core.ExternalTurnEnded); !strings.Contains(end.Result, "vigil does not answer initialize requests") {
		t.Fatalf("result %q", end.Result)
	}
}
