package shell

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testCgroup returns a fresh cgroup path for one test, removed afterwards,
// or skips loudly when this machine gives the test no writable cgroup v2
// (VIGIL_TEST_STRICT=1 fails instead).
func testCgroup(t *testing.T) string {
	t.Helper()
	base, err := CgroupBase()
	if err != nil {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("no writable cgroup v2 here: %v", err)
		}
		t.Skipf("SKIP: no writable cgroup v2 here (%v): commands are contained by process group only", err)
	}
	dir := filepath.Join(base, fmt.Sprintf("vigil-test-%d", rand.Uint64()))
	t.Cleanup(func() {
		if _, err := KillCgroup(dir, guard); err != nil {
			t.Errorf("clean up %s: %v", dir, err)
		}
	})
	return dir
}

// pidfds opens a pidfd on each process of the cgroup: the test can then
// wait for each one's end even if its pid is reused.
func cgroupPidfds(t *testing.T, dir string, want int) map[int]int {
	t.Helper()
	pids, err := CgroupProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) < want {
		t.Fatalf("cgroup %s holds %v, want at least %d processes", dir, pids, want)
	}
	fds := map[int]int{}
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
			t.Cleanup(func() { unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); unix.Close(fd) })
		}
	}
	return fds
}

// The processes a command detaches from its group — setsid, a double fork —
// stay in its cgroup, and end when the command ends (before, they ran on
// after the task was reported ended).
func TestCgroupEndsDetachedProcesses(t *testing.T) {
	cg := filepath.Join(testCgroup(t), "task")
	ready, resume := fifo(t), fifo(t)
	p := start(t, Spec{Cgroup: cg, Command: "setsid -f sleep 300 >/dev/null 2>&1 </dev/null; (sleep 301 </dev/null >/dev/null 2>&1 &); " +
		"echo ready > " + ready + "; read x < " + resume + "; echo bye"})
	readFifo(t, ready)
	fds := cgroupPidfds(t, cg, 3) // the shell and both sleeps
	if err := os.WriteFile(resume, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	res := wait(t, p)
	if res.ExitCode != 0 || res.Err != "" || res.Tail != "bye\n" {
		t.Fatalf("result %+v", res)
	}
	for pid, fd := range fds {
		waitGone(t, fd, pid)
	}
	if exists(cg) {
		t.Fatalf("cgroup %s is left after the command", cg)
	}
}

// Stop reaches the processes that left the command's process group.
func TestCgroupStopReachesDetached(t *testing.T) {
	cg := filepath.Join(testCgroup(t), "task")
	ready := fifo(t)
	p := start(t, Spec{Cgroup: cg, Grace: 50 * time.Millisecond, Command: "setsid -f bash -c 'trap \"\" TERM; sleep 300' >/dev/null 2>&1 </dev/null; echo ready > " + ready + "; sleep 300"})
	readFifo(t, ready)
	fds := cgroupPidfds(t, cg, 2) // the shell and the detached bash at least
	p.Stop()
	if res := wait(t, p); !res.Stopped {
		t.Fatalf("result %+v", res)
	}
	for pid, fd := range fds {
		waitGone(t, fd, pid)
	}
	if exists(cg) {
		t.Fatalf("cgroup %s is left after Stop", cg)
	}
}

// A vigil killed with SIGKILL leaves its commands' detached processes
// running; its successor ends all of them by the cgroup's path.
func TestKillCgroupAfterOwnerDied(t *testing.T) {
	cg := filepath.Join(testCgroup(t), "task")
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), cgroupHelperEnv+"="+cg)
	helper.Stderr = os.Stderr
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	fds := cgroupPidfds(t, cg, 3)
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	n, err := KillCgroup(cg, guard)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("KillCgroup found %d processes after the owner died; want the detached ones", n)
	}
	for pid, fd := range fds {
		waitGone(t, fd, pid)
	}
	if exists(cg) {
		t.Fatalf("cgroup %s is left", cg)
	}
	if n, err := KillCgroup(cg, guard); n != 0 || err != nil {
		t.Fatalf("KillCgroup of a gone group = %d, %v", n, err)
	}
}

const cgroupHelperEnv = "VIGIL_SHELL_TEST_CGROUP"

// cgroupHelper starts a command in cgroup dir whose processes detach, says
// ready, and blocks until it is killed.
func cgroupHelper(dir string) int {
	ready := filepath.Join(filepath.Dir(os.Args[0]), fmt.Sprintf("ready-%d", os.Getpid()))
	if err := unix.Mkfifo(ready, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.Remove(ready)
	_, err := Start(Spec{Cgroup: dir, Command: "setsid -f sleep 300 >/dev/null 2>&1 </dev/null; (sleep 301 </dev/null >/dev/null 2>&1 &); echo > " + ready + "; sleep 300"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := os.ReadFile(ready); err != nil { // blocks until the command wrote
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

func TestCgroupBaseAndMount(t *testing.T) {
	if got := unescapeMount(`/sys/fs/cgroup\040x`); got != "/sys/fs/cgroup x" {
		t.Fatalf("unescapeMount = %q", got)
	}
	testCgroup(t)
}

// BenchmarkRunTrue measures a command's start-to-result cost without and
// with a cgroup of its own (created, joined, killed and removed).
func BenchmarkRunTrue(b *testing.B) {
	base, err := CgroupBase()
	for _, cg := range []bool{false, true} {
		b.Run(fmt.Sprintf("cgroup=%v", cg), func(b *testing.B) {
			if cg && err != nil {
				b.Skipf("no writable cgroup v2: %v", err)
			}
			dir := filepath.Join(base, fmt.Sprintf("vigil-bench-%d", rand.Uint64()))
			defer KillCgroup(dir, guard)
			for i := 0; b.Loop(); i++ {
				spec := Spec{Command: "true"}
				if cg {
					spec.Cgroup = filepath.Join(dir, fmt.Sprint(i))
				}
				p, err := Start(spec)
				if err != nil {
					b.Fatal(err)
				}
				if res := p.Wait(); res.ExitCode != 0 {
					b.Fatalf("%+v", res)
				}
			}
		})
	}
}
