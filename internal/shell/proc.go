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

// ProcStat holds the fields of /proc/<pid>/stat that vigil reads of a
// process: its state, parent, process group, session and start time.
type ProcStat struct {
	// State is the one-letter state (R, S, Z, ...).
	State byte
	// PPID, PGID and SID are the parent, the process group and the
	// session.
	PPID, PGID, SID int
	// StartTicks is the start time in clock ticks after boot: with the
	// pid it names one process for good.
	StartTicks uint64
}

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(b)
}

// ParseProcStat parses a /proc/<pid>/stat line: "pid (comm) state ppid
// pgrp session ...". The command name may hold spaces and parentheses, so
// the fields are counted from the last ')'.
func ParseProcStat(b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, errors.New("parse stat: no command name")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 || len(f[0]) != 1 {
		return ProcStat{}, errors.New("parse stat: too few fields")
	}
	st := ProcStat{State: f[0][0]}
	var err error
	for _, fld := range []struct {
		name string
		at   int
		to   *int
	}{{"ppid", 1, &st.PPID}, {"pgrp", 2, &st.PGID}, {"session", 3, &st.SID}} {
		if *fld.to, err = strconv.Atoi(string(f[fld.at])); err != nil {
			return ProcStat{}, fmt.Errorf("parse stat: %s: %w", fld.name, err)
		}
	}
	if st.StartTicks, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil { // field 22
		return ProcStat{}, fmt.Errorf("parse stat: starttime: %w", err)
	}
	return st, nil
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
	st, err := ReadProcStat(pid)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kill stale: %w", err)
	}
	if st.StartTicks != startTime {
		return false, nil
	}
	target := pid
	if st.PGID == pid {
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
	st, err := ReadProcStat(pid)
	if err != nil {
		return false
	}
	return st.StartTicks == startTime && st.State != 'Z' && st.State != 'X'
}

// SelfStartTime returns this process's start time in clock ticks since
// boot, as /proc/<pid>/stat shows it.
func SelfStartTime() (uint64, error) {
	st, err := ReadProcStat(os.Getpid())
	if err != nil {
		return 0, fmt.Errorf("read own start time: %w", err)
	}
	return st.StartTicks, nil
}
