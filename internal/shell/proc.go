package shell

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// procStat holds the fields of /proc/<pid>/stat that the package uses.
type procStat struct {
	state     byte
	pgid      int
	startTime uint64
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// parseStat parses a /proc/<pid>/stat line: "pid (comm) state ppid pgrp
// ...". The command name may hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("parse stat: no command name")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("parse stat: too few fields")
	}
	pgid, err := strconv.Atoi(string(f[2])) // field 5
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: pgrp: %w", err)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64) // field 22
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: starttime: %w", err)
	}
	return procStat{state: f[0][0], pgid: pgid, startTime: start}, nil
}

// KillStale kills, with SIGKILL, the process group of a process that an
// earlier vigil started (see Process.PID and Process.StartTime), but only
// if /proc/<pid>/stat still shows startTime: otherwise the pid now names
// another process and nothing is signalled. It reports whether it sent the
// signal. A process that is gone is not an error.
//
// Limitation: when the group's leader is gone (Pdeathsig kills it when vigil
// dies), the pid cannot be verified and the rest of its group is left alone.
func KillStale(pid int, startTime uint64) (killed bool, err error) {
	if pid <= 0 {
		return false, fmt.Errorf("kill stale: bad pid %d", pid)
	}
	// While the pidfd is open the kernel cannot give pid, and so the group
	// id, to another process: the check below cannot go stale.
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		defer unix.Close(fd)
	} else if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EINVAL) {
		return false, nil // gone, or now a thread of another process
	} else if !errors.Is(err, unix.ENOSYS) {
		return false, fmt.Errorf("kill stale: pidfd: %w", err)
	}
	st, err := readStat(pid)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kill stale: %w", err)
	}
	if st.startTime != startTime {
		return false, nil
	}
	target := pid
	if st.pgid == pid {
		target = -pid
	}
	if err := unix.Kill(target, unix.SIGKILL); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("kill stale: %w", err)
	}
	return true, nil
}

// Alive reports whether the process pid is running and is the one that
// started at startTime (not a later process that reuses the pid).
func Alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := readStat(pid)
	if err != nil {
		return false
	}
	return st.startTime == startTime && st.state != 'Z' && st.state != 'X'
}

// SelfStartTime returns this process's start time in clock ticks since
// boot, as /proc/<pid>/stat shows it.
func SelfStartTime() (uint64, error) {
	st, err := readStat(os.Getpid())
	if err != nil {
		return 0, fmt.Errorf("read own start time: %w", err)
	}
	return st.startTime, nil
}
