package claudecode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// procStat holds the fields of /proc/<pid>/stat the driver uses.
type procStat struct {
	ppid, pgid int
	startTicks uint64
}

// readProcStat reads /proc/<pid>/stat. The command name may hold spaces
// and parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("parse stat: no command name")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return procStat{}, errors.New("parse stat: too few fields")
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: ppid: %w", err)
	}
	pgid, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: pgrp: %w", err)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat: starttime: %w", err)
	}
	return procStat{ppid: ppid, pgid: pgid, startTicks: start}, nil
}

// escapedGroups returns the children of parent that lead a process group
// of their own (the CLI starts its shell commands with setsid), with their
// start ticks. Killing parent's group does not reach them.
func escapedGroups(parent int) map[int]uint64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[int]uint64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == parent {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.ppid != parent || st.pgid != pid {
			continue
		}
		out[pid] = st.startTicks
	}
	return out
}
