package codex

import (
	"bytes"
	"errors"
	"os"
	"strconv"
)

// procStat holds the fields of /proc/<pid>/stat the driver reads.
type procStat struct {
	ppid, sid  int
	startTicks uint64
}

// readStat reads /proc/<pid>/stat, counting fields after the last ')'
// since the command name may hold spaces and parentheses.
func readStat(pid int) (procStat, error) {
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
	var st procStat
	if st.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procStat{}, errors.New("parse stat: ppid")
	}
	if st.sid, err = strconv.Atoi(string(f[3])); err != nil {
		return procStat{}, errors.New("parse stat: session")
	}
	if st.startTicks, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procStat{}, errors.New("parse stat: starttime")
	}
	return st, nil
}

// startTicks returns a process's start time in clock ticks since boot.
func startTicks(pid int) (uint64, error) {
	st, err := readStat(pid)
	return st.startTicks, err
}

// findCommand finds the process of a command Codex started for a tool
// call: a child of parent that leads a session of its own (Codex gives
// each command a session and a PTY) and whose environment holds
// CODEX_TOOL_CALL_ID=call. The processId Codex reports is a unified-exec
// session number, not a pid.
func findCommand(parent int, call string) (pid int, ticks uint64, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, false
	}
	want := []byte("CODEX_TOOL_CALL_ID=" + call + "\x00")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(n)
		if err != nil || st.ppid != parent || st.sid != n {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			continue
		}
		return n, st.startTicks, true
	}
	return 0, 0, false
}
