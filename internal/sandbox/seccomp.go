package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data: nr (int), arch (u32), ip (u64), then
// six u64 arguments. The low word of an argument comes first on the
// little-endian architectures the filter is built for.
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16
	seccompArg1 = 24
)

// x32Bit marks the x32 system call numbers on amd64.
const x32Bit = 0x40000000

// auditArch returns the seccomp architecture of this build, if the
// package has a filter for it.
func auditArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// seccompFilter returns the filter the Landlock backend installs. It
//
//   - kills a process making a system call of a foreign architecture
//     (i386 or x32 calls on amd64 would dodge the numbers below);
//   - refuses the TIOCSTI and TIOCLINUX ioctls (pushing input into a
//     terminal) and io_uring (its operations bypass this filter);
//   - refuses chmod calls that set the setuid or setgid bit: Landlock does
//     not cover file modes, and a root-owned binary made setuid outside
//     the sandbox would hand root to every local user;
//   - without network, refuses sockets of every family but AF_UNIX, and
//     AF_UNIX too unless allowUnix. Landlock restricts TCP only from ABI 4
//     and UDP only from ABI 10; this covers both, and raw sockets. A unix
//     socket reaches the host's services (a database, docker), and Landlock
//     confines those only from ABI 9.
func seccompFilter(network, allowUnix bool) ([]unix.SockFilter, error) {
	arch, ok := auditArch()
	if !ok {
		return nil, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	var b bpf
	b.stmt(ld, seccompArch)
	b.jump(jeq, arch, "", "kill")
	b.stmt(ld, seccompNr)
	if runtime.GOARCH == "amd64" {
		b.jump(jge, x32Bit, "kill", "")
	}
	b.jump(jeq, unix.SYS_IOCTL, "ioctl", "")
	b.jump(jeq, unix.SYS_IO_URING_SETUP, "eperm", "")
	for _, c := range chmodCalls() {
		b.jump(jeq, c.nr, fmt.Sprintf("mode%d", c.modeArg), "")
	}
	if !network {
		b.jump(jeq, unix.SYS_SOCKET, "socket", "")
	}
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)

	b.label("ioctl")
	b.stmt(ld, seccompArg1) // the tty layer reads the request as an unsigned int
	b.jump(jeq, unix.TIOCSTI, "eperm", "")
	b.jump(jeq, unix.TIOCLINUX, "eperm", "")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)

	for _, arg := range []uint32{1, 2} {
		b.label(fmt.Sprintf("mode%d", arg))
		b.stmt(ld, seccompArg0+8*arg)
		b.jump(jset, unix.S_ISUID|unix.S_ISGID, "eperm", "")
		b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	}

	if !network {
		b.label("socket")
		b.stmt(ld, seccompArg0)
		if allowUnix {
			b.jump(jeq, unix.AF_UNIX, "allow", "")
		}
		b.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EACCES))
	}
	b.label("allow")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	b.label("eperm")
	b.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	b.label("kill")
	b.stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)
	return b.assemble()
}

// chmodCall is a system call that sets a file mode, and the index of its
// mode argument.
type chmodCall struct {
	nr      uint32
	modeArg uint32
}

func chmodCalls() []chmodCall {
	calls := []chmodCall{{unix.SYS_FCHMOD, 1}, {unix.SYS_FCHMODAT, 2}, {unix.SYS_FCHMODAT2, 2}}
	if runtime.GOARCH == "amd64" {
		calls = append(calls, chmodCall{90, 1}) // chmod(2); arm64 has only fchmodat
	}
	return calls
}

// installSeccomp installs filter on the calling thread; no_new_privs must
// be set.
func installSeccomp(filter []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// bpf assembles a classic BPF program with named jump targets.
type bpf struct {
	ins    []unix.SockFilter
	jt, jf []string // per instruction; "" means the next one
	labels map[string]int
}

func (b *bpf) stmt(code uint16, k uint32) { b.jump(code, k, "", "") }

func (b *bpf) jump(code uint16, k uint32, jt, jf string) {
	b.ins = append(b.ins, unix.SockFilter{Code: code, K: k})
	b.jt = append(b.jt, jt)
	b.jf = append(b.jf, jf)
}

func (b *bpf) label(name string) {
	if b.labels == nil {
		b.labels = map[string]int{}
	}
	b.labels[name] = len(b.ins)
}

func (b *bpf) assemble() ([]unix.SockFilter, error) {
	off := func(i int, name string) (uint8, error) {
		if name == "" {
			return 0, nil
		}
		at, ok := b.labels[name]
		if !ok {
			return 0, fmt.Errorf("seccomp: no label %q", name)
		}
		d := at - i - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: jump to %q out of range", name)
		}
		return uint8(d), nil
	}
	out := make([]unix.SockFilter, len(b.ins))
	for i, in := range b.ins {
		var err error
		if in.Jt, err = off(i, b.jt[i]); err != nil {
			return nil, err
		}
		if in.Jf, err = off(i, b.jf[i]); err != nil {
			return nil, err
		}
		out[i] = in
	}
	return out, nil
}
