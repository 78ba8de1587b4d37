package shell

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A command with Spec.Cgroup set runs in a cgroup v2 group of its own: the
// kernel puts the shell there as it is created (clone3 with
// CLONE_INTO_CGROUP), and every process it starts stays there, whatever it
// does with process groups, sessions or double forks. Ending the command
// then means ending the group (cgroup.kill), and a successor of a vigil
// killed with SIGKILL finds every process it left by the group's path
// (KillCgroup), not by pids that may be gone or reused.

// CgroupBase returns the directory under which this process may create
// cgroups: its own cgroup v2 directory, found from /proc/self/mountinfo and
// /proc/self/cgroup. It fails, saying why, when the machine has no cgroup
// v2 hierarchy or this process may not create groups in it (an
// unprivileged user without a delegated subtree, a read-only mount).
func CgroupBase() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	own := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			own = rest
		}
	}
	if own == "" {
		return "", errors.New("cgroup: this process is in no cgroup v2 group (/proc/self/cgroup has no 0:: line)")
	}
	base := filepath.Join(mount, filepath.Clean("/"+own))
	probe := filepath.Join(base, fmt.Sprintf("vigil-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cgroup: cannot create groups under %s: %w", base, err)
	}
	if err := os.Remove(probe); err != nil {
		return "", fmt.Errorf("cgroup: remove probe group: %w", err)
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("cgroup: %s is not a cgroup v2 directory: %w", base, err)
	}
	return base, nil
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "36 25 0:31 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if f := strings.Fields(post); len(f) > 0 && f[0] == "cgroup2" {
			if pf := strings.Fields(pre); len(pf) >= 5 {
				return unescapeMount(pf[4]), nil
			}
		}
	}
	return "", errors.New("cgroup: no cgroup v2 hierarchy is mounted")
}

// unescapeMount undoes the octal escapes of a mountinfo path ("\040").
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// openCgroup creates dir (and its parents) as a cgroup and opens it for
// CLONE_INTO_CGROUP.
func openCgroup(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return -1, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return fd, nil
}

// IntoCgroup creates the cgroup dir (and its parents) and sets attr so
// that the process started with it is created in that group
// (CLONE_INTO_CGROUP): every process it starts then stays in the group. Call
// release once the process has started (or failed to).
func IntoCgroup(attr *syscall.SysProcAttr, dir string) (release func(), err error) {
	fd, err := openCgroup(dir)
	if err != nil {
		return nil, err
	}
	attr.UseCgroupFD, attr.CgroupFD = true, fd
	return func() { unix.Close(fd) }, nil
}

// cgroupProcs returns the pids in the group dir (not its children).
func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// populated reports whether the group dir or a group below it holds a
// process.
func populated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return false, fmt.Errorf("cgroup %s: cgroup.events has no populated line", dir)
}

// signalCgroup sends sig to every process in the group dir. SIGKILL uses
// cgroup.kill, which the kernel applies to the whole subtree at once, so
// that a process forking in a loop cannot slip out; without cgroup.kill
// (Linux before 5.14) the group is frozen, signalled pid by pid, and thawed.
func signalCgroup(dir string, sig unix.Signal) error {
	if sig == unix.SIGKILL {
		err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		if err == nil || errors.Is(err, fs.ErrNotExist) && !exists(dir) {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("kill cgroup %s: %w", dir, err)
		}
		freeze := filepath.Join(dir, "cgroup.freeze")
		if os.WriteFile(freeze, []byte("1"), 0) == nil {
			defer os.WriteFile(freeze, []byte("0"), 0)
		}
	}
	var errs []error
	err := walkGroups(dir, func(d string) {
		pids, err := cgroupProcs(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("signal %d in cgroup %s: %w", pid, d, err))
			}
		}
	})
	return errors.Join(append(errs, err)...)
}

// walkGroups calls fn for dir and every group below it.
func walkGroups(dir string, fn func(string)) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			fn(p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// removeCgroup removes the group dir and the groups below it, deepest
// first; they must hold no process.
func removeCgroup(dir string) error {
	var dirs []string
	if err := walkGroups(dir, func(d string) { dirs = append(dirs, d) }); err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// waitEmpty waits until the group dir holds no process, at most timeout.
// The kernel delivers SIGKILL at once, but a process leaves the group only
// when it has exited, which can take a moment (a process in D state, a big
// core dump); the wait polls cgroup.events, which is cheap.
func waitEmpty(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		pop, err := populated(dir)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !pop {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			pids, _ := cgroupProcs(dir)
			return fmt.Errorf("cgroup %s still holds processes %v after %s", dir, pids, timeout)
		}
		time.Sleep(delay)
	}
}

// KillCgroup ends every process in the cgroup dir and below it, waits
// until they have exited, and removes the groups. It is how a successor
// ends what a vigil killed with SIGKILL left running: the group's path is
// the task's, so nothing that lives is missed and no other process is
// touched. It returns how many processes the group held. A group that does
// not exist holds none and is not an error.
func KillCgroup(dir string, timeout time.Duration) (int, error) {
	if !exists(dir) {
		return 0, nil
	}
	n := 0
	_ = walkGroups(dir, func(d string) {
		pids, _ := cgroupProcs(d)
		n += len(pids)
	})
	if err := signalCgroup(dir, unix.SIGKILL); err != nil {
		return n, err
	}
	if err := waitEmpty(dir, timeout); err != nil {
		return n, err
	}
	return n, removeCgroup(dir)
}

// CgroupProcs returns the pids of the processes in the cgroup dir and
// below it; none when it does not exist.
func CgroupProcs(dir string) ([]int, error) {
	var all []int
	var errs []error
	err := walkGroups(dir, func(d string) {
		pids, err := cgroupProcs(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		all = append(all, pids...)
	})
	return all, errors.Join(append(errs, err)...)
}

// RemoveEmptyCgroups removes the groups at and below dir that hold no
// process, deepest first, and leaves the others; a group that does not
// exist is not an error.
func RemoveEmptyCgroups(dir string) {
	var dirs []string
	_ = walkGroups(dir, func(d string) { dirs = append(dirs, d) })
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = unix.Rmdir(dirs[i]) // EBUSY: it holds processes, or a group that does
	}
}
