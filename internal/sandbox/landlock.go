package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// helperArg is the argv[1] by which vigil, re-executed by the Landlock
// backend, knows that it is to confine itself and execute a command:
//
//	vigil __vigil-sandbox <layout as JSON> -- argv...
//
// An argument rather than an environment variable, so that nothing needs
// taking out of the command's environment.
const helperArg = "__vigil-sandbox"

// helperFailed is the exit status of a helper that could not confine
// itself or execute the command; the reason is on its stderr.
const helperFailed = 126

// Main runs the Landlock helper when this process was started as one, and
// then never returns; otherwise it returns at once. Call it first thing in
// main, and in TestMain of a package whose tests start sandboxed commands
// (the test binary is then the executable that re-executes itself).
//
// The helper reads only os.Args; it keeps no state.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != helperArg {
		return
	}
	err := helper(os.Args[2:])
	fmt.Fprintf(os.Stderr, "vigil sandbox: %v\n", err)
	os.Exit(helperFailed)
}

// errHelperSkipped is landlockArgs' refusal in a process that was started
// as the helper but did not run it.
var errHelperSkipped = errors.New("sandbox: this process was started as the Landlock helper but did not run it " +
	"(its main, or TestMain, must call sandbox.Main first); it starts no helper of its own")

// landlockArgs returns the helper argv for layout l. A process started as
// the helper that went on with its own main instead (a test binary whose
// TestMain does not call Main runs its tests) gets errHelperSkipped: its
// commands would start it again, and again, without end.
func landlockArgs(exe string, l layout, argv []string) ([]string, error) {
	if len(os.Args) > 1 && os.Args[1] == helperArg {
		return nil, errHelperSkipped
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode policy: %w", err)
	}
	return append([]string{exe, helperArg, string(b), "--"}, argv...), nil
}

// landlockCheck refuses what Landlock cannot enforce. Landlock only grants
// access to whole hierarchies, so a directory that is writable cannot keep
// a read-only or unreadable part: refusing is honest, pretending is not.
func landlockCheck(l layout, r Report) error {
	if l.writable() {
		for _, p := range slices.Concat(l.ReadOnly, l.Hidden) {
			if !under(p, l.Roots) {
				continue
			}
			what := "read-only"
			if slices.Contains(l.Hidden, p) {
				what = "hidden"
			}
			return fmt.Errorf("sandbox: landlock cannot keep %s %s inside a writable root (bubblewrap can; or leave it out of the policy): %w",
				p, what, ErrUnenforceable)
		}
	}
	if !l.Network && !r.Seccomp && r.Landlock < 10 {
		return fmt.Errorf("sandbox: %w: %w", errNoSeccomp, ErrUnenforceable)
	}
	return nil
}

// Landlock access rights. A rule on a directory grants them for everything
// beneath it; a rule on a file may only carry the file rights.
const (
	accessRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR

	accessFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV | unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX

	accessDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
)

// handledFS returns the file-system rights the kernel with Landlock ABI abi
// knows; the helper handles (denies unless granted) all of them.
func handledFS(abi int) uint64 {
	var a uint64 = (1 << 13) - 1 // ABI 1: execute .. make_sym
	if abi >= 2 {
		a |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		a |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		a |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 9 {
		a |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	return a
}

// handledNet returns the network rights to deny at ABI abi.
func handledNet(abi int) uint64 {
	var a uint64
	if abi >= 4 {
		a |= unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if abi >= 10 {
		a |= unix.LANDLOCK_ACCESS_NET_BIND_UDP | unix.LANDLOCK_ACCESS_NET_CONNECT_SEND_UDP
	}
	return a
}

// scoped returns the IPC scopes to restrict at ABI abi: no signals to, and
// no abstract unix sockets of, processes outside the sandbox.
func scoped(abi int) uint64 {
	if abi >= 6 {
		return unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	return 0
}

// pathRule grants access to the hierarchy at path.
type pathRule struct {
	path   string
	access uint64
}

// rules returns the Landlock rules for l: read everywhere but the hidden
// paths, write (every right) the roots in workspace-write, the tmp
// directory and the harmless devices.
func rules(l layout) []pathRule {
	var rs []pathRule
	full, partial := cover("/", l.Hidden)
	for _, p := range full {
		rs = append(rs, pathRule{p, accessRead})
	}
	for _, p := range partial {
		// An ancestor of a hidden path: its entries may be listed (the
		// names under a hidden directory too), its files are granted one
		// by one.
		rs = append(rs, pathRule{p, unix.LANDLOCK_ACCESS_FS_READ_DIR})
	}
	// Every right but creating device nodes: a block device made in a
	// root would read and write the whole disk.
	var all uint64 = ^uint64(0) &^ (unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR)
	if l.writable() {
		for _, root := range l.Roots {
			rs = append(rs, pathRule{root, all})
		}
	}
	if l.Tmp != "" {
		rs = append(rs, pathRule{l.Tmp, all})
	}
	for _, dev := range []string{"/dev/null", "/dev/zero", "/dev/full"} {
		rs = append(rs, pathRule{dev, accessDevice})
	}
	return rs
}

// cover returns paths whose hierarchies together hold everything under dir
// except the hidden paths (full), and the directories between dir and the
// hidden paths (partial). Symbolic links are skipped: Landlock checks the
// file a link leads to, which has its own rule.
func cover(dir string, hidden []string) (full, partial []string) {
	if slices.Contains(hidden, dir) {
		return nil, nil
	}
	inside := false
	for _, h := range hidden {
		if h != dir && within(h, dir) {
			inside = true
			break
		}
	}
	if !inside {
		return []string{dir}, nil
	}
	partial = []string{dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, partial
	}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 {
			continue
		}
		f, p := cover(filepath.Join(dir, e.Name()), hidden)
		full = append(full, f...)
		partial = append(partial, p...)
	}
	return full, partial
}

// helper confines this process and executes the command; it returns only
// on failure. args are what follows helperArg.
func helper(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return errors.New("usage: __vigil-sandbox POLICY -- COMMAND...")
	}
	var l layout
	dec := json.NewDecoder(bytes.NewReader([]byte(args[0])))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return fmt.Errorf("decode policy: %w", err)
	}
	argv := args[2:]
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	env := os.Environ()
	if l.Tmp != "" {
		env = setEnv(env, "TMPDIR", l.Tmp)
	}
	abi := landlockABI()
	if abi < minLandlockABI {
		return fmt.Errorf("landlock ABI %d, need %d", abi, minLandlockABI)
	}
	var filter []unix.SockFilter
	if seccompAvailable() {
		if filter, err = seccompFilter(l.Network, abi >= 9); err != nil {
			return err
		}
	} else if !l.Network && abi < 10 {
		return errNoSeccomp
	}

	// Landlock and seccomp bind the calling thread and what it executes:
	// the thread stays locked, so nothing else runs on it, until exec.
	runtime.LockOSThread()
	fd, err := ruleset(l, abi)
	if err != nil {
		return err
	}
	if err := dropCaps(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	unix.Close(fd)
	if filter != nil {
		if err := installSeccomp(filter); err != nil {
			return err
		}
	}
	if err := unix.Exec(path, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

// ruleset creates the Landlock ruleset for l at ABI abi.
func ruleset(l layout, abi int) (int, error) {
	fs := handledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs, Scoped: scoped(abi)}
	if !l.Network {
		attr.Handled_access_net = handledNet(abi)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	for _, r := range rules(l) {
		if err := addRule(int(fd), r.path, r.access&fs); err != nil {
			unix.Close(int(fd))
			return -1, err
		}
	}
	return int(fd), nil
}

// addRule grants access beneath path; a missing path is skipped.
func addRule(rulesetFD int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock rule %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock rule %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= accessFile
	}
	if access == 0 {
		return nil
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock rule %s: %w", path, errno)
	}
	return nil
}

// Secure bits (linux/securebits.h).
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// capSetPCap is CAP_SETPCAP.
const capSetPCap = 8

// dropCaps takes every capability from the calling thread and what it
// executes, as bubblewrap's --cap-drop ALL does: Landlock leaves a root
// process the rest of root's powers (chown, mknod, modules, raw devices).
// It does nothing for a process without capabilities.
func dropCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Permitted|data[1].Permitted|data[0].Effective|data[1].Effective == 0 && os.Geteuid() != 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if data[0].Effective&(1<<capSetPCap) == 0 {
		if os.Geteuid() == 0 {
			// Without CAP_SETPCAP root cannot keep exec from giving it
			// the bounding set back.
			return errors.New("drop capabilities: root without CAP_SETPCAP")
		}
	} else {
		bits := secbitNoRoot | secbitNoRootLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
			return fmt.Errorf("set securebits: %w", err)
		}
		for c := 0; c < 64; c++ {
			err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			if err != nil {
				return fmt.Errorf("drop bounding capability %d: %w", c, err)
			}
		}
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// setEnv returns env with name set to value.
func setEnv(env []string, name, value string) []string {
	prefix := name + "="
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return len(kv) >= len(prefix) && kv[:len(prefix)] == prefix })
	return append(out, prefix+value)
}
