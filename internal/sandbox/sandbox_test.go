package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// TestMain lets the test binary act as vigil's Landlock helper: the
// Landlock backend re-executes os.Executable, which here is this binary.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}

// probe returns what this machine offers.
func probe(t testing.TB) sandbox.Report {
	t.Helper()
	return sandbox.Probe(context.Background())
}

// strict reports whether a missing backend fails the test instead of
// skipping it.
func strict() bool { return os.Getenv("VIGIL_TEST_STRICT") == "1" }

// skipOrFail skips the test, loudly, or fails it under VIGIL_TEST_STRICT=1.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if strict() {
		t.Fatalf("VIGIL_TEST_STRICT=1: "+format, args...)
	}
	t.Skipf("SKIPPED, SANDBOX NOT TESTED: "+format, args...)
}

// bwrapReport returns the probed report, or skips when bubblewrap does not
// work here.
func bwrapReport(t testing.TB) sandbox.Report {
	t.Helper()
	r := probe(t)
	if r.Backend() != sandbox.BackendBwrap {
		skipOrFail(t, "bubblewrap does not work here (apt-get install bubblewrap): %s", r)
	}
	return r
}

// landlockReport returns a report without bubblewrap, which forces the
// Landlock backend, or skips when the kernel has no usable Landlock.
func landlockReport(t testing.TB) sandbox.Report {
	t.Helper()
	r := probe(t)
	r.Bwrap, r.BwrapVersion, r.BwrapWorks, r.BwrapError = "", "", false, ""
	if r.Backend() != sandbox.BackendLandlock {
		skipOrFail(t, "no usable landlock here: %s", r)
	}
	return r
}

// testBase returns a fresh directory for a fixture, outside /tmp: the
// sandbox puts a private directory over /tmp, so a sentinel under /tmp
// would be out of sight and every attempt on it would "hold" for the
// wrong reason.
func testBase(t testing.TB) string {
	t.Helper()
	parent := os.Getenv("VIGIL_SANDBOX_TESTDIR")
	if parent == "" {
		parent = "/var/tmp"
	}
	if real, err := filepath.EvalSymlinks(parent); err != nil || real == "/tmp" || strings.HasPrefix(real, "/tmp/") {
		t.Fatalf("test directory %s: must exist outside /tmp (set VIGIL_SANDBOX_TESTDIR)", parent)
	}
	dir, err := os.MkdirTemp(parent, "vigil-sandbox-test-")
	if err != nil {
		t.Fatalf("test directory: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove test directory: %v", err)
		}
	})
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

func mkdir(t testing.TB, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// baseEnv is the environment of the commands the tests run.
func baseEnv(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=C"}
	if v := os.Getenv("PYENV_ROOT"); v != "" {
		env = append(env, "PYENV_ROOT="+v)
	}
	return append(env, extra...)
}

// runIn runs script under bash in the sandbox and returns its combined
// output and exit status.
func runIn(t testing.TB, p sandbox.Policy, r sandbox.Report, dir string, env []string, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = env
	if err := sandbox.Wrap(cmd, p, r); err != nil {
		t.Fatalf("wrap: %v", err)
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("run %q: %v", script, err)
	return "", 0
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"read-only", "workspace-write", "full-access"} {
		m, err := sandbox.ParseMode(s)
		if err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := sandbox.ParseMode("workspace"); err == nil {
		t.Error("ParseMode(workspace): no error")
	}
}

func TestProbe(t *testing.T) {
	r := probe(t)
	t.Logf("probe: %+v", r)
	t.Logf("%s", r)
	if !strings.HasPrefix(r.String(), "sandbox: ") {
		t.Errorf("sentence %q does not start with \"sandbox: \"", r)
	}
	if r.Executable == "" {
		t.Error("no executable")
	}
	if r.Bwrap != "" && !r.BwrapWorks && r.BwrapError == "" {
		t.Error("bwrap found, not working, and no reason given")
	}
	if strict() && r.Backend() != sandbox.BackendBwrap {
		t.Errorf("VIGIL_TEST_STRICT=1 and the backend is %s: %s", r.Backend(), r)
	}

	var none sandbox.Report
	if none.Backend() != sandbox.BackendNone {
		t.Errorf("zero report backend = %s", none.Backend())
	}
	if !strings.Contains(none.String(), "NONE") || !strings.Contains(none.String(), "refused") {
		t.Errorf("zero report sentence = %q", none)
	}
	for _, m := range []sandbox.Mode{sandbox.ReadOnly, sandbox.WorkspaceWrite} {
		if err := none.Check(m); !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("zero report Check(%s) = %v", m, err)
		}
		if _, err := sandbox.Command(sandbox.Policy{Mode: m}, none, "/", []string{"true"}); !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("zero report Command(%s) = %v, want ErrUnavailable", m, err)
		}
	}
	if err := none.Check(sandbox.FullAccess); err != nil {
		t.Errorf("zero report Check(full-access) = %v", err)
	}
	ll := sandbox.Report{Landlock: 7, Seccomp: true, Executable: "/usr/bin/vigil"}
	if ll.Backend() != sandbox.BackendLandlock || !strings.Contains(ll.String(), "landlock ABI 7") {
		t.Errorf("landlock-only report: %s, %q", ll.Backend(), ll)
	}
	old := sandbox.Report{Landlock: 2, Executable: "/usr/bin/vigil"}
	if old.Backend() != sandbox.BackendNone {
		t.Errorf("landlock ABI 2 report backend = %s", old.Backend())
	}
}

// TestCommandArgs checks the bubblewrap argv for a policy with every kind
// of path, and that full access is left alone.
func TestCommandArgs(t *testing.T) {
	base := testBase(t)
	w := filepath.Join(base, "w")
	mkdir(t, filepath.Join(w, ".git"))
	mkdir(t, filepath.Join(w, "secrets"))
	writeFile(t, filepath.Join(w, ".env"), "X=1\n")
	tmp := filepath.Join(base, "tmp")
	mkdir(t, tmp)
	if err := os.Symlink(w, filepath.Join(base, "wlink")); err != nil {
		t.Fatal(err)
	}
	r := sandbox.Report{Bwrap: "/usr/bin/bwrap", BwrapWorks: true}
	p := sandbox.Policy{
		Mode:   sandbox.WorkspaceWrite,
		Roots:  []string{filepath.Join(base, "wlink")}, // resolved to w
		Hidden: []string{filepath.Join(w, "secrets"), filepath.Join(w, ".env"), filepath.Join(base, "missing")},
		Tmp:    tmp,
	}
	got, err := sandbox.Command(p, r, w, []string{"make", "test"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/bin/bwrap",
		"--die-with-parent", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL", "--unshare-net", "--new-session",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--ro-bind-try", "/proc/bus", "/proc/bus", "--ro-bind-try", "/proc/fs", "/proc/fs",
		"--ro-bind-try", "/proc/irq", "/proc/irq", "--ro-bind-try", "/proc/sys", "/proc/sys",
		"--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"}
	if exists("/run") {
		want = append(want, "--tmpfs", "/run")
	}
	want = append(want,
		"--bind", tmp, "/tmp",
		"--bind", w, w,
		"--ro-bind", w+"/.git", w+"/.git",
		"--tmpfs", w+"/secrets",
		"--ro-bind", "/dev/null", w+"/.env",
		"--remount-ro", w+"/secrets",
		"--setenv", "TMPDIR", "/tmp", "--chdir", w, "--", "make", "test")
	if !slices.Equal(got, want) {
		t.Errorf("argv\n got %q\nwant %q", got, want)
	}

	p.Network = true
	p.WritableGit = true
	got, err = sandbox.Command(p, r, w, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, "--unshare-net") || slices.Contains(got, w+"/.git") {
		t.Errorf("network and writable .git: argv %q", got)
	}

	p.Mode = sandbox.ReadOnly
	got, err = sandbox.Command(p, r, w, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(got, w); i < 1 || got[i-1] != "--ro-bind" {
		t.Errorf("read-only: root not bound read-only: %q", got)
	}

	full := sandbox.Policy{Mode: sandbox.FullAccess}
	got, err = sandbox.Command(full, r, w, []string{"make", "test"})
	if err != nil || !slices.Equal(got, []string{"make", "test"}) {
		t.Errorf("full access: %q, %v", got, err)
	}
	full.Contain = true
	got, err = sandbox.Command(full, r, w, []string{"make"})
	want = []string{"/usr/bin/bwrap", "--die-with-parent", "--unshare-pid", "--new-session",
		"--dev-bind", "/", "/", "--proc", "/proc", "--chdir", w, "--", "make"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("full access, contained:\n got %q, %v\nwant %q", got, err, want)
	}

	for name, bad := range map[string]sandbox.Policy{
		"no mode":       {Roots: []string{w}},
		"relative root": {Mode: sandbox.WorkspaceWrite, Roots: []string{"w"}},
		"missing root":  {Mode: sandbox.WorkspaceWrite, Roots: []string{filepath.Join(base, "nope")}},
		"tmp is a file": {Mode: sandbox.WorkspaceWrite, Roots: []string{w}, Tmp: filepath.Join(w, ".env")},
		"hide /":        {Mode: sandbox.ReadOnly, Hidden: []string{"/"}},
	} {
		if _, err := sandbox.Command(bad, r, w, []string{"true"}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestGitWorktree checks that a worktree's git directory and the main
// repository's, where its config and hooks live, stay read-only.
func TestGitWorktree(t *testing.T) {
	r := bwrapReport(t)
	if _, err := exec.LookPath("git"); err != nil {
		skipOrFail(t, "git is not installed")
	}
	base := testBase(t)
	main, wt := filepath.Join(base, "main"), filepath.Join(base, "wt")
	gitWorktree(t, main, wt)
	config := readFile(t, filepath.Join(main, ".git", "config"))

	p := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Roots: []string{wt, main}}
	argv, err := sandbox.Command(p, r, wt, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range []string{filepath.Join(wt, ".git"), filepath.Join(main, ".git"), filepath.Join(main, ".git", "worktrees", "wt")} {
		if i := slices.Index(argv, ro); i < 1 || argv[i-1] != "--ro-bind" {
			t.Errorf("%s is not bound read-only: %q", ro, argv)
		}
	}
	out, code := runIn(t, p, r, wt, baseEnv(), `git status --short && git config core.hooksPath /tmp/x`)
	if code == 0 || readFile(t, filepath.Join(main, ".git", "config")) != config {
		t.Errorf("the worktree changed the main repository's config: exit %d: %s", code, out)
	}
}

// TestWrapKeepsGroup checks that Wrap starts the sandbox in a session of
// its own, whose id is the process group id.
func TestWrapKeepsGroup(t *testing.T) {
	r := probe(t)
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := sandbox.Wrap(cmd, sandbox.Policy{Mode: sandbox.ReadOnly}, sandbox.Report{Bwrap: "/usr/bin/bwrap", BwrapWorks: true}); err != nil {
		t.Fatal(err)
	}
	a := cmd.SysProcAttr
	if !a.Setsid || a.Setpgid || a.Pdeathsig != syscall.SIGKILL {
		t.Errorf("attributes after Wrap: %+v", a)
	}
	if slices.Contains(cmd.Args, "--new-session") {
		t.Errorf("Wrap passes --new-session: %q", cmd.Args)
	}
	if cmd.Path != "/usr/bin/bwrap" || cmd.Args[len(cmd.Args)-1] != "/bin/true" {
		t.Errorf("path %q args %q", cmd.Path, cmd.Args)
	}
	sc := exec.Command("/bin/true")
	sc.ExtraFiles = []*os.File{os.Stdin}
	if err := sandbox.Wrap(sc, sandbox.Policy{Mode: sandbox.ReadOnly}, sandbox.Report{Bwrap: "/usr/bin/bwrap", BwrapWorks: true, Seccomp: true}); err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(sc.Args, "--seccomp"); i < 0 || sc.Args[i+1] != "4" || len(sc.ExtraFiles) != 2 {
		t.Errorf("seccomp: args %q, %d extra files", sc.Args, len(sc.ExtraFiles))
	} else {
		sc.ExtraFiles[1].Close()
	}
	tty := exec.Command("/bin/true")
	tty.SysProcAttr = &syscall.SysProcAttr{Setctty: true}
	if err := sandbox.Wrap(tty, sandbox.Policy{Mode: sandbox.ReadOnly}, r); err == nil {
		t.Error("Wrap accepted Setctty")
	}
}

// TestReadOnly checks that read-only mode lets a command read the root and
// write only the private tmp.
func TestReadOnly(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b.name), func(t *testing.T) {
			base := testBase(t)
			w, tmp := filepath.Join(base, "w"), filepath.Join(base, "tmp")
			writeFile(t, filepath.Join(w, "a.txt"), "hello\n")
			mkdir(t, tmp)
			p := sandbox.Policy{Mode: sandbox.ReadOnly, Roots: []string{w}, Tmp: tmp}
			out, code := runIn(t, p, b.report, w, baseEnv(), `cat a.txt && echo x > "$TMPDIR/t" && echo y > a.txt`)
			if code == 0 || !strings.Contains(out, "hello") {
				t.Errorf("exit %d, output %q: want hello and a failed write", code, out)
			}
			if got := readFile(t, filepath.Join(w, "a.txt")); got != "hello\n" {
				t.Errorf("a.txt = %q", got)
			}
			if !exists(filepath.Join(tmp, "t")) {
				t.Error("the private tmp was not writable")
			}
			if _, code := runIn(t, p, b.report, w, baseEnv(), `touch new`); code == 0 || exists(filepath.Join(w, "new")) {
				t.Error("read-only mode created a file in the root")
			}
		})
	}
}

// TestRootUnderTmp checks a root and a private tmp that both live under
// the host's /tmp, which the sandbox replaces: the root stays visible and
// writable at its own path.
func TestRootUnderTmp(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b.name), func(t *testing.T) {
			dir := t.TempDir()
			w, tmp := filepath.Join(dir, "w"), filepath.Join(dir, "tmp")
			mkdir(t, w)
			mkdir(t, tmp)
			p := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Roots: []string{w}, Tmp: tmp}
			if out, code := runIn(t, p, b.report, w, baseEnv(), `echo hi > f && cat f && echo t > "$TMPDIR/x"`); code != 0 || out != "hi\n" {
				t.Fatalf("exit %d: %q", code, out)
			}
			if got := readFile(t, filepath.Join(w, "f")); got != "hi\n" {
				t.Errorf("f = %q", got)
			}
			if got := readFile(t, filepath.Join(tmp, "x")); got != "t\n" {
				t.Errorf("tmp/x = %q", got)
			}
		})
	}
}

// TestFullAccess checks that full access writes outside any root.
func TestFullAccess(t *testing.T) {
	r := probe(t)
	base := testBase(t)
	out := filepath.Join(base, "outside")
	for _, contain := range []bool{false, true} {
		p := sandbox.Policy{Mode: sandbox.FullAccess, Contain: contain}
		if o, code := runIn(t, p, r, base, baseEnv("OUT="+out), `echo yes > "$OUT"`); code != 0 {
			t.Fatalf("contain=%v: exit %d: %s", contain, code, o)
		}
		if got := readFile(t, out); got != "yes\n" {
			t.Errorf("contain=%v: outside = %q", contain, got)
		}
		os.Remove(out)
	}
}

// TestContainment checks that no process started in the sandbox outlives
// it: a background process (double-forked into a session of its own, too)
// dies when the command ends, and everything dies when the sandbox's
// launcher is killed. Each process holds the write end of a pipe; the read
// end sees EOF once the last holder is gone.
func TestContainment(t *testing.T) {
	r := bwrapReport(t)
	base := testBase(t)
	policies := map[string]sandbox.Policy{
		"workspace-write":       {Mode: sandbox.WorkspaceWrite, Roots: []string{base}},
		"full-access contained": {Mode: sandbox.FullAccess, Contain: true},
	}
	for name, p := range policies {
		t.Run(name+"/command ends", func(t *testing.T) {
			cmd, rd, wr := holdPipe(t, p, r, base, `(setsid sleep 300 >/dev/null 2>&1 &) ; sleep 300 >/dev/null 2>&1 & echo started`)
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), "started") {
				t.Fatalf("%v: %s", err, out)
			}
			waitEOF(t, rd, wr)
		})
		t.Run(name+"/launcher killed", func(t *testing.T) {
			cmd, rd, wr := holdPipe(t, p, r, base, `(setsid sleep 300 >/dev/null 2>&1 &) ; sleep 300 >/dev/null 2>&1 & echo started; exec sleep 300`)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line := make([]byte, len("started"))
			if _, err := io.ReadFull(stdout, line); err != nil {
				t.Fatalf("read: %v", err)
			}
			if err := cmd.Process.Kill(); err != nil { // what kill -9 of vigil does to its child
				t.Fatal(err)
			}
			cmd.Wait()
			waitEOF(t, rd, wr)
		})
	}
}

// holdPipe returns a wrapped command whose processes inherit the write end
// of a pipe as fd 3, and both ends.
func holdPipe(t *testing.T, p sandbox.Policy, r sandbox.Report, dir, script string) (cmd *exec.Cmd, rd, wr *os.File) {
	t.Helper()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close(); wr.Close() })
	cmd = exec.Command("/bin/bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = baseEnv()
	cmd.ExtraFiles = []*os.File{wr}
	if err := sandbox.Wrap(cmd, p, r); err != nil {
		t.Fatal(err)
	}
	return cmd, rd, wr
}

// waitEOF closes the test's own write end, once the command has started,
// and waits, with a deadline, for every other holder to be gone.
func waitEOF(t *testing.T, rd, wr *os.File) {
	t.Helper()
	wr.Close()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, rd)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a process of the sandbox outlived it (the pipe is still held)")
	}
}

// TestLandlockRefusesSubpaths checks that the Landlock backend refuses,
// rather than ignores, a read-only .git or a hidden path inside a writable
// root, and accepts them in read-only mode.
func TestLandlockRefusesSubpaths(t *testing.T) {
	r := sandbox.Report{Landlock: 7, Seccomp: true, Executable: "/usr/bin/vigil"}
	base := testBase(t)
	w := filepath.Join(base, "w")
	mkdir(t, filepath.Join(w, ".git"))
	mkdir(t, filepath.Join(w, "secrets"))
	for name, p := range map[string]sandbox.Policy{
		".git":   {Mode: sandbox.WorkspaceWrite, Roots: []string{w}},
		"hidden": {Mode: sandbox.WorkspaceWrite, Roots: []string{w}, WritableGit: true, Hidden: []string{filepath.Join(w, "secrets")}},
	} {
		if _, err := sandbox.Command(p, r, w, []string{"true"}); !errors.Is(err, sandbox.ErrUnenforceable) {
			t.Errorf("%s: err = %v, want ErrUnenforceable", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	ok := sandbox.Policy{Mode: sandbox.ReadOnly, Roots: []string{w}, Hidden: []string{filepath.Join(w, "secrets")}}
	if _, err := sandbox.Command(ok, r, w, []string{"true"}); err != nil {
		t.Errorf("read-only with hidden path: %v", err)
	}
	noNet := sandbox.Report{Landlock: 7, Executable: "/usr/bin/vigil"} // no seccomp
	if _, err := sandbox.Command(sandbox.Policy{Mode: sandbox.ReadOnly}, noNet, w, []string{"true"}); !errors.Is(err, sandbox.ErrUnenforceable) {
		t.Errorf("no network without seccomp at ABI 7: err = %v", err)
	}
}

// TestLandlockHelperErrors checks that the helper fails loudly.
func TestLandlockHelperErrors(t *testing.T) {
	r := landlockReport(t)
	out, code := runIn(t, sandbox.Policy{Mode: sandbox.ReadOnly}, r, "/", baseEnv(), "exit 0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	cmd := exec.Command(r.Executable, "__vigil-sandbox", `{"mode":"read-only","bogus":1}`, "--", "true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 126 || !strings.Contains(stderr.String(), "vigil sandbox: decode policy") {
		t.Errorf("bad policy: %v, %q", err, stderr.String())
	}
}

// backend is one way to run the suites.
type backend struct {
	name   sandbox.Backend
	report sandbox.Report
}

// backends returns the backends to test on this machine: bubblewrap, and
// Landlock forced by a report without bubblewrap. A missing one is
// reported (or fails the test under VIGIL_TEST_STRICT=1).
func backends(t *testing.T) []backend {
	t.Helper()
	r := probe(t)
	var bs []backend
	if r.Backend() == sandbox.BackendBwrap {
		bs = append(bs, backend{sandbox.BackendBwrap, r})
	} else if strict() {
		t.Fatalf("VIGIL_TEST_STRICT=1: bubblewrap does not work here: %s", r)
	} else {
		t.Logf("NOT TESTED: bubblewrap does not work here: %s", r)
	}
	ll := r
	ll.Bwrap, ll.BwrapVersion, ll.BwrapWorks, ll.BwrapError = "", "", false, ""
	if ll.Backend() == sandbox.BackendLandlock {
		bs = append(bs, backend{sandbox.BackendLandlock, ll})
	} else if strict() {
		t.Fatalf("VIGIL_TEST_STRICT=1: no usable landlock here: %s", r)
	} else {
		t.Logf("NOT TESTED: no usable landlock here: %s", r)
	}
	if len(bs) == 0 {
		t.Skip("SKIPPED, SANDBOX NOT TESTED: neither bubblewrap nor landlock works here")
	}
	return bs
}

// A root of / would bind the host's /proc, /sys and /dev over the
// sandbox's own, writable: it is refused rather than confined in name only.
func TestRootOfSlashRefused(t *testing.T) {
	r := bwrapReport(t)
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.ReadOnly} {
		_, err := sandbox.Command(sandbox.Policy{Mode: mode, Roots: []string{"/"}}, r, "/", []string{"true"})
		if !errors.Is(err, sandbox.ErrUnenforceable) || !strings.Contains(err.Error(), "/proc") {
			t.Errorf("%s with root /: %v; want it refused, naming /proc", mode, err)
		}
	}
}

// A worktree whose main repository lies outside the roots, under /tmp
// (which the sandbox masks), still finds its git directory, read-only.
func TestGitWorktreeOutsideRoots(t *testing.T) {
	r := bwrapReport(t)
	if _, err := exec.LookPath("git"); err != nil {
		skipOrFail(t, "git is not installed")
	}
	base := t.TempDir() // under /tmp
	main, wt := filepath.Join(base, "main"), filepath.Join(base, "wt")
	gitWorktree(t, main, wt)
	config := readFile(t, filepath.Join(main, ".git", "config"))
	p := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Roots: []string{wt}}
	if out, code := runIn(t, p, r, wt, baseEnv(), `git status --short && echo STATUS-OK`); code != 0 || !strings.Contains(out, "STATUS-OK") {
		t.Fatalf("git status in a worktree whose repository is outside the roots: exit %d: %s", code, out)
	}
	if out, code := runIn(t, p, r, wt, baseEnv(), `git config core.hooksPath /tmp/x`); code == 0 || readFile(t, filepath.Join(main, ".git", "config")) != config {
		t.Errorf("the worktree changed the main repository's config: exit %d: %s", code, out)
	}
}

// gitWorktree makes a repository at main with one commit and a worktree
// of it at wt.
func gitWorktree(t *testing.T, main, wt string) {
	t.Helper()
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v: %s", args, err, out)
		}
	}
	mkdir(t, main)
	git(main, "init", "-q")
	git(main, "commit", "-q", "--allow-empty", "-m", "first")
	git(main, "worktree", "add", "-q", wt)
}

// TestLandlockHelperNotRun: a process started as the Landlock helper that
// ran its own main instead (a test binary without sandbox.Main in its
// TestMain runs its tests) starts no helper of its own; each would start
// the binary again, without end.
func TestLandlockHelperNotRun(t *testing.T) {
	r := sandbox.Report{Landlock: 7, Seccomp: true, Executable: "/usr/bin/vigil"}
	p := sandbox.Policy{Mode: sandbox.ReadOnly}
	if _, err := sandbox.Command(p, r, "/", []string{"true"}); err != nil {
		t.Fatalf("as vigil: %v", err)
	}
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	os.Args = []string{args[0], "__vigil-sandbox", `{"mode":"read-only"}`, "--", "true"}
	if argv, err := sandbox.Command(p, r, "/", []string{"true"}); err == nil || !strings.Contains(err.Error(), "did not run it") {
		t.Fatalf("as a helper that did not run: %v, %v; want a refusal", argv, err)
	}
}
