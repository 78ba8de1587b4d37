package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Backend names what enforces a policy.
type Backend string

// The backends, best first.
const (
	BackendBwrap    Backend = "bubblewrap"
	BackendLandlock Backend = "landlock"
	BackendNone     Backend = "none"
)

// minLandlockABI is the lowest Landlock ABI the fallback accepts: ABI 3
// (Linux 6.2) is the first that restricts truncate(2), and ABI 2 the first
// that allows renames between writable directories.
const minLandlockABI = 3

// probeTimeout bounds the trial run of bubblewrap.
const probeTimeout = 10 * time.Second

// Report is what the kernel and the machine offer. Probe fills it in; its
// zero value offers nothing, so every confined mode is refused with it.
type Report struct {
	// Bwrap is the path of the bwrap executable; empty when none was found.
	Bwrap string
	// BwrapVersion is what "bwrap --version" printed, such as
	// "bubblewrap 0.8.0".
	BwrapVersion string
	// BwrapWorks reports that a trial sandbox with the namespaces Command
	// asks for ran here.
	BwrapWorks bool
	// BwrapError says why bubblewrap does not work, when Bwrap is set and
	// BwrapWorks is not.
	BwrapError string
	// Landlock is the kernel's Landlock ABI version; zero means none.
	Landlock int
	// Seccomp reports that seccomp filters are available, on an
	// architecture the Landlock backend has a filter for.
	Seccomp bool
	// Executable is vigil's own executable, which the Landlock backend
	// re-executes; empty disables that backend.
	Executable string
}

// Probe finds out what this machine offers: it looks for bwrap on PATH (and
// in /usr/bin), runs a trial sandbox with it, asks the kernel for its
// Landlock ABI and checks for seccomp. It takes a few milliseconds; call it
// once at start-up and log Report.String.
func Probe(ctx context.Context) Report {
	var r Report
	if exe, err := os.Executable(); err == nil {
		r.Executable = exe
	}
	r.Landlock = landlockABI()
	r.Seccomp = seccompAvailable()
	path, err := exec.LookPath("bwrap")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/bwrap"); serr != nil {
			return r
		}
		path = "/usr/bin/bwrap"
	}
	r.Bwrap = path
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, path, "--version").Output(); err == nil {
		r.BwrapVersion = strings.TrimSpace(string(out))
	}
	if err := bwrapTrial(ctx, path); err != nil {
		r.BwrapError = err.Error()
	} else {
		r.BwrapWorks = true
	}
	return r
}

// bwrapTrial runs true in the sandbox Command builds for a read-only
// policy, so that a missing namespace or a refused mount shows here, not
// in the first command.
func bwrapTrial(ctx context.Context, bwrap string) error {
	argv := bwrapArgs(bwrap, layout{Mode: ReadOnly}, "/", []string{"true"}, true, -1)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return err
	}
	return nil
}

// landlockABI returns the kernel's Landlock ABI version, or 0.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// seccompAvailable reports whether the kernel has seccomp filters and the
// package has a filter for this architecture.
func seccompAvailable() bool {
	if _, ok := auditArch(); !ok {
		return false
	}
	// PR_GET_SECCOMP fails with EINVAL on a kernel without seccomp.
	_, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	return err == nil
}

// Backend returns the backend that confines commands under r: bubblewrap
// when it works, else Landlock when the kernel's ABI is recent enough and
// vigil's executable is known, else none.
func (r Report) Backend() Backend {
	switch {
	case r.Bwrap != "" && r.BwrapWorks:
		return BackendBwrap
	case r.Landlock >= minLandlockABI && r.Executable != "":
		return BackendLandlock
	}
	return BackendNone
}

// Check returns nil when mode m can be enforced under r, and otherwise an
// error wrapping ErrUnavailable. A policy can still be refused by Wrap for
// one of its parts (ErrUnenforceable).
func (r Report) Check(m Mode) error {
	if m == FullAccess || r.Backend() != BackendNone {
		return nil
	}
	return r.unavailable(m)
}

func (r Report) unavailable(m Mode) error {
	return fmt.Errorf("sandbox: %s refused: %w (%s)", m, ErrUnavailable, strings.TrimPrefix(r.String(), "sandbox: "))
}

// String is one sentence for start-up logs and status: what is available,
// which backend confines commands, and what is refused or weaker.
func (r Report) String() string {
	var have []string
	if r.BwrapWorks {
		have = append(have, r.bwrapName())
	}
	if r.Landlock > 0 {
		have = append(have, fmt.Sprintf("landlock ABI %d", r.Landlock))
	}
	if r.Seccomp {
		have = append(have, "seccomp")
	}
	var why string
	switch {
	case r.Bwrap == "":
		why = "bubblewrap not installed"
	case !r.BwrapWorks:
		why = fmt.Sprintf("%s does not work here: %s", r.bwrapName(), r.BwrapError)
	}
	switch r.Backend() {
	case BackendBwrap:
		return fmt.Sprintf("sandbox: %s; commands run under bubblewrap; read-only and workspace-write available", strings.Join(have, " + "))
	case BackendLandlock:
		return fmt.Sprintf("sandbox: %s (%s); commands run under landlock, which is weaker: "+
			"no read-only .git or hidden path inside a writable root (such policies are refused), no private /tmp, "+
			"no protection of file modes outside the roots, no PID namespace; read-only and workspace-write available",
			strings.Join(have, " + "), why)
	}
	ll := "no landlock"
	switch {
	case r.Landlock >= minLandlockABI:
		ll = fmt.Sprintf("landlock ABI %d but vigil's executable is unknown", r.Landlock)
	case r.Landlock > 0:
		ll = fmt.Sprintf("landlock ABI %d, older than %d", r.Landlock, minLandlockABI)
	}
	return fmt.Sprintf("sandbox: NONE — %s and %s; read-only and workspace-write refused", why, ll)
}

func (r Report) bwrapName() string {
	if r.BwrapVersion != "" {
		return r.BwrapVersion
	}
	return "bubblewrap"
}

// errNoSeccomp explains a refused network restriction.
var errNoSeccomp = errors.New("network off needs seccomp or landlock ABI 10")
