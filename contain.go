package vigil

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/shell"
)

// Containment: every process an agent's command or a provider CLI starts
// runs in a cgroup of its own, under <own cgroup>/vigil-<data dir hash>/
// <session>/, when the machine gives vigil a writable cgroup v2 hierarchy
// (DESIGN rule 12). The path is recorded with the task (and the agent's
// provider process), and a successor of a vigil killed with SIGKILL ends,
// before it reports anything, every process of the session's groups — the
// recorded ones and any left under the session's directory (a foreground
// command, a task whose start was never committed). Without cgroups the
// process group is all there is, which a command can leave (setsid), and
// vigil says so at start-up.

// killWait bounds how long ending a group waits for its processes to exit.
const killWait = 10 * time.Second

// Containment says how this runtime contains the processes it starts.
type Containment struct {
	// Cgroups is true when every command and provider process runs in a
	// cgroup of its own, which vigil or a successor kills whole.
	Cgroups bool
	// Root is the cgroup directory of this runtime's groups.
	Root string
	// Note says, for people, what containment there is and, without
	// cgroups, why not and what that means.
	Note string
}

// probeContainment finds where this runtime may create cgroups.
func probeContainment(dataDir string) Containment {
	base, err := shell.CgroupBase()
	if err != nil {
		return Containment{Note: "commands are contained by process group only: " + err.Error() +
			"; a command that starts a new session (setsid, a daemon) can outlive vigil"}
	}
	abs, _ := filepath.Abs(dataDir)
	sum := sha256.Sum256([]byte(abs))
	root := filepath.Join(base, "vigil-"+hex.EncodeToString(sum[:6]))
	return Containment{Cgroups: true, Root: root, Note: "every command runs in a cgroup of its own under " + root}
}

// Containment reports how this runtime contains the processes it starts.
func (r *Runtime) Containment() Containment { return r.contain }

// cgroupFor returns the cgroup path for one process of a session, or ""
// without cgroups.
func (r *Runtime) cgroupFor(session core.SessionID, name string) string {
	if !r.contain.Cgroups {
		return ""
	}
	return filepath.Join(r.contain.Root, sanitize(string(session)), sanitize(name))
}

// killSessionGroups ends every process in the session's cgroups: the
// recorded paths (which an earlier vigil may have made under another root)
// and everything under the session's directory here. It returns how many
// processes were ended.
func (a *actor) killSessionGroups(recorded []string) int {
	dirs := append([]string(nil), recorded...)
	if a.rt.contain.Cgroups {
		dirs = append(dirs, filepath.Join(a.rt.contain.Root, sanitize(string(a.id))))
	}
	n := 0
	for _, d := range dirs {
		k, err := shell.KillCgroup(d, killWait)
		n += k
		if err != nil {
			a.rt.log.Error("could not end every process a previous vigil left", "session", a.id, "cgroup", d, "err", err)
		}
	}
	return n
}
