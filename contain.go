package vigil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/internal/shell"
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

// probeContainment finds where this runtime may create cgroups, and
// records the place in the data directory (rootsFile): a successor started
// in another cgroup (another terminal, another service) still finds the
// groups this one made.
func probeContainment(dataDir string) Containment {
	base, err := shell.CgroupBase()
	if err != nil {
		return Containment{Note: "no cgroups: " + err.Error()}
	}
	sum := sha256.Sum256([]byte(canonicalDir(dataDir)))
	root := filepath.Join(base, "vigil-"+hex.EncodeToString(sum[:6]))
	c := Containment{Cgroups: true, Root: root, Note: "every command runs in a cgroup of its own under " + root}
	if err := recordRoot(dataDir, root); err != nil {
		c.Note += " (" + err.Error() + ")"
	}
	return c
}

// rootsFile lists, in the data directory, every cgroup root a runtime on
// it has used.
const rootsFile = "cgroup-roots"

// canonicalDir is dir, absolute, with symlinks resolved where it exists.
func canonicalDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// recordRoot adds root to the data directory's list of cgroup roots.
func recordRoot(dataDir, root string) error {
	path := filepath.Join(dataDir, rootsFile)
	if slices.Contains(cgroupRoots(dataDir), root) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record cgroup root: %w", err)
	}
	_, err = fmt.Fprintln(f, root)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record cgroup root: %w", err)
	}
	return nil
}

// cgroupRoots returns the cgroup roots runtimes on dataDir have used. Only
// vigil's own roots (absolute, named vigil-…) are taken: the sweep kills
// whatever lives under them.
func cgroupRoots(dataDir string) []string {
	b, err := os.ReadFile(filepath.Join(dataDir, rootsFile))
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		line = filepath.Clean(strings.TrimSpace(line))
		if filepath.IsAbs(line) && strings.HasPrefix(filepath.Base(line), "vigil-") && !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return out
}

// rootsMemo holds cgroupRoots of a data directory while the file is
// unchanged (its size and modification time): Open of 10,000 sessions
// read it once each, 8% of Open's CPU.
type rootsMemo struct {
	mu        sync.Mutex
	ok        bool
	size      int64
	mod       time.Time
	roots     []string
	readCount int // files read, for tests
}

// get returns cgroupRoots(dataDir), read again only when the file
// changed. The slice is shared: do not change it.
func (m *rootsMemo) get(dataDir string) []string {
	fi, err := os.Stat(filepath.Join(dataDir, rootsFile))
	if err != nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ok || fi.Size() != m.size || !fi.ModTime().Equal(m.mod) {
		// Read after the stat: a change between the two is read now and
		// seen again at the next call.
		m.roots, m.size, m.mod, m.ok = cgroupRoots(dataDir), fi.Size(), fi.ModTime(), true
		m.readCount++
	}
	return m.roots
}

// cgroupFor returns the cgroup path for one process of a session, or ""
// without cgroups.
func (r *Runtime) cgroupFor(session core.SessionID, name string) string {
	if !r.iso.Containment.Cgroups {
		return ""
	}
	return filepath.Join(r.iso.Containment.Root, sanitize(string(session)), sanitize(name))
}

// killSessionGroups ends every process in the session's cgroups: the
// recorded paths, and everything under the session's directory of every
// cgroup root a runtime on this data directory has used (a foreground
// command, a task whose start was never committed, made by a vigil that
// ran in another cgroup). scan, when not nil, is what the recovery pass
// found under the roots (scanGroups): a session directory it did not find
// is not looked for again. It returns how many processes were ended.
func (a *actor) killSessionGroups(recorded []string, scan *groupScan) int {
	dirs := append([]string(nil), recorded...)
	name := sanitize(string(a.id))
	if scan != nil {
		for _, root := range scan.roots {
			if d := filepath.Join(root, name); scan.found[d] {
				dirs = append(dirs, d)
			}
		}
	} else {
		for _, root := range a.rt.groupRoots() {
			dirs = append(dirs, filepath.Join(root, name))
		}
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

// groupRoots returns the cgroup roots that may hold a session's
// directory: those runtimes on the data directory have used, and this
// runtime's own.
func (r *Runtime) groupRoots() []string {
	roots := slices.Clone(r.roots.get(r.opts.DataDir))
	if r.iso.Containment.Cgroups {
		roots = append(roots, r.iso.Containment.Root)
	}
	return roots
}

// groupScan is what a recovery pass found under the cgroup roots, read
// once for the whole pass: each root's directories. Looking for each
// session's directory with a stat per root took 2-4 system calls a
// session, 5% of the CPU of Open of 10,000 sessions.
type groupScan struct {
	roots []string
	found map[string]bool // the directories found under the roots
}

// scanGroups reads the cgroup roots' directories, for a recovery pass at
// Open, where no process of a session's previous owner still runs to make
// a new one (it died or stopped): nil when a root cannot be read, and
// each takeover looks for its session's directories itself.
func (r *Runtime) scanGroups() *groupScan {
	scan := &groupScan{roots: r.groupRoots(), found: map[string]bool{}}
	for _, root := range scan.roots {
		entries, err := os.ReadDir(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			r.log.Debug("could not list a cgroup root; each takeover looks for its session's groups", "root", root, "err", err)
			return nil
		}
		for _, e := range entries {
			if e.IsDir() {
				scan.found[filepath.Join(root, e.Name())] = true
			}
		}
	}
	return scan
}

// Sandbox configures the kernel sandbox of agents' commands (DESIGN rule
// 12; see internal/sandbox).
type Sandbox struct {
	// Mode is read-only, workspace-write or full-access. Empty chooses
	// workspace-write where the machine has a sandbox, and full-access,
	// said loudly at start-up and in Isolation, where it has none. A
	// confined mode the machine cannot enforce is refused by Open.
	Mode string
	// Network lets confined commands use the network; off by default.
	Network bool
	// WritableGit leaves each root's .git writable in workspace-write; by
	// default it is read-only, so a command cannot plant a hook or an alias
	// that git would run later outside the sandbox.
	WritableGit bool
	// Protect are more paths kept read-only in workspace-write, for the
	// commands and the file tools alike: vigil's own configuration (a
	// command that could write it could turn the sandbox off for the next
	// session). A path must exist to be protected.
	Protect []string
}

// Isolation says how this runtime confines and contains what agents run.
type Isolation struct {
	// Sandbox is the mode commands run in: read-only, workspace-write or
	// full-access.
	Sandbox string
	// Network reports whether confined commands may use the network.
	Network bool
	// WritableGit reports whether the roots' .git stay writable in
	// workspace-write: when configured, or when the backend (Landlock)
	// cannot keep a path read-only inside a writable root.
	WritableGit bool
	// Kernel is what the machine offers, in a sentence (the probe's).
	Kernel string
	// Containment is how processes are kept within reach.
	Containment Containment
	// Warning, when set, says loudly what is weaker than the default.
	Warning string
}

// Isolation reports how this runtime confines and contains what agents run.
func (r *Runtime) Isolation() Isolation { return r.iso }

// setupIsolation probes the kernel and settles the sandbox mode.
func setupIsolation(ctx context.Context, opts Sandbox, dataDir string) (Isolation, sandbox.Report, error) {
	rep := sandbox.Probe(ctx)
	iso, err := isolationFor(opts, rep, probeContainment(dataDir))
	return iso, rep, err
}

// isolationFor settles the sandbox mode from the options and what the
// kernel offers.
func isolationFor(opts Sandbox, rep sandbox.Report, contain Containment) (Isolation, error) {
	iso := Isolation{Network: opts.Network, WritableGit: opts.WritableGit, Kernel: rep.String(), Containment: contain}
	switch opts.Mode {
	case "":
		iso.Sandbox = string(sandbox.WorkspaceWrite)
		if rep.Backend() == sandbox.BackendLandlock && !opts.WritableGit {
			// Landlock grants whole trees: .git inside a writable root
			// cannot stay read-only, and refusing every command in a git
			// repository would leave the default unusable.
			iso.WritableGit = true
			iso.Warning = "sandbox: Landlock without bubblewrap cannot keep .git read-only inside the workspace, so .git is writable (a command could plant a git hook); install bubblewrap"
		}
		if rep.Check(sandbox.WorkspaceWrite) != nil {
			iso.Sandbox = string(sandbox.FullAccess)
			iso.Warning = "NO SANDBOX: agents' commands run with full access to this machine (" + rep.String() +
				"); install bubblewrap, or a kernel with Landlock, to confine them"
		}
	default:
		m, err := sandbox.ParseMode(opts.Mode)
		if err != nil {
			return iso, err
		}
		if err := rep.Check(m); err != nil {
			return iso, err
		}
		iso.Sandbox = string(m)
		if m == sandbox.FullAccess {
			iso.Warning = "sandbox full-access: agents' commands run with full access to this machine, as configured"
		}
	}
	if !iso.Containment.Cgroups {
		switch {
		case rep.Backend() == sandbox.BackendBwrap:
			iso.Containment.Note = "each command runs in a PID namespace of its own, whose processes die with it and with vigil (" + iso.Containment.Note + ")"
		default:
			iso.Containment.Note = "commands are contained by process group only (" + iso.Containment.Note +
				"): a command that starts a new session (setsid, a daemon) can outlive vigil"
			iso.Warning = strings.TrimPrefix(iso.Warning+"; "+iso.Containment.Note, "; ")
		}
	}
	return iso, nil
}

// wrapFor returns the sandbox wrapper of one command of a session, or nil
// for none (full access with cgroups, or no way to contain more).
func (r *Runtime) wrapFor(env toolEnv) func(*exec.Cmd) error {
	mode := sandbox.Mode(r.iso.Sandbox)
	if mode == sandbox.FullAccess && r.iso.Containment.Cgroups {
		return nil
	}
	tmp := r.sessionTmp(env.sessionDir)
	p := sandbox.Policy{
		Mode: mode, Roots: env.roots, Network: r.opts.Sandbox.Network, WritableGit: r.iso.WritableGit,
		ReadOnlyPaths: r.opts.Sandbox.Protect,
		Hidden:        append([]string{r.opts.DataDir}, hiddenByRules(env.roots, env.perms.Deny)...), Tmp: tmp,
		// Without cgroups, a PID namespace is what keeps a command's
		// processes within reach.
		Contain: mode == sandbox.FullAccess,
	}
	rep := r.sandbox
	return func(cmd *exec.Cmd) error {
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return fmt.Errorf("sandbox tmp: %w", err)
		}
		if cmd.Dir != "" {
			// The sandbox binds the roots by their real paths.
			cmd.Dir = canonicalDir(cmd.Dir)
		}
		if cmd.Dir == "" && mode != sandbox.FullAccess {
			// A session without a directory runs its commands in its
			// private tmp (vigil's own directory may not be visible).
			cmd.Dir = tmp
			if rep.Backend() == sandbox.BackendBwrap {
				cmd.Dir = "/tmp"
			}
		}
		return sandbox.Wrap(cmd, p, rep)
	}
}

// hiddenByRules returns the paths that deny Read rules name literally
// ("Read(secrets)", "Read(secrets/*)", "Read(/etc/creds/**)"): the sandbox
// hides them from commands as the rules hide them from the file tools. A
// pattern with a wildcard elsewhere names no one path and is left to the
// rules.
func hiddenByRules(roots, deny []string) []string {
	var out []string
	for _, rule := range deny {
		tool, pat, ok := strings.Cut(rule, "(")
		if !ok || tool != "Read" || !strings.HasSuffix(pat, ")") {
			continue
		}
		pat = strings.TrimSuffix(pat, ")")
		pat = strings.TrimSuffix(strings.TrimSuffix(pat, "/**"), "/*")
		if pat == "" || strings.ContainsAny(pat, "*?[{") {
			continue
		}
		if !filepath.IsAbs(pat) {
			if len(roots) == 0 {
				continue
			}
			pat = filepath.Join(roots[0], pat)
		}
		out = append(out, filepath.Clean(pat))
	}
	return out
}

// cleanupSession removes what a closed session leaves outside the store:
// its private tmp and its cgroups (killing anything still in them).
func (r *Runtime) cleanupSession(id core.SessionID) {
	if err := os.RemoveAll(r.sessionTmp(r.sessionDir(id))); err != nil {
		r.log.Warn("could not remove a closed session's tmp", "session", id, "err", err)
	}
	if !r.iso.Containment.Cgroups {
		return
	}
	if n, err := shell.KillCgroup(filepath.Join(r.iso.Containment.Root, sanitize(string(id))), killWait); err != nil {
		r.log.Warn("could not remove a closed session's cgroups", "session", id, "err", err)
	} else if n > 0 {
		r.log.Warn("ended processes a closed session left", "session", id, "processes", n)
	}
}

// sessionTmp is the private tmp of the session whose directory is dir: it
// lives outside the data directory, which commands cannot see.
func (r *Runtime) sessionTmp(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(os.TempDir(), "vigil-tmp-"+hex.EncodeToString(sum[:6]))
}

// Main must be the first call in the main function of a program that
// embeds vigil. Where the machine confines commands with Landlock alone
// (no bubblewrap), the runtime starts each command by re-executing its own
// program as the sandbox's launcher; Main runs that launcher, and never
// returns, when this process is one, and returns at once otherwise. A test
// binary whose tests run commands calls it in TestMain.
func Main() { sandbox.Main() }
