package sandbox

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// mountKind is one bubblewrap mount operation.
type mountKind int

// The kinds in the order they are applied to one path: a later one wins.
const (
	mountTmpfs    mountKind = iota // an empty writable tmpfs
	mountBind                      // src bound writable at path
	mountROBind                    // path bound read-only onto itself
	mountHideDir                   // an empty tmpfs, made read-only at the end
	mountHideFile                  // /dev/null bound read-only over the file
)

type mount struct {
	kind mountKind
	path string
	src  string // mountBind only; empty means path itself
}

// bwrapArgs returns the bubblewrap argv for layout l.
//
// The order matters. bubblewrap applies its options in order, and a mount
// hides what an earlier one put at or under its path, so the system goes
// first (read-only), then the private /run and /tmp, then the roots and the
// paths inside them sorted by depth, parents before children. Hidden
// directories are made read-only only at the end, after any root below
// them has been given its mount point.
func bwrapArgs(bwrap string, l layout, dir string, argv []string, newSession bool, seccompFD int) []string {
	a := []string{bwrap,
		"--die-with-parent", // the kernel kills the sandbox when its parent (the forking thread) dies
		"--unshare-pid",     // and every process in it when its init dies; no view of vigil's processes
		"--unshare-ipc",
		"--cap-drop", "ALL", // root keeps no capability inside, so it cannot remount or unmount
	}
	if !l.Network {
		a = append(a, "--unshare-net")
	}
	if newSession {
		a = append(a, "--new-session")
	}
	if seccompFD >= 0 {
		a = append(a, "--seccomp", strconv.Itoa(seccompFD))
	}
	a = append(a, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
	// A process with uid 0 needs no capability to write the files of
	// these (sysctls such as kernel.core_pattern, sysrq), and bubblewrap
	// running as root does not cover them, so they are bound read-only
	// here as Docker does.
	for _, p := range procReadOnly {
		a = append(a, "--ro-bind-try", p, p)
	}

	var ms []mount
	// /run holds the host's service sockets (databases, docker, systemd,
	// the user's agents). A read-only mount does not stop connect(2) on a
	// socket, so /run is replaced with an empty tmpfs.
	if fi, err := os.Lstat("/run"); err == nil && fi.IsDir() {
		ms = append(ms, mount{kind: mountTmpfs, path: "/run"})
		if l.Network {
			if target, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && within(target, "/run") {
				ms = append(ms, mount{kind: mountROBind, path: target})
			}
		}
	}
	if l.Tmp != "" {
		ms = append(ms, mount{kind: mountBind, path: "/tmp", src: l.Tmp})
	} else {
		ms = append(ms, mount{kind: mountTmpfs, path: "/tmp"})
	}
	for _, root := range l.Roots {
		if l.writable() {
			ms = append(ms, mount{kind: mountBind, path: root})
		} else {
			// Already read-only, but bound anyway so that a root under
			// /tmp or /run stays visible.
			ms = append(ms, mount{kind: mountROBind, path: root})
		}
	}
	for _, p := range l.ReadOnly {
		ms = append(ms, mount{kind: mountROBind, path: p})
	}
	for _, p := range l.Hidden {
		if (within(p, "/tmp") || within(p, "/run")) && !under(p, l.Roots) {
			continue // already out of sight; a mount point would litter Tmp
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			ms = append(ms, mount{kind: mountHideDir, path: p})
		} else {
			ms = append(ms, mount{kind: mountHideFile, path: p})
		}
	}
	slices.SortStableFunc(ms, func(x, y mount) int {
		return cmp.Or(
			cmp.Compare(depth(x.path), depth(y.path)),
			cmp.Compare(x.kind, y.kind),
			strings.Compare(x.path, y.path))
	})
	var remount []string
	for _, m := range ms {
		switch m.kind {
		case mountTmpfs:
			a = append(a, "--tmpfs", m.path)
		case mountBind:
			a = append(a, "--bind", cmp.Or(m.src, m.path), m.path)
		case mountROBind:
			a = append(a, "--ro-bind", m.path, m.path)
		case mountHideDir:
			a = append(a, "--tmpfs", m.path)
			remount = append(remount, m.path)
		case mountHideFile:
			a = append(a, "--ro-bind", "/dev/null", m.path)
		}
	}
	for _, p := range remount {
		a = append(a, "--remount-ro", p)
	}
	a = append(a, "--setenv", "TMPDIR", "/tmp", "--chdir", dir, "--")
	return append(a, argv...)
}

// filterFile returns the read end of a pipe that holds the seccomp filter
// for bubblewrap's --seccomp: the namespaces already cut the network, so
// the filter keeps only the rules on terminals, io_uring and setuid modes.
func filterFile() (*os.File, error) {
	filter, err := seccompFilter(true, true)
	if err != nil {
		return nil, err
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&filter[0])), len(filter)*int(unsafe.Sizeof(filter[0])))
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	defer w.Close()
	if _, err := w.Write(b); err != nil { // far less than a pipe's buffer
		r.Close()
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	return r, nil
}

// containArgs returns the bubblewrap argv that runs argv with full access
// but in a PID namespace of its own, which the kernel empties when the
// command's parent dies.
func containArgs(bwrap, dir string, argv []string, newSession bool) []string {
	a := []string{bwrap, "--die-with-parent", "--unshare-pid"}
	if newSession {
		a = append(a, "--new-session")
	}
	a = append(a, "--dev-bind", "/", "/", "--proc", "/proc", "--chdir", dir, "--")
	return append(a, argv...)
}

// procReadOnly are the parts of /proc that stay read-only in the sandbox.
var procReadOnly = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// depth counts the components of a clean absolute path; "/" has 0.
func depth(path string) int {
	if path == "/" {
		return 0
	}
	return strings.Count(path, "/")
}
