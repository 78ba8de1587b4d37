package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
)

// ErrEnded is returned by a process's methods once it is ending or gone.
var ErrEnded = provider.ErrProcessEnded

// Why the driver ended a process; empty when the process ended on its own.
const (
	causeClosed     = "closed by vigil"
	causeFailedOpen = "the thread could not be opened"
	causeIdle       = "idle release"
)

// outputWaitDelay bounds how long the driver waits, after Codex exited,
// for the rest of its output (held open by a leftover process).
const outputWaitDelay = 2 * time.Second

// process is one running app-server. It implements provider.SessionProcess.
//
// Goroutines: monitor starts Codex from a thread locked for the child's
// whole life (Pdeathsig fires when the forking thread exits), waits for it
// to exit without reaping it, kills its group and the command groups it
// started, reaps it, then finishes; readStdout answers responses, refuses
// Codex's requests, maps notifications and emits them; readStderr keeps
// the tail. Only readStdout emits until it is done; then monitor emits
// ProviderExited, once. Methods called by vigil (StopTask of an idle
// sub-agent) emit under emitMu too.
type process struct {
	d      *Driver
	log    *slog.Logger
	agent  core.AgentID
	emitFn func(core.Input)
	emitMu sync.Mutex
	perm   core.PermissionMode
	model  string
	cwd    string

	pid    int
	ticks  uint64
	cgroup string

	wmu         sync.Mutex // serialises writes to stdin
	stdin       *os.File
	stdinClosed bool

	mu      sync.Mutex
	cond    *sync.Cond // signalled when the main thread's turn state changes
	m       *mapper
	cause   string
	ending  bool
	exited  bool
	reaped  bool
	nextID  int64
	pending map[int64]func(json.RawMessage, *rpcError)
	term    shell.Timer
	// asks are Codex's approval requests waiting for vigil's answer, by
	// the Request vigil knows them as; edits are the paths of the file
	// changes Codex started, by item, for the requests that name none.
	asks  map[string]askRef
	edits map[string][]string
	// lastActive is when Codex last printed or was handed work; idle
	// checks the process for IdleRelease.
	lastActive time.Time
	idle       shell.Timer
	opened     bool // the thread is open: idle release may begin

	stderr   shell.TailBuffer
	outR     *os.File
	errR     *os.File
	readDone chan struct{}
	errDone  chan struct{}
	exitedCh chan struct{}
	done     chan struct{}
}

var _ provider.SessionProcess = (*process)(nil)

// askRef is an approval request of Codex's: its JSON-RPC id, and the item
// of the command it asks about ("" for a file change).
type askRef struct {
	rpcID   json.RawMessage
	command string
}

func newProcess(d *Driver, p *provider.SessionStart, emit func(core.Input)) *process {
	log := d.log.With("session", p.Session, "agent", p.Agent)
	model := p.Model
	if model == "" {
		model = d.opts.Model
	}
	pr := &process{
		d: d, log: log, agent: p.Agent, emitFn: emit, perm: p.PermissionMode, model: model, cwd: p.Cwd, cgroup: p.Cgroup,
		m: newMapper(p.Agent, log, &d.stats), pending: map[int64]func(json.RawMessage, *rpcError){},
		asks: map[string]askRef{}, edits: map[string][]string{},
		stderr:   shell.TailBuffer{Max: DefaultStderrTail},
		readDone: make(chan struct{}), errDone: make(chan struct{}),
		exitedCh: make(chan struct{}), done: make(chan struct{}),
	}
	pr.cond = sync.NewCond(&pr.mu)
	return pr
}

func (p *process) emit(ins ...core.Input) {
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	for _, in := range ins {
		p.emitFn(in)
	}
}

// start starts Codex and the goroutines that watch it.
func (p *process) start(path string, args, env []string, dir string) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return fmt.Errorf("stderr pipe: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if p.cgroup != "" {
		release, err := shell.IntoCgroup(cmd.SysProcAttr, p.cgroup)
		if err != nil {
			closeAll(inR, inW, outR, outW, errR, errW)
			return err
		}
		defer release()
	}
	p.stdin, p.outR, p.errR = inW, outR, errR
	started := make(chan error, 1)
	go p.monitor(cmd, started, inR, outW, errW)
	if err := <-started; err != nil {
		closeAll(inW, outR, errR)
		return err
	}
	p.mu.Lock()
	p.m.pid = p.pid
	p.mu.Unlock()
	go p.readStdout()
	go p.readStderr()
	return nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// monitor sees Codex through from fork to reap; see the type's comment.
func (p *process) monitor(cmd *exec.Cmd, started chan<- error, childEnds ...*os.File) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := cmd.Start()
	closeAll(childEnds...)
	if err != nil {
		started <- err
		return
	}
	p.pid = cmd.Process.Pid
	p.ticks, _ = startTicks(p.pid)
	started <- nil

	// Wait for the exit without reaping: while the leader is a zombie its
	// pid, and so the group id, cannot name another group.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	p.exited = true
	_ = syscall.Kill(-p.pid, syscall.SIGKILL) // nothing outlives its process
	cmds := p.m.commandProcesses()
	if p.term != nil {
		p.term.Stop()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	close(p.exitedCh)
	// Codex runs commands in sessions of their own (a PTY each), beyond
	// its group: what is left of them ends with it.
	for pid, ticks := range cmds {
		if killed, err := shell.KillStale(pid, ticks); err != nil {
			p.log.Warn("codex: could not end a command Codex left", "pid", pid, "err", err)
		} else if killed {
			p.log.Info("codex: ended a command Codex left", "pid", pid)
		}
	}
	werr := cmd.Wait()
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	if p.cgroup != "" {
		if n, err := shell.KillCgroup(p.cgroup, 10*time.Second); err != nil {
			p.log.Warn("codex: could not end the processes Codex left", "cgroup", p.cgroup, "err", err)
		} else if n > 0 {
			p.log.Info("codex: ended processes Codex left", "cgroup", p.cgroup, "processes", n)
		}
	}
	p.finish(werr)
}

// finish emits what the process sent, then ProviderExited.
func (p *process) finish(werr error) {
	t := p.d.opts.Clock.AfterFunc(outputWaitDelay, func() {
		p.log.Warn("codex: output still open after Codex exited; closing it")
		closeAll(p.outR, p.errR)
	})
	<-p.readDone
	<-p.errDone
	t.Stop()
	closeAll(p.outR, p.errR)
	p.closeStdin()
	p.mu.Lock()
	pending := p.pending
	p.pending = map[int64]func(json.RawMessage, *rpcError){}
	cause := p.cause
	held := p.m.finish()
	p.mu.Unlock()
	p.emit(held...)
	for _, f := range pending {
		f(nil, &rpcError{Code: -1, Message: ErrEnded.Error()})
	}
	reason := shell.ExitReason(cause, werr, p.stderr.String())
	if cause == "" {
		p.log.Warn("codex: process exited", "pid", p.pid, "reason", reason)
	} else {
		p.log.Info("codex: process ended", "pid", p.pid, "reason", reason)
	}
	p.emit(core.ProviderExited{Agent: p.agent, PID: p.pid, Reason: reason})
	p.d.forget(p)
	close(p.done)
}

func (p *process) readStdout() {
	defer close(p.readDone)
	br := bufio.NewReaderSize(p.outR, 64<<10)
	for {
		line, long, err := shell.ReadLine(br, MaxLineBytes)
		if long {
			p.d.stats.malformed.Add(1)
			p.log.Warn("codex: output line too long; dropped", "limit", MaxLineBytes)
		} else if len(line) > 0 {
			p.handle(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				p.log.Warn("codex: reading output failed", "err", err)
			}
			return
		}
	}
}

// handle takes one line of Codex's output: a response to a request of
// the driver, a request of Codex, or a notification.
func (p *process) handle(line []byte) {
	if p.d.trace != nil {
		p.d.trace(line)
	}
	p.touch()
	msg, err := decodeMessage(line)
	if errors.Is(err, errEmptyLine) {
		return
	}
	if err != nil {
		p.d.stats.malformed.Add(1)
		p.log.Warn("codex: malformed output line dropped", "err", err, "line", preview(line))
		return
	}
	switch {
	case msg.Method == "" && msg.ID != nil:
		p.response(msg)
	case msg.Method != "" && msg.ID != nil:
		p.request(msg)
	default:
		p.observe(msg)
		p.mu.Lock()
		ins, wakes := p.m.feed(msg.Method, msg.Params)
		p.cond.Broadcast()
		p.mu.Unlock()
		p.emit(ins...)
		for _, w := range wakes {
			p.wake(w)
		}
	}
}

func preview(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// response hands a response to the request that waits for it.
func (p *process) response(msg *rpcMessage) {
	var id int64
	if err := json.Unmarshal(*msg.ID, &id); err != nil {
		p.log.Warn("codex: response with an id the driver never sent", "id", string(*msg.ID))
		return
	}
	p.mu.Lock()
	f := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if f == nil {
		p.log.Debug("codex: response to no pending request", "id", id)
		return
	}
	f(msg.Result, msg.Error)
}

// request takes a request of Codex: an approval of a command or a file
// change becomes vigil's (core.ExternalPermission), which the session's
// permissions decide or a person answers (AnswerPermission); anything
// else is refused at once, so that Codex does not wait.
func (p *process) request(msg *rpcMessage) {
	var ask struct {
		ThreadID  string `json:"threadId"`
		ItemID    string `json:"itemId"`
		Command   string `json:"command"`
		Cwd       string `json:"cwd"`
		Reason    string `json:"reason"`
		GrantRoot string `json:"grantRoot"`
	}
	var tool string
	var input map[string]any
	switch msg.Method {
	case "item/commandExecution/requestApproval":
		if json.Unmarshal(msg.Params, &ask) != nil || ask.Command == "" {
			p.refuseRequest(msg)
			return
		}
		tool, input = "Bash", map[string]any{"command": modelCommand(ask.Command)}
	case "item/fileChange/requestApproval":
		if json.Unmarshal(msg.Params, &ask) != nil {
			p.refuseRequest(msg)
			return
		}
		p.mu.Lock()
		paths := p.edits[ask.ItemID]
		p.mu.Unlock()
		// Codex asks only for a patch it may not apply in its sandbox,
		// and applies it itself: not vigil's Write, which its workspace
		// confines and accept-edits allows by kind. As apply_patch it is
		// a person's to answer (or an apply_patch rule's), with every
		// path shown.
		tool, input = "apply_patch", map[string]any{"file_paths": paths}
		if ask.GrantRoot != "" {
			input["grant_root"] = ask.GrantRoot
		}
	default:
		p.refuseRequest(msg)
		return
	}
	if ask.Reason != "" {
		input["reason"] = ask.Reason
	}
	raw, err := json.Marshal(input)
	if err != nil {
		p.refuseRequest(msg)
		return
	}
	id := "codex-" + string(*msg.ID)
	ref := askRef{rpcID: *msg.ID}
	p.mu.Lock()
	if tool == "Bash" {
		ref.command = ask.ItemID
		p.m.awaiting(ask.ItemID, true)
	}
	p.asks[id] = ref
	p.mu.Unlock()
	p.emit(core.ExternalPermission{Agent: p.agent, Request: id, Tool: tool, Input: raw, UseID: ask.ItemID})
}

// observe notes, of a notification, what requests need: the paths of a
// file change as it starts, and the end of a request Codex no longer
// waits for (serverRequest/resolved of one vigil did not answer: the turn
// was interrupted), which withdraws it.
func (p *process) observe(msg *rpcMessage) {
	switch msg.Method {
	case "item/started":
		var it struct {
			Item struct {
				Type    string `json:"type"`
				ID      string `json:"id"`
				Changes []struct {
					Path string `json:"path"`
				} `json:"changes"`
			} `json:"item"`
		}
		if json.Unmarshal(msg.Params, &it) != nil || it.Item.Type != "fileChange" {
			return
		}
		var paths []string
		for _, c := range it.Item.Changes {
			paths = append(paths, c.Path)
		}
		p.mu.Lock()
		p.edits[it.Item.ID] = paths
		p.mu.Unlock()
	case "item/completed":
		var it struct {
			Item struct {
				ID string `json:"id"`
			} `json:"item"`
		}
		if json.Unmarshal(msg.Params, &it) == nil {
			p.mu.Lock()
			delete(p.edits, it.Item.ID)
			p.mu.Unlock()
		}
	case "serverRequest/resolved":
		var r struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.Params, &r) != nil {
			return
		}
		id := "codex-" + string(r.RequestID)
		p.mu.Lock()
		_, waiting := p.asks[id]
		delete(p.asks, id)
		p.mu.Unlock()
		if waiting {
			p.emit(core.ExternalPermissionWithdrawn{Agent: p.agent, Request: id})
		}
	}
}

// refuseRequest answers a request of Codex (a question for the user, a
// dynamic tool call, an MCP elicitation) with an error, so that it does
// not wait.
func (p *process) refuseRequest(msg *rpcMessage) {
	p.d.stats.refused.Add(1)
	p.log.Warn("codex: Codex asked its client for something vigil does not answer; refused", "method", msg.Method)
	err := p.write(map[string]any{"id": msg.ID, "error": map[string]any{"code": -32601, "message": "vigil does not answer " + msg.Method}})
	if err != nil {
		p.log.Warn("codex: could not answer a request", "err", err)
	}
}

// send writes a request; done is called once with its answer, from the
// reader (or from finish, with an error, if the process ends first). It
// must not block.
func (p *process) send(method string, params any, done func(json.RawMessage, *rpcError)) error {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return ErrEnded
	}
	p.nextID++
	id := p.nextID
	p.pending[id] = done
	p.mu.Unlock()
	if err := p.write(rpcRequest{ID: id, Method: method, Params: params}); err != nil {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
		return err
	}
	return nil
}

// call sends a request and waits for its answer, decoded into out when
// not nil.
func (p *process) call(ctx context.Context, method string, params, out any) error {
	type answer struct {
		res json.RawMessage
		err *rpcError
	}
	ch := make(chan answer, 1)
	if err := p.send(method, params, func(res json.RawMessage, err *rpcError) { ch <- answer{res, err} }); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	timeout := make(chan struct{})
	t := p.d.opts.Clock.AfterFunc(p.d.opts.RequestTimeout, func() { close(timeout) })
	defer t.Stop()
	select {
	case a := <-ch:
		if a.err != nil {
			return fmt.Errorf("%s: %w", method, a.err)
		}
		if out != nil {
			if err := json.Unmarshal(a.res, out); err != nil {
				return fmt.Errorf("%s: decode result: %w", method, err)
			}
		}
		return nil
	case <-timeout:
		return fmt.Errorf("%s: no answer within %s", method, p.d.opts.RequestTimeout)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// open runs the handshake (initialize, initialized) and opens the agent's
// thread: thread/resume of the one to resume, else thread/start. A thread
// Codex cannot resume (its rollout is gone) is replaced by a new one, at
// warn: the run goes on without the history.
func (p *process) open(ctx context.Context, st *provider.SessionStart) error {
	var init struct {
		UserAgent string `json:"userAgent"`
	}
	if err := p.call(ctx, "initialize", map[string]any{
		"clientInfo":   map[string]any{"name": "vigil", "title": "vigil", "version": "1"},
		"capabilities": map[string]any{"experimentalApi": true},
	}, &init); err != nil {
		return err
	}
	if err := p.write(rpcNotification{Method: "initialized"}); err != nil {
		return fmt.Errorf("initialized: %w", err)
	}
	params := map[string]any{"approvalPolicy": approvalFor(p.perm), "sandbox": sandboxFor(p.perm)}
	if st.Cwd != "" {
		params["cwd"] = st.Cwd
	}
	if p.model != "" {
		params["model"] = p.model
	}
	var res struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if st.Resume != "" {
		params["threadId"] = st.Resume
		params["excludeTurns"] = true
		err := p.call(ctx, "thread/resume", params, &res)
		if err == nil && res.Thread.ID != "" {
			p.setMain(res.Thread.ID)
			return nil
		}
		p.log.Warn("codex: could not resume the thread; starting a new one", "thread", st.Resume, "err", err)
		delete(params, "threadId")
		delete(params, "excludeTurns")
	}
	if err := p.call(ctx, "thread/start", params, &res); err != nil {
		return err
	}
	if res.Thread.ID == "" {
		return errors.New("thread/start: no thread id in the answer")
	}
	p.setMain(res.Thread.ID)
	return nil
}

// sandboxFor is the sandbox a thread runs its commands in: none for
// bypass, the workspace otherwise.
func sandboxFor(m core.PermissionMode) string {
	if m == core.PermBypass {
		return "danger-full-access"
	}
	return "workspace-write"
}

// approvalFor is the approval policy of a thread. In bypass none is
// asked. In auto, "on-request": every command runs in the workspace-write
// sandbox without asking, and Codex asks only to run one outside it,
// which vigil's rules decide (what they do not allow is declined). In ask
// and accept-edits, "untrusted": Codex asks before every command it does
// not know to be safe, and vigil's permissions decide or a person
// answers. Measured on 0.169.0: a command Codex asked about and was
// allowed runs outside the sandbox (Codex has no "accept, sandboxed").
func approvalFor(m core.PermissionMode) string {
	switch m {
	case core.PermBypass:
		return "never"
	case core.PermAuto:
		return "on-request"
	}
	return "untrusted"
}

func (p *process) setMain(id string) {
	p.mu.Lock()
	p.m.setMain(id)
	p.mu.Unlock()
}

func (p *process) mainThread() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m.main
}

func (p *process) readStderr() {
	defer close(p.errDone)
	buf := make([]byte, 4096)
	for {
		n, err := p.errR.Read(buf)
		p.stderr.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// PID returns Codex's process id, which is also its process group id.
func (p *process) PID() int { return p.pid }

// StartTicks returns Codex's start time in clock ticks since boot (field
// 22 of /proc/<pid>/stat), which tells it from a later process with the
// same pid.
func (p *process) StartTicks() uint64 { return p.ticks }

// userInput is the input of a turn: one text item.
func userInput(text string) []map[string]any {
	return []map[string]any{{"type": "text", "text": text, "text_elements": []any{}}}
}

// Deliver hands text to the agent's thread: turn/start when the thread is
// idle, turn/steer (the input joins the turn at its next model round) when
// a turn is in progress. A turn the driver asked for and Codex has not
// begun yet is waited for first.
func (p *process) Deliver(text string, _ core.Priority) error {
	p.mu.Lock()
	if p.ending || p.exited {
		p.mu.Unlock()
		return fmt.Errorf("deliver: %w", ErrEnded)
	}
	p.lastActive = p.d.opts.Clock.Now()
	turn, err := p.settledTurnLocked(p.m.main)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("deliver: %w", err)
	}
	ctx := context.Background()
	thread := p.mainThread()
	if turn != "" {
		err := p.call(ctx, "turn/steer", map[string]any{"threadId": thread, "input": userInput(text), "expectedTurnId": turn}, nil)
		if err == nil {
			return nil
		}
		// The turn ended meanwhile: a new one takes the input.
		p.log.Info("codex: could not join the turn in progress; starting a new one", "turn", turn, "err", err)
	}
	if err := p.startTurn(ctx, thread, text, false); err != nil {
		return fmt.Errorf("deliver: %w", err)
	}
	return nil
}

// settledTurnLocked waits until no turn/start the driver sent on thread
// is unanswered by turn/started (or failed), and returns the turn in
// progress, if any. p.mu is held.
func (p *process) settledTurnLocked(thread string) (string, error) {
	deadline := p.d.opts.Clock.Now().Add(p.d.opts.RequestTimeout)
	t := p.d.opts.Clock.AfterFunc(p.d.opts.RequestTimeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	for p.m.starting(thread) {
		if p.exited {
			return "", ErrEnded
		}
		if !p.d.opts.Clock.Now().Before(deadline) {
			return "", fmt.Errorf("codex began no turn within %s of turn/start", p.d.opts.RequestTimeout)
		}
		p.cond.Wait()
	}
	if p.exited {
		return "", ErrEnded
	}
	return p.m.activeTurn(thread), nil
}

// startTurn sends turn/start on thread and waits for its answer; wake
// marks a turn the driver starts on its own to hand over what ended.
func (p *process) startTurn(ctx context.Context, thread, text string, wake bool) error {
	p.mu.Lock()
	p.m.markStarting(thread, wake)
	p.mu.Unlock()
	err := p.call(ctx, "turn/start", map[string]any{"threadId": thread, "input": userInput(text)}, nil)
	if err != nil {
		p.mu.Lock()
		p.m.startFailed(thread)
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	return err
}

// wake starts a turn on a thread Codex left idle while work it owns
// ended. It runs from the reader, so it does not wait for the answer.
func (p *process) wake(w wake) {
	p.d.stats.wakes.Add(1)
	p.log.Info("codex: waking a thread for work that ended", "thread", w.thread, "tasks", w.tasks)
	err := p.send("turn/start", map[string]any{"threadId": w.thread, "input": userInput(w.text)}, func(_ json.RawMessage, e *rpcError) {
		if e == nil {
			return
		}
		p.log.Warn("codex: the wake turn was refused; vigil's deadline hands the notifications over", "thread", w.thread, "err", e)
		p.mu.Lock()
		p.m.startFailed(w.thread)
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	if err != nil {
		p.log.Warn("codex: could not send the wake turn", "thread", w.thread, "err", err)
		p.mu.Lock()
		p.m.startFailed(w.thread)
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// Interrupt asks Codex to end the agent's turn in progress
// (turn/interrupt); the turn ends with status interrupted. With no turn
// in progress there is nothing to end.
func (p *process) Interrupt() error {
	p.mu.Lock()
	thread := p.m.main
	turn, err := p.settledTurnLocked(thread)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	if turn == "" {
		return nil
	}
	if err := p.call(context.Background(), "turn/interrupt", map[string]any{"threadId": thread, "turnId": turn}, nil); err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	return nil
}

// StopTask stops a mirrored task: a sub-agent's turn in progress is
// interrupted (turn/interrupt on its thread), an idle sub-agent is
// reported stopped; a background command's process group is killed (the
// app-server has no request that ends a command it started), and Codex
// reports its end. An unknown id is acknowledged.
func (p *process) StopTask(id string) error {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return fmt.Errorf("stop task %s: %w", id, ErrEnded)
	}
	if pid, ticks, ok := p.m.stopCommand(id); ok {
		p.mu.Unlock()
		killed, err := shell.KillStale(pid, ticks)
		if err != nil {
			return fmt.Errorf("stop task %s: %w", id, err)
		}
		p.log.Info("codex: stopped a command", "task", id, "pid", pid, "killed", killed)
		return nil
	}
	if !p.m.isChild(id) {
		p.mu.Unlock()
		p.log.Info("codex: stop of a task Codex does not run; nothing to stop", "task", id)
		return nil
	}
	turn, err := p.settledTurnLocked(id)
	var idle []core.Input
	if err == nil && turn == "" {
		idle = p.m.stoppedIdle(id)
	}
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stop task %s: %w", id, err)
	}
	if turn == "" {
		p.emit(idle...)
		return nil
	}
	if err := p.call(context.Background(), "turn/interrupt", map[string]any{"threadId": id, "turnId": turn}, nil); err != nil {
		return fmt.Errorf("stop task %s: %w", id, err)
	}
	return nil
}

// AnswerPermission implements provider.SessionProcess: accept or decline
// Codex's approval request. Codex takes no other input for the call, so
// an updated input cannot be applied: the call is declined instead, and
// the model is told so by Codex.
func (p *process) AnswerPermission(request string, allow bool, _ string, input json.RawMessage) error {
	decision := "decline"
	if allow && len(input) == 0 {
		decision = "accept"
	} else if allow {
		p.log.Warn("codex: an approval with a changed input cannot be applied to Codex; the call is declined", "request", request)
	}
	p.mu.Lock()
	ref, asked := p.asks[request]
	delete(p.asks, request)
	if asked && decision == "accept" && ref.command != "" {
		p.m.awaiting(ref.command, false)
	}
	p.mu.Unlock()
	if !asked {
		// Codex withdrew it (its turn ended): nothing waits for the answer.
		p.log.Debug("codex: an answer to a permission request Codex no longer waits for", "request", request)
		return nil
	}
	return p.write(map[string]any{"id": ref.rpcID, "result": map[string]any{"decision": decision}})
}

// write sends one JSON line to stdin.
func (p *process) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	b = append(b, '\n')
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.stdinClosed {
		return ErrEnded
	}
	if _, err := p.stdin.Write(b); err != nil {
		return fmt.Errorf("write stdin: %w", err)
	}
	return nil
}

func (p *process) closeStdin() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if !p.stdinClosed && p.stdin != nil {
		p.stdinClosed = true
		p.stdin.Close()
	}
}

// Close ends the process: stdin is closed (the app-server exits at its
// end), the group gets SIGTERM after the grace period and SIGKILL after
// another. It returns when the process has exited (ProviderExited
// follows). Safe to call twice.
func (p *process) Close() error {
	p.end(causeClosed)
	limit := make(chan struct{})
	t := p.d.opts.Clock.AfterFunc(3*p.d.opts.CloseGrace+time.Second, func() { close(limit) })
	defer t.Stop()
	select {
	case <-p.exitedCh:
		return nil
	case <-limit:
		return fmt.Errorf("close codex process %d: still running after SIGKILL", p.pid)
	}
}

// end starts ending the process for cause (the first cause given wins).
func (p *process) end(cause string) {
	p.mu.Lock()
	if !p.endLocked(cause) {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.closeStdin()
}

// endLocked begins to end the process (see end) and reports whether the
// caller must close its stdin, once p.mu is released. p.mu is held.
func (p *process) endLocked(cause string) bool {
	if p.cause == "" && !p.exited {
		p.cause = cause
	}
	if p.ending || p.exited {
		return false
	}
	if p.idle != nil {
		p.idle.Stop()
	}
	p.ending = true
	p.m.ending = true
	grace := p.d.opts.CloseGrace
	p.term = p.d.opts.Clock.AfterFunc(grace, func() {
		p.signal(syscall.SIGTERM)
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.exited {
			p.term = p.d.opts.Clock.AfterFunc(grace, func() { p.signal(syscall.SIGKILL) })
		}
	})
	return true
}

// opened marks the thread open: from now on the process may be released
// when idle.
func (p *process) markOpened() {
	p.mu.Lock()
	p.opened = true
	p.mu.Unlock()
	p.touch()
}

// touch notes activity and schedules the idle check.
func (p *process) touch() {
	if p.d.opts.IdleRelease <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastActive = p.d.opts.Clock.Now()
	if p.opened && p.idle == nil && !p.ending && !p.exited {
		p.idle = p.d.opts.Clock.AfterFunc(p.d.opts.IdleRelease, p.idleCheck)
	}
}

// idleCheck ends the process once it has been idle for IdleRelease: it
// printed nothing and was handed nothing, and no thread has a turn in
// progress or being started, no command runs, no request waits for an
// answer and no wake is owed. Live work defers it.
func (p *process) idleCheck() {
	o := &p.d.opts
	p.mu.Lock()
	p.idle = nil
	if p.ending || p.exited {
		p.mu.Unlock()
		return
	}
	if quiet := o.Clock.Now().Sub(p.lastActive); quiet < o.IdleRelease {
		p.idle = o.Clock.AfterFunc(o.IdleRelease-quiet, p.idleCheck)
		p.mu.Unlock()
		return
	}
	if why := p.m.busy(); why != "" || len(p.asks) > 0 {
		if why == "" {
			why = "a permission request waits"
		}
		p.log.Debug("codex: idle release deferred", "reason", why)
		p.idle = o.Clock.AfterFunc(o.IdleRelease, p.idleCheck)
		p.mu.Unlock()
		return
	}
	p.d.stats.idleReleases.Add(1)
	p.log.Info("codex: idle release", "pid", p.pid, "idle_for", o.IdleRelease)
	closeIn := p.endLocked(causeIdle)
	p.mu.Unlock()
	if closeIn {
		p.closeStdin()
	}
}

// signal signals the process group unless the leader has been reaped.
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.pid, sig)
	}
}
