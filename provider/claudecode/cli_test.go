package claudecode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// The tests below drive the real Claude Code CLI against a fake Anthropic
// Messages API (providertest) through a real vigil Runtime.

const skipMessage = "SKIP: Claude Code CLI not found; run .ci/claude.sh and set VIGIL_CLAUDE"

// findCLI returns the CLI to test: $VIGIL_CLAUDE, else claude on PATH.
func findCLI() string {
	if p := os.Getenv("VIGIL_CLAUDE"); p != "" {
		return p
	}
	if p, err := exec.LookPath("claude"); err == nil {
		return p
	}
	return ""
}

// cliPath returns the CLI or skips the test (fails it when
// VIGIL_TEST_STRICT=1).
func cliPath(t *testing.T) string {
	t.Helper()
	p := findCLI()
	if p == "" {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(skipMessage)
		}
		t.Skip(skipMessage)
	}
	return p
}

// testLogger writes to the test log: warnings and above, or everything
// from VIGIL_TEST_LOG=debug.
func testLogger(t *testing.T) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("VIGIL_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// harness is a vigil Runtime with one Claude Code session whose CLI talks
// to a fake model server.
type harness struct {
	t    *testing.T
	ctx  context.Context
	srv  *providertest.Server
	drv  *Driver
	rt   *vigil.Runtime
	st   *memstore.Store
	sess string
	cwd  string
}

func newHarness(t *testing.T, tune func(*Options)) *harness {
	t.Helper()
	path := cliPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	srv := providertest.NewAnthropic(t)
	home, tmp, cwd := t.TempDir(), t.TempDir(), t.TempDir()
	opts := Options{
		Path: path,
		Env: []string{
			"HOME=" + home, "TMPDIR=" + tmp, "ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=sk-test-dummy",
			"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		},
		Logger: testLogger(t),
	}
	if tune != nil {
		tune(&opts)
	}
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
	})
	return &harness{t: t, ctx: ctx, srv: srv, drv: drv, rt: rt, st: st, cwd: cwd}
}

// start creates the session with a first prompt.
func (h *harness) start(prompt string) {
	h.t.Helper()
	s, err := h.rt.CreateSession(h.ctx, &vigil.SessionParams{
		Prompt: prompt, Provider: Name, Cwd: h.cwd, Permissions: vigil.Permissions{Mode: vigil.PermBypass},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.sess = string(s.ID)
}

// waitEvent waits for a committed event that match accepts and returns
// it. It reads the session's whole log, so an event committed before the
// call is found too.
func (h *harness) waitEvent(what string, match func(typ string, data []byte) bool) vigil.Event {
	h.t.Helper()
	sub, err := h.rt.Subscribe(h.ctx, &vigil.SubscribeParams{Session: vigil.SessionID(h.sess)})
	if err != nil {
		h.t.Fatal(err)
	}
	defer sub.Close()
	for rec := range sub.C {
		if match(rec.Type, rec.Data) {
			return rec
		}
	}
	h.dump()
	h.t.Fatalf("no %s: %v", what, h.ctx.Err())
	return vigil.Event{}
}

// waitRunEnded waits for the end of an agent's run whose reply matches.
func (h *harness) waitRunEnded(agent core.AgentID, reply string) core.RunEnded {
	h.t.Helper()
	var e core.RunEnded
	h.waitEvent(fmt.Sprintf("end of a run of %s replying %q", agent, reply), func(typ string, data []byte) bool {
		if typ != "run.ended" {
			return false
		}
		e = core.RunEnded{}
		return json.Unmarshal(data, &e) == nil && e.Agent == agent && strings.Contains(e.Reply, reply)
	})
	return e
}

// waitQuiet waits until the session has nothing left to do and returns
// its state.
func (h *harness) waitQuiet() *core.State {
	h.t.Helper()
	if err := h.rt.WaitQuiescent(h.ctx, vigil.SessionID(h.sess)); err != nil {
		h.dump()
		h.t.Fatalf("wait quiescent: %v", err)
	}
	return h.state()
}

// state is the session's state, folded from the events the store holds:
// the driver's mirror of the CLI's work, processes included, which the
// library does not show.
func (h *harness) state() *core.State {
	h.t.Helper()
	recs, err := h.st.EventList(h.ctx, &store.EventListParams{Session: h.sess, Limit: 1 << 30})
	if err != nil {
		h.t.Fatal(err)
	}
	events := make([]core.Event, len(recs))
	for i, rec := range recs {
		body, err := core.DecodeBody(rec.Type, rec.Data)
		if err != nil {
			h.t.Fatal(err)
		}
		events[i] = core.Event{Seq: rec.Seq, At: rec.At, Body: body}
	}
	return core.Replay(events)
}

// dump logs the session's events, to explain a failure.
func (h *harness) dump() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sub, err := h.rt.Subscribe(ctx, &vigil.SubscribeParams{Session: vigil.SessionID(h.sess)})
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
			h.t.Logf("event %d %s %s", rec.Seq, rec.Type, preview(rec.Data))
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

// checkSettled asserts what every scenario must end with: no run open, no
// live task, every inbox empty, nothing in status.
func (h *harness) checkSettled(s *core.State) {
	h.t.Helper()
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Run != nil {
			h.t.Errorf("agent %s (%s) has run %d open", a.ID, a.Name, a.Run.Seq)
		}
		if len(a.Inbox) > 0 {
			h.t.Errorf("agent %s has %d inbox items", a.ID, len(a.Inbox))
		}
	}
	for _, id := range s.TaskOrder {
		if t := s.Tasks[id]; t.Status.Live() && t.Kind == core.TaskShell {
			h.t.Errorf("task %s is still %s", t.ID, t.Status)
		}
	}
	if st := core.Status(s); len(st) != 0 {
		h.t.Errorf("status not empty: %+v", st)
	}
}

// isSub tells a subagent's request from the main agent's.
func isSub(r *providertest.Request) bool { return r.Header.Get("x-claude-code-agent-id") != "" }

// lastIsToolResult reports whether the request answers tool calls.
func lastIsToolResult(r *providertest.Request) bool {
	for _, b := range r.LastUser().Content {
		if b.Type == chat.BlockToolResult {
			return true
		}
	}
	return false
}

// notified returns the task ids of the <task-notification>s in the last
// user message of r.
var taskIDTag = regexp.MustCompile(`<task-id>([^<]+)</task-id>`)

func notified(r *providertest.Request) []string {
	var ids []string
	for _, m := range taskIDTag.FindAllStringSubmatch(r.LastUserText(), -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func text(s string) providertest.Reply { return providertest.TextAnswer(s) }

func toolUse(name, input string) providertest.Reply {
	return providertest.Answer(providertest.ToolUse("", name, input))
}

// lastTasks returns the newest agent task and the newest shell task of s.
func lastTasks(s *core.State) (agent, shell *core.Task) {
	for _, id := range s.TaskOrder {
		switch t := s.Tasks[id]; t.Kind {
		case core.TaskAgent:
			agent = t
		case core.TaskShell:
			shell = t
		}
	}
	return agent, shell
}

// taskByExternal returns the mirrored task with the CLI's id.
func taskByExternal(s *core.State, id string) *core.Task {
	for _, tid := range s.TaskOrder {
		if t := s.Tasks[tid]; t.External == id {
			return t
		}
	}
	return nil
}

func transcriptText(a *core.Agent) string {
	var b strings.Builder
	for _, m := range a.Transcript {
		for _, c := range m.Content {
			b.WriteString(c.Text + c.Content + "\n")
		}
	}
	return b.String()
}

// (a) A plain turn: the prompt goes to the CLI, the reply is recorded as
// run 1 of main, with the transcript and the CLI's session id.
func TestPlainTurn(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		if strings.Contains(r.LastUserText(), "say hello") {
			return text("hello from the fake model"), true
		}
		return providertest.Reply{}, false
	})
	h.start("say hello")
	h.waitRunEnded(core.MainAgent, "hello from the fake model")
	s := h.waitQuiet()
	h.checkSettled(s)
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 1 {
		t.Fatalf("main has %d runs, want 1", len(main.Runs))
	}
	r := main.Runs[0]
	if r.Seq != 1 || r.Status != core.RunCompleted || r.Reply != "hello from the fake model" || r.Kind != core.RunKind(core.KindPrompt) {
		t.Fatalf("run 1: %+v", r)
	}
	tr := transcriptText(main)
	if !strings.Contains(tr, "say hello") || !strings.Contains(tr, "hello from the fake model") {
		t.Fatalf("transcript: %q", tr)
	}
	req := h.srv.Request(1)
	if sid := req.Header.Get("X-Claude-Code-Session-Id"); sid == "" || sid != main.ExternalSession {
		t.Fatalf("external session %q, the CLI's %q", main.ExternalSession, sid)
	}
	if main.PID <= 0 {
		t.Fatalf("no process recorded: pid %d", main.PID)
	}
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", main.PID)); err == nil && !strings.Contains(string(env), SessionEnv+"="+h.sess) {
		t.Errorf("the process has no %s=%s marker", SessionEnv, h.sess)
	}
}

// (b) A background subagent that finishes while the session is idle: the
// CLI's wake turn is a provider-wake run, the subagent is mirrored with its
// output, and its notification is recorded under (task, run).
func TestBackgroundAgentWake(t *testing.T) {
	h := newHarness(t, nil)
	release := make(chan struct{})
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case isSub(r):
			return providertest.Reply{Blocks: []chat.Block{chat.Text("SUBAGENT-RESULT: the answer is 42")}, Hold: release}, true
		case len(notified(r)) > 0:
			return text("MAIN: woke, the answer is 42"), true
		case lastIsToolResult(r):
			return text("MAIN: agent launched"), true
		case strings.Contains(r.LastUserText(), "start the agent"):
			return toolUse("Agent", `{"description":"compute answer","prompt":"SUBTASK: compute the answer","subagent_type":"general-purpose","run_in_background":true}`), true
		}
		return providertest.Reply{}, false
	})
	h.start("start the agent")
	h.waitRunEnded(core.MainAgent, "MAIN: agent launched")
	close(release) // the subagent finishes while main is idle
	h.waitRunEnded(core.MainAgent, "MAIN: woke")
	s := h.waitQuiet()
	h.checkSettled(s)

	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 {
		t.Fatalf("main runs: %+v", main.Runs)
	}
	if w := main.Runs[1]; w.Kind != core.RunProviderWake || w.Status != core.RunCompleted || w.Reply != "MAIN: woke, the answer is 42" {
		t.Fatalf("wake run: %+v", w)
	}
	var agentID string
	for _, r := range h.srv.Requests() {
		if id := r.Header.Get("x-claude-code-agent-id"); id != "" {
			agentID = id
		}
	}
	task := taskByExternal(s, agentID)
	if task == nil || task.Kind != core.TaskAgent || task.Owner != core.MainAgent {
		t.Fatalf("no mirrored agent task for %s: %+v", agentID, task)
	}
	sub := s.Agents[task.Agent]
	if sub == nil || len(sub.Runs) != 1 || sub.Runs[0].Status != core.RunCompleted || !strings.Contains(sub.Runs[0].Reply, "42") {
		t.Fatalf("mirrored subagent: %+v", sub)
	}
	if !strings.Contains(transcriptText(sub), "SUBAGENT-RESULT: the answer is 42") {
		t.Fatalf("subagent transcript: %q", transcriptText(sub))
	}
	n := s.Note(core.NoteKey{Task: task.ID, Run: 1})
	if n == nil || n.Status != "completed" || !strings.Contains(n.Reply, "42") || n.Delivery != core.DeliverProvider {
		t.Fatalf("notification %s#1: %+v", task.ID, n)
	}
	if !strings.HasSuffix(n.OutputPath, agentID+".output") {
		t.Errorf("output path %q", n.OutputPath)
	}
}

// (c) A background Bash task: mirrored as a shell task; its notification
// carries the exit status; the CLI's wake turn is recorded.
func TestBackgroundBash(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case len(notified(r)) > 0:
			return text("MAIN: the command failed"), true
		case lastIsToolResult(r):
			return text("MAIN: command launched"), true
		case strings.Contains(r.LastUserText(), "run the command"):
			return toolUse("Bash", `{"command":"sleep 0.3; echo BASH-BG-DONE; exit 3","description":"sleep then fail","run_in_background":true}`), true
		}
		return providertest.Reply{}, false
	})
	h.start("run the command")
	h.waitRunEnded(core.MainAgent, "MAIN: the command failed")
	s := h.waitQuiet()
	h.checkSettled(s)

	var task *core.Task
	for _, id := range s.TaskOrder {
		if t := s.Tasks[id]; t.Kind == core.TaskShell {
			task = t
		}
	}
	if task == nil || task.External == "" || task.Owner != core.MainAgent || task.Status != core.TaskFailed {
		t.Fatalf("mirrored shell task: %+v", task)
	}
	n := s.Note(core.NoteKey{Task: task.ID})
	if n == nil || n.Status != "failed" || !strings.Contains(n.Reply, "exit code 3") {
		t.Fatalf("notification %s#exit: %+v", task.ID, n)
	}
	out, err := os.ReadFile(task.OutputPath)
	if err != nil || !strings.Contains(string(out), "BASH-BG-DONE") {
		t.Fatalf("output file %q: %q %v", task.OutputPath, out, err)
	}
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 || main.Runs[1].Kind != core.RunProviderWake {
		t.Fatalf("main runs: %+v", main.Runs)
	}
}

// (d) The 002 sequence: two background commands finish within ~40 ms, as
// the run that launched them is finishing. Whatever way the CLI batches
// them (one wake, two wakes, an empty num_turns:0 turn first), both are
// recorded, nothing is held, every turn the CLI ran is a run, and no run
// is left open.
func TestTwoWakesInQuickSuccession(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	seen := map[string]bool{}
	var replies []string
	final := make(chan string, 1)
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		mu.Lock()
		defer mu.Unlock()
		reply := func(s string) (providertest.Reply, bool) {
			s = fmt.Sprintf("%s #%d", s, r.N)
			replies = append(replies, s)
			return text(s), true
		}
		switch {
		case isSub(r):
			return providertest.Reply{}, false
		case len(notified(r)) > 0:
			for _, id := range notified(r) {
				seen[id] = true
			}
			rep, ok := reply("MAIN: woke")
			if len(seen) == 2 {
				final <- rep.Blocks[0].Text
			}
			return rep, ok
		case lastIsToolResult(r):
			// Finish the launching run just as the commands finish.
			rep, ok := reply("MAIN: both launched")
			rep.Delay = 900 * time.Millisecond
			return rep, ok
		case strings.Contains(r.LastUserText(), "run both"):
			return providertest.Answer(
				providertest.ToolUse("", "Bash", `{"command":"sleep 1; echo ONE","description":"first","run_in_background":true}`),
				providertest.ToolUse("", "Bash", `{"command":"sleep 1.04; echo TWO","description":"second","run_in_background":true}`),
			), true
		}
		return providertest.Reply{}, false
	})
	h.start("run both")
	var last string
	select {
	case last = <-final:
	case <-h.ctx.Done():
		h.dump()
		t.Fatal("the model never saw both notifications")
	}
	h.waitRunEnded(core.MainAgent, last)
	s := h.waitQuiet()
	h.checkSettled(s)

	var shells []*core.Task
	for _, id := range s.TaskOrder {
		if t := s.Tasks[id]; t.Kind == core.TaskShell {
			shells = append(shells, t)
		}
	}
	if len(shells) != 2 {
		t.Fatalf("%d shell tasks mirrored, want 2", len(shells))
	}
	for _, task := range shells {
		if task.Status != core.TaskCompleted {
			t.Errorf("task %s: %s", task.ID, task.Status)
		}
		if n := s.Note(core.NoteKey{Task: task.ID}); n == nil || n.Status != "completed" {
			t.Errorf("notification %s#exit: %+v", task.ID, n)
		}
		if !seen[task.External] {
			t.Errorf("the model never saw the notification of %s", task.External)
		}
	}
	main := s.Agents[core.MainAgent]
	tr := transcriptText(main)
	mu.Lock()
	for _, r := range replies {
		if !strings.Contains(tr, r) {
			t.Errorf("model reply %q is not in main's transcript", r)
		}
	}
	mu.Unlock()
	wakes := 0
	for _, r := range main.Runs {
		if r.Status != core.RunCompleted {
			t.Errorf("main run %d: %s %s", r.Seq, r.Status, r.Error)
		}
		if r.Kind == core.RunProviderWake {
			wakes++
		}
	}
	if wakes == 0 {
		t.Errorf("no provider-wake run: %+v", main.Runs)
	}
	t.Logf("main runs: %d (%d wakes); model replies %q", len(main.Runs), wakes, replies)
}

// (e) The CLI is killed while a subagent and a command run: both mirrored
// tasks end lost, main is notified, and that notification starts a run on
// a new CLI process that resumes the session. The command, which the CLI
// ran in a session of its own, does not outlive it.
func TestKilledWhileSubagentRuns(t *testing.T) {
	h := newHarness(t, nil)
	subStarted := make(chan struct{})
	var once sync.Once
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case isSub(r):
			once.Do(func() { close(subStarted) })
			return providertest.Reply{Blocks: []chat.Block{chat.Text("never sent")}, Hold: make(chan struct{})}, true
		case strings.Contains(r.LastUserText(), "lost"):
			return text("MAIN: resumed after the loss"), true
		case lastIsToolResult(r):
			return text("MAIN: agent launched"), true
		case strings.Contains(r.LastUserText(), "start the agent"):
			return providertest.Answer(
				providertest.ToolUse("", "Agent", `{"description":"long job","prompt":"SUBTASK: work for a long time","subagent_type":"general-purpose","run_in_background":true}`),
				providertest.ToolUse("", "Bash", `{"command":"sleep 60","description":"a minute","run_in_background":true}`),
			), true
		}
		return providertest.Reply{}, false
	})
	h.start("start the agent")
	h.waitRunEnded(core.MainAgent, "MAIN: agent launched")
	select {
	case <-subStarted:
	case <-h.ctx.Done():
		t.Fatal("the subagent never called the model")
	}
	h.waitEvent("the mirrored subagent's run", func(typ string, data []byte) bool {
		var e core.RunStarted
		return typ == "run.started" && json.Unmarshal(data, &e) == nil && e.Agent != core.MainAgent
	})
	before := h.state().Agents[core.MainAgent]
	if before.PID <= 0 {
		t.Fatal("no process recorded")
	}
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.waitRunEnded(core.MainAgent, "MAIN: resumed after the loss")
	s := h.waitQuiet()
	h.checkSettled(s)

	task, shellTask := lastTasks(s)
	if task == nil || shellTask == nil {
		t.Fatal("a mirrored task is missing")
	}
	if shellTask.Status != core.TaskLost {
		t.Errorf("shell task: %s", shellTask.Status)
	}
	if n := s.Note(core.NoteKey{Task: shellTask.ID}); n == nil || n.Status != string(core.TaskLost) || n.DeliveredRun != 2 {
		t.Errorf("shell task's notification: %+v", n)
	}
	checkGone(t, h.sess, "sleep 60")
	sub := s.Agents[task.Agent]
	if len(sub.Runs) != 1 || sub.Runs[0].Status != core.RunInterrupted {
		t.Fatalf("subagent runs: %+v", sub.Runs)
	}
	n := s.Note(core.NoteKey{Task: task.ID, Run: 1})
	if n == nil || n.Status != string(core.TaskLost) || n.Delivery != core.DeliverInbox || n.Owner != core.MainAgent {
		t.Fatalf("lost notification: %+v", n)
	}
	if !strings.Contains(n.Reply, "signal: killed") {
		t.Errorf("the reason does not carry the exit status: %q", n.Reply)
	}
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 || main.Runs[1].Kind != core.RunKind(core.KindNotification) || main.Runs[1].Status != core.RunCompleted {
		t.Fatalf("main runs: %+v", main.Runs)
	}
	if n.DeliveredRun != 2 {
		t.Errorf("the lost notification was taken by run %d, want 2", n.DeliveredRun)
	}
	if main.PID == before.PID {
		t.Errorf("pid before %d, after %d", before.PID, main.PID)
	}
	// The new process resumed the CLI's session: same session id, and the
	// model saw the history.
	var resumed *providertest.Request
	for _, r := range h.srv.Requests() {
		if strings.Contains(r.LastUserText(), "lost") && !isSub(r) {
			resumed = r
		}
	}
	if resumed == nil || resumed.Header.Get("X-Claude-Code-Session-Id") != h.srv.Request(1).Header.Get("X-Claude-Code-Session-Id") {
		t.Fatalf("the new process did not resume the session")
	}
	hist := ""
	for _, m := range resumed.Messages {
		hist += m.PlainText()
	}
	if !strings.Contains(hist, "MAIN: agent launched") {
		t.Errorf("the resumed request lacks the history")
	}
}

// waitReleased waits for the record of the agent's process ending
// (ProcessRecorded with pid 0) and returns its sequence number.
func (h *harness) waitReleased(after int64) int64 {
	h.t.Helper()
	rec := h.waitEvent("the end of the process", func(typ string, data []byte) bool {
		var e struct{ Running bool }
		return typ == "provider.process" && json.Unmarshal(data, &e) == nil && !e.Running
	})
	if rec.Seq <= after {
		h.t.Fatalf("the process ended (event %d) before event %d", rec.Seq, after)
	}
	return rec.Seq
}

// runEndedSeq returns the sequence number of the event that ended run seq
// of agent.
func (h *harness) runEndedSeq(agent core.AgentID, seq int) int64 {
	h.t.Helper()
	rec := h.waitEvent(fmt.Sprintf("end of run %d of %s", seq, agent), func(typ string, data []byte) bool {
		var e core.RunEnded
		return typ == "run.ended" && json.Unmarshal(data, &e) == nil && e.Agent == agent && e.Seq == seq
	})
	return rec.Seq
}

// Idle release ends an idle CLI; the next prompt starts a new one that
// resumes the CLI's session.
func TestIdleReleaseAndResume(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.IdleRelease = 300 * time.Millisecond })
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case strings.Contains(r.LastUserText(), "second prompt"):
			return text("reply two"), true
		case strings.Contains(r.LastUserText(), "first prompt"):
			return text("reply one"), true
		}
		return providertest.Reply{}, false
	})
	h.start("first prompt")
	h.waitRunEnded(core.MainAgent, "reply one")
	h.waitReleased(h.runEndedSeq(core.MainAgent, 1))
	if st := h.drv.Stats(); st.IdleReleases != 1 || st.ForcedReleases != 0 {
		t.Fatalf("stats: %+v", st)
	}
	if _, err := h.rt.Prompt(h.ctx, vigil.SessionID(h.sess), &vigil.PromptParams{Text: "second prompt"}); err != nil {
		t.Fatal(err)
	}
	h.waitRunEnded(core.MainAgent, "reply two")
	s := h.waitQuiet()
	h.checkSettled(s)
	r1, r2 := h.srv.Request(1), h.srv.Requests()[len(h.srv.Requests())-1]
	if r1.Header.Get("X-Claude-Code-Session-Id") != r2.Header.Get("X-Claude-Code-Session-Id") {
		t.Fatal("the second process did not resume the session")
	}
	hist := ""
	for _, m := range r2.Messages {
		hist += m.PlainText()
	}
	if !strings.Contains(hist, "reply one") {
		t.Fatal("the resumed request lacks the history")
	}
}

// Idle release waits for live background work: the command finishes, the
// wake turn runs, and only then is the process released.
func TestIdleReleaseDefersForBackgroundWork(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.IdleRelease = 150 * time.Millisecond
		o.MaxDeferral = 15 * time.Second
	})
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case len(notified(r)) > 0:
			return text("MAIN: woke"), true
		case lastIsToolResult(r):
			return text("MAIN: launched"), true
		case strings.Contains(r.LastUserText(), "run it"):
			return toolUse("Bash", `{"command":"sleep 1; echo DONE","description":"one second","run_in_background":true}`), true
		}
		return providertest.Reply{}, false
	})
	h.start("run it")
	h.waitRunEnded(core.MainAgent, "MAIN: woke")
	h.waitReleased(h.runEndedSeq(core.MainAgent, 2))
	s := h.waitQuiet()
	h.checkSettled(s)
	for _, id := range s.TaskOrder {
		if task := s.Tasks[id]; task.Status != core.TaskCompleted {
			t.Errorf("task %s: %s", task.ID, task.Status)
		}
	}
	if st := h.drv.Stats(); st.Deferrals == 0 || st.IdleReleases != 1 || st.ForcedReleases != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// Past MaxDeferral the process is released anyway: its command ends lost,
// main hears of it and a new process answers.
func TestIdleReleaseAfterMaxDeferral(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.IdleRelease = 150 * time.Millisecond
		o.MaxDeferral = 300 * time.Millisecond
		o.CloseGrace = 300 * time.Millisecond
	})
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case strings.Contains(r.LastUserText(), "lost"):
			return text("MAIN: noted the loss"), true
		case lastIsToolResult(r):
			return text("MAIN: launched"), true
		case strings.Contains(r.LastUserText(), "run it"):
			return toolUse("Bash", `{"command":"sleep 60","description":"a minute","run_in_background":true}`), true
		case strings.Contains(r.LastUserText(), "stopped"):
			return text("MAIN: heard of the stop"), true
		}
		return providertest.Reply{}, false
	})
	h.start("run it")
	h.waitRunEnded(core.MainAgent, "MAIN: noted the loss")
	s := h.waitQuiet()
	h.checkSettled(s)
	var task *core.Task
	for _, id := range s.TaskOrder {
		task = s.Tasks[id]
	}
	if task == nil || task.Kind != core.TaskShell || task.Status != core.TaskLost {
		t.Fatalf("task: %+v", task)
	}
	if n := s.Note(core.NoteKey{Task: task.ID}); n == nil || !strings.Contains(n.Reply, causeForced) || n.DeliveredRun != 2 {
		t.Fatalf("notification: %+v", n)
	}
	if st := h.drv.Stats(); st.ForcedReleases != 1 {
		t.Fatalf("stats: %+v", st)
	}
	checkGone(t, h.sess, "sleep 60")
}

// checkGone fails if a process of the session that runs command is still
// alive two seconds later (a stopped command takes a moment to die).
func checkGone(t *testing.T, session, command string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
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
		if !strings.Contains(strings.ReplaceAll(string(cmd), "\x00", " "), command) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, int(max(time.Until(deadline), 0)/time.Millisecond))
		unix.Close(fd)
		if n == 0 {
			t.Errorf("process %d (%q) outlived its task", pid, cmd)
		}
	}
}

// StopTask and a now-priority prompt go through the control protocol.
func TestStopTaskAndInterrupt(t *testing.T) {
	h := newHarness(t, nil)
	slow := make(chan struct{})
	var once sync.Once
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		switch {
		case strings.Contains(r.LastUserText(), "urgent"):
			return text("MAIN: urgent handled"), true
		case strings.Contains(r.LastUserText(), "think slowly"):
			once.Do(func() { close(slow) })
			return providertest.Reply{Blocks: []chat.Block{chat.Text("never sent")}, Hold: make(chan struct{})}, true
		case lastIsToolResult(r):
			return text("MAIN: launched"), true
		case strings.Contains(r.LastUserText(), "run it"):
			return toolUse("Bash", `{"command":"sleep 60","description":"a minute","run_in_background":true}`), true
		case strings.Contains(r.LastUserText(), "stopped"):
			return text("MAIN: heard of the stop"), true
		}
		return providertest.Reply{}, false
	})
	h.start("run it")
	h.waitRunEnded(core.MainAgent, "MAIN: launched")
	var task *core.Task
	for _, id := range h.state().TaskOrder {
		task = h.state().Tasks[id]
	}
	if task == nil {
		t.Fatal("no mirrored task")
	}
	if err := h.rt.StopTask(h.ctx, vigil.SessionID(h.sess), &vigil.StopTaskParams{Task: vigil.TaskID(task.ID), By: "test"}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("the stopped task's notification", func(typ string, data []byte) bool {
		var e core.NotificationWritten
		return typ == "notification.written" && json.Unmarshal(data, &e) == nil && e.Note.Key.Task == task.ID
	})
	// The CLI runs no turn for a task it was told to stop: vigil's inbox
	// delivers the notification, and main hears of the stop at once.
	h.waitRunEnded(core.MainAgent, "MAIN: heard of the stop")
	s := h.waitQuiet()
	if got := s.Tasks[task.ID].Status; got != core.TaskStopped {
		t.Fatalf("stopped task: %s", got)
	}
	if n := s.Note(core.NoteKey{Task: task.ID}); n == nil || n.DeliveredRun != 2 {
		t.Fatalf("the stopped task's notification: %+v", n)
	}
	checkGone(t, h.sess, "sleep 60")

	if _, err := h.rt.Prompt(h.ctx, vigil.SessionID(h.sess), &vigil.PromptParams{Text: "think slowly"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow:
	case <-h.ctx.Done():
		t.Fatal("the slow prompt never reached the model")
	}
	if _, err := h.rt.Prompt(h.ctx, vigil.SessionID(h.sess), &vigil.PromptParams{Text: "urgent", Priority: vigil.PriorityNow}); err != nil {
		t.Fatal(err)
	}
	h.waitRunEnded(core.MainAgent, "MAIN: urgent handled")
	s = h.waitQuiet()
	h.checkSettled(s)
	runs := s.Agents[core.MainAgent].Runs
	if len(runs) != 4 {
		t.Fatalf("main runs: %+v", runs)
	}
	if runs[2].Status != core.RunCancelled || !strings.Contains(runs[2].Error, "interrupted") || !strings.Contains(runs[2].Reply, "aborted_streaming") {
		t.Errorf("interrupted run: %+v", runs[2])
	}
}

// A subagent's own background command: mirrored as a shell task owned by
// the mirrored subagent; when it ends the CLI wakes the subagent (its run
// 2) and then main, and each run's notification is recorded.
func TestSubagentBackgroundBash(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	agentWakes := 0
	final := make(chan string, 1)
	h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case isSub(r) && !lastIsToolResult(r) && strings.Contains(r.LastUserText(), "SUBTASK"):
			return toolUse("Bash", `{"command":"sleep 0.5; echo SUBBG","description":"sub command","run_in_background":true}`), true
		case isSub(r):
			return text(fmt.Sprintf("SUB: done #%d", r.N)), true
		case len(notified(r)) > 0:
			reply := fmt.Sprintf("MAIN: woke #%d", r.N)
			for _, id := range notified(r) {
				if agentTaskID.MatchString(id) {
					agentWakes++
				}
			}
			if agentWakes == 2 {
				final <- reply
			}
			return text(reply), true
		case lastIsToolResult(r):
			return text("MAIN: agent launched"), true
		case strings.Contains(r.LastUserText(), "start the agent"):
			return toolUse("Agent", `{"description":"worker","prompt":"SUBTASK: run a command","subagent_type":"general-purpose","run_in_background":true}`), true
		}
		return providertest.Reply{}, false
	})
	h.start("start the agent")
	var last string
	select {
	case last = <-final:
	case <-h.ctx.Done():
		h.dump()
		t.Fatal("main never heard of both runs of the subagent")
	}
	h.waitRunEnded(core.MainAgent, last)
	s := h.waitQuiet()
	h.checkSettled(s)

	agentTask, shellTask := lastTasks(s)
	if agentTask == nil || shellTask == nil {
		t.Fatalf("tasks: %v", s.TaskOrder)
	}
	if shellTask.Owner != agentTask.Agent || shellTask.Status != core.TaskCompleted {
		t.Fatalf("the subagent's command: %+v", shellTask)
	}
	if n := s.Note(core.NoteKey{Task: shellTask.ID}); n == nil || n.Owner != agentTask.Agent || n.Status != "completed" {
		t.Fatalf("the command's notification: %+v", n)
	}
	sub := s.Agents[agentTask.Agent]
	if len(sub.Runs) != 2 {
		t.Fatalf("subagent runs: %+v", sub.Runs)
	}
	for _, r := range sub.Runs {
		if r.Status != core.RunCompleted || !strings.HasPrefix(r.Reply, "SUB: done") {
			t.Errorf("subagent run %d: %+v", r.Seq, r)
		}
		if n := s.Note(core.NoteKey{Task: agentTask.ID, Run: r.Seq}); n == nil || n.Reply != r.Reply {
			t.Errorf("notification %s#%d: %+v", agentTask.ID, r.Seq, n)
		}
	}
}

// A background subagent starts a background command and is stopped before
// the command exits: after its run ended (it waits on the command), or while
// that run is still in its model round. The CLI 2.1.328 reports the agent
// task killed and, in the model round, its run stopped; it kills the
// command and reports it stopped, and wakes neither the subagent nor main
// for it. Whatever the CLI reports, the session must settle, every run of
// the mirrored subagent must end with a notification, and every
// notification written must reach a run of some agent or be dropped with a
// reason.
func TestSubagentStoppedBeforeItsBackgroundBash(t *testing.T) {
	for _, tc := range []struct {
		name string
		// inRound stops the subagent while its model answers the command's
		// tool result, instead of after its run ended.
		inRound bool
	}{
		{name: "after its run ended"},
		{name: "in its model round", inRound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) })
			held := make(chan struct{})
			var once, seenOnce sync.Once
			var shellID atomic.Value // the mirrored command's vigil task id, once known
			shellID.Store("")
			seen := make(chan int, 1) // the request in which main's model saw it
			h.srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
				if id := shellID.Load().(string); id != "" && !isSub(r) && slices.Contains(notified(r), id) {
					seenOnce.Do(func() { seen <- r.N })
				}
				switch {
				case isSub(r) && !lastIsToolResult(r) && strings.Contains(r.LastUserText(), "SUBTASK"):
					return toolUse("Bash", `{"command":"sleep 3; echo SUBBG","description":"sub command","run_in_background":true}`), true
				case isSub(r) && lastIsToolResult(r) && tc.inRound:
					once.Do(func() { close(held) })
					return providertest.Reply{Blocks: []chat.Block{chat.Text("SUB: never sent")}, Hold: hold}, true
				case isSub(r):
					return text(fmt.Sprintf("SUB: done #%d", r.N)), true
				case strings.Contains(r.LastUserText(), "start the agent"):
					return toolUse("Agent", `{"description":"worker","prompt":"SUBTASK: run a command","subagent_type":"general-purpose","run_in_background":true}`), true
				case lastIsToolResult(r) && strings.Contains(r.LastUserText(), "Async agent launched"):
					return text("MAIN: agent launched"), true
				}
				// Wakes and whatever vigil delivers to main.
				return text(fmt.Sprintf("MAIN: noted #%d", r.N)), true
			})
			h.start("start the agent")
			h.waitRunEnded(core.MainAgent, "MAIN: agent launched")
			if tc.inRound {
				select {
				case <-held:
				case <-h.ctx.Done():
					h.dump()
					t.Fatal("the subagent never answered its command's tool result")
				}
			} else {
				h.waitEvent("the end of the subagent's run", func(typ string, data []byte) bool {
					var e core.RunEnded
					return typ == "run.ended" && json.Unmarshal(data, &e) == nil && e.Agent != core.MainAgent
				})
			}
			h.waitEvent("the subagent's command", func(typ string, data []byte) bool {
				var e core.TaskStarted
				return typ == "task.started" && json.Unmarshal(data, &e) == nil && e.Task.Kind == core.TaskShell
			})
			s := h.state()
			agentTask, shellTask := lastTasks(s)
			if agentTask == nil || shellTask == nil || shellTask.Owner != agentTask.Agent {
				t.Fatalf("tasks: agent %+v, shell %+v", agentTask, shellTask)
			}
			if !shellTask.Status.Live() {
				t.Fatalf("the command ended before the stop: %+v", shellTask)
			}
			shellID.Store(string(shellTask.ID))
			requestsBefore := len(h.srv.Requests())
			// A subagent between runs (waiting on its command) can be
			// stopped as well as one in a model round.
			if err := h.rt.StopTask(h.ctx, vigil.SessionID(h.sess), &vigil.StopTaskParams{Task: vigil.TaskID(agentTask.ID), By: "test"}); err != nil {
				t.Fatalf("StopTask of the %s subagent: %v", agentTask.Status, err)
			}
			h.waitEvent("the end of the subagent's command", func(typ string, data []byte) bool {
				var e core.TaskUpdated
				return typ == "task.updated" && json.Unmarshal(data, &e) == nil && e.Task == shellTask.ID && !e.Status.Live()
			})

			// The CLI tells no one of the command it killed; vigil does:
			// main's model sees its notification.
			select {
			case n := <-seen:
				t.Logf("main's model saw the stopped command's notification in request #%d", n)
			case <-h.ctx.Done():
				for _, r := range h.srv.Requests()[requestsBefore:] {
					t.Logf("model request #%d after the stop (subagent %v): notifications of %v", r.N, isSub(r), notified(r))
				}
				h.dump()
				t.Fatalf("no model request of main carried the stopped command's notification %s", shellTask.ID)
			}
			s = h.waitQuiet()
			h.checkSettled(s)
			sub := s.Agents[agentTask.Agent]
			for _, r := range sub.Runs {
				if r.Status == core.RunRunning {
					t.Errorf("subagent run %d never ended: %+v", r.Seq, r)
				} else if s.Note(core.NoteKey{Task: agentTask.ID, Run: r.Seq}) == nil {
					t.Errorf("subagent run %d (%s) ended without a notification", r.Seq, r.Status)
				}
			}
			for _, k := range s.NoteOrder {
				n := s.Note(k)
				if k.Task != agentTask.ID && k.Task != shellTask.ID {
					continue
				}
				t.Logf("notification %s (%s): owner %s, delivery %s, item %q, delivered to run %d, dropped %q",
					k, n.Status, n.Owner, n.Delivery, n.Item, n.DeliveredRun, n.Dropped)
				if n.DeliveredRun == 0 && n.Dropped == "" {
					t.Errorf("notification %s (%s) of %s was neither delivered nor dropped: delivery %s, item %q",
						k, n.Status, n.Owner, n.Delivery, n.Item)
					continue
				}
				if n.DeliveredRun > 0 {
					if o := s.Agents[n.Owner]; o == nil || n.DeliveredRun > len(o.Runs) || o.Runs[n.DeliveredRun-1].Status == core.RunRunning {
						t.Errorf("notification %s was delivered to run %d of %s, which is not a run that ended", k, n.DeliveredRun, n.Owner)
					}
				}
			}
		})
	}
}
