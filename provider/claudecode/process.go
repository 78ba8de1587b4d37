package claudecode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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
	causeIdle   = "idle release"
	causeForced = "idle release after max deferral"
	causeClosed = "closed by vigil"
)

// outputWaitDelay bounds how long the driver waits, after the CLI exited,
// for the rest of its output (held open by a leftover process).
const outputWaitDelay = 2 * time.Second

// process is one running CLI. It implements provider.SessionProcess.
//
// Goroutines: monitor starts the CLI from a thread locked for the child's
// whole life (Pdeathsig fires when the forking thread exits), waits for it
// to exit, kills what is left in its group and reaps it, then finishes;
// readStdout maps frames and emits them; readStderr keeps the tail. Only
// readStdout emits until it is done; then monitor emits the rest and
// ProviderExited, once.
type process struct {
	d     *Driver
	log   *slog.Logger
	agent core.AgentID
	emit  func(core.Input)
	m     *mapper

	pid    int
	ticks  uint64
	cgroup string // holds the CLI and all it starts; empty without cgroups

	wmu         sync.Mutex // serialises writes to stdin
	stdin       *os.File
	stdinClosed bool

	mu         sync.Mutex
	asks       map[string]json.RawMessage // permission requests vigil has not answered, with their input
	cause      string                     // why the driver ends it
	ending     bool
	exited     bool // the leader exited (it may still be a zombie)
	reaped     bool // never signal the group once set: its id may be reused
	inTurn     bool
	awaiting   bool // a delivered message has not been answered by a result
	live       []string
	lastActive time.Time
	deferSince time.Time
	idleTimer  shell.Timer
	termTimer  shell.Timer
	nextReq    int
	pending    map[string]chan error
	groups     map[int]uint64

	stderr   shell.TailBuffer
	outR     *os.File
	errR     *os.File
	readDone chan struct{}
	errDone  chan struct{}
	exitedCh chan struct{}
	done     chan struct{}
}

var _ provider.SessionProcess = (*process)(nil)

func newProcess(d *Driver, p *provider.SessionStart, emit func(core.Input)) *process {
	log := d.log.With("session", p.Session, "agent", p.Agent)
	return &process{
		d: d, log: log, agent: p.Agent, emit: emit, m: newMapper(p.Agent, log, &d.stats), cgroup: p.Cgroup,
		pending: map[string]chan error{}, groups: map[int]uint64{},
		stderr:   shell.TailBuffer{Max: DefaultStderrTail},
		readDone: make(chan struct{}), errDone: make(chan struct{}),
		exitedCh: make(chan struct{}), done: make(chan struct{}),
	}
}

// start starts the CLI and the goroutines that watch it.
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
	p.lastActive = p.d.opts.Clock.Now()
	p.armIdle(p.d.opts.IdleRelease)
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

// monitor sees the CLI through from fork to reap; see the type's comment.
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
	if st, err := shell.ReadProcStat(p.pid); err == nil {
		p.ticks = st.StartTicks
	}
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
	groups := p.groups
	p.groups = nil
	p.stopTimersLocked()
	p.mu.Unlock()
	close(p.exitedCh)
	for pid, ticks := range groups {
		if killed, err := shell.KillStale(pid, ticks); err != nil {
			p.log.Warn("claude code: could not end a process group the CLI left", "pgid", pid, "err", err)
		} else if killed {
			p.log.Info("claude code: ended a process group the CLI left", "pgid", pid)
		}
	}
	werr := cmd.Wait()
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	if p.cgroup != "" {
		// Whatever the CLI started, in any group or session, ends with it.
		if n, err := shell.KillCgroup(p.cgroup, 10*time.Second); err != nil {
			p.log.Warn("claude code: could not end the processes the CLI left", "cgroup", p.cgroup, "err", err)
		} else if n > 0 {
			p.log.Info("claude code: ended processes the CLI left", "cgroup", p.cgroup, "processes", n)
		}
	}
	p.finish(werr)
}

// finish emits what the process sent, then ProviderExited.
func (p *process) finish(werr error) {
	t := p.d.opts.Clock.AfterFunc(outputWaitDelay, func() {
		p.log.Warn("claude code: output still open after the CLI exited; closing it")
		closeAll(p.outR, p.errR)
	})
	<-p.readDone
	<-p.errDone
	t.Stop()
	closeAll(p.outR, p.errR)
	p.closeStdin()
	for _, in := range p.m.finish() {
		p.emit(in)
	}
	p.mu.Lock()
	pending := p.pending
	p.pending = map[string]chan error{}
	cause := p.cause
	p.mu.Unlock()
	for _, ch := range pending {
		ch <- ErrEnded
	}
	reason := shell.ExitReason(cause, werr, p.stderr.String())
	if cause == "" {
		p.log.Warn("claude code: process exited", "pid", p.pid, "reason", reason)
	} else {
		p.log.Info("claude code: process ended", "pid", p.pid, "reason", reason)
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
			p.log.Warn("claude code: output line too long; dropped", "limit", MaxLineBytes)
		} else if len(line) > 0 {
			p.handle(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				p.log.Warn("claude code: reading output failed", "err", err)
			}
			return
		}
	}
}

// handle applies one output line.
func (p *process) handle(line []byte) {
	p.touch()
	h, err := decodeHeader(line)
	if errors.Is(err, errEmptyLine) {
		return
	}
	if err != nil {
		p.d.stats.malformed.Add(1)
		p.log.Warn("claude code: malformed output line dropped", "err", err, "line", preview(line))
		return
	}
	switch h.Type {
	case "control_response":
		p.controlResponse(line)
		return
	case "control_request":
		p.controlRequest(line)
		return
	case "control_cancel_request":
		var f controlCancelFrame
		if err := json.Unmarshal(line, &f); err != nil || f.RequestID == "" {
			p.m.undecodable(h, fmt.Errorf("control_cancel_request: %v", err))
			return
		}
		p.mu.Lock()
		_, asked := p.asks[f.RequestID]
		delete(p.asks, f.RequestID)
		p.mu.Unlock()
		if !asked {
			p.m.ignore(h, "no such request of the CLI is pending")
			return
		}
		p.emit(core.ExternalPermissionWithdrawn{Agent: p.agent, Request: f.RequestID})
		return
	}
	p.mu.Lock()
	p.m.ending = p.ending
	p.mu.Unlock()
	ins := p.m.feed(h, line)
	p.mu.Lock()
	p.inTurn = p.m.inTurn
	if h.Type == "result" {
		p.awaiting = false
	}
	p.live = p.m.liveTasks()
	if len(p.live) == 0 {
		p.deferSince = time.Time{}
	}
	p.mu.Unlock()
	if h.Type == "system" && (h.Subtype == "task_started" || h.Subtype == "background_tasks_changed") {
		p.trackGroups()
	}
	for _, in := range ins {
		p.emit(in)
	}
}

func preview(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// trackGroups records the process groups the CLI started outside its own
// (its shell commands), so they can be ended with it.
func (p *process) trackGroups() {
	found := escapedGroups(p.pid)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groups == nil { // exited already
		return
	}
	for pid, ticks := range found {
		p.groups[pid] = ticks
	}
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

// PID returns the CLI's process id, which is also its process group id.
func (p *process) PID() int { return p.pid }

// StartTicks returns the CLI's start time in clock ticks since boot (field
// 22 of /proc/<pid>/stat), which tells it from a later process with the
// same pid.
func (p *process) StartTicks() uint64 { return p.ticks }

// Deliver writes text to the CLI as a user message.
func (p *process) Deliver(text string, priority core.Priority) error {
	p.mu.Lock()
	if p.ending || p.exited {
		p.mu.Unlock()
		return fmt.Errorf("deliver: %w", ErrEnded)
	}
	p.awaiting = true
	p.lastActive = p.d.opts.Clock.Now()
	p.mu.Unlock()
	var l userLine
	l.Type = "user"
	l.Message.Role, l.Message.Content = "user", text
	switch priority {
	case core.PriorityNow, core.PriorityNext, core.PriorityLater:
		l.Priority = string(priority)
	}
	if err := p.write(l); err != nil {
		return fmt.Errorf("deliver: %w", err)
	}
	return nil
}

// Interrupt asks the CLI to end its current turn. The turn ends with an
// error result (error_during_execution, terminal_reason
// aborted_streaming).
func (p *process) Interrupt() error {
	if err := p.control(map[string]any{"subtype": "interrupt"}); err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	return nil
}

// StopTask asks the CLI to stop one of its background tasks. The CLI
// answers at once and reports the task stopped (task_updated killed,
// task_notification stopped); an unknown id is acknowledged too.
func (p *process) StopTask(id string) error {
	if err := p.control(map[string]any{"subtype": "stop_task", "task_id": id}); err != nil {
		return fmt.Errorf("stop task %s: %w", id, err)
	}
	return nil
}

// control sends a control request and waits for its answer.
func (p *process) control(req map[string]any) error {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return ErrEnded
	}
	p.nextReq++
	id := "vigil-" + strconv.Itoa(p.nextReq)
	ch := make(chan error, 1)
	p.pending[id] = ch
	p.mu.Unlock()
	if err := p.write(controlLine{Type: "control_request", RequestID: id, Request: req}); err != nil {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
		return err
	}
	timeout := make(chan struct{})
	t := p.d.opts.Clock.AfterFunc(p.d.opts.ControlTimeout, func() { close(timeout) })
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-timeout:
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
		return fmt.Errorf("no answer to control request %s within %s", id, p.d.opts.ControlTimeout)
	}
}

func (p *process) controlResponse(line []byte) {
	var f controlResponseFrame
	if err := json.Unmarshal(line, &f); err != nil {
		p.m.undecodable(header{Type: "control_response"}, err)
		return
	}
	p.mu.Lock()
	ch := p.pending[f.Response.RequestID]
	delete(p.pending, f.Response.RequestID)
	p.mu.Unlock()
	if ch == nil {
		p.log.Debug("claude code: answer to no pending control request", "request", f.Response.RequestID)
		return
	}
	if f.Response.Subtype == "error" {
		ch <- fmt.Errorf("claude code refused: %s", f.Response.Error)
		return
	}
	ch <- nil
}

// controlRequest takes a control request of the CLI: a permission prompt
// (can_use_tool, with --permission-prompt-tool stdio) goes to vigil, which
// answers it from the session's rules or asks a person; anything else is
// refused, so that the CLI does not wait for an answer.
func (p *process) controlRequest(line []byte) {
	var f controlRequestFrame
	if err := json.Unmarshal(line, &f); err != nil {
		p.m.undecodable(header{Type: "control_request"}, err)
		// Answer what can be answered, so that the CLI does not wait.
		var id struct {
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(line, &id) == nil && id.RequestID != "" {
			f = controlRequestFrame{RequestID: id.RequestID}
			f.Request.Subtype = "undecodable"
			p.refuseControl(f)
		}
		return
	}
	if f.Request.Subtype == "can_use_tool" && f.RequestID != "" && f.Request.ToolName != "" {
		p.mu.Lock()
		if p.asks == nil {
			p.asks = map[string]json.RawMessage{}
		}
		p.asks[f.RequestID] = f.Request.Input
		p.mu.Unlock()
		p.emit(core.ExternalPermission{Agent: p.agent, Request: f.RequestID, Tool: f.Request.ToolName, Input: f.Request.Input, UseID: f.Request.ToolUseID})
		return
	}
	p.refuseControl(f)
}

// AnswerPermission implements provider.SessionProcess.
func (p *process) AnswerPermission(request string, allow bool, message string, updated json.RawMessage) error {
	p.mu.Lock()
	input, asked := p.asks[request]
	delete(p.asks, request)
	p.mu.Unlock()
	if !asked {
		return fmt.Errorf("claude code: no permission request %s is pending", request)
	}
	var a permissionAnswer
	a.Type = "control_response"
	a.Response.Subtype, a.Response.RequestID = "success", request
	if allow {
		a.Response.Response.Behavior = "allow"
		if len(updated) > 0 {
			input = updated
		}
		a.Response.Response.UpdatedInput = input
		if len(input) == 0 {
			a.Response.Response.UpdatedInput = json.RawMessage("{}")
		}
	} else {
		a.Response.Response.Behavior, a.Response.Response.Message = "deny", message
	}
	return p.write(a)
}

// refuseControl answers a control request vigil does not serve with an
// error.
func (p *process) refuseControl(f controlRequestFrame) {
	p.log.Warn("claude code: the CLI asked its host for something vigil does not answer; refused", "subtype", f.Request.Subtype)
	var a controlAnswer
	a.Type = "control_response"
	a.Response.Subtype, a.Response.RequestID = "error", f.RequestID
	a.Response.Error = "vigil does not answer " + f.Request.Subtype + " requests"
	if err := p.write(a); err != nil {
		p.log.Warn("claude code: could not answer a control request", "err", err)
	}
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

// Close ends the process: stdin is closed, the group gets SIGTERM after
// the grace period and SIGKILL after another. It returns when the process
// has exited (ProviderExited follows). Safe to call twice.
func (p *process) Close() error {
	p.end(causeClosed)
	limit := make(chan struct{})
	t := p.d.opts.Clock.AfterFunc(3*p.d.opts.CloseGrace+time.Second, func() { close(limit) })
	defer t.Stop()
	select {
	case <-p.exitedCh:
		return nil
	case <-limit:
		return fmt.Errorf("close claude process %d: still running after SIGKILL", p.pid)
	}
}

// end starts ending the process for cause (the first cause given wins).
func (p *process) end(cause string) {
	p.mu.Lock()
	if p.cause == "" && !p.exited {
		p.cause = cause
	}
	if p.ending || p.exited {
		p.mu.Unlock()
		return
	}
	p.ending = true
	grace := p.d.opts.CloseGrace
	p.termTimer = p.d.opts.Clock.AfterFunc(grace, func() {
		p.signal(syscall.SIGTERM)
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.exited {
			p.termTimer = p.d.opts.Clock.AfterFunc(grace, func() { p.signal(syscall.SIGKILL) })
		}
	})
	p.mu.Unlock()
	p.closeStdin()
}

// signal signals the process group unless the leader has been reaped.
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.pid, sig)
	}
}

func (p *process) touch() {
	p.mu.Lock()
	p.lastActive = p.d.opts.Clock.Now()
	p.mu.Unlock()
}

// armIdle schedules the idle check after d. p.mu is held.
func (p *process) armIdle(d time.Duration) {
	if p.d.opts.IdleRelease <= 0 || p.exited {
		return
	}
	if p.idleTimer != nil {
		p.idleTimer.Stop()
	}
	p.idleTimer = p.d.opts.Clock.AfterFunc(d, p.idleCheck)
}

func (p *process) stopTimersLocked() {
	if p.idleTimer != nil {
		p.idleTimer.Stop()
	}
	if p.termTimer != nil {
		p.termTimer.Stop()
	}
}

// idleCheck releases the process when it has been idle for IdleRelease:
// no frame, no turn in progress, no delivery unanswered, no live
// background task. Live tasks defer the release, at most MaxDeferral.
func (p *process) idleCheck() {
	o := &p.d.opts
	p.mu.Lock()
	if p.ending || p.exited {
		p.mu.Unlock()
		return
	}
	now := o.Clock.Now()
	if quiet := now.Sub(p.lastActive); quiet < o.IdleRelease {
		p.armIdle(o.IdleRelease - quiet)
		p.mu.Unlock()
		return
	}
	if p.inTurn || p.awaiting {
		p.armIdle(o.IdleRelease)
		p.mu.Unlock()
		return
	}
	cause := causeIdle
	if n := len(p.live); n > 0 {
		if p.deferSince.IsZero() {
			p.deferSince = now
		}
		waited := now.Sub(p.deferSince)
		if waited < o.MaxDeferral {
			p.d.stats.deferrals.Add(1)
			p.log.Info("claude code: idle release deferred", "reason", fmt.Sprintf("%d background task(s) live", n),
				"tasks", p.live, "deferred_for", waited, "max_deferral", o.MaxDeferral)
			p.armIdle(min(o.IdleRelease, o.MaxDeferral-waited))
			p.mu.Unlock()
			return
		}
		cause = causeForced
		p.d.stats.forcedReleases.Add(1)
		p.log.Warn("claude code: idle release after max deferral; live background tasks end lost",
			"tasks", p.live, "deferred_for", waited)
	}
	p.mu.Unlock()
	p.d.stats.idleReleases.Add(1)
	p.log.Info("claude code: idle release", "pid", p.pid, "idle_for", o.IdleRelease)
	p.end(cause)
}
