package ccwire

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
)

// fakeSession records what the server asks of the session.
type fakeSession struct {
	prompts    chan string
	interrupts chan struct{}
	answers    chan string
	modes      chan string
	events     chan Update
	quiet      chan int64
	replayed   int64
}

// event queues a committed event.
func (f *fakeSession) event(e core.Event) { f.events <- Update{Event: e} }

func newFakeSession() *fakeSession {
	return &fakeSession{
		prompts: make(chan string, 8), interrupts: make(chan struct{}, 8), answers: make(chan string, 8),
		modes: make(chan string, 8), events: make(chan Update, 8), quiet: make(chan int64, 1),
	}
}

func (f *fakeSession) Prompt(_ context.Context, text string) (string, error) {
	f.prompts <- text
	return "s1", nil
}

func (f *fakeSession) Interrupt(context.Context) error { f.interrupts <- struct{}{}; return nil }

func (f *fakeSession) Answer(_ context.Context, ap core.ApprovalID, allow bool, reason string, input json.RawMessage) error {
	a := fmt.Sprintf("%s allow=%v %s", ap, allow, reason)
	if input != nil {
		a += " input=" + string(input)
		if !json.Valid(input) || input[0] != '{' {
			f.answers <- a
			return fmt.Errorf("the updated input is not a JSON object")
		}
	}
	f.answers <- a
	return nil
}

func (f *fakeSession) SetMode(_ context.Context, mode string) error {
	f.modes <- mode
	return nil
}

func (f *fakeSession) Events() <-chan Update { return f.events }

func (f *fakeSession) Replayed() int64 { return f.replayed }

func (f *fakeSession) Quiescent(ctx context.Context) (int64, error) {
	select {
	case seq := <-f.quiet:
		return seq, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// wire is a running server with a program's ends of its pipes.
type wire struct {
	srv  *Server
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Scanner
	done chan error
}

func startServer(t *testing.T, s *fakeSession, mode string) *wire {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	m := newTestMapper()
	m.PermissionMode = mode
	srv := &Server{Args: &Args{}, Session: s, Mapper: m, Stderr: io.Discard}
	w := &wire{t: t, in: inW, out: bufio.NewScanner(outR), done: make(chan error, 1), srv: srv}
	go func() {
		err := srv.Serve(ctx, inR, outW)
		outW.Close()
		w.done <- err
	}()
	return w
}

// srvMapper is the server's mapper; read it only while the server waits
// for input (after an answer was read).
func (w *wire) srvMapper() *Mapper { return w.srv.Mapper }

func (w *wire) send(line string) {
	w.t.Helper()
	if _, err := io.WriteString(w.in, line+"\n"); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wire) read() map[string]any {
	w.t.Helper()
	if !w.out.Scan() {
		w.t.Fatalf("no more output: %v", w.out.Err())
	}
	var m map[string]any
	if err := json.Unmarshal(w.out.Bytes(), &m); err != nil {
		w.t.Fatal(err)
	}
	return m
}

func TestServerControl(t *testing.T) {
	s := newFakeSession()
	w := startServer(t, s, "default")

	w.send(`{"request_id":"r1","type":"control_request","request":{"subtype":"initialize","systemPrompt":[""]}}`)
	resp := w.read()["response"].(map[string]any)
	if resp["subtype"] != "success" || resp["request_id"] != "r1" {
		t.Fatalf("initialize response: %v", resp)
	}
	if r := resp["response"].(map[string]any); r["claude_code_version"] != Version || r["current_permission_mode"] != "default" {
		t.Fatalf("initialize: %v", r)
	}

	w.send(`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"hello"}]},"parent_tool_use_id":null,"session_id":""}`)
	if p := <-s.prompts; p != "hello" {
		t.Fatalf("prompt %q", p)
	}

	// A permission request goes to the program; its answer to vigil.
	s.event(core.Event{Seq: 1, Body: &core.ApprovalRequested{Approval: core.Approval{ID: "p1", Agent: core.MainAgent, UseID: "toolu_9", Tool: "Bash", Input: json.RawMessage(`{"command":"rm x"}`)}}})
	req := w.read()
	r := req["request"].(map[string]any)
	if req["type"] != "control_request" || r["subtype"] != "can_use_tool" || r["tool_name"] != "Bash" || r["tool_use_id"] != "toolu_9" {
		t.Fatalf("can_use_tool: %v", req)
	}
	w.send(fmt.Sprintf(`{"type":"control_response","response":{"subtype":"success","request_id":%q,"response":{"behavior":"deny","message":"no"}}}`, req["request_id"]))
	if a := <-s.answers; a != "p1 allow=false no" {
		t.Fatalf("answer %q", a)
	}
	// An allow with updatedInput passes the input on; one the session
	// refuses denies the call rather than leaving it waiting.
	for _, c := range []struct {
		id, input string
		want      []string
	}{
		{"p2", `{"command":"ls -la"}`, []string{`p2 allow=true  input={"command":"ls -la"}`}},
		{"p3", `"ls"`, []string{`p3 allow=true  input="ls"`, "p3 allow=false the program's updated input was refused: the updated input is not a JSON object"}},
	} {
		s.event(core.Event{Seq: 1, Body: &core.ApprovalRequested{Approval: core.Approval{ID: core.ApprovalID(c.id), Agent: core.MainAgent, UseID: "toolu_" + c.id, Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}}})
		req := w.read()
		w.send(fmt.Sprintf(`{"type":"control_response","response":{"subtype":"success","request_id":%q,"response":{"behavior":"allow","updatedInput":%s}}}`, req["request_id"], c.input))
		for _, want := range c.want {
			if a := <-s.answers; a != want {
				t.Fatalf("answer %q, want %q", a, want)
			}
		}
	}

	w.send(`{"request_id":"r2","type":"control_request","request":{"subtype":"interrupt"}}`)
	<-s.interrupts
	if resp := w.read()["response"].(map[string]any); resp["subtype"] != "success" || resp["request_id"] != "r2" {
		t.Fatalf("interrupt response: %v", resp)
	}

	// set_permission_mode answers as the CLI does: the mode, or an
	// error with the CLI's error_code; the session gets vigil's mode.
	for _, c := range []struct{ mode, subtype, code, vigil string }{
		{"acceptEdits", "success", "", "accept-edits"},
		{"dontAsk", "success", "", "auto"},
		{"default", "success", "", "auto"}, // no permission prompt tool: nobody to ask
		{"bypassPermissions", "error", "bypass_not_launched", ""},
		{"plan", "error", "invalid_mode", ""},
		{"yolo", "error", "invalid_mode", ""},
	} {
		w.send(fmt.Sprintf(`{"request_id":"m-%s","type":"control_request","request":{"subtype":"set_permission_mode","mode":%q}}`, c.mode, c.mode))
		resp := w.read()["response"].(map[string]any)
		if resp["subtype"] != c.subtype || resp["request_id"] != "m-"+c.mode || c.code != "" && resp["error_code"] != c.code {
			t.Fatalf("set_permission_mode %s: %v", c.mode, resp)
		}
		if c.subtype == "success" {
			if r := resp["response"].(map[string]any); r["mode"] != c.mode {
				t.Fatalf("set_permission_mode %s: %v", c.mode, r)
			}
			if got := <-s.modes; got != c.vigil {
				t.Fatalf("set_permission_mode %s set vigil's mode %q, want %q", c.mode, got, c.vigil)
			}
		}
	}
	// The next turn's system/init reports the mode set.
	if w.srvMapper().PermissionMode != "default" {
		t.Fatalf("the mapper reports %q", w.srvMapper().PermissionMode)
	}
	w.send(`{"request_id":"r4","type":"control_request","request":{"subtype":"mcp_status"}}`)
	if resp := w.read()["response"].(map[string]any); resp["subtype"] != "error" || resp["request_id"] != "r4" {
		t.Fatalf("unknown request's response: %v", resp)
	}

	// Stdin closes: the server waits for the session, prints what is left,
	// and ends.
	w.in.Close()
	s.quiet <- 2
	s.event(core.Event{Seq: 2, Body: &core.RunStarted{Agent: core.MainAgent, Seq: 2}})
	if f := w.read(); f["subtype"] != "init" {
		t.Fatalf("last frame: %v", f)
	}
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
}

// Stdin closed before any prompt: nothing to run, the server ends.
func TestServerNoPrompt(t *testing.T) {
	w := startServer(t, newFakeSession(), "default")
	w.in.Close()
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
}

// A resumed session's events before the takeover are mapped, not printed:
// the task the earlier process printed is known when it ends.
func TestServerReplay(t *testing.T) {
	s := newFakeSession()
	s.replayed = 6
	w := startServer(t, s, "default")
	w.send(`{"type":"user","message":{"role":"user","content":"go on"}}`)
	<-s.prompts
	s.event(core.Event{Seq: 1, Body: &core.AgentCreated{Agent: core.Agent{ID: "a1", Owner: core.MainAgent, Task: "t1"}}})
	s.event(core.Event{Seq: 2, Body: &core.TaskStarted{Task: core.Task{ID: "t1", Kind: core.TaskAgent, Owner: core.MainAgent, Agent: "a1", Background: true}}})
	s.event(core.Event{Seq: 3, Body: &core.ToolCallStarted{Agent: core.MainAgent, Call: core.ToolCall{UseID: "toolu_1", Name: "Agent", Child: "a1"}}})
	s.event(core.Event{Seq: 4, Body: &core.ApprovalRequested{Approval: core.Approval{ID: "p1", Agent: core.MainAgent, Tool: "Bash"}}})
	s.event(core.Event{Seq: 5, Body: &core.ApprovalResolved{Approval: "p1", Allow: true}})
	s.event(core.Event{Seq: 6, Body: &core.ApprovalRequested{Approval: core.Approval{ID: "p2", Agent: core.MainAgent, Tool: "Write"}}})
	// The earlier process's unanswered request is asked again.
	if r := w.read()["request"].(map[string]any); r["subtype"] != "can_use_tool" || r["tool_name"] != "Write" {
		t.Fatalf("asked again: %v", r)
	}
	s.event(core.Event{Seq: 7, Body: &core.NotificationWritten{Note: core.Note{Key: core.NoteKey{Task: "t1", Run: 1}, Kind: core.TaskAgent, Status: "completed", Reply: "42"}}})
	if f := w.read(); f["subtype"] != "task_updated" {
		t.Fatalf("first frame printed: %v", f)
	}
	if f := w.read(); f["subtype"] != "task_notification" || f["tool_use_id"] != "toolu_1" || f["summary"] != "42" {
		t.Fatalf("notification: %v", f)
	}
	w.read() // background_tasks_changed
	w.in.Close()
	s.quiet <- 7
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
}

// A session whose last result was an error ends Serve with
// ErrLastResultError (the CLI exits 1, and the SDK reports the result);
// a later success clears it.
func TestServerLastResultError(t *testing.T) {
	for _, c := range []struct {
		name     string
		statuses []core.RunStatus
		want     error
	}{
		{"interrupted last", []core.RunStatus{core.RunCompleted, core.RunCancelled}, ErrLastResultError},
		{"out of rounds last", []core.RunStatus{core.RunRoundLimit}, ErrLastResultError},
		{"success after an error", []core.RunStatus{core.RunCancelled, core.RunCompleted}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newFakeSession()
			w := startServer(t, s, "default")
			w.send(`{"type":"user","message":{"role":"user","content":"go"}}`)
			<-s.prompts
			seq := int64(0)
			for i, st := range c.statuses {
				seq++
				s.event(core.Event{Seq: seq, Body: &core.RunStarted{Agent: core.MainAgent, Seq: i + 1}})
				seq++
				s.event(core.Event{Seq: seq, Body: &core.RunEnded{Agent: core.MainAgent, Seq: i + 1, Status: st}})
			}
			for results := 0; results < len(c.statuses); {
				if w.read()["type"] == "result" {
					results++
				}
			}
			w.in.Close()
			s.quiet <- seq
			if err := <-w.done; err != c.want {
				t.Fatalf("Serve: %v, want %v", err, c.want)
			}
		})
	}
}
