package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// Scenarios for the test providers, one per behaviour a test needs; a
// session picks one by its provider name.
var scenarios = map[string]string{
	// echo answers every input at once.
	"echo": `
name: echo
agents:
  "*":
    turns:
      - say: "echo: {{.Input}}"
    on:
      prompt: [{say: "echo: {{.Input}}"}]
      message: [{say: "answer: {{.Message.Text}}"}]
      notification: [{say: "noted"}]
`,
	// slow never answers on its own: its model round stays in flight.
	"slow": `
name: slow
agents:
  "*":
    on:
      prompt: [{delay: 1h, say: "slow"}]
      message: [{delay: 1h, say: "slow"}]
`,
	// shell runs each prompt as a background shell command.
	"shell": `
name: shell
agents:
  main:
    turns:
      - say: "started"
    on:
      prompt:
        - say: "starting"
          tools:
            - Bash: {command: "{{.Input}}", description: "test task", run_in_background: true}
      notification: [{say: "done: {{.Notification.Key}}"}]
`,
	// spawn starts a background subagent w1.
	"spawn": `
name: spawn
agents:
  main:
    turns:
      - say: "waiting"
    on:
      prompt:
        - say: "spawning"
          tools:
            - Agent: {name: w1, description: "worker", prompt: "work on {{.Input}}", run_in_background: true}
      notification: [{say: "{{.Notification.Agent}} reported"}]
  w1:
    turns:
      - say: "w1 done"
    on:
      message: [{say: "w1 answers {{.Message.Text}}"}]
`,
	// coord is examples/coordinator.yaml with short delays: three
	// background workers, messages sent into their final rounds.
	"coord": `
name: coord
agents:
  main:
    turns:
      - say: "Splitting the job."
        tools:
          - Agent: {name: w1, prompt: "one", run_in_background: true}
          - Agent: {name: w2, prompt: "two", run_in_background: true}
          - Agent: {name: w3, prompt: "three", run_in_background: true}
      - say: "Waiting."
    on:
      notification:
        - say: "{{.Notification.Agent}} reported"
          tools:
            - SendMessage: {to: w2, message: "Also add tests."}
        - say: "{{.Notification.Agent}} reported"
          tools:
            - SendMessage: {to: w3, message: "Also write the changelog."}
        - say: "{{.Notification.Agent}} reported"
  w1:
    turns: [{delay: 20ms, say: "part one is done"}]
    on: {message: [{say: "w1: {{.Message.Text}}"}]}
  w2:
    turns: [{delay: 60ms, say: "part two is done"}]
    on: {message: [{delay: 10ms, say: "tests added"}]}
  w3:
    turns: [{delay: 100ms, say: "part three is done"}]
    on: {message: [{delay: 10ms, say: "changelog written"}]}
`,
}

const testToken = "test-token-0123456789"

// harness is a real server on a random loopback port over a runtime on
// memstore (or another store) with the scripted providers.
type harness struct {
	t       testing.TB
	rt      *vigil.Runtime
	st      store.Store
	srv     *Server
	ts      *httptest.Server
	metrics *Metrics
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testProviders(t testing.TB) map[string]provider.Provider {
	provs := map[string]provider.Provider{}
	for name, src := range scenarios {
		sc, err := script.Parse([]byte(src))
		if err != nil {
			t.Fatalf("scenario %s: %v", name, err)
		}
		provs[name] = script.New(sc, nil)
	}
	return provs
}

func newHarness(t testing.TB, edit ...func(*Options)) *harness {
	t.Helper()
	return newHarnessStore(t, memstore.New(), edit...)
}

// newHarnessStore is newHarness over st, which it closes at the end.
func newHarnessStore(t testing.TB, st store.Store, edit ...func(*Options)) *harness {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(logWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := NewMetrics()
	rt, err := vigil.Open(context.Background(), vigil.Options{
		Store: st, Providers: testProviders(t), DefaultProvider: "echo", DataDir: t.TempDir(), Node: "test",
		Logger: logger, Observer: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Token: testToken, Logger: logger, Metrics: m}
	for _, f := range edit {
		f(&opts)
	}
	srv := New(rt, opts)
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close() // ends the event streams
		ts.Close()
		rt.Close()
		st.Close()
	})
	return &harness{t: t, rt: rt, st: st, srv: srv, ts: ts, metrics: m}
}

// call sends a request with the test token and returns the status and body.
func (h *harness) call(method, path string, body any) (int, []byte) {
	h.t.Helper()
	return h.callToken(method, path, body, testToken)
}

func (h *harness) callToken(method, path string, body any, token string) (int, []byte) {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, h.ts.URL+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// must sends a request, checks the status and decodes the body into out.
func (h *harness) must(method, path string, body any, want int, out any) {
	h.t.Helper()
	code, b := h.call(method, path, body)
	if code != want {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// mustErr sends a request and checks it fails with status and code.
func (h *harness) mustErr(method, path string, body any, status int, code string) ErrorDetail {
	h.t.Helper()
	got, b := h.call(method, path, body)
	var e ErrorBody
	if err := json.Unmarshal(b, &e); err != nil {
		h.t.Fatalf("%s %s: status %d, body is not a JSON error: %q", method, path, got, b)
	}
	if got != status || e.Error.Code != code {
		h.t.Fatalf("%s %s: %d %s (%s), want %d %s", method, path, got, e.Error.Code, e.Error.Message, status, code)
	}
	return e.Error
}

// create makes a session and returns its id.
func (h *harness) create(req CreateSessionRequest) string {
	h.t.Helper()
	var d vigil.SessionDetail
	h.must("POST", "/api/sessions", req, http.StatusCreated, &d)
	if d.Session.ID == "" {
		h.t.Fatal("created session has no id")
	}
	return string(d.Session.ID)
}

// wait returns the first event of the session matching pred, reading the
// committed events from the start: no sleeps, no polling.
func (h *harness) wait(session string, what string, pred func(core.Event) bool) core.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := h.rt.Subscribe(ctx, &vigil.SubscribeParams{Session: vigil.SessionID(session)})
	if err != nil {
		h.t.Fatal(err)
	}
	defer sub.Close()
	for rec := range sub.C {
		if rec.Live {
			continue // streamed model text: no event of the session's
		}
		e, err := decodeEvent(rec)
		if err != nil {
			h.t.Fatal(err)
		}
		if pred(e) {
			return e
		}
	}
	h.t.Fatalf("session %s: no event %s", session, what)
	return core.Event{}
}

func (h *harness) quiet(session string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.rt.WaitQuiescent(ctx, vigil.SessionID(session)); err != nil {
		h.t.Fatalf("session %s not quiescent: %v", session, err)
	}
}

func taskEnded(task string) func(core.Event) bool {
	return func(e core.Event) bool {
		b, ok := e.Body.(*core.TaskUpdated)
		return ok && string(b.Task) == task && b.Ended
	}
}

func TestHealthzAndUINeedNoToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	code, b := h.callToken("GET", "/healthz", nil, "")
	if code != 200 || !strings.Contains(string(b), `"ok"`) {
		t.Fatalf("healthz: %d %s", code, b)
	}
	code, b = h.callToken("GET", "/", nil, "")
	if code != 200 || !strings.Contains(string(b), "<title>vigil</title>") {
		t.Fatalf("ui: %d %s", code, b)
	}
	code, b = h.callToken("GET", "/ui/", nil, "")
	if code != 200 || !strings.Contains(string(b), "<title>vigil</title>") {
		t.Fatalf("ui files: %d %s", code, b)
	}
}

// TestAuthRefused calls every authenticated route without a token and
// with a wrong one.
func TestAuthRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{})
	r := strings.NewReplacer("{session}", id, "{agent}", "main", "{task}", "t1", "{item}", "i1", "{msg}", "m1", "{approval}", "p1", "{path...}", "x", "{$}", "")
	n := 0
	for _, rt := range h.srv.routes() {
		if rt.public {
			continue
		}
		path := r.Replace(rt.path)
		for _, tok := range []string{"", "wrong-token", testToken + "x", strings.ToUpper(testToken)} {
			code, b := h.callToken(rt.method, path, `{}`, tok)
			var e ErrorBody
			if code != http.StatusUnauthorized || json.Unmarshal(b, &e) != nil || e.Error.Code != "unauthorized" {
				t.Errorf("%s %s with token %q: %d %s, want 401 unauthorized", rt.method, path, tok, code, b)
			}
		}
		n++
	}
	// Unknown routes are refused before they are looked up.
	if code, _ := h.callToken("GET", "/api/nope", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("unknown route without a token: %d, want 401", code)
	}
	if n < 30 {
		t.Errorf("only %d authenticated routes checked", n)
	}
}

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var d vigil.SessionDetail
	code, b := h.call("POST", "/api/sessions", CreateSessionRequest{Prompt: "hello there", Provider: "echo", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	id := string(d.Session.ID)
	if d.Session.Title != "hello there" || d.Session.Permissions.Mode != vigil.PermBypass || d.Session.Provider != "echo" {
		t.Errorf("created session: %+v", d.Session)
	}
	h.quiet(id)

	var list SessionList
	h.must("GET", "/api/sessions", nil, 200, &list)
	if len(list.Sessions) != 1 || string(list.Sessions[0].ID) != id {
		t.Fatalf("sessions: %+v", list)
	}
	h.must("GET", "/api/sessions?open=true", nil, 200, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("open sessions: %+v", list)
	}

	h.must("GET", "/api/sessions/"+id, nil, 200, &d)
	if len(d.Agents) != 1 || d.Agents[0].Name != "main" || d.Agents[0].Runs != 1 || d.Agents[0].State != vigil.AgentIdle || !d.Quiescent {
		t.Fatalf("detail: %+v", d)
	}
	if d.Agents[0].LastActive.IsZero() || len(d.Agents[0].Inbox) != 0 || len(d.Status) != 0 {
		t.Errorf("detail agent: %+v", d.Agents[0])
	}

	var agents AgentList
	h.must("GET", "/api/sessions/"+id+"/agents", nil, 200, &agents)
	if len(agents.Agents) != 1 || agents.Agents[0].ID != vigil.MainAgent {
		t.Fatalf("agents: %+v", agents)
	}
	var ad vigil.AgentDetail
	h.must("GET", "/api/sessions/"+id+"/agents/main", nil, 200, &ad)
	if len(ad.Transcript) < 2 || len(ad.RunHistory) != 1 || ad.RunHistory[0].Reply != "echo: hello there" {
		t.Fatalf("agent detail: %+v", ad)
	}
	h.must("GET", "/api/sessions/"+id+"/agents/a0", nil, 200, &ad)

	var runs RunList
	h.must("GET", "/api/sessions/"+id+"/runs", nil, 200, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].Status != vigil.RunCompleted || runs.Runs[0].AgentName != "main" {
		t.Fatalf("runs: %+v", runs)
	}
	h.must("GET", "/api/sessions/"+id+"/runs?agent=main", nil, 200, &runs)

	var p PromptResult
	h.must("POST", "/api/sessions/"+id+"/prompts", PromptRequest{Text: "again", Priority: vigil.PriorityLater}, http.StatusAccepted, &p)
	if p.Item == "" {
		t.Fatalf("prompt: %+v", p)
	}
	h.quiet(id)
	h.must("GET", "/api/sessions/"+id+"/runs", nil, 200, &runs)
	if len(runs.Runs) != 2 {
		t.Fatalf("runs after a second prompt: %+v", runs)
	}

	var tasks TaskList
	h.must("GET", "/api/sessions/"+id+"/tasks", nil, 200, &tasks)
	var msgs MessageList
	h.must("GET", "/api/sessions/"+id+"/messages", nil, 200, &msgs)
	var ns NoteList
	h.must("GET", "/api/sessions/"+id+"/notifications", nil, 200, &ns)
	var aps ApprovalList
	h.must("GET", "/api/sessions/"+id+"/approvals", nil, 200, &aps)
	if tasks.Tasks == nil || msgs.Messages == nil || ns.Notifications == nil || aps.Approvals == nil {
		t.Errorf("empty lists must be [], not null")
	}

	h.must("POST", "/api/sessions/"+id+"/close", nil, 200, &d)
	if !d.Session.Closed {
		t.Fatalf("closed: %+v", d.Session)
	}
	h.must("POST", "/api/sessions/"+id+"/close", nil, 200, &d) // idempotent
	h.mustErr("POST", "/api/sessions/"+id+"/prompts", PromptRequest{Text: "late"}, http.StatusConflict, "closed")
	h.must("GET", "/api/sessions?open=true", nil, 200, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("open sessions after close: %+v", list)
	}
}

// TestHoldResumeAndInbox holds the user queue, queues prompts, reorders and
// cancels them, and checks status explains the hold until resume.
func TestHoldResumeAndInbox(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	base := "/api/sessions/" + id
	var st StatusView
	h.must("POST", base+"/hold", HoldRequest{Reason: "reviewing"}, 200, &st)
	if st.Hold == nil || st.Hold.Reason != "reviewing" || st.Hold.By != "user" {
		t.Fatalf("hold: %+v", st)
	}
	var items []string
	for _, text := range []string{"one", "two", "three"} {
		var p PromptResult
		h.must("POST", base+"/prompts", PromptRequest{Text: text}, http.StatusAccepted, &p)
		items = append(items, string(p.Item))
	}
	h.must("GET", base+"/status", nil, 200, &st)
	if st.Hold == nil || len(st.Inboxes) != 1 || st.Inboxes[0].Held != 3 || st.Inboxes[0].Draining || !strings.Contains(st.Inboxes[0].Reason, "held") {
		t.Fatalf("status while held: %+v", st)
	}
	var in InboxList
	h.must("GET", base+"/inbox", nil, 200, &in)
	if len(in.Items) != 3 || !in.Items[0].Held || in.Items[0].AgentName != "main" || in.Items[2].Position != 2 {
		t.Fatalf("inbox: %+v", in)
	}
	h.must("POST", base+"/inbox/"+items[2]+"/move", MoveRequest{Index: new(int)}, 200, &in)
	if got := []string{string(in.Items[0].ID), string(in.Items[1].ID), string(in.Items[2].ID)}; got[0] != items[2] || got[1] != items[0] {
		t.Fatalf("after move: %v", got)
	}
	if code, b := h.call("DELETE", base+"/inbox/"+items[1], nil); code != http.StatusNoContent || len(b) != 0 {
		t.Fatalf("cancel item: %d %s", code, b)
	}
	h.mustErr("DELETE", base+"/inbox/"+items[1], nil, 404, "not_found")
	h.must("GET", base+"/inbox?agent=main", nil, 200, &in)
	if len(in.Items) != 2 {
		t.Fatalf("inbox after cancel: %+v", in)
	}

	st = StatusView{}
	h.must("POST", base+"/resume", nil, 200, &st)
	if st.Hold != nil {
		t.Fatalf("resume: %+v", st)
	}
	h.quiet(id)
	h.must("GET", base+"/status", nil, 200, &st)
	if len(st.Inboxes) != 0 || !st.Quiescent {
		t.Fatalf("status after resume: %+v", st)
	}
	var runs RunList
	h.must("GET", base+"/runs", nil, 200, &runs)
	if len(runs.Runs) == 0 {
		t.Fatal("no run after resume")
	}
}

// TestMessageOutcomes: a message is answered with what happened to it; a
// rejection is an outcome, not an HTTP error.
func TestMessageOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "spawn", Prompt: "the job", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	base := "/api/sessions/" + id
	h.quiet(id)
	var mv vigil.Message
	h.must("POST", base+"/agents/w1/messages", MessageRequest{Text: "one more thing"}, 200, &mv)
	if mv.Outcome != vigil.OutcomeResumed || mv.To == "" || !strings.Contains(mv.Detail, "was idle; run 2 started") {
		t.Fatalf("message to idle w1: %+v", mv)
	}
	var m vigil.Message
	h.quiet(id)
	// The worker's transcript, as JSONL, shows the message arriving.
	code, body := h.call("GET", base+"/agents/w1/transcript", nil)
	if code != 200 || !strings.Contains(string(body), `"operation":"dequeue"`) || !strings.Contains(string(body), "one more thing") {
		t.Fatalf("transcript: %d %s", code, body)
	}
	h.mustErr("GET", base+"/agents/nobody/transcript", nil, 404, "not_found")
	h.must("POST", base+"/agents/nobody/messages", MessageRequest{Text: "hello?"}, 200, &m)
	if m.Outcome != vigil.OutcomeRejected || !strings.Contains(m.Reason, "nobody") {
		t.Fatalf("message to an unknown agent: %+v", m)
	}
	var av vigil.Agent
	h.must("POST", base+"/agents/w1/close", nil, 200, &av)
	if av.State != vigil.AgentClosed {
		t.Fatalf("closed agent: %+v", av)
	}
	h.must("POST", base+"/agents/w1/messages", MessageRequest{Text: "still there?"}, 200, &m)
	if m.Outcome != vigil.OutcomeRejected || !strings.Contains(m.Reason, "closed") {
		t.Fatalf("message to a closed agent: %+v", m)
	}
	var msgs MessageList
	h.must("GET", base+"/messages", nil, 200, &msgs)
	if len(msgs.Messages) != 3 || msgs.Messages[0].ID != "m1" || msgs.Messages[0].AnsweredBy == 0 {
		t.Fatalf("messages: %+v", msgs)
	}
	h.must("GET", base+"/messages/m1", nil, 200, &m)
	h.mustErr("GET", base+"/messages/m99", nil, 404, "not_found")
	var ns NoteList
	h.must("GET", base+"/notifications", nil, 200, &ns)
	if len(ns.Notifications) < 2 {
		t.Fatalf("notifications: %+v", ns)
	}
	h.mustErr("POST", "/api/sessions/nope/agents/main/messages", MessageRequest{Text: "x"}, 404, "not_found")
	h.mustErr("POST", base+"/agents/main/messages", MessageRequest{Text: "x", Priority: "soon"}, 400, "invalid")
}

// TestMessagePendingAnswersAtOnce: a message to an agent whose model round
// is in flight is answered at once, 202 pending with its promise (DESIGN
// rule 11); the round's end settles it.
func TestMessagePendingAnswersAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "slow", Prompt: "think"})
	h.wait(id, "model call in flight", func(e core.Event) bool { _, ok := e.Body.(*core.ModelCallStarted); return ok })
	var v vigil.Message
	h.must("POST", "/api/sessions/"+id+"/agents/main/messages", MessageRequest{Text: "hurry"}, http.StatusAccepted, &v)
	m := v
	if m.Outcome != vigil.OutcomePending || m.ID == "" || !strings.Contains(v.Detail, "joins run 1") || !strings.Contains(v.Detail, "run 2 answers") {
		t.Fatalf("pending message: %+v", v)
	}
	// Cancelling the run settles it.
	h.must("POST", "/api/sessions/"+id+"/agents/main/cancel", nil, 200, nil)
	h.wait(id, "message resolved", func(e core.Event) bool { _, ok := e.Body.(*core.MessageResolved); return ok })
	h.must("GET", "/api/sessions/"+id+"/messages/"+string(m.ID), nil, 200, &m)
	if m.Outcome == vigil.OutcomePending {
		t.Fatalf("message still pending after the run ended: %+v", m)
	}
}

func TestCancelRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "slow", Prompt: "think hard"})
	base := "/api/sessions/" + id
	h.wait(id, "model call", func(e core.Event) bool { _, ok := e.Body.(*core.ModelCallStarted); return ok })
	var d vigil.SessionDetail
	h.must("GET", base, nil, 200, &d)
	if d.Agents[0].State != vigil.AgentRunning || d.Agents[0].Run == nil {
		t.Fatalf("main is not running: %+v", d.Agents[0])
	}
	h.must("POST", base+"/agents/main/cancel", nil, 200, nil)
	e := h.wait(id, "run end", func(e core.Event) bool { _, ok := e.Body.(*core.RunEnded); return ok })
	if st := e.Body.(*core.RunEnded).Status; st != core.RunCancelled {
		t.Fatalf("run ended %s, want cancelled", st)
	}
	h.mustErr("POST", base+"/agents/main/cancel", nil, 409, "conflict")
	h.mustErr("POST", base+"/agents/ghost/cancel", nil, 404, "not_found")
}

func TestShellTasks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "shell", Prompt: "echo hello-task", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	base := "/api/sessions/" + id
	h.wait(id, "t1 ended", taskEnded("t1"))
	var tl TaskList
	h.must("GET", base+"/tasks", nil, 200, &tl)
	if len(tl.Tasks) != 1 || tl.Tasks[0].ID != "t1" || tl.Tasks[0].Kind != vigil.TaskShell || tl.Tasks[0].Status != vigil.TaskCompleted {
		t.Fatalf("tasks: %+v", tl.Tasks)
	}
	var task vigil.Task
	h.must("GET", base+"/tasks/t1", nil, 200, &task)
	var out TaskOutput
	h.must("GET", base+"/tasks/t1/output", nil, 200, &out)
	if out.Data != "hello-task\n" || out.Next != int64(len(out.Data)) || out.Status != vigil.TaskCompleted {
		t.Fatalf("output: %+v", out)
	}
	h.must("GET", fmt.Sprintf("%s/tasks/t1/output?offset=%d&limit=10", base, out.Next), nil, 200, &out)
	if out.Data != "" {
		t.Fatalf("output after the end: %+v", out)
	}
	h.must("GET", base+"/tasks/t1/output?offset=6&limit=4", nil, 200, &out)
	if out.Data != "task" {
		t.Fatalf("output at 6: %q", out.Data)
	}
	h.mustErr("GET", base+"/tasks/t1/output?offset=-1", nil, 400, "invalid")
	h.mustErr("GET", base+"/tasks/t1/output?limit=abc", nil, 400, "invalid")
	h.mustErr("GET", base+"/tasks/t9", nil, 404, "not_found")
	h.mustErr("GET", base+"/tasks/t9/output", nil, 404, "not_found")
	h.mustErr("POST", base+"/tasks/t1/stop", nil, 409, "conflict")

	h.quiet(id)
	h.must("POST", base+"/prompts", PromptRequest{Text: "sleep 30"}, http.StatusAccepted, nil)
	h.wait(id, "t2's process", func(e core.Event) bool {
		b, ok := e.Body.(*core.TaskProcess)
		return ok && b.Task == "t2"
	})
	h.must("POST", base+"/tasks/t2/stop", nil, 200, &task)
	h.wait(id, "t2 ended", taskEnded("t2"))
	h.must("GET", base+"/tasks/t2", nil, 200, &task)
	if task.Status != vigil.TaskStopped {
		t.Fatalf("stopped task: %+v", task)
	}
	h.mustErr("POST", base+"/tasks/t9/stop", nil, 404, "not_found")
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "shell", Prompt: "echo approved", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	base := "/api/sessions/" + id
	h.wait(id, "approval request", func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })
	var aps ApprovalList
	h.must("GET", base+"/approvals", nil, 200, &aps)
	if len(aps.Approvals) != 1 || aps.Approvals[0].Tool != "Bash" {
		t.Fatalf("approvals: %+v", aps)
	}
	p := string(aps.Approvals[0].ID)
	var d vigil.SessionDetail
	h.must("GET", base, nil, 200, &d)
	if len(d.Approvals) != 1 || d.Agents[0].State != vigil.AgentWaiting {
		t.Fatalf("detail while waiting: %+v", d)
	}
	h.mustErr("POST", base+"/approvals/"+p, `{"reason":"no allow"}`, 400, "invalid")
	yes := true
	h.must("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &yes, Reason: "fine"}, 200, &aps)
	if len(aps.Approvals) != 0 {
		t.Fatalf("approvals after the answer: %+v", aps)
	}
	h.wait(id, "t1 ended", taskEnded("t1"))
	h.mustErr("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &yes}, 404, "not_found")
}

// An approval answered with an updated input runs that input; a new
// permission mode answers the request pending; bad modes and inputs are
// refused and lose nothing.
func TestApprovalInputAndMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "shell", Prompt: "echo original", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	base := "/api/sessions/" + id
	asked := func(n int) string {
		h.wait(id, "approval request", func(e core.Event) bool {
			b, ok := e.Body.(*core.ApprovalRequested)
			return ok && b.Approval.ID == core.ApprovalID(fmt.Sprintf("p%d", n))
		})
		return fmt.Sprintf("p%d", n)
	}
	p := asked(1)
	yes, no := true, false
	h.mustErr("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &no, Input: json.RawMessage(`{"command":"echo x"}`)}, 400, "invalid")
	h.mustErr("POST", base+"/approvals/"+p, `{"allow": true, "input": "echo x"}`, 400, "invalid")
	h.mustErr("POST", base+"/approvals/"+p, `{"allow": true, "always": true, "save": true, "input": {"command": "echo x"}}`, 400, "invalid")
	var aps ApprovalList
	h.must("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &yes, Input: json.RawMessage(`{"command":"echo updated","description":"test task","run_in_background":true}`)}, 200, &aps)
	h.wait(id, "t1 ended", taskEnded("t1"))
	var out TaskOutput
	h.must("GET", base+"/tasks/t1/output", nil, 200, &out)
	if out.Data != "updated\n" {
		t.Fatalf("the approved call printed %q, want the updated input's output", out.Data)
	}

	h.quiet(id)
	h.must("POST", base+"/prompts", PromptRequest{Text: "echo second"}, http.StatusAccepted, nil)
	asked(2)
	h.mustErr("POST", base+"/permissions", `{"mode": "plan"}`, 400, "invalid")
	h.mustErr("POST", base+"/permissions", `{}`, 400, "invalid")
	var perms vigil.Permissions
	h.must("POST", base+"/permissions", PermissionModeRequest{Mode: "bypass"}, 200, &perms)
	if perms.Mode != vigil.PermBypass {
		t.Fatalf("permissions after the change: %+v", perms)
	}
	h.wait(id, "t2 ended", taskEnded("t2"))
	h.must("GET", base+"/approvals", nil, 200, &aps)
	if len(aps.Approvals) != 0 {
		t.Fatalf("approvals after mode bypass: %+v", aps)
	}
	h.mustErr("POST", "/api/sessions/nope/permissions", PermissionModeRequest{Mode: "ask"}, 404, "not_found")
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	base := "/api/sessions/" + id
	for _, c := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"malformed JSON", "POST", base + "/prompts", `{"text": "x"`, 400, "invalid"},
		{"not an object", "POST", base + "/prompts", `["x"]`, 400, "invalid"},
		{"unknown field", "POST", base + "/prompts", `{"text": "x", "prio": "now"}`, 400, "invalid"},
		{"trailing data", "POST", base + "/prompts", `{"text": "x"} {}`, 400, "invalid"},
		{"empty body", "POST", base + "/prompts", nil, 400, "invalid"},
		{"empty text", "POST", base + "/prompts", `{"text": "  "}`, 400, "invalid"},
		{"bad priority", "POST", base + "/prompts", `{"text": "x", "priority": "urgent"}`, 400, "invalid"},
		{"oversized body", "POST", base + "/prompts", `{"text": "` + strings.Repeat("x", 2<<20) + `"}`, 413, "too_large"},
		{"oversized create", "POST", "/api/sessions", `{"prompt": "` + strings.Repeat("x", 1<<20) + `"}`, 413, "too_large"},
		{"unknown field in create", "POST", "/api/sessions", `{"promt": "x"}`, 400, "invalid"},
		{"unknown nested field", "POST", "/api/sessions", `{"permissions": {"mode": "auto", "allowed": []}}`, 400, "invalid"},
		{"bad permission mode", "POST", "/api/sessions", `{"permissions": {"mode": "yolo"}}`, 400, "invalid"},
		{"bad rule", "POST", "/api/sessions", `{"permissions": {"mode": "auto", "allow": ["Bash(("]}}`, 400, "invalid"},
		{"unknown provider", "POST", "/api/sessions", `{"provider": "gpt-9"}`, 400, "invalid"},
		{"missing cwd", "POST", "/api/sessions", `{"cwd": "/no/such/dir"}`, 400, "invalid"},
		{"bad open filter", "GET", "/api/sessions?open=maybe", nil, 400, "invalid"},
		{"move without index", "POST", base + "/inbox/i1/move", `{}`, 400, "invalid"},
		{"hold unknown field", "POST", base + "/hold", `{"why": "x"}`, 400, "invalid"},
		{"unknown session", "GET", "/api/sessions/nope", nil, 404, "not_found"},
		{"unknown session status", "GET", "/api/sessions/nope/status", nil, 404, "not_found"},
		{"prompt to unknown session", "POST", "/api/sessions/nope/prompts", `{"text": "x"}`, 404, "not_found"},
		{"hold unknown session", "POST", "/api/sessions/nope/hold", nil, 404, "not_found"},
		{"events of unknown session", "GET", "/api/sessions/nope/events", nil, 404, "not_found"},
		{"unknown agent", "GET", base + "/agents/ghost", nil, 404, "not_found"},
		{"runs of unknown agent", "GET", base + "/runs?agent=ghost", nil, 404, "not_found"},
		{"close unknown agent", "POST", base + "/agents/ghost/close", nil, 404, "not_found"},
		{"unknown task", "GET", base + "/tasks/t7", nil, 404, "not_found"},
		{"unknown item", "DELETE", base + "/inbox/i77", nil, 404, "not_found"},
		{"move unknown item", "POST", base + "/inbox/i77/move", `{"index": 0}`, 404, "not_found"},
		{"unknown approval", "POST", base + "/approvals/p9", `{"allow": false}`, 404, "not_found"},
		{"unknown route", "GET", "/api/nope", nil, 404, "not_found"},
		{"wrong method", "PUT", "/api/sessions", `{}`, 405, "method_not_allowed"},
		{"bad after", "GET", base + "/events?after=x", nil, 400, "invalid"},
		{"bad after on all events", "GET", "/api/events?after=-3", nil, 400, "invalid"},
	} {
		code, b := h.call(c.method, c.path, c.body)
		var e ErrorBody
		if err := json.Unmarshal(b, &e); err != nil || code != c.status || e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: %s %s: %d %.200s, want %d %s", c.name, c.method, c.path, code, b, c.status, c.code)
		}
	}
}

// TestServeAndShutdown: Serve returns after its context ends, event
// streams end at once, Shutdown and Close are safe to repeat.
func TestServeAndShutdown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(o *Options) { o.Heartbeat = 5 * time.Millisecond })
	srv := New(h.rt, Options{Token: testToken, Heartbeat: 5 * time.Millisecond})
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	req, _ := http.NewRequest("GET", base+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before a heartbeat: %v", err)
		}
		if strings.HasPrefix(line, ": heartbeat") {
			break
		}
	}
	cancel() // like SIGTERM
	if _, err := io.Copy(io.Discard, br); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("stream end: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("close after shutdown: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still accepts connections after shutdown")
	}
}

// TestSessionDefaults: the server's model and permissions fill in what a
// request leaves out; a request's own choices win.
func TestSessionDefaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(o *Options) {
		o.Defaults = SessionDefaults{Provider: "echo", Model: "big", SubagentModel: "small", Permissions: vigil.Permissions{Mode: vigil.PermAuto, Allow: []string{"Bash(ls *)"}}}
	})
	var d vigil.SessionDetail
	h.must("POST", "/api/sessions", CreateSessionRequest{}, 201, &d)
	if d.Session.Model != "big" || d.Session.Permissions.Mode != vigil.PermAuto || len(d.Session.Permissions.Allow) != 1 {
		t.Errorf("defaults not applied: %+v", d.Session)
	}
	d = vigil.SessionDetail{}
	h.must("POST", "/api/sessions", CreateSessionRequest{Provider: "shell", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}}, 201, &d)
	if d.Session.Model != "" || d.Session.Permissions.Mode != vigil.PermAsk || len(d.Session.Permissions.Allow) != 0 {
		t.Errorf("the request's choices lost: %+v", d.Session)
	}
	d = vigil.SessionDetail{}
	h.must("POST", "/api/sessions", CreateSessionRequest{Model: "other"}, 201, &d)
	if d.Session.Model != "other" {
		t.Errorf("the request's model lost: %+v", d.Session)
	}
}

// "Allow always" with save: the request runs, the session gets the rule,
// the server keeps it for the project directory, and a later session there
// starts with it.
func TestApprovalAlwaysSaved(t *testing.T) {
	t.Parallel()
	saved := map[string][]string{}
	h := newHarness(t, func(o *Options) {
		o.Defaults.SaveRule = func(dir, rule string) error { saved[dir] = append(saved[dir], rule); return nil }
		o.Defaults.ProjectRules = func(dir string) []string { return saved[dir] }
	})
	dir := t.TempDir()
	id := h.create(CreateSessionRequest{Provider: "shell", Prompt: "echo approved", Cwd: dir, Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	base := "/api/sessions/" + id
	h.wait(id, "approval request", func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })
	var aps ApprovalList
	h.must("GET", base+"/approvals", nil, 200, &aps)
	p := string(aps.Approvals[0].ID)
	yes, no := true, false
	h.mustErr("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &no, Always: true}, 400, "invalid")
	h.mustErr("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &yes, Save: true}, 400, "invalid")
	h.must("POST", base+"/approvals/"+p, ApprovalRequest{Allow: &yes, Always: true, Save: true}, 200, &aps)
	h.wait(id, "t1 ended", taskEnded("t1"))
	var d vigil.SessionDetail
	h.must("GET", base, nil, 200, &d)
	if got := d.Session.Permissions.Allow; len(got) != 1 || got[0] != "Bash(echo approved)" {
		t.Fatalf("session rules: %q", got)
	}
	if got := saved[dir]; len(got) != 1 || got[0] != "Bash(echo approved)" {
		t.Fatalf("saved rules: %q", saved)
	}
	// A later session in the project starts with the rule: nothing to ask.
	id2 := h.create(CreateSessionRequest{Provider: "shell", Prompt: "echo approved", Cwd: dir, Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	h.wait(id2, "t1 ended", taskEnded("t1"))
	h.must("GET", "/api/sessions/"+id2+"/approvals", nil, 200, &aps)
	if len(aps.Approvals) != 0 {
		t.Fatalf("the saved rule did not apply: %+v", aps)
	}
}

// decodeEvent decodes an event of the library into the core's event, for
// tests that look at what happened.
func decodeEvent(e vigil.Event) (core.Event, error) {
	body, err := core.DecodeBody(e.Type, e.Data)
	if err != nil {
		return core.Event{}, err
	}
	return core.Event{Seq: e.Seq, At: e.At, Body: body}, nil
}
