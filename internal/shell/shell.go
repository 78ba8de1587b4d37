// Package shell runs real shell commands for vigil's Bash tool, in the
// foreground (Run) and in the background (Start).
//
// Each command runs under /bin/bash -c (or /bin/sh -c when bash is absent)
// in a process group of its own, so that a timeout or Stop reaches every
// process it spawned. Its combined stdout and stderr go to an output file,
// capped in size, and the last few kilobytes are also kept in memory for the
// result's tail.
//
// The leader of the group is started with Pdeathsig SIGKILL: if vigil dies,
// the kernel kills it. With Spec.Cgroup every process the command starts is
// also held in a cgroup of its own, which the command's end, Stop and a
// successor's KillCgroup kill whole (see cgroup.go). Without a cgroup, the
// processes the leader spawned outlive it in its group; KillStale removes
// them at the next start-up, guarded against pid reuse by the leader's
// start time, but a process that left the group is out of reach.
//
// A Process has one goroutine, pinned to its OS thread from the fork until
// the leader is reaped. The pin matters: Linux sends the parent-death signal
// when the forking thread exits, not when the process does, and the Go
// runtime ends a thread when a goroutine locked to it exits. Forking from a
// goroutine that stays locked for the child's whole life means the signal
// fires only when vigil itself dies.
package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/vigilrun/vigil/internal/clock"
	"golang.org/x/sys/unix"
)

// Defaults applied to a Spec's zero fields.
const (
	DefaultMaxOutputBytes = 8 << 20
	DefaultTailBytes      = 4096
	DefaultGrace          = 2 * time.Second
	DefaultWaitDelay      = 2 * time.Second
)

// cgroupWait bounds how long ending a command's cgroup waits for its
// killed processes to exit.
const cgroupWait = 10 * time.Second

// The shells tried in order; the first that exists runs the command.
const (
	bashPath = "/bin/bash"
	shPath   = "/bin/sh"
)

// Spec describes one command to run.
type Spec struct {
	// Command is the shell command line, run with "-c".
	Command string
	// Dir is the working directory; empty means vigil's own.
	Dir string
	// Env is the whole environment of the command; nil means vigil's own.
	Env []string
	// Timeout ends the command (as Stop does) when it runs longer; zero
	// means no timeout.
	Timeout time.Duration
	// OutputPath receives the combined stdout and stderr. It is created (or
	// truncated) with mode 0600, its parent directory with mode 0700. Empty
	// means no file: the output only feeds the tail.
	OutputPath string
	// MaxOutputBytes caps what is written to OutputPath; zero means
	// DefaultMaxOutputBytes. Bytes past the cap are counted, not written,
	// and the file ends with a line saying how many were dropped.
	MaxOutputBytes int64
	// TailBytes is how much of the end of the output Result.Tail keeps;
	// zero means DefaultTailBytes.
	TailBytes int
	// Grace is how long Stop (or the timeout) waits after SIGTERM before it
	// sends SIGKILL to the group; zero means DefaultGrace.
	Grace time.Duration
	// WaitDelay bounds how long, after the shell itself has exited, the
	// output is still read from processes it left running. When it expires
	// those processes (if still in the group) are killed and the result is
	// made. A process that redirected its output elsewhere is not waited
	// for; without a Cgroup it is left alone, with one it ends with the
	// command. Zero means DefaultWaitDelay.
	WaitDelay time.Duration
	// Clock is the time source for the timeout, the grace period, the wait
	// delay and the duration; nil means the real clock.
	Clock Clock
	// Cgroup, when set, is a cgroup v2 directory (under CgroupBase) that
	// Start creates for the command. The shell is created in it, and every
	// process the command starts stays in it whatever it does with process
	// groups and sessions: Stop, the timeout and the end of the command
	// reach all of them, and the group is killed and removed before the
	// result is made, so no process outlives its command. A successor of a
	// vigil killed with SIGKILL ends what is left with KillCgroup. Empty
	// means the process group alone, which a process can leave (setsid).
	Cgroup string
	// Wrap, when set, rewrites the command before it starts: a sandbox
	// (internal/sandbox.Wrap) puts its launcher in front. Its error fails
	// Start.
	Wrap func(*exec.Cmd) error
}

// Clock is the time source a Process uses: the runtime's.
type Clock = clock.Clock

// Timer is a pending call made by Clock.AfterFunc.
type Timer = clock.Timer

// Result is what a finished command left.
type Result struct {
	// ExitCode is the shell's exit status, or -1 when a signal killed it.
	ExitCode int
	// Signal names the signal that killed the shell ("SIGKILL"), if any.
	Signal string
	// TimedOut reports that Spec.Timeout expired while the shell ran, and
	// the group was signalled.
	TimedOut bool
	// Stopped reports that Stop (or Run's context) signalled the group
	// while the shell ran.
	Stopped bool
	// Err describes a failure of the runner itself (writing the output,
	// waiting for the process); empty when there was none. A non-zero exit
	// is not an Err.
	Err string
	// OutputBytes counts every byte the command wrote, written or dropped.
	OutputBytes int64
	// Truncated reports that OutputBytes exceeded the cap.
	Truncated bool
	// Tail is the end of the output, at most Spec.TailBytes long, starting
	// on a UTF-8 boundary.
	Tail string
	// Duration is the time from start to result.
	Duration time.Duration
}

// Process is a started command.
type Process struct {
	spec      Spec
	clock     Clock
	pid       int
	startTime uint64
	started   time.Time

	mu        sync.Mutex
	exited    bool // the shell has exited (still a zombie, so its pgid is ours)
	reaped    bool // the shell is reaped: the group id may be reused, never signal it
	cause     cause
	killTimer Timer
	timeout   Timer

	done   chan struct{}
	result Result
}

type cause int

const (
	causeNone cause = iota
	causeTimeout
	causeStop
)

// Start starts spec's command and returns at once. It fails, without
// leaving an output file behind, when the output file cannot be created or
// the process cannot start (a missing Dir, for one).
func Start(spec Spec) (*Process, error) {
	spec = withDefaults(spec)
	if spec.Command == "" {
		return nil, errors.New("start: empty command")
	}
	out, err := openOutput(spec.OutputPath)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		discardOutput(out)
		return nil, fmt.Errorf("start: pipe: %w", err)
	}

	cmd := exec.Command(pickShell(bashPath, shPath), "-c", spec.Command)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if spec.Wrap != nil {
		if err := spec.Wrap(cmd); err != nil {
			r.Close()
			w.Close()
			discardOutput(out)
			return nil, fmt.Errorf("start: %w", err)
		}
		defer func() {
			for _, f := range cmd.ExtraFiles {
				f.Close() // the child has its copies
			}
		}()
	}
	if spec.Cgroup != "" {
		release, err := IntoCgroup(cmd.SysProcAttr, spec.Cgroup)
		if err != nil {
			r.Close()
			w.Close()
			discardOutput(out)
			return nil, fmt.Errorf("start: %w", err)
		}
		defer release() // the child is in the group once created
	}

	p := &Process{spec: spec, clock: spec.Clock, done: make(chan struct{})}
	started := make(chan error, 1)
	go p.monitor(cmd, r, w, out, started)
	if err := <-started; err != nil {
		r.Close()
		discardOutput(out)
		if spec.Cgroup != "" {
			_ = removeCgroup(spec.Cgroup)
		}
		return nil, fmt.Errorf("start: %w", err)
	}
	return p, nil
}

// Run runs spec's command in the foreground and returns its result. When
// ctx is cancelled the process group is stopped as by Stop. A command that
// cannot start yields ExitCode -1 and the reason in Err.
func Run(ctx context.Context, spec Spec) Result {
	if err := ctx.Err(); err != nil {
		return Result{ExitCode: -1, Err: fmt.Sprintf("start: %v", err)}
	}
	p, err := Start(spec)
	if err != nil {
		return Result{ExitCode: -1, Err: err.Error()}
	}
	stop := context.AfterFunc(ctx, p.Stop)
	defer stop()
	return p.Wait()
}

// PID returns the shell's process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// StartTime returns the shell's start time in clock ticks since boot, field
// 22 of /proc/<pid>/stat. With PID it identifies the process across a
// restart of vigil (see KillStale).
func (p *Process) StartTime() uint64 { return p.startTime }

// Done returns a channel closed when the result is ready.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the command has finished and returns its result. Every
// call returns the same result.
func (p *Process) Wait() Result {
	<-p.done
	return p.result
}

// Stop ends the command: SIGTERM to its whole process group now, SIGKILL to
// the group after the grace period unless the result is made by then. It
// returns at once (use Wait for the result), and does nothing when the
// result is made or the group is already being stopped (by Stop or the
// timeout). Called after the shell exited but while processes it left
// still hold the output, it ends those without marking the result Stopped.
func (p *Process) Stop() { p.terminate(causeStop) }

func (p *Process) terminate(c cause) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped || p.killTimer != nil {
		return
	}
	if !p.exited {
		p.cause = c
	}
	p.signalLocked(syscall.SIGTERM)
	p.killTimer = p.clock.AfterFunc(p.spec.Grace, p.kill)
}

func (p *Process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalLocked(syscall.SIGKILL)
}

// signalLocked signals the process group unless the shell has been reaped:
// until then its pid, and so the group id, cannot name another group. The
// command's cgroup, when it has one, is signalled too: it also holds the
// processes that left the group, and its path cannot name anything else.
func (p *Process) signalLocked(sig syscall.Signal) {
	if !p.reaped {
		_ = syscall.Kill(-p.pid, sig) // ESRCH: the group is already gone
	}
	if p.spec.Cgroup != "" {
		_ = signalCgroup(p.spec.Cgroup, sig)
	}
}

// monitor starts cmd and sees it through to the result. It stays locked to
// its OS thread until the shell is reaped; see the package comment.
func (p *Process) monitor(cmd *exec.Cmd, r, w, out *os.File, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	p.started = p.clock.Now()
	err := cmd.Start()
	w.Close()
	if err != nil {
		started <- err
		return
	}
	p.pid = cmd.Process.Pid
	// The shell cannot be reaped before this goroutine does it, so its stat
	// is readable even when it has already exited.
	if st, err := ReadProcStat(p.pid); err == nil {
		p.startTime = st.StartTicks
	}
	o := newOutput(out, p.spec.MaxOutputBytes, p.spec.TailBytes)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		o.copyFrom(r)
	}()
	if p.spec.Timeout > 0 {
		p.mu.Lock()
		p.timeout = p.clock.AfterFunc(p.spec.Timeout, func() { p.terminate(causeTimeout) })
		p.mu.Unlock()
	}
	started <- nil

	var errs []error
	if err := waitExited(p.pid); err != nil {
		errs = append(errs, fmt.Errorf("wait: %w", err))
	}
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()

	// Processes the shell left behind may still hold the output open. Give
	// them WaitDelay, then kill the group and give its output WaitDelay more
	// to drain; a process that left the group could still hold the pipe, so
	// it is closed then.
	if !p.waitCopied(copied) {
		p.mu.Lock()
		p.signalLocked(syscall.SIGKILL)
		p.mu.Unlock()
		if !p.waitCopied(copied) {
			r.Close()
			<-copied
		}
	}
	r.Close()

	p.mu.Lock()
	p.reaped = true
	for _, t := range []Timer{p.timeout, p.killTimer} {
		if t != nil {
			t.Stop()
		}
	}
	c := p.cause
	p.mu.Unlock()

	waitErr := cmd.Wait()
	if err := o.finish(); err != nil {
		errs = append(errs, err)
	}

	res := Result{
		ExitCode:    -1,
		TimedOut:    c == causeTimeout,
		Stopped:     c == causeStop,
		OutputBytes: o.total,
		Truncated:   o.total > o.max,
		Tail:        o.tail.String(),
		Duration:    p.clock.Now().Sub(p.started),
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		errs = append(errs, fmt.Errorf("wait: %w", waitErr))
	}
	if st := cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if res.Signal = unix.SignalName(ws.Signal()); res.Signal == "" {
				res.Signal = fmt.Sprintf("signal %d", int(ws.Signal()))
			}
		} else {
			res.ExitCode = st.ExitCode()
		}
	}
	if p.spec.Cgroup != "" {
		// Nothing outlives the command: what it left running (a daemon that
		// closed its output) ends with it.
		if _, err := KillCgroup(p.spec.Cgroup, cgroupWait); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		res.Err = err.Error()
	}
	p.result = res
	close(p.done)
}

// waitCopied waits for the output to reach EOF, at most WaitDelay. It
// reports whether it did.
func (p *Process) waitCopied(copied <-chan struct{}) bool {
	select {
	case <-copied:
		return true
	default:
	}
	expired := make(chan struct{})
	t := p.clock.AfterFunc(p.spec.WaitDelay, func() { close(expired) })
	defer t.Stop()
	select {
	case <-copied:
		return true
	case <-expired:
		return false
	}
}

// waitExited blocks until pid has exited, without reaping it.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// pickShell returns the first of paths that exists, or the last one.
func pickShell(paths ...string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return paths[len(paths)-1]
}

func withDefaults(s Spec) Spec {
	if s.MaxOutputBytes <= 0 {
		s.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if s.TailBytes <= 0 {
		s.TailBytes = DefaultTailBytes
	}
	if s.Grace <= 0 {
		s.Grace = DefaultGrace
	}
	if s.WaitDelay <= 0 {
		s.WaitDelay = DefaultWaitDelay
	}
	if s.Clock == nil {
		s.Clock = clock.Real()
	}
	return s
}

// openOutput creates path for the output, or returns nil for no path.
func openOutput(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create output dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create output: %w", err)
	}
	if err := f.Chmod(0o600); err != nil { // an existing file keeps its mode
		f.Close()
		return nil, fmt.Errorf("create output: %w", err)
	}
	return f, nil
}

func discardOutput(f *os.File) {
	if f != nil {
		f.Close()
		os.Remove(f.Name())
	}
}
