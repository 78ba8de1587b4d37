package claudecode

import (
	"os"
	"strconv"

	"github.com/vigilrun/vigil/internal/shell"
)

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
		st, err := shell.ReadProcStat(pid)
		if err != nil || st.PPID != parent || st.PGID != pid {
			continue
		}
		out[pid] = st.StartTicks
	}
	return out
}
