package codex

import (
	"bytes"
	"os"
	"strconv"

	"github.com/vigilrun/vigil/internal/shell"
)

// startTicks returns a process's start time in clock ticks since boot.
func startTicks(pid int) (uint64, error) {
	st, err := shell.ReadProcStat(pid)
	return st.StartTicks, err
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
		st, err := shell.ReadProcStat(n)
		if err != nil || st.PPID != parent || st.SID != n {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			continue
		}
		return n, st.StartTicks, true
	}
	return 0, 0, false
}
