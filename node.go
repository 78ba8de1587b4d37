package vigil

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vigilrun/vigil/internal/shell"
)

// defaultNode names this process as a lease owner:
// "vigil:<host>:<pid>:<start ticks>".
func defaultNode() string {
	host, _ := os.Hostname()
	ticks, _ := shell.SelfStartTime()
	return fmt.Sprintf("vigil:%s:%d:%d", host, os.Getpid(), ticks)
}

// nodeGone reports whether a lease owner named by defaultNode is a process
// of this host that no longer runs. Owners of other hosts, or named
// otherwise, are never judged gone: their leases must expire.
func nodeGone(owner string) bool {
	parts := strings.Split(owner, ":")
	if len(parts) != 4 || parts[0] != "vigil" {
		return false
	}
	host, _ := os.Hostname()
	if parts[1] != host {
		return false
	}
	pid, err1 := strconv.Atoi(parts[2])
	ticks, err2 := strconv.ParseUint(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return !shell.Alive(pid, ticks)
}
