package shell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the parent process of the Pdeathsig test.
const helperEnv = "VIGIL_SHELL_TEST_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperParent(dir))
	}
	if dir := os.Getenv(cgroupHelperEnv); dir != "" {
		os.Exit(cgroupHelper(dir))
	}
	os.Exit(m.Run())
}

// helperParent starts "sleep 30", prints its pid and blocks until stdin
// closes or it is killed.
func helperParent(dir string) int {
	p, err := Start(Spec{Command: "sleep 30", OutputPath: filepath.Join(dir, "out")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(p.PID())
	io.Copy(io.Discard, os.Stdin)
	p.Stop()
	p.Wait()
	return 0
}

// guard bounds every blocking wait of the tests, so that a bug fails a test
// instead of hanging the run.
const guard = 20 * time.Second

// fakeClock fires its timers only when the test says so.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	added  chan time.Duration
}

type fakeTimer struct {
	d    time.Duration
	f    func()
	done bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_000_000, 0), added: make(chan time.Duration, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{d: d, f: f}
	c.timers = append(c.timers, t)
	c.added <- d
	return fakeStop{c, t}
}

type fakeStop struct {
	c *fakeClock
	t *fakeTimer
}

func (s fakeStop) Stop() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	was := !s.t.done
	s.t.done = true
	return was
}

// waitTimer blocks until a timer for d has been set.
func (c *fakeClock) waitTimer(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.After(guard)
	for {
		select {
		case got := <-c.added:
			if got == d {
				return
			}
		case <-deadline:
			t.Fatalf("no timer for %v was set", d)
		}
	}
}

// fire advances the clock by d and runs the pending timers set for d. It
// returns how many ran.
func (c *fakeClock) fire(d time.Duration) int {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var fs []func()
	for _, t := range c.timers {
		if !t.done && t.d == d {
			t.done = true
			fs = append(fs, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return len(fs)
}

// Distinct durations, so that the fake clock can tell the timers apart.
const (
	fakeTimeout   = 13 * time.Second
	fakeGrace     = 7 * time.Second
	fakeWaitDelay = 11 * time.Second
)

func fakeSpec(c *fakeClock, command string) Spec {
	return Spec{Command: command, Timeout: fakeTimeout, Grace: fakeGrace, WaitDelay: fakeWaitDelay, Clock: c}
}

// start starts spec and makes sure the process is gone when the test ends.
func start(t *testing.T, spec Spec) *Process {
	t.Helper()
	p, err := Start(spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		p.Stop()
		p.kill()
		wait(t, p)
	})
	return p
}

func wait(t *testing.T, p *Process) Result {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(guard):
		t.Fatalf("process %d did not finish", p.PID())
		return Result{}
	}
}

// fifo makes a named pipe that commands write to, to tell the test they
// reached a point.
func fifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readFifo blocks until a writer has written to path and closed it.
func readFifo(t *testing.T, path string) string {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := os.ReadFile(path)
		ch <- res{b, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return strings.TrimSpace(string(r.b))
	case <-time.After(guard):
		// Release the reader blocked in open.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatalf("nothing was written to %s", path)
		return ""
	}
}

// pidfd pins pid (so it cannot be reused) and lets the test wait for its
// exit.
func pidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("pidfd_open not supported")
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// waitGone waits until the process behind fd has exited, then checks that
// /proc shows it gone or a zombie (its new parent may not reap it).
func waitGone(t *testing.T, fd, pid int) {
	t.Helper()
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(guard/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("process %d still alive", pid)
		}
		break
	}
	if st, err := ReadProcStat(pid); err == nil && st.State != 'Z' && st.State != 'X' {
		t.Fatalf("process %d in state %c", pid, st.State)
	}
}

// waitSize waits, with inotify, until the file at path holds n bytes.
func waitSize(t *testing.T, path string, n int64) {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, path, unix.IN_MODIFY); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() >= n {
			return
		}
		k, err := unix.Poll([]unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}, int(guard/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || k == 0 {
			t.Fatalf("%s stayed at %d bytes (%v)", path, fi.Size(), err)
		}
		if _, err := unix.Read(in, buf); err != nil {
			t.Fatal(err)
		}
	}
}

func alive(pid int) bool {
	st, err := ReadProcStat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		command string
		code    int
	}{
		{"true", 0},
		{"exit 3", 3},
		{"echo x; exit 3", 3},
	} {
		t.Run(tc.command, func(t *testing.T) {
			res := wait(t, start(t, Spec{Command: tc.command}))
			want := Result{ExitCode: tc.code, Duration: res.Duration, OutputBytes: res.OutputBytes, Tail: res.Tail}
			if !reflect.DeepEqual(res, want) {
				t.Fatalf("got %+v, want %+v", res, want)
			}
		})
	}
}

func TestOutput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks", "t1", "output")
	p := start(t, Spec{
		Command:    `echo out; echo err >&2; printf "%s" "$VIGIL_X"; pwd >&2`,
		Dir:        dir,
		Env:        []string{"VIGIL_X=env-ok"},
		OutputPath: path,
	})
	res := wait(t, p)
	want := "out\nerr\nenv-ok" + dir + "\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Fatalf("file = %q, want %q", b, want)
	}
	if res.ExitCode != 0 || res.Tail != want || res.OutputBytes != int64(len(want)) || res.Truncated || res.Err != "" {
		t.Fatalf("result %+v", res)
	}
	for path, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), mode)
		}
	}
}

func TestOutputExistingFileGets0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	if err := os.WriteFile(path, []byte("old content, longer than the new"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, start(t, Spec{Command: "echo new", OutputPath: path}))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if fi.Mode() != 0o600 || string(b) != "new\n" {
		t.Fatalf("mode %v, content %q", fi.Mode(), b)
	}
}

func TestOutputCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	const max, tail = 1000, 100
	p := start(t, Spec{
		Command:        `yes 0123456789 | head -c 5000; printf 'TAIL\xc3\xa9END'`,
		OutputPath:     path,
		MaxOutputBytes: max,
		TailBytes:      tail,
	})
	res := wait(t, p)
	full := strings.Repeat("0123456789\n", 500)[:5000] + "TAIL\u00e9END"
	total := int64(len(full))
	wantFile := full[:max] + fmt.Sprintf("\n[vigil: output truncated after %d bytes; %d bytes dropped]\n", max, total-max)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != wantFile {
		t.Fatalf("file ends %q, want %q", b[max-20:], wantFile[max-20:])
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(wantFile)) {
		t.Fatalf("size %d, want %d", fi.Size(), len(wantFile))
	}
	if res.ExitCode != 0 || !res.Truncated || res.OutputBytes != total || res.Tail != full[len(full)-tail:] {
		t.Fatalf("result %+v", res)
	}
}

func TestOutputCapOnLineBoundary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	wait(t, start(t, Spec{Command: `printf 'abc\ndef\n'`, OutputPath: path, MaxOutputBytes: 4}))
	b, _ := os.ReadFile(path)
	if want := "abc\n[vigil: output truncated after 4 bytes; 4 bytes dropped]\n"; string(b) != want {
		t.Fatalf("file %q, want %q", b, want)
	}
}

func TestRing(t *testing.T) {
	r := ring{size: 4}
	var all string
	for _, s := range []string{"a", "bc", "", "de", "fghij", "k", "\u00e9"} {
		r.write([]byte(s))
		all += s
		want := all
		if len(want) > 4 {
			want = want[len(want)-4:]
		}
		if string(r.buf) != want {
			t.Fatalf("after %q: %q, want %q", s, r.buf, want)
		}
	}
	// A cut through a rune drops its remains.
	r = ring{size: 3}
	r.write([]byte("ab\u00e9"))
	r.write([]byte("\u00e9"))
	if got := r.String(); got != "\u00e9" {
		t.Fatalf("String() = %q", got)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	c := newFakeClock()
	f := fifo(t)
	p := start(t, fakeSpec(c, "sleep 30 & echo $! > "+f+"; wait"))
	grandchild, err := strconv.Atoi(readFifo(t, f))
	if err != nil {
		t.Fatal(err)
	}
	fd := pidfd(t, grandchild)
	if n := c.fire(fakeTimeout); n != 1 {
		t.Fatalf("%d timeout timers fired", n)
	}
	res := wait(t, p)
	if !res.TimedOut || res.Stopped || res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Fatalf("result %+v", res)
	}
	if res.Duration != fakeTimeout {
		t.Fatalf("duration %v", res.Duration)
	}
	waitGone(t, fd, grandchild)
}

func TestTimeoutRealClock(t *testing.T) {
	res := wait(t, start(t, Spec{Command: "sleep 30", Timeout: 50 * time.Millisecond}))
	if !res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGTERM" || res.Duration < 50*time.Millisecond {
		t.Fatalf("result %+v", res)
	}
}

func TestStop(t *testing.T) {
	p := start(t, Spec{Command: "sleep 30"})
	p.Stop()
	p.Stop()
	res := wait(t, p)
	if !res.Stopped || res.TimedOut || res.ExitCode != -1 || res.Signal != "SIGTERM" {
		t.Fatalf("result %+v", res)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	c := newFakeClock()
	f := fifo(t)
	p := start(t, fakeSpec(c, "trap '' TERM; echo ready > "+f+"; sleep 30; echo survived"))
	readFifo(t, f)
	p.Stop() // SIGTERM is ignored by the shell and by sleep
	select {
	case <-p.Done():
		t.Fatalf("finished on SIGTERM: %+v", p.Wait())
	default:
	}
	if n := c.fire(fakeGrace); n != 1 {
		t.Fatalf("%d grace timers fired", n)
	}
	res := wait(t, p)
	if !res.Stopped || res.ExitCode != -1 || res.Signal != "SIGKILL" || res.Tail != "" {
		t.Fatalf("result %+v", res)
	}
}

func TestStopAfterExit(t *testing.T) {
	p := start(t, Spec{Command: "exit 3"})
	first := wait(t, p)
	p.Stop()
	p.Stop()
	if again := p.Wait(); !reflect.DeepEqual(first, again) || again.Stopped || again.ExitCode != 3 {
		t.Fatalf("first %+v, after Stop %+v", first, again)
	}
}

func TestConcurrentWait(t *testing.T) {
	p := start(t, Spec{Command: "echo hello; exit 3"})
	const n = 8
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = p.Wait() })
	}
	wg.Wait()
	for i := range n {
		if !reflect.DeepEqual(results[i], results[0]) {
			t.Fatalf("result %d = %+v, result 0 = %+v", i, results[i], results[0])
		}
	}
	if results[0].Tail != "hello\n" {
		t.Fatalf("result %+v", results[0])
	}
}

func TestLeftoverProcessKilledAfterWaitDelay(t *testing.T) {
	c := newFakeClock()
	f := fifo(t)
	p := start(t, fakeSpec(c, "sleep 30 & echo $! > "+f+"; echo bye"))
	grandchild, err := strconv.Atoi(readFifo(t, f))
	if err != nil {
		t.Fatal(err)
	}
	fd := pidfd(t, grandchild)
	c.waitTimer(t, fakeWaitDelay) // the shell exited; sleep holds the output
	select {
	case <-p.Done():
		t.Fatal("finished while the output was still open")
	default:
	}
	if n := c.fire(fakeWaitDelay); n != 1 {
		t.Fatalf("%d wait-delay timers fired", n)
	}
	res := wait(t, p)
	if res.ExitCode != 0 || res.Stopped || res.TimedOut || res.Tail != "bye\n" {
		t.Fatalf("result %+v", res)
	}
	waitGone(t, fd, grandchild)
}

func TestRedirectedLeftoverIsLeftAlone(t *testing.T) {
	c := newFakeClock()
	f := fifo(t)
	p := start(t, fakeSpec(c, "sleep 30 >/dev/null 2>&1 & echo $! > "+f))
	grandchild, err := strconv.Atoi(readFifo(t, f))
	if err != nil {
		t.Fatal(err)
	}
	fd := pidfd(t, grandchild)
	t.Cleanup(func() { unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) })
	if res := wait(t, p); res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if !alive(grandchild) {
		t.Fatal("redirected background process was killed")
	}
	unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	waitGone(t, fd, grandchild)
}

func TestRun(t *testing.T) {
	if res := Run(context.Background(), Spec{Command: "echo hi; exit 3"}); res.ExitCode != 3 || res.Tail != "hi\n" {
		t.Fatalf("result %+v", res)
	}

	ctx, cancel := context.WithCancel(context.Background())
	f := fifo(t)
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, Spec{Command: "echo ready > " + f + "; sleep 30"}) }()
	readFifo(t, f)
	cancel()
	select {
	case res := <-done:
		if !res.Stopped || res.ExitCode != -1 {
			t.Fatalf("result %+v", res)
		}
	case <-time.After(guard):
		t.Fatal("Run did not return after cancel")
	}

	if res := Run(ctx, Spec{Command: "true"}); res.ExitCode != -1 || !strings.Contains(res.Err, "canceled") {
		t.Fatalf("result with cancelled ctx %+v", res)
	}
	if res := Run(context.Background(), Spec{Command: "true", Dir: "/nonexistent/dir"}); res.ExitCode != -1 || res.Err == "" {
		t.Fatalf("result with bad dir %+v", res)
	}
}

func TestStartErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	if _, err := Start(Spec{Command: "true", Dir: "/nonexistent/dir", OutputPath: path}); err == nil {
		t.Fatal("Start with a missing Dir succeeded")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("output file left behind: %v", err)
	}
	if _, err := Start(Spec{}); err == nil {
		t.Fatal("Start with no command succeeded")
	}
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o600)
	if _, err := Start(Spec{Command: "true", OutputPath: filepath.Join(blocker, "output")}); err == nil {
		t.Fatal("Start with an impossible OutputPath succeeded")
	}
}

func TestPickShell(t *testing.T) {
	if got := pickShell("/nonexistent/bash", shPath); got != shPath {
		t.Fatalf("pickShell = %q", got)
	}
	if got := pickShell(bashPath, shPath); got != bashPath {
		if _, err := os.Stat(bashPath); err == nil {
			t.Fatalf("pickShell = %q with bash present", got)
		}
	}
}

func TestStartTime(t *testing.T) {
	p := start(t, Spec{Command: "sleep 30"})
	st, err := ReadProcStat(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	if p.StartTime() == 0 || p.StartTime() != st.StartTicks || st.PGID != p.PID() {
		t.Fatalf("StartTime %d, stat %+v, pid %d", p.StartTime(), st, p.PID())
	}
}

func TestParseStat(t *testing.T) {
	line := "42 (a (b) c) S 1 42 42 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3\n"
	st, err := ParseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st != (ProcStat{State: 'S', PPID: 1, PGID: 42, SID: 42, StartTicks: 987654}) {
		t.Fatalf("%+v", st)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q) succeeded", bad)
		}
	}
}

func TestReadOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	wait(t, start(t, Spec{Command: "printf 0123456789", OutputPath: path}))
	for _, tc := range []struct {
		offset, limit int64
		data          string
		next          int64
	}{
		{0, 4, "0123", 4},
		{4, 4, "4567", 8},
		{8, 4, "89", 10},
		{10, 4, "", 10},
		{25, 4, "", 25},
		{3, 0, "3456789", 10},
		{0, -1, "0123456789", 10},
	} {
		data, next, err := ReadOutput(path, tc.offset, tc.limit)
		if err != nil || string(data) != tc.data || next != tc.next {
			t.Errorf("ReadOutput(%d, %d) = %q, %d, %v; want %q, %d", tc.offset, tc.limit, data, next, err, tc.data, tc.next)
		}
	}
	if _, _, err := ReadOutput(path, -1, 4); err == nil {
		t.Error("negative offset accepted")
	}
	if _, _, err := ReadOutput(path+".missing", 0, 4); err == nil {
		t.Error("missing file accepted")
	}
}

func TestReadOutputWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	f := fifo(t)
	p := start(t, Spec{Command: "printf first; echo > " + f + "; read line < " + f + "; printf second", OutputPath: path})
	readFifo(t, f)
	waitSize(t, path, int64(len("first")))
	data, next, err := ReadOutput(path, 0, 0)
	if err != nil || string(data) != "first" {
		t.Fatalf("ReadOutput = %q, %v", data, err)
	}
	w, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("go\n")
	w.Close()
	wait(t, p)
	data, next, err = ReadOutput(path, next, 0)
	if err != nil || string(data) != "second" || next != int64(len("firstsecond")) {
		t.Fatalf("ReadOutput = %q, %d, %v", data, next, err)
	}
}

func TestKillStale(t *testing.T) {
	f := fifo(t)
	p := start(t, Spec{Command: "sleep 30 & echo $! > " + f + "; wait"})
	grandchild, err := strconv.Atoi(readFifo(t, f))
	if err != nil {
		t.Fatal(err)
	}
	fd := pidfd(t, grandchild)

	killed, err := KillStale(p.PID(), p.StartTime()+1)
	if err != nil || killed {
		t.Fatalf("KillStale with another start time = %v, %v", killed, err)
	}
	if !alive(p.PID()) || !alive(grandchild) {
		t.Fatal("KillStale with another start time killed")
	}
	select {
	case <-p.Done():
		t.Fatal("process finished")
	default:
	}

	killed, err = KillStale(p.PID(), p.StartTime())
	if err != nil || !killed {
		t.Fatalf("KillStale = %v, %v", killed, err)
	}
	if res := wait(t, p); res.Signal != "SIGKILL" || res.ExitCode != -1 {
		t.Fatalf("result %+v", res)
	}
	waitGone(t, fd, grandchild)

	// The shell is reaped now; its pid names nothing (or another process).
	if killed, err := KillStale(p.PID(), p.StartTime()); err != nil || killed {
		t.Fatalf("KillStale of a reaped process = %v, %v", killed, err)
	}
	if killed, err := KillStale(1<<30, 1); err != nil || killed {
		t.Fatalf("KillStale of a missing pid = %v, %v", killed, err)
	}
}

func TestPdeathsig(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	helper.Stderr = os.Stderr
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	fd := pidfd(t, child) // the helper is alive, so the child is too
	t.Cleanup(func() { unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) })
	if st, err := ReadProcStat(child); err != nil || st.PGID != child {
		t.Fatalf("child stat %+v, %v", st, err)
	}

	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	waitGone(t, fd, child)
}
