// Package sandbox confines the commands vigil runs for agents with the
// kernel, so that the boundary is the kernel and not the permission
// patterns.
//
// Three modes exist. read-only lets a command read the system and write
// nowhere but a private tmp directory; workspace-write adds the session's
// roots, minus read-only paths inside them (each root's .git unless the
// policy says otherwise); full-access runs the command as it is. Network
// access is off in the two confined modes unless the policy allows it.
//
// Two backends enforce a policy:
//
//   - bubblewrap (Debian's bubblewrap package): a mount namespace with a
//     read-only view of the system, the roots bound writable, read-only and
//     hidden paths mounted over, a private /tmp and /run, read-only sysctls;
//     new PID, IPC and (unless allowed) network namespaces; no capabilities;
//     and, through Wrap, a seccomp filter (no terminal injection, no
//     io_uring, no setuid bits). The PID namespace also contains the
//     command: when it ends, or its launcher is killed, the kernel kills
//     every process it started. It is the backend of choice.
//   - Landlock with seccomp, where bubblewrap is missing or cannot create
//     namespaces: vigil re-executes itself (see Main), drops its
//     capabilities, restricts its thread with Landlock and a seccomp filter
//     (which also cuts the network), and executes the command. Landlock
//     cannot take a subtree away from a writable root, so a policy with
//     read-only or hidden paths inside a writable root is refused with
//     ErrUnenforceable under it; /tmp is not private (TMPDIR points at the
//     policy's Tmp instead); file modes outside the roots are not protected
//     (setuid bits are); below ABI 9 unix sockets are refused without
//     network; and there is no PID namespace.
//
// Probe finds out which backend works on this machine. Wrap and Command
// turn a command into one that runs inside the sandbox, or refuse with an
// error when the mode needs a sandbox that the machine cannot give.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Mode is how much a sandboxed command may do.
type Mode string

// The modes.
const (
	// ReadOnly lets the command read everything that is not hidden and
	// write only the private tmp directory.
	ReadOnly Mode = "read-only"
	// WorkspaceWrite lets the command also write the policy's roots,
	// except their read-only paths.
	WorkspaceWrite Mode = "workspace-write"
	// FullAccess runs the command without a sandbox.
	FullAccess Mode = "full-access"
)

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ReadOnly, WorkspaceWrite, FullAccess:
		return m, nil
	}
	return "", fmt.Errorf("sandbox: unknown mode %q (want %s, %s or %s)", s, ReadOnly, WorkspaceWrite, FullAccess)
}

// Policy says what one command may touch. Paths are absolute; symbolic
// links in them are resolved when the command is wrapped, so a policy
// names the files themselves, not the links that lead to them.
type Policy struct {
	// Mode is the mode; it must be set.
	Mode Mode
	// Roots are the session's directories. They are writable in
	// WorkspaceWrite and readable in every mode. Each must exist.
	Roots []string
	// ReadOnlyPaths are paths inside the roots that stay read-only in
	// WorkspaceWrite. Paths that do not exist are skipped.
	ReadOnlyPaths []string
	// WritableGit leaves each root's .git writable. When false (the
	// default) each root's .git, and the git directory a .git file points
	// to, is added to ReadOnlyPaths.
	WritableGit bool
	// Hidden are paths the command must not read, such as the targets of
	// deny Read rules and vigil's own data. Under bubblewrap a hidden
	// directory appears empty and read-only and a hidden file cannot be
	// opened (/dev/null is bound over it, on a mount without device
	// access); under Landlock neither can be read, but the names in a
	// hidden directory can still be listed. Paths that do not exist are
	// skipped.
	Hidden []string
	// Network allows network access; without it the command has none.
	Network bool
	// Tmp is a private directory on the host, per session, that the command
	// may write. Under bubblewrap it becomes /tmp; under Landlock it stays
	// where it is. Either way TMPDIR names it. Empty means a fresh tmpfs at
	// /tmp under bubblewrap and no writable tmp under Landlock.
	Tmp string
	// Contain, in FullAccess, still runs the command in a PID namespace of
	// its own (bubblewrap, when it works) that dies with it and with vigil,
	// so that no process it starts outlives either. It changes nothing
	// else: the file system, the network and the user stay the host's.
	// Other modes always have it.
	Contain bool
}

// ErrUnavailable is returned (wrapped) when a mode needs a sandbox that
// this machine cannot give.
var ErrUnavailable = errors.New("sandbox unavailable")

// ErrUnenforceable is returned (wrapped) when the available backend
// cannot enforce a part of the policy; the message says which part.
var ErrUnenforceable = errors.New("policy cannot be enforced")

// Wrap rewrites cmd, before it is started, so that it runs inside the
// sandbox that p and r describe: cmd.Path and cmd.Args become those of the
// sandbox's launcher, and cmd.SysProcAttr gets Setsid in place of Setpgid.
// A new session gives the command no controlling terminal (so TIOCSTI has
// no terminal to push input into), and its id is the process group id, so
// signalling -pid still reaches every process in the sandbox. Pdeathsig
// and the other attributes are kept; Setctty and Foreground are refused.
//
// Under bubblewrap, when r.Seccomp, Wrap also appends to cmd.ExtraFiles the
// read end of a pipe holding the seccomp filter that bubblewrap installs
// (see seccompFilter); bubblewrap reads and closes it before the command
// runs. The parent's copy is closed when cmd is collected; a caller may
// close it after Start.
//
// In FullAccess without Contain, cmd is left as it is. cmd.Dir (or vigil's
// own directory) stays the working directory inside the sandbox.
func Wrap(cmd *exec.Cmd, p Policy, r Report) error {
	if cmd.Err != nil {
		return fmt.Errorf("sandbox: %w", cmd.Err)
	}
	if cmd.Process != nil {
		return errors.New("sandbox: command already started")
	}
	if a := cmd.SysProcAttr; a != nil && (a.Setctty || a.Foreground) {
		return errors.New("sandbox: a sandboxed command cannot take a controlling terminal")
	}
	argv := []string{cmd.Path}
	if len(cmd.Args) > 1 {
		argv = append(argv, cmd.Args[1:]...)
	}
	seccompFD := -1
	if p.Mode != FullAccess && r.Backend() == BackendBwrap && r.Seccomp {
		seccompFD = 3 + len(cmd.ExtraFiles) // where the child will find it
	}
	wrapped, err := command(p, r, cmd.Dir, argv, false, seccompFD)
	if err != nil {
		return err
	}
	if slices.Equal(wrapped, argv) {
		return nil
	}
	if seccompFD >= 0 {
		f, err := filterFile()
		if err != nil {
			return err
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	cmd.Path = wrapped[0]
	cmd.Args = wrapped
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Pgid = 0
	return nil
}

// Command returns the argv that runs argv inside the sandbox p and r
// describe, with dir (empty: vigil's own working directory) as its working
// directory. In FullAccess without Contain it returns argv itself.
//
// Prefer Wrap. The bubblewrap form Command returns passes --new-session,
// which keeps the command away from vigil's terminal but also takes it out
// of the caller's process group, and it has no seccomp filter, which needs
// a file descriptor that only Wrap can hand over.
func Command(p Policy, r Report, dir string, argv []string) ([]string, error) {
	return command(p, r, dir, argv, true, -1)
}

func command(p Policy, r Report, dir string, argv []string, newSession bool, seccompFD int) ([]string, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: empty command")
	}
	if p.Mode == FullAccess && !p.Contain {
		return argv, nil
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("sandbox: working directory: %w", err)
		}
		dir = wd
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("sandbox: working directory %q is not absolute", dir)
	}
	if p.Mode == FullAccess {
		if r.Backend() != BackendBwrap {
			return argv, nil // containment is best effort; full access promises nothing else
		}
		return containArgs(r.Bwrap, dir, argv, newSession), nil
	}
	lay, err := resolve(p)
	if err != nil {
		return nil, err
	}
	switch r.Backend() {
	case BackendBwrap:
		return bwrapArgs(r.Bwrap, lay, dir, argv, newSession, seccompFD), nil
	case BackendLandlock:
		if err := landlockCheck(lay, r); err != nil {
			return nil, err
		}
		return landlockArgs(r.Executable, lay, argv)
	}
	return nil, r.unavailable(p.Mode)
}

// layout is a policy resolved against the file system: canonical paths,
// the .git default applied, missing optional paths dropped. It is also the
// form the Landlock helper receives.
type layout struct {
	Mode     Mode     `json:"mode"`
	Roots    []string `json:"roots,omitempty"`
	ReadOnly []string `json:"read_only,omitempty"`
	Hidden   []string `json:"hidden,omitempty"`
	Network  bool     `json:"network,omitempty"`
	Tmp      string   `json:"tmp,omitempty"`
}

// writable reports whether the layout's roots are writable.
func (l layout) writable() bool { return l.Mode == WorkspaceWrite }

func resolve(p Policy) (layout, error) {
	switch p.Mode {
	case ReadOnly, WorkspaceWrite:
	case "":
		return layout{}, errors.New("sandbox: policy has no mode")
	default:
		return layout{}, fmt.Errorf("sandbox: unknown mode %q", p.Mode)
	}
	l := layout{Mode: p.Mode, Network: p.Network}
	for _, root := range p.Roots {
		c, err := canonical(root)
		if err != nil {
			return layout{}, fmt.Errorf("sandbox: root: %w", err)
		}
		for _, sys := range []string{"/proc", "/sys", "/dev"} {
			if within(sys, c) {
				// Binding it would put the host's /proc, /sys and /dev
				// over the sandbox's own, writable (kernel.core_pattern,
				// cgroup.procs): the whole machine.
				return layout{}, fmt.Errorf("sandbox: a root of %s holds %s, and confining a command to it would give it the machine; choose a narrower directory, or full-access: %w", c, sys, ErrUnenforceable)
			}
		}
		l.Roots = appendNew(l.Roots, c)
	}
	ro := p.ReadOnlyPaths
	if !p.WritableGit {
		for _, root := range l.Roots {
			ro = append(ro, gitPaths(root)...)
		}
	}
	for _, path := range ro {
		c, err := canonical(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return layout{}, fmt.Errorf("sandbox: read-only path: %w", err)
		}
		// Inside a writable root it is kept read-only; outside the roots
		// it is bound read-only as well, so that it stays visible where
		// the sandbox masks the host (a worktree's git directory under
		// /tmp).
		if l.writable() || !under(c, l.Roots) {
			l.ReadOnly = appendNew(l.ReadOnly, c)
		}
	}
	for _, path := range p.Hidden {
		c, err := canonical(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return layout{}, fmt.Errorf("sandbox: hidden path: %w", err)
		}
		if c == "/" {
			return layout{}, errors.New("sandbox: hidden path: cannot hide /")
		}
		l.Hidden = appendNew(l.Hidden, c)
	}
	if p.Tmp != "" {
		c, err := canonical(p.Tmp)
		if err != nil {
			return layout{}, fmt.Errorf("sandbox: tmp: %w", err)
		}
		fi, err := os.Stat(c)
		if err != nil {
			return layout{}, fmt.Errorf("sandbox: tmp: %w", err)
		}
		if !fi.IsDir() {
			return layout{}, fmt.Errorf("sandbox: tmp: %s is not a directory", c)
		}
		l.Tmp = c
	}
	return l, nil
}

// gitPaths returns root/.git when it exists and, when it is a file (a
// worktree or a submodule), the git directory it points to and that
// directory's common directory (where a worktree's config and hooks live).
func gitPaths(root string) []string {
	dot := filepath.Join(root, ".git")
	fi, err := os.Lstat(dot)
	if err != nil {
		return nil
	}
	paths := []string{dot}
	if !fi.Mode().IsRegular() {
		return paths
	}
	b, err := os.ReadFile(dot)
	if err != nil {
		return paths
	}
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return paths
	}
	gitdir = strings.TrimSpace(gitdir)
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(root, gitdir)
	}
	paths = append(paths, gitdir)
	if b, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		paths = append(paths, common)
	}
	return paths
}

// canonical returns path, which must be absolute, with every symbolic link
// resolved.
func canonical(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%q is not absolute", path)
	}
	c, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	return c, nil
}

// under reports whether path is one of dirs or beneath one of them.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if within(path, d) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or beneath it; both are clean.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
