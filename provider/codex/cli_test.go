package codex

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	vigil "github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// The tests below drive the real Codex CLI (codex app-server) against the
// fake Responses API (providertest) through a real vigil Runtime.

const skipMessage = "SKIPPED: the Codex CLI is not installed: set VIGIL_CODEX=\"$(bash .ci/codex.sh)\" to run Codex as a vigil provider"

// codexPath returns the CLI to test ($VIGIL_CODEX), or skips the test
// saying so loudly, or fails it when VIGIL_TEST_STRICT=1.
func codexPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("VIGIL_CODEX")
	if p == "" {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(skipMessage + " (VIGIL_TEST_STRICT=1 forbids skipping)")
		}
		t.Skip(skipMessage)
	}
	return p
}

// testLogger writes warnings and above to the test log, everything with
// VIGIL_TEST_LOG=debug.
func testLogger(t *testing.T) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("VIGIL_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: level}))
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// testKey is the API key the tests hand the driver: it must reach the fake
// server and no log.
const testKey = "sk-test-codex-key-5f3e"

// rig is a vigil Runtime with one Codex session whose app-server talks to
// a fake Responses API.
type rig struct {
	t    *testing.T
	ctx  context.Context
	srv  *providertest.Server
	drv  *Driver
	rt   *vigil.Runtime
	st   *memstore.Store
	logs *strings.Builder
	sess string
	cwd  string
}

func newRig(t *testing.T, set ...func(*Options)) *rig {
	t.Helper()
	path := codexPath(t)
	srv := providertest.NewResponses(t)
	// A home outside /tmp: Codex refuses to put its helper links under it.
	home, err := os.MkdirTemp(os.Getenv("HOME"), "codex-home-")
	if err != nil {
		home = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(home) })
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(providertest.CodexConfig(srv)), 0o600); err != nil {
		t.Fatal(err)
	}
	// HOME is a directory of the test's: the login shells Codex runs its
	// commands in read no profile of the machine's.
	opts := Options{Path: path, Home: home, APIKey: testKey, APIKeyEnv: "FAKE_OPENAI_KEY", Env: []string{"HOME=" + home}}
	for _, f := range set {
		f(&opts)
	}
	r := rigWith(t, opts)
	r.srv = srv
	if os.Getenv("VIGIL_CODEX_RECORD") == "1" {
		record(t, r.drv)
	}
	return r
}

// record writes what Codex prints in the test to testdata/NAME.jsonl,
// with the machine's paths and the test's key taken out, for the mapping
// tests that run without the CLI.
func record(t *testing.T, d *Driver) {
	var mu sync.Mutex
	var lines []string
	d.trace = func(line []byte) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, string(line))
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		out := strings.Join(lines, "\n") + "\n"
		for _, dir := range []string{os.Getenv("HOME"), os.TempDir()} {
			out = strings.ReplaceAll(out, dir, "/x")
		}
		if strings.Contains(out, testKey) {
			t.Fatal("the recording holds the key")
		}
		if err := os.WriteFile(filepath.Join("testdata", t.Name()+".jsonl"), []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	})
}

// rigWith is a rig whose driver has opts (and a logger).
func rigWith(t *testing.T, opts Options) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	logs := &strings.Builder{}
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Logger = slog.New(teeHandler{log.Handler(), testLogger(t).Handler()})
	drv := New(opts)
	st := memstore.New()
	rt, err := vigil.Open(ctx, vigil.Options{
		Store: st, Drivers: map[string]provider.SessionDriver{Name: drv}, DefaultProvider: Name,
		DataDir: t.TempDir(), Node: "test", Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := drv.Close(cctx); err != nil {
			t.Errorf("driver close: %v", err)
		}
		logMu.Lock()
		defer logMu.Unlock()
		if opts.APIKey != "" && strings.Contains(logs.String(), opts.APIKey) {
			t.Errorf("the API key is in the driver's logs")
		}
	})
	return &rig{t: t, ctx: ctx, drv: drv, rt: rt, st: st, logs: logs, cwd: t.TempDir()}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// teeHandler sends records to two handlers.
type teeHandler struct{ a, b slog.Handler }

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.a.Enabled(ctx, l) || h.b.Enabled(ctx, l)
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.a.Enabled(ctx, r.Level) {
		_ = h.a.Handle(ctx, r.Clone())
	}
	if h.b.Enabled(ctx, r.Level) {
		_ = h.b.Handle(ctx, r.Clone())
	}
	return nil
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.a.WithAttrs(as), h.b.WithAttrs(as)}
}

func (h teeHandler) WithGroup(n string) slog.Handler {
	return teeHandler{h.a.WithGroup(n), h.b.WithGroup(n)}
}

// start creates the session with a first prompt.
func (r *rig) start(prompt string) {
	r.t.Helper()
	s, err := r.rt.CreateSession(r.ctx, &vigil.SessionParams{
		Prompt: prompt, Provider: Name, Cwd: r.cwd, Permissions: vigil.Permissions{Mode: vigil.PermBypass},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.sess = string(s.ID)
}

// waitEvent waits for a committed event that match accepts (the whole log
// is read, so one committed before the call is found too).
func (r *rig) waitEvent(what string, match func(typ string, data []byte) bool) vigil.Event {
	r.t.Helper()
	sub, err := r.rt.Subscribe(r.ctx, &vigil.SubscribeParams{Session: vigil.SessionID(r.sess)})
	if err != nil {
		r.t.Fatal(err)
	}
	defer sub.Close()
	for rec := range sub.C {
		if match(rec.Type, rec.Data) {
			return rec
		}
	}
	r.dump()
	r.t.Fatalf("no %s: %v", what, r.ctx.Err())
	return vigil.Event{}
}

// waitRunEnded waits for the end of a run of agent whose reply holds reply.
func (r *rig) waitRunEnded(agent core.AgentID, reply string) core.RunEnded {
	r.t.Helper()
	var e core.RunEnded
	r.waitEvent(fmt.Sprintf("end of a run of %s replying %q", agent, reply), func(typ string, data []byte) bool {
		e = core.RunEnded{}
		return typ == "run.ended" && json.Unmarshal(data, &e) == nil && e.Agent == agent && strings.Contains(e.Reply, reply)
	})
	return e
}

// waitQuiet waits until the session has nothing left to do and returns
// its state.
func (r *rig) waitQuiet() *core.State {
	r.t.Helper()
	if err := r.rt.WaitQuiescent(r.ctx, vigil.SessionID(r.sess)); err != nil {
		r.dump()
		r.t.Fatalf("wait quiescent: %v", err)
	}
	return r.state()
}

// state folds the session's events from the store.
func (r *rig) state() *core.State {
	r.t.Helper()
	recs, err := r.st.EventList(r.ctx, &store.EventListParams{Session: r.sess, Limit: 1 << 30})
	if err != nil {
		r.t.Fatal(err)
	}
	events := make([]core.Event, len(recs))
	for i, rec := range recs {
		body, err := core.DecodeBody(rec.Type, rec.Data)
		if err != nil {
			r.t.Fatal(err)
		}
		events[i] = core.Event{Seq: rec.Seq, At: rec.At, Body: body}
	}
	return core.Replay(events)
}

// dump logs the session's events, to explain a failure.
func (r *rig) dump() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sub, err := r.rt.Subscribe(ctx, &vigil.SubscribeParams{Session: vigil.SessionID(r.sess)})
	if err != nil {
		return
	}
	defer sub.Close()
	for {
		select {
		case rec, ok := <-sub.C:
			if !ok {
				return
			}
			r.t.Logf("event %d %s %s", rec.Seq, rec.Type, preview(rec.Data))
		case <-ctx.Done():
			return
		}
	}
}

// settled asserts what every scenario ends with: no run open, no live
// shell task, every inbox empty, nothing in status.
func (r *rig) settled(s *core.State) {
	r.t.Helper()
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Run != nil {
			r.t.Errorf("agent %s (%s) has run %d open", a.ID, a.Name, a.Run.Seq)
		}
		if len(a.Inbox) > 0 {
			r.t.Errorf("agent %s has %d inbox items", a.ID, len(a.Inbox))
		}
	}
	for _, id := range s.TaskOrder {
		if t := s.Tasks[id]; t.Status.Live() && t.Kind == core.TaskShell {
			r.t.Errorf("task %s is still %s", t.ID, t.Status)
		}
	}
	if st := core.Status(s); len(st) != 0 {
		r.t.Errorf("status not empty: %+v", st)
	}
}

// task returns the newest mirrored task of kind.
func task(s *core.State, kind core.TaskKind) *core.Task {
	var out *core.Task
	for _, id := range s.TaskOrder {
		if t := s.Tasks[id]; t.Kind == kind {
			out = t
		}
	}
	return out
}

func transcript(a *core.Agent) string {
	var b strings.Builder
	for _, m := range a.Transcript {
		for _, c := range m.Content {
			b.WriteString(c.Text + c.Content + "\n")
		}
	}
	return b.String()
}

// woken reports whether r is a turn the driver started for ended work.
func woken(r *providertest.Request) bool {
	return strings.Contains(r.LastUserText(), "<task_notification>")
}

// answersTool reports whether r's last user message is a tool result.
func answersTool(r *providertest.Request) bool {
	for _, b := range r.LastUser().Content {
		if b.Type == chat.BlockToolResult {
			return true
		}
	}
	return false
}

func say(s string) providertest.Reply { return providertest.TextAnswer(s) }

func call(id, name, input string) providertest.Reply {
	return providertest.Answer(providertest.ToolUse(id, name, input))
}

// held is a reply whose headers never come: the model round hangs until
// the client goes away.
func held() providertest.Reply {
	return providertest.Reply{Blocks: []chat.Block{chat.Text("never sent")}, Hold: make(chan struct{})}
}

// procsOf returns the processes of the session whose command line holds
// command.
func procsOf(session, command string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains(string(env), SessionEnv+"="+session+"\x00") {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(strings.ReplaceAll(string(cmd), "\x00", " "), command) {
			out = append(out, pid)
		}
	}
	return out
}

// checkGone fails the test if a process of the session whose command line
// holds command is still running after a short grace.
func checkGone(t *testing.T, session, command string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range procsOf(session, command) {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, int(max(time.Until(deadline), 0)/time.Millisecond))
		unix.Close(fd)
		if n == 0 {
			t.Errorf("process %d (%q) outlived its task", pid, command)
		}
	}
}

// A plain turn: the prompt goes to Codex as turn/start, the reply is run 1
// of main, the thread id is kept for thread/resume, the key reaches the
// model server and vigil's own settings do not reach Codex.
func TestPlainTurn(t *testing.T) {
	t.Setenv("VIGIL_SECRET_FOR_TEST", "must-not-leak")
	r := newRig(t)
	r.srv.On(providertest.LastUserContains("say hello"), say("hello from the fake model"))
	r.start("say hello")
	r.waitRunEnded(core.MainAgent, "hello from the fake model")
	s := r.waitQuiet()
	r.settled(s)
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 1 || main.Runs[0].Status != core.RunCompleted || main.Runs[0].Kind != core.RunKind(core.KindPrompt) {
		t.Fatalf("main runs: %+v", main.Runs)
	}
	if tr := transcript(main); !strings.Contains(tr, "say hello") || !strings.Contains(tr, "hello from the fake model") {
		t.Errorf("transcript: %q", tr)
	}
	if len(main.ExternalSession) != 36 {
		t.Errorf("external session %q is not a Codex thread id", main.ExternalSession)
	}
	req := r.srv.Request(1)
	if req == nil || req.Header.Get("Authorization") != "Bearer "+testKey {
		t.Fatalf("the key did not reach the model server: %+v", req)
	}
	if main.PID <= 0 {
		t.Fatalf("no process recorded: pid %d", main.PID)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", main.PID))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(string(env), "\x00")
	for _, v := range vars {
		if strings.HasPrefix(v, "VIGIL_") && v != SessionEnv+"="+r.sess {
			t.Errorf("Codex's environment holds %s", v)
		}
	}
	if !strings.Contains(string(env), "FAKE_OPENAI_KEY="+testKey+"\x00") {
		t.Errorf("Codex's environment lacks the key")
	}
}

// A sub-agent spawned with spawn_agent: mirrored as an agent task with its
// transcript; it ends while main is idle and Codex starts no turn for it,
// so the driver does: a provider-wake run of main that sees Codex's
// <subagent_notification> and vigil's <task_notification>, and the
// sub-agent's notification is recorded under (task, run 1).
func TestSubagentWakesOwner(t *testing.T) {
	r := newRig(t)
	release := make(chan struct{})
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case strings.Contains(last, "SUBTASK"):
			return providertest.Reply{Blocks: []chat.Block{chat.Text("SUB: the answer is 42")}, Hold: release}, true
		case woken(q) && strings.Contains(last, "<subagent_notification>") && strings.Contains(last, "the answer is 42"):
			return say("MAIN: woke, the answer is 42"), true
		case answersTool(q):
			return say("MAIN: agent spawned"), true
		case strings.Contains(last, "start the agent"):
			return call("call_spawn_1", "multi_agent_v1__spawn_agent", `{"message":"SUBTASK: compute the answer"}`), true
		}
		return providertest.Reply{}, false
	})
	r.start("start the agent")
	r.waitRunEnded(core.MainAgent, "MAIN: agent spawned")
	close(release) // the sub-agent ends while main is idle
	r.waitRunEnded(core.MainAgent, "MAIN: woke")
	s := r.waitQuiet()
	r.settled(s)

	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 {
		t.Fatalf("main runs: %+v", main.Runs)
	}
	if w := main.Runs[1]; w.Kind != core.RunProviderWake || w.Status != core.RunCompleted {
		t.Fatalf("wake run: %+v", w)
	}
	at := task(s, core.TaskAgent)
	if at == nil || at.Owner != core.MainAgent || len(at.External) != 36 {
		t.Fatalf("mirrored agent task: %+v", at)
	}
	sub := s.Agents[at.Agent]
	if sub == nil || len(sub.Runs) != 1 || sub.Runs[0].Status != core.RunCompleted || !strings.Contains(sub.Runs[0].Reply, "42") {
		t.Fatalf("mirrored sub-agent: %+v", sub)
	}
	if sub.Name != "codex-"+at.External[:8] {
		t.Errorf("mirrored sub-agent's name %q, want codex- and its thread's first eight characters", sub.Name)
	}
	if tr := transcript(sub); !strings.Contains(tr, "SUBTASK: compute the answer") || !strings.Contains(tr, "SUB: the answer is 42") {
		t.Errorf("sub-agent transcript: %q", tr)
	}
	n := s.Note(core.NoteKey{Task: at.ID, Run: 1})
	if n == nil || n.Status != "completed" || !strings.Contains(n.Reply, "42") || n.Delivery != core.DeliverProvider || n.DeliveredRun != 2 {
		t.Fatalf("notification %s#1: %+v", at.ID, n)
	}
	if got := r.drv.Stats().Wakes; got != 1 {
		t.Errorf("wakes: %d, want 1", got)
	}
}

// A background command: exec_command yields after 250 ms with the command
// still running, Codex's turn ends, and the command's end (exit 3) comes
// as an item of a turn that is over. It is mirrored as a shell task that
// ends failed with its exit code, and the driver wakes main with the
// output, which Codex itself never shows the model.
func TestBackgroundCommand(t *testing.T) {
	r := newRig(t)
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case woken(q) && strings.Contains(last, "BG-DONE") && strings.Contains(last, `"exit_code":3`):
			return say("MAIN: the command failed"), true
		case answersTool(q):
			return say("MAIN: command launched"), true
		case strings.Contains(last, "run the command"):
			return call("call_bg_1", "exec_command", `{"cmd":"sleep 3; echo KEY=${FAKE_OPENAI_KEY:-none}; echo BG-DONE; exit 3","yield_time_ms":250}`), true
		}
		return providertest.Reply{}, false
	})
	r.start("run the command")
	r.waitRunEnded(core.MainAgent, "MAIN: command launched")
	r.waitRunEnded(core.MainAgent, "MAIN: the command failed")
	s := r.waitQuiet()
	r.settled(s)

	st := task(s, core.TaskShell)
	if st == nil || st.External != "call_bg_1" || st.Owner != core.MainAgent || st.Status != core.TaskFailed {
		t.Fatalf("mirrored shell task: %+v", st)
	}
	n := s.Note(core.NoteKey{Task: st.ID})
	if n == nil || n.Status != "failed" || !strings.Contains(n.Reply, "exit code 3") || !strings.Contains(n.Reply, "BG-DONE") {
		t.Fatalf("notification %s: %+v", st.ID, n)
	}
	if !strings.Contains(n.Reply, "KEY=none") {
		t.Errorf("the API key reached the command: %q", n.Reply)
	}
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 || main.Runs[1].Kind != core.RunProviderWake || n.DeliveredRun != 2 {
		t.Fatalf("main runs: %+v; notification delivered to run %d", main.Runs, n.DeliveredRun)
	}
}

// Codex is killed with SIGKILL mid-turn while a sub-agent and a background
// command run: both mirrored tasks end lost with notifications to main,
// the turn ends interrupted, the command does not outlive Codex, and the
// notifications start a run that a new process takes, resuming the
// thread (thread/resume): the model sees the history.
func TestKilledMidTurn(t *testing.T) {
	r := newRig(t)
	subStarted, mainHeld := make(chan struct{}), make(chan struct{})
	var subOnce, mainOnce sync.Once
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case strings.Contains(last, "SUBTASK"):
			subOnce.Do(func() { close(subStarted) })
			return held(), true
		case strings.Contains(last, "lost"):
			return say("MAIN: resumed after the loss"), true
		case answersTool(q) && strings.Contains(last, "running"):
			return call("call_spawn_2", "multi_agent_v1__spawn_agent", `{"message":"SUBTASK: work for a long time"}`), true
		case answersTool(q):
			mainOnce.Do(func() { close(mainHeld) })
			return held(), true
		case strings.Contains(last, "start the work"):
			return call("call_sleep_1", "exec_command", `{"cmd":"sleep 60","yield_time_ms":250}`), true
		}
		return providertest.Reply{}, false
	})
	r.start("start the work")
	for _, ch := range []chan struct{}{subStarted, mainHeld} {
		select {
		case <-ch:
		case <-r.ctx.Done():
			t.Fatal("the model rounds never came")
		}
	}
	r.waitEvent("the mirrored sub-agent's run", func(typ string, data []byte) bool {
		var e core.RunStarted
		return typ == "run.started" && json.Unmarshal(data, &e) == nil && e.Agent != core.MainAgent
	})
	before := r.state()
	if task(before, core.TaskShell) == nil {
		t.Fatal("the command is not mirrored")
	}
	pid := before.Agents[core.MainAgent].PID
	if pid <= 0 {
		t.Fatal("no process recorded")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "MAIN: resumed after the loss")
	s := r.waitQuiet()
	r.settled(s)

	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 || main.Runs[0].Status != core.RunInterrupted || main.Runs[1].Kind != core.RunKind(core.KindNotification) {
		t.Fatalf("main runs: %+v", main.Runs)
	}
	st := task(s, core.TaskShell)
	if st.Status != core.TaskLost {
		t.Errorf("shell task: %s", st.Status)
	}
	if n := s.Note(core.NoteKey{Task: st.ID}); n == nil || n.Status != string(core.TaskLost) || n.DeliveredRun != 2 || !strings.Contains(n.Reply, "signal: killed") {
		t.Errorf("shell task's notification: %+v", n)
	}
	checkGone(t, r.sess, "sleep 60")
	at := task(s, core.TaskAgent)
	sub := s.Agents[at.Agent]
	if len(sub.Runs) != 1 || sub.Runs[0].Status != core.RunInterrupted {
		t.Fatalf("sub-agent runs: %+v", sub.Runs)
	}
	if n := s.Note(core.NoteKey{Task: at.ID, Run: 1}); n == nil || n.Status != string(core.TaskLost) || n.Delivery != core.DeliverInbox || n.DeliveredRun != 2 {
		t.Fatalf("sub-agent's notification: %+v", n)
	}
	if main.PID == pid {
		t.Errorf("the same process %d runs main", pid)
	}
	if main.ExternalSession != before.Agents[core.MainAgent].ExternalSession {
		t.Errorf("thread %q after the kill, %q before", main.ExternalSession, before.Agents[core.MainAgent].ExternalSession)
	}
	var resumed *providertest.Request
	for _, q := range r.srv.Requests() {
		if strings.Contains(q.LastUserText(), "lost") {
			resumed = q
		}
	}
	hist := ""
	for _, m := range resumed.Messages {
		hist += m.PlainText()
	}
	if !strings.Contains(hist, "start the work") {
		t.Errorf("the resumed thread lacks the history: %q", hist)
	}
}

// A cancel reaches Codex: stopping a background command kills it, and it
// ends stopped with its notification; cancelling main's turn in progress
// is a turn/interrupt, and the run ends cancelled.
func TestCancel(t *testing.T) {
	r := newRig(t)
	slow := make(chan struct{})
	var once sync.Once
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case woken(q) && strings.Contains(last, `"status":"stopped"`):
			return say("MAIN: noted the stop"), true
		case strings.Contains(last, "think slowly"):
			once.Do(func() { close(slow) })
			return held(), true
		case answersTool(q):
			return say("MAIN: launched"), true
		case strings.Contains(last, "run it"):
			return call("call_sleep_2", "exec_command", `{"cmd":"sleep 60","yield_time_ms":250}`), true
		}
		return providertest.Reply{}, false
	})
	r.start("run it")
	r.waitRunEnded(core.MainAgent, "MAIN: launched")
	st := task(r.state(), core.TaskShell)
	if st == nil {
		t.Fatal("no mirrored command")
	}
	if err := r.rt.StopTask(r.ctx, vigil.SessionID(r.sess), &vigil.StopTaskParams{Task: vigil.TaskID(st.ID), By: "test"}); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "MAIN: noted the stop")
	s := r.waitQuiet()
	if got := s.Tasks[st.ID].Status; got != core.TaskStopped {
		t.Fatalf("stopped task: %s", got)
	}
	if n := s.Note(core.NoteKey{Task: st.ID}); n == nil || n.Status != "stopped" {
		t.Fatalf("stopped task's notification: %+v", n)
	}
	checkGone(t, r.sess, "sleep 60")

	if _, err := r.rt.Prompt(r.ctx, vigil.SessionID(r.sess), &vigil.PromptParams{Text: "think slowly"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow:
	case <-r.ctx.Done():
		t.Fatal("the slow prompt never reached the model")
	}
	if err := r.rt.CancelRun(r.ctx, vigil.SessionID(r.sess), &vigil.AgentActionParams{Agent: string(core.MainAgent), By: "test"}); err != nil {
		t.Fatal(err)
	}
	e := r.waitEvent("the cancelled run's end", func(typ string, data []byte) bool {
		var e core.RunEnded
		return typ == "run.ended" && json.Unmarshal(data, &e) == nil && e.Agent == core.MainAgent && e.Seq == 3
	})
	var end core.RunEnded
	if err := json.Unmarshal(e.Data, &end); err != nil || end.Status != core.RunCancelled {
		t.Fatalf("run 3 ended %+v", end)
	}
	s = r.waitQuiet()
	r.settled(s)
	if main := s.Agents[core.MainAgent]; main.PID <= 0 {
		t.Errorf("the cancel ended the process")
	}
}

// Stopping a mirrored sub-agent in a model round interrupts its turn
// (turn/interrupt on its thread): its run ends cancelled, its notification
// says stopped, and main is woken to hear of it.
func TestStopSubagent(t *testing.T) {
	r := newRig(t)
	subStarted := make(chan struct{})
	var once sync.Once
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case strings.Contains(last, "SUBTASK"):
			once.Do(func() { close(subStarted) })
			return held(), true
		case woken(q) && strings.Contains(last, `"status":"stopped"`):
			return say("MAIN: heard of the stop"), true
		case answersTool(q):
			return say("MAIN: agent spawned"), true
		case strings.Contains(last, "start the agent"):
			return call("call_spawn_3", "multi_agent_v1__spawn_agent", `{"message":"SUBTASK: work for a long time"}`), true
		}
		return providertest.Reply{}, false
	})
	r.start("start the agent")
	r.waitRunEnded(core.MainAgent, "MAIN: agent spawned")
	select {
	case <-subStarted:
	case <-r.ctx.Done():
		t.Fatal("the sub-agent never called the model")
	}
	r.waitEvent("the mirrored sub-agent's run", func(typ string, data []byte) bool {
		var e core.RunStarted
		return typ == "run.started" && json.Unmarshal(data, &e) == nil && e.Agent != core.MainAgent
	})
	at := task(r.state(), core.TaskAgent)
	if err := r.rt.StopTask(r.ctx, vigil.SessionID(r.sess), &vigil.StopTaskParams{Task: vigil.TaskID(at.ID), By: "test"}); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "MAIN: heard of the stop")
	s := r.waitQuiet()
	r.settled(s)
	sub := s.Agents[at.Agent]
	if len(sub.Runs) != 1 || sub.Runs[0].Status != core.RunCancelled {
		t.Fatalf("sub-agent runs: %+v", sub.Runs)
	}
	if n := s.Note(core.NoteKey{Task: at.ID, Run: 1}); n == nil || n.Status != "stopped" || n.DeliveredRun != 2 {
		t.Fatalf("sub-agent's notification: %+v", n)
	}
	if got := s.Tasks[at.ID].Status; got != core.TaskStopped {
		t.Errorf("sub-agent task: %s", got)
	}
}

// Without cgroups, the driver alone ends the commands Codex ran in
// sessions of their own: Codex is killed with SIGKILL while a background
// command runs, and the command does not outlive it.
func TestKilledLeavesNoCommand(t *testing.T) {
	r := newRig(t)
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		if answersTool(q) {
			return say("MAIN: launched"), true
		}
		// The command ignores SIGHUP and SIGTERM: neither the end of its PTY nor
		// a parent-death signal ends it.
		return call("call_sleep_3", "exec_command", `{"cmd":"trap '' HUP TERM; sleep 60","yield_time_ms":250}`), true
	})
	inputs := make(chan core.Input, 100)
	sess := "nocgroup-" + strconv.Itoa(os.Getpid())
	p, err := r.drv.Start(r.ctx, &provider.SessionStart{Session: sess, Agent: core.MainAgent, Cwd: r.cwd,
		PermissionMode: core.PermBypass, Emit: func(in core.Input) { inputs <- in }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Deliver("run it", core.PriorityNext); err != nil {
		t.Fatal(err)
	}
	var exited *core.ProviderExited
	for exited == nil {
		select {
		case in := <-inputs:
			switch in := in.(type) {
			case core.ExternalTask:
				if in.Status == "running" {
					if len(procsOf(sess, "sleep 60")) == 0 {
						t.Fatal("the command is not running")
					}
					if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
			case core.ProviderExited:
				exited = &in
			}
		case <-r.ctx.Done():
			t.Fatal("no ProviderExited")
		}
	}
	if exited.PID != p.PID() || !strings.Contains(exited.Reason, "signal: killed") {
		t.Errorf("exit: %+v", exited)
	}
	checkGone(t, sess, "sleep 60")
}

// A sub-agent's own background command: mirrored as a shell task owned by
// the mirrored sub-agent; when it ends the driver wakes the sub-agent's
// thread (its run 2), whose end wakes main in turn.
func TestSubagentBackgroundCommand(t *testing.T) {
	r := newRig(t)
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case woken(q) && strings.Contains(last, "saw SUB-BG-DONE"):
			return say("MAIN: all done"), true
		case woken(q) && strings.Contains(last, "SUB-BG-DONE"):
			return say("SUB: saw SUB-BG-DONE"), true
		case woken(q) && strings.Contains(last, "SUB: command launched"):
			return say("MAIN: the sub-agent launched its command"), true
		case strings.Contains(last, "SUBTASK"):
			return call("call_subbg_1", "exec_command", `{"cmd":"sleep 3; echo SUB-BG-DONE","yield_time_ms":250}`), true
		case answersTool(q) && strings.Contains(last, "running with session"):
			return say("SUB: command launched"), true
		case answersTool(q):
			return say("MAIN: agent spawned"), true
		case strings.Contains(last, "start the agent"):
			return call("call_spawn_4", "multi_agent_v1__spawn_agent", `{"message":"SUBTASK: run a command in the background"}`), true
		}
		return providertest.Reply{}, false
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, q := range r.srv.Requests() {
				t.Logf("request %d: last user %q", q.N, q.LastUserText())
			}
		}
	})
	r.start("start the agent")
	r.waitRunEnded(core.MainAgent, "MAIN: all done")
	s := r.waitQuiet()
	r.settled(s)
	at, st := task(s, core.TaskAgent), task(s, core.TaskShell)
	if at == nil || st == nil {
		t.Fatal("a mirrored task is missing")
	}
	if st.Owner != at.Agent || st.Status != core.TaskCompleted {
		t.Fatalf("the command's task: %+v (sub-agent %s)", st, at.Agent)
	}
	sub := s.Agents[at.Agent]
	if len(sub.Runs) != 2 || sub.Runs[1].Status != core.RunCompleted || !strings.Contains(sub.Runs[1].Reply, "saw SUB-BG-DONE") {
		t.Fatalf("sub-agent runs: %+v", sub.Runs)
	}
	if n := s.Note(core.NoteKey{Task: st.ID}); n == nil || n.Owner != at.Agent || n.DeliveredRun != 2 {
		t.Errorf("the command's notification: %+v", n)
	}
	for run := 1; run <= 2; run++ {
		if n := s.Note(core.NoteKey{Task: at.ID, Run: run}); n == nil || n.Status != "completed" {
			t.Errorf("sub-agent's notification %d: %+v", run, n)
		}
	}
	if runs := s.Agents[core.MainAgent].Runs; len(runs) < 2 || runs[len(runs)-1].Kind != core.RunProviderWake {
		t.Errorf("main runs: %+v", runs)
	}
}

// The commands of these tests sleep 3 s against a yield of 250 ms: the
// model round after the yield must begin before the command ends, or Codex's
// frames cannot tell it from a foreground command (see the package doc).
// With 1 s, a loaded machine made that race (a CI run).

// A background command that ends while its owner's turn is still in
// progress (the model round after its yield is stalled, once it began its
// message, until Codex reports the command's end): Codex shows that turn
// nothing of it, so its end is passed on when the turn ends, and the wake
// turn that follows is the run that takes its notification.
func TestCommandEndsDuringTurn(t *testing.T) {
	r := newRig(t)
	stall := make(chan struct{})
	var once sync.Once
	prev := r.drv.trace
	r.drv.trace = func(line []byte) {
		if prev != nil {
			prev(line)
		}
		if strings.Contains(string(line), `"item/completed"`) && strings.Contains(string(line), `"id":"call_early_1"`) {
			once.Do(func() { close(stall) })
		}
	}
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case woken(q) && strings.Contains(last, "EARLY-DONE"):
			return say("MAIN: woke for EARLY-DONE"), true
		case answersTool(q):
			// created, in_progress, output_item.added: then the stall.
			return providertest.Reply{Blocks: []chat.Block{chat.Text("MAIN: first turn over")}, FaultAfter: 3, Stall: stall}, true
		case strings.Contains(last, "run the command"):
			return call("call_early_1", "exec_command", `{"cmd":"sleep 3; echo EARLY-DONE","yield_time_ms":250}`), true
		}
		return providertest.Reply{}, false
	})
	r.start("run the command")
	r.waitRunEnded(core.MainAgent, "MAIN: woke for EARLY-DONE")
	s := r.waitQuiet()
	r.settled(s)
	st := task(s, core.TaskShell)
	if st == nil || st.Status != core.TaskCompleted {
		t.Fatalf("mirrored shell task: %+v", st)
	}
	n := s.Note(core.NoteKey{Task: st.ID})
	main := s.Agents[core.MainAgent]
	if n == nil || len(main.Runs) != 2 || main.Runs[1].Kind != core.RunProviderWake || n.DeliveredRun != 2 {
		t.Fatalf("main runs %+v; notification %+v", main.Runs, n)
	}
}
