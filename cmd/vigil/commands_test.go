package main

import (
	"context"
	"encoding/json"
	"iter"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/server"
	"github.com/vigilrun/vigil/store/memstore"
)

// cliRun runs the vigil command in-process with both outputs given, so a
// test can watch either while the command runs.
func (ts *testServer) cliRun(t *testing.T, ctx context.Context, out, errb *syncBuffer, args ...string) int {
	t.Helper()
	vars := map[string]string{"VIGIL_SERVER": ts.url, "VIGIL_TOKEN": clientTestToken, "VIGIL_DATA": t.TempDir()}
	e := &env{stdout: out, stderr: errb, getenv: func(k string) string { return vars[k] }}
	return runMain(ctx, e, args)
}

// background runs a command on a goroutine; the channel yields its exit
// code when it returns.
func (ts *testServer) background(t *testing.T, ctx context.Context, out, errb *syncBuffer, args ...string) <-chan int {
	done := make(chan int, 1)
	go func() { done <- ts.cliRun(t, ctx, out, errb, args...) }()
	return done
}

// exitOf waits for a command started by background.
func exitOf(t *testing.T, done <-chan int, what string) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
		return 0
	}
}

// waitText waits until b holds s.
func waitText(t *testing.T, b *syncBuffer, s, what string) {
	t.Helper()
	select {
	case <-b.waitFor(s):
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never printed %q; it printed:\n%s", what, s, b.String())
	}
}

// TestCLIOutputFollows: output prints what a running task wrote so far
// and returns; output -f goes on printing as the task writes, and returns
// when the task ends, saying how it ended.
func TestCLIOutputFollows(t *testing.T) {
	ts := newTestServer(t, nil)
	// The gate is in the session's directory, which a sandboxed command
	// sees.
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	// The command prints a line, blocks until the test opens the gate,
	// then prints another and ends.
	id := strings.TrimSpace(ts.ok(t, "new", "echo first; read x < gate; echo second", "--provider", "shell", "--permission-mode", "bypass", "--cwd", dir))
	waitEvent(t, ts.rt, id, func(e core.Event) bool { b, ok := e.Body.(*core.TaskProcess); return ok && b.Task == "t1" })

	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := ts.background(t, ctx, &out, &errb, "output", id+"/t1", "-f")
	waitText(t, &out, "first\n", "output -f")
	// The task is blocked on the gate: a follower must still be following.
	select {
	case code := <-follow:
		t.Fatalf("output -f returned (exit %d) while the task runs:\n%s\n%s", code, out.String(), errb.String())
	default:
	}
	// Without -f: what is there now, at once.
	if got := ts.ok(t, "output", id+"/t1"); got != "first\n" {
		t.Errorf("output of the running task = %q, want %q", got, "first\n")
	}
	opened := make(chan error, 1)
	go func() {
		// Opening a FIFO to write waits for its reader: the command.
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the command never opened the gate; its output:\n%s\n%s", out.String(), errb.String())
	}
	if code := exitOf(t, follow, "output -f"); code != 0 {
		t.Fatalf("output -f: exit %d: %s", code, errb.String())
	}
	if got := out.String(); got != "first\nsecond\n" {
		t.Errorf("output -f printed %q, want %q", got, "first\nsecond\n")
	}
	if got := errb.String(); !strings.Contains(got, "task t1 completed (exit 0)") {
		t.Errorf("output -f stderr = %q, want how the task ended", got)
	}

	// --json: the server's chunks, one a line; the last is at the end.
	lines := strings.Split(strings.TrimSpace(ts.ok(t, "output", "t1", "--session", id, "--json")), "\n")
	var last server.TaskOutput
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("output --json: %v\n%s", err, lines)
	}
	if last.Status != vigil.TaskCompleted || last.Next != int64(len("first\nsecond\n")) {
		t.Errorf("output --json last chunk = %+v", last)
	}

	code, _, errs := ts.vigilCLI(t, nil, "output", id+"/t9")
	if code != 1 || !strings.Contains(errs, `no task "t9"`) {
		t.Errorf("output of an unknown task: exit %d: %s", code, errs)
	}
	code, _, errs = ts.vigilCLI(t, nil, "output", "t1")
	if code != 2 || !strings.Contains(errs, "<session>/<task>") {
		t.Errorf("output without a session: exit %d: %s", code, errs)
	}
}

// TestCLICloseCancelTasks: cancel removes a queued item and says what it
// was; tasks names agents, not ids, in aligned columns; close closes an
// agent, then the session.
func TestCLICloseCancelTasks(t *testing.T) {
	ts := newTestServer(t, nil)
	id := strings.TrimSpace(ts.ok(t, "new", "hello", "--provider", "echo", "--permission-mode", "bypass"))
	ts.quiet(t, id)

	ts.ok(t, "hold", id)
	ts.ok(t, "send", id, "second prompt")
	if out := ts.ok(t, "cancel", id, "i2"); out != "cancelled i2: prompt for main (\"second prompt\")\n" {
		t.Errorf("cancel printed %q", out)
	}
	items, err := ts.rt.InboxList(context.Background(), vigil.SessionID(id), "")
	if err != nil || len(items) != 0 {
		t.Errorf("inbox after cancel: %+v %v", items, err)
	}
	code, _, errs := ts.vigilCLI(t, nil, "cancel", id, "i2")
	if code != 1 || !strings.Contains(errs, "i2") {
		t.Errorf("cancel twice: exit %d: %s", code, errs)
	}
	ts.ok(t, "resume", id)

	// A subagent with a long name.
	if _, _, err := ts.rt.Spawn(context.Background(), vigil.SessionID(id), &vigil.SpawnParams{Name: "reviewer-of-long-names", Prompt: "look", Provider: "echo"}); err != nil {
		t.Fatal(err)
	}
	ts.quiet(t, id)
	out := ts.ok(t, "tasks", id)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("tasks:\n%s", out)
	}
	col := strings.Index(lines[0], "OWNER")
	if col < 0 || !strings.HasPrefix(lines[1][col:], "main ") {
		t.Errorf("tasks: OWNER is not the owner's name in its column:\n%s", out)
	}
	if c := strings.Index(lines[0], "WHAT"); c < 0 || !strings.HasPrefix(lines[1][c:], "agent reviewer-of-long-names") {
		t.Errorf("tasks: WHAT column:\n%s", out)
	}
	if strings.Contains(out, "a0") {
		t.Errorf("tasks shows an agent id:\n%s", out)
	}
	var tl server.TaskList
	if err := json.Unmarshal([]byte(ts.ok(t, "tasks", id, "--json")), &tl); err != nil || len(tl.Tasks) != 1 {
		t.Errorf("tasks --json: %v %+v", err, tl)
	}

	if out := ts.ok(t, "transcript", id); !strings.Contains(out, ": notification from reviewer-of-long-names, priority next") {
		t.Errorf("transcript does not name the notification's sender:\n%s", out)
	}
	code, _, errs = ts.vigilCLI(t, nil, "output", id+"/t1")
	if code != 1 || !strings.Contains(errs, "vigil transcript "+id+" reviewer-of-long-names") {
		t.Errorf("output of an agent task: exit %d: %s", code, errs)
	}

	if out := ts.ok(t, "close", id, "reviewer-of-long-names"); out != "agent reviewer-of-long-names (a1): closed\n" {
		t.Errorf("close agent printed %q", out)
	}
	a, err := ts.rt.AgentGet(context.Background(), vigil.SessionID(id), "a1")
	if err != nil || a.State != vigil.AgentClosed {
		t.Errorf("agent after close: %v %v", a, err)
	}
	code, _, errs = ts.vigilCLI(t, nil, "close", id, "ghost")
	if code != 1 || !strings.Contains(errs, "ghost") {
		t.Errorf("close of an unknown agent: exit %d: %s", code, errs)
	}
	if out := ts.ok(t, "close", id); !strings.HasPrefix(out, "session "+id+" closed") {
		t.Errorf("close session printed %q", out)
	}
	d, err := ts.rt.SessionGet(context.Background(), vigil.SessionID(id), nil)
	if err != nil || !d.Session.Closed {
		t.Errorf("session after close: closed=%v %v", d != nil && d.Session.Closed, err)
	}
	if code, _, _ := ts.vigilCLI(t, nil, "close"); code != 2 {
		t.Errorf("close with no session: exit %d, want 2", code)
	}
}

// TestCLITranscript: the readable transcript has a time on every line,
// the conversation by name, and long outputs folded; --json is the
// server's JSONL.
func TestCLITranscript(t *testing.T) {
	ts := newTestServer(t, nil)
	id := strings.TrimSpace(ts.ok(t, "new", "seq 1 40", "--provider", "shell", "--permission-mode", "bypass"))
	ts.quiet(t, id)
	out := ts.ok(t, "transcript", id)
	for _, want := range []string{"── run 1 started (prompt)", "user: seq 1 40", "main: starting", "→ Bash(seq 1 40)", "notification t1#exit completed (", "… ", "more lines (--full prints them)", "── run 2 started (notification)", "main: done"} {
		if !strings.Contains(out, want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
	stamp := regexp.MustCompile(`^(\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d  .+| {10}.*)$`)
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if l != "" && !stamp.MatchString(l) {
			t.Errorf("transcript line without a time: %q", l)
		}
	}
	full := ts.ok(t, "transcript", id, "main", "--full")
	if strings.Contains(full, "more lines") || !strings.Contains(full, "          40\n") {
		t.Errorf("transcript --full folds or lacks the output's end:\n%s", full)
	}
	raw := ts.ok(t, "transcript", id, "--json")
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(raw), "\n") {
		var line struct {
			At   time.Time `json:"timestamp"`
			Type string    `json:"type"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.At.IsZero() || line.Type == "" {
			t.Errorf("transcript --json line %q: %v", l, err)
		}
		n++
	}
	if n < 8 {
		t.Errorf("transcript --json has %d lines:\n%s", n, raw)
	}
	code, _, errs := ts.vigilCLI(t, nil, "transcript", id, "ghost")
	if code != 1 || !strings.Contains(errs, `no agent "ghost"`) {
		t.Errorf("transcript of an unknown agent: exit %d: %s", code, errs)
	}
}

// gatedProvider holds its first model round until release is closed.
type gatedProvider struct {
	next    provider.Provider
	entered chan struct{} // closed when the first round has begun
	release chan struct{}
	once    sync.Once
	opened  sync.Once
}

// open lets the held round go on.
func (g *gatedProvider) open() { g.opened.Do(func() { close(g.release) }) }

// Name implements provider.Provider.
func (g *gatedProvider) Name() string { return "gated" }

// Stream implements provider.Provider.
func (g *gatedProvider) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return g.next.Stream(ctx, req)
	}
	return func(yield func(provider.Event, error) bool) {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			yield(provider.Event{}, ctx.Err())
			return
		}
		for ev, err := range g.next.Stream(ctx, req) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// newGatedServer is a test server whose only provider is a gated echo.
func newGatedServer(t *testing.T) (*testServer, *gatedProvider) {
	t.Helper()
	sc, err := script.Parse([]byte(clientScenarios["echo"]))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedProvider{next: script.New(sc, nil), entered: make(chan struct{}), release: make(chan struct{})}
	st := memstore.New()
	logger := slog.New(slog.DiscardHandler)
	rt, err := vigil.Open(context.Background(), vigil.Options{Store: st, Providers: map[string]provider.Provider{"gated": g}, DefaultProvider: "gated", DataDir: t.TempDir(), Node: "test", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(rt, server.Options{Token: clientTestToken, Logger: logger})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		g.open()
		srv.Close()
		hs.Close()
		rt.Close()
		st.Close()
	})
	return &testServer{url: hs.URL, rt: rt, st: st}, g
}

// TestCLIMessageReturnsAtOnce: while the target's model round is held
// open, message returns with the outcome pending; message --wait returns
// only when the round settles it, and prints the settled outcome.
func TestCLIMessageReturnsAtOnce(t *testing.T) {
	ts, g := newGatedServer(t)
	id := strings.TrimSpace(ts.ok(t, "new", "hello", "--permission-mode", "bypass"))
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first model round never began")
	}
	ctx := context.Background()

	var out, errb syncBuffer
	done := ts.background(t, ctx, &out, &errb, "message", id, "main", "are you there?")
	if code := exitOf(t, done, "message while the round is in flight"); code != 0 {
		t.Fatalf("message: exit %d: %s", code, errb.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "message m1 → main: pending: run 1's model round is in flight") || strings.Count(got, "\n") != 1 {
		t.Errorf("message printed %q", got)
	}

	var wout, werr syncBuffer
	waiting := ts.background(t, ctx, &wout, &werr, "message", id, "main", "and now?", "--wait")
	waitText(t, &werr, "message m2 → main: pending", "message --wait")
	select {
	case code := <-waiting:
		t.Fatalf("message --wait returned (exit %d) while the round is held: %s %s", code, wout.String(), werr.String())
	default:
	}
	g.open()
	if code := exitOf(t, waiting, "message --wait"); code != 0 {
		t.Fatalf("message --wait: exit %d: %s", code, werr.String())
	}
	got := wout.String()
	if strings.Count(got, "\n") != 1 || strings.Contains(got, "pending") || !regexp.MustCompile(`^message m2 → main: (joined|queued-behind-stop) `).MatchString(got) {
		t.Errorf("message --wait printed %q, want one settled outcome", got)
	}
	m, err := ts.rt.SessionGet(ctx, vigil.SessionID(id), &vigil.SessionGetParams{Messages: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range m.Messages {
		if msg.ID == "m2" && !strings.Contains(got, string(msg.Outcome)) {
			t.Errorf("message --wait printed %q; the session says %s", got, msg.Outcome)
		}
	}
	// A message whose outcome is known at once: --wait does not wait.
	ts.quiet(t, id)
	if out := ts.ok(t, "message", id, "main", "idle now?", "--wait"); !strings.HasPrefix(out, "message m3 → main: resumed") {
		t.Errorf("message --wait to an idle agent printed %q", out)
	}
}

// TestCLIMessageRejectedOnce: a message to an unknown agent says so once,
// as the command's error, and exits 1.
func TestCLIMessageRejectedOnce(t *testing.T) {
	ts := newTestServer(t, nil)
	id := strings.TrimSpace(ts.ok(t, "new", "hello", "--provider", "echo", "--permission-mode", "bypass"))
	ts.quiet(t, id)
	code, out, errs := ts.vigilCLI(t, nil, "message", id, "ghost", "hello?")
	if code != 1 || out != "" {
		t.Errorf("message to an unknown agent: exit %d, stdout %q", code, out)
	}
	if n := strings.Count(out+errs, `no agent "ghost"`); n != 1 || !strings.Contains(errs, "rejected") {
		t.Errorf("the rejection is printed %d times:\nstdout: %s\nstderr: %s", n, out, errs)
	}
	code, out, errs = ts.vigilCLI(t, nil, "message", id, "ghost", "hello?", "--json")
	var m vigil.Message
	if err := json.Unmarshal([]byte(out), &m); code != 1 || err != nil || m.Outcome != vigil.OutcomeRejected {
		t.Errorf("message --json to an unknown agent: exit %d, %v: %s", code, err, out)
	}
	if n := strings.Count(errs, `no agent "ghost"`); n != 1 {
		t.Errorf("message --json: stderr says the rejection %d times: %s", n, errs)
	}
}

// TestCLIVersion: the version line is made of the build information, and
// vigil version and vigil --version print it.
func TestCLIVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/vigilrun/vigil", Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := buildVersion(bi).String(), "vigil v1.4.0 (commit 0123456789ab, 2026-12-01T10:00:00Z, modified) go1.26.1 linux/arm64"; got != want {
		t.Errorf("version line\n got %q\nwant %q", got, want)
	}
	if got, want := buildVersion(nil).String(), "vigil (unknown) "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH; got != want {
		t.Errorf("version without build information = %q, want %q", got, want)
	}

	var ts testServer
	_, a, _ := ts.vigilCLI(t, nil, "version")
	code, b, errs := ts.vigilCLI(t, nil, "--version")
	if code != 0 || a != b || !strings.HasPrefix(b, "vigil ") || !strings.Contains(b, runtime.Version()) {
		t.Errorf("vigil --version: exit %d %q (vigil version: %q) %s", code, b, a, errs)
	}
	_, j, _ := ts.vigilCLI(t, nil, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(j), &v); err != nil || v.Go != runtime.Version() || v.Version == "" {
		t.Errorf("version --json = %q: %v", j, err)
	}
}

// TestCLIVersionBuilt builds the vigil binary from this checkout and reads
// its --version: the commit is the checkout's.
func TestCLIVersionBuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the vigil binary")
	}
	goBin, err := exec.LookPath("go")
	gitBin, gerr := exec.LookPath("git")
	if err != nil || gerr != nil {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("go or git is not installed: %v %v", err, gerr)
		}
		t.Skipf("SKIP: go or git is not installed (%v %v)", err, gerr)
	}
	head, err := exec.Command(gitBin, "rev-parse", "HEAD").Output()
	if err != nil {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("not a git checkout: %v", err)
		}
		t.Skipf("SKIP: not a git checkout, so no commit to stamp: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "vigil")
	build := exec.Command(goBin, "build", "-buildvcs=true", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("vigil --version: %v", err)
	}
	want := "commit " + strings.TrimSpace(string(head))[:12]
	if !strings.HasPrefix(string(out), "vigil ") || !strings.Contains(string(out), want) || !strings.Contains(string(out), runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("vigil --version = %q, want %q in it", out, want)
	}
}

// TestCLIUsage: help states the permission-mode rule, and new and run
// repeat it; the command list stays aligned whatever the names' lengths.
func TestCLIUsage(t *testing.T) {
	var ts testServer
	code, out, _ := ts.vigilCLI(t, nil, "help")
	if code != 0 || !strings.Contains(out, permissionDefaults) {
		t.Errorf("help lacks the permission-mode rule:\n%s", out)
	}
	col := -1
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(l, "  ")
		if !ok || rest == "" || rest[0] == ' ' {
			continue
		}
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		n := len(l) - len(strings.TrimLeft(rest[i:], " "))
		if col < 0 {
			col = n
		} else if n != col {
			t.Errorf("help: the summary of %q starts at column %d, others at %d", l, n, col)
		}
	}
	for _, cmd := range []string{"new", "run"} {
		_, _, errs := ts.vigilCLI(t, nil, cmd, "-h")
		if !strings.Contains(errs, permissionDefaults) {
			t.Errorf("%s -h lacks the permission-mode rule:\n%s", cmd, errs)
		}
	}
}

// TestRelTime: one relative format for past and future times.
func TestRelTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		300 * time.Millisecond:      "just now",
		42 * time.Second:            "42s ago",
		3*time.Minute + time.Second: "3m ago",
		2*time.Hour + 5*time.Minute: "2h05m ago",
		80 * time.Hour:              "3d ago",
		-4 * time.Minute:            "in 4m",
		-90 * time.Second:           "in 1m",
	} {
		if got := relTime(d); got != want {
			t.Errorf("relTime(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestCLISessionsNeedsYou: sessions shows what a person must act on in a
// column of its own, aligned past long reasons, and --needs-you keeps only
// the sessions that have something.
func TestCLISessionsNeedsYou(t *testing.T) {
	ts := newTestServer(t, nil)
	idle := strings.TrimSpace(ts.ok(t, "new", "hello", "--provider", "echo", "--permission-mode", "bypass"))
	ts.quiet(t, idle)
	asked := strings.TrimSpace(ts.ok(t, "new", "echo asked", "--provider", "shell", "--permission-mode", "ask"))
	waitEvent(t, ts.rt, asked, func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })

	out := ts.ok(t, "sessions")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("sessions:\n%s", out)
	}
	col, upd := strings.Index(lines[0], "NEEDS YOU"), strings.Index(lines[0], "UPDATED")
	if col < 0 || upd < 0 {
		t.Fatalf("sessions has no NEEDS YOU or UPDATED column:\n%s", out)
	}
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, asked):
			if !strings.HasPrefix(l[col:], "approval p1: Bash (main)") {
				t.Errorf("sessions: the waiting session's NEEDS YOU:\n%s", out)
			}
		case strings.HasPrefix(l, idle):
			if !strings.HasPrefix(l[col:], "- ") {
				t.Errorf("sessions: the idle session's NEEDS YOU:\n%s", out)
			}
		default:
			t.Errorf("sessions: row %q is neither session", l)
		}
		if !regexp.MustCompile(`^(just now|\d+s ago) `).MatchString(l[upd:]) {
			t.Errorf("sessions: UPDATED is not in its column in %q:\n%s", l, out)
		}
	}
	out = ts.ok(t, "sessions", "--needs-you")
	if lines := strings.Split(strings.TrimRight(out, "\n"), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], asked) {
		t.Errorf("sessions --needs-you:\n%s", out)
	}
	ts.ok(t, "approve", asked, "p1")
	ts.quiet(t, asked)
	if out := ts.ok(t, "sessions", "--needs-you"); out != "no session needs you\n" {
		t.Errorf("sessions --needs-you after the answer: %q", out)
	}
}
