package sandbox_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// The secrets the fixture hides; no command output may contain them.
const (
	secretOutside = "TOPSECRET-OUTSIDE-7f3a"
	secretInRoot  = "TOPSECRET-INROOT-91c2"
	secretEnv     = "TOPSECRET-ENV-55d0"
	keep          = "keep\n"
)

// fixture is the workspace an escape attempt starts from:
//
//	W/            the session's root, a git repository
//	W/.git/vigil-sentinel
//	W/secrets/key hidden (bubblewrap only: Landlock refuses it)
//	W/link        -> S
//	W/gitlink     -> W/.git
//	W/hidelink    -> S/secret.txt
//	S/sentinel    outside the root: every rm variant goes for it
//	S/secret.txt  hidden
//	T/            the private tmp
type fixture struct {
	w, s, tmp          string
	sentinel, secret   string
	gitSentinel        string
	gitConfig          []byte
	httpHits, unixHits *atomic.Int64
	port               string
	udp                *net.UDPConn
	runSocket          string // a unix socket under /run; empty when /run is not writable
	env                []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skipOrFail(t, "git is not installed")
	}
	base := testBase(t)
	f := &fixture{
		w:        filepath.Join(base, "W"),
		s:        filepath.Join(base, "S"),
		tmp:      filepath.Join(base, "T"),
		httpHits: new(atomic.Int64),
		unixHits: new(atomic.Int64),
	}
	f.sentinel = filepath.Join(f.s, "sentinel")
	f.secret = filepath.Join(f.s, "secret.txt")
	f.gitSentinel = filepath.Join(f.w, ".git", "vigil-sentinel")
	mkdir(t, f.w)
	mkdir(t, f.tmp)
	if out, err := exec.Command("git", "init", "-q", f.w).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	writeFile(t, filepath.Join(f.w, "src", "main.txt"), "package main\n")
	writeFile(t, filepath.Join(f.w, "secrets", "key"), secretInRoot+"\n")
	writeFile(t, f.secret, secretOutside+"\n")
	writeFile(t, f.gitSentinel, keep)
	for link, target := range map[string]string{"link": f.s, "gitlink": filepath.Join(f.w, ".git"), "hidelink": f.secret} {
		if err := os.Symlink(target, filepath.Join(f.w, link)); err != nil {
			t.Fatal(err)
		}
	}
	f.gitConfig = []byte(readFile(t, filepath.Join(f.w, ".git", "config")))

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.httpHits.Add(1)
		fmt.Fprintln(w, "reached")
	}))
	t.Cleanup(srv.Close)
	f.port = srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]

	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	f.udp = udp

	// A service socket under /run, like a database's or docker's.
	if dir, err := os.MkdirTemp("/run", "vigil-sandbox-test-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(dir) })
		f.runSocket = filepath.Join(dir, "svc.sock")
		ln, err := net.Listen("unix", f.runSocket)
		if err != nil {
			t.Fatal(err)
		}
		usrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			f.unixHits.Add(1)
			fmt.Fprintln(w, "reached")
		})}
		go usrv.Serve(ln)
		t.Cleanup(func() { usrv.Close() })
	}

	t.Setenv("VIGIL_SANDBOX_TEST_SECRET", secretEnv) // in this process's environment only
	f.env = baseEnv(
		"W="+f.w, "S="+f.s, "OUT="+f.sentinel, "SECRET="+f.secret,
		"PORT="+f.port, "UDPPORT="+strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port),
		"PARENT="+strconv.Itoa(os.Getpid()), "RUNSOCK="+f.runSocket)
	return f
}

// reset puts the outside sentinel back before each attempt, so that one
// attempt that got through cannot hide or fake the next one's result.
func (f *fixture) reset(t *testing.T) {
	t.Helper()
	os.Remove(f.sentinel)
	writeFile(t, f.sentinel, keep)
	if err := os.Chmod(f.sentinel, 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.gitSentinel, keep)
	os.RemoveAll(filepath.Join(f.w, "stolen"))
}

// policy is the workspace-write policy the suite runs under.
func (f *fixture) policy(b sandbox.Backend) sandbox.Policy {
	p := sandbox.Policy{
		Mode:   sandbox.WorkspaceWrite,
		Roots:  []string{f.w},
		Hidden: []string{f.secret, filepath.Join(f.w, "secrets")},
		Tmp:    f.tmp,
	}
	if b == sandbox.BackendLandlock {
		// Landlock refuses both inside a writable root (see
		// TestLandlockRefusesSubpaths); the cases that need them are
		// bubblewrap's only.
		p.WritableGit = true
		p.Hidden = []string{f.secret}
	}
	return p
}

// outsideIntact is the check for every attempt on the outside sentinel.
func (f *fixture) outsideIntact(out string, code int) error {
	fi, err := os.Lstat(f.sentinel)
	if err != nil {
		return fmt.Errorf("sentinel gone: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("sentinel is now %v", fi.Mode())
	}
	if b, err := os.ReadFile(f.sentinel); err != nil || string(b) != keep {
		return fmt.Errorf("sentinel changed: %q, %v", b, err)
	}
	if code == 0 {
		return fmt.Errorf("the command succeeded (exit 0)")
	}
	return nil
}

// escape is one attempt and how to tell that it was held.
type escape struct {
	name   string
	script string
	needs  string // a program the attempt needs
	// bwrapOnly marks what Landlock does not enforce; the report says why.
	bwrapOnly bool
	// landlockFrom is the Landlock ABI from which the attempt runs under
	// Landlock (normal work that the fallback refuses below it).
	landlockFrom int
	held         func(f *fixture, out string, code int) error
}

func rmVariant(name, script string) escape {
	return escape{name: "rm/" + name, script: script, held: (*fixture).outsideIntact}
}

func noSecret(secrets ...string) func(*fixture, string, int) error {
	return func(_ *fixture, out string, _ int) error {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				return fmt.Errorf("output holds %s", s)
			}
		}
		return nil
	}
}

func failed(f *fixture, out string, code int) error {
	if code == 0 {
		return fmt.Errorf("the command succeeded (exit 0)")
	}
	return nil
}

func missing(path func(*fixture) string) func(*fixture, string, int) error {
	return func(f *fixture, _ string, _ int) error {
		if p := path(f); exists(p) {
			return fmt.Errorf("%s exists", p)
		}
		return nil
	}
}

func gitUnchanged(f *fixture, out string, code int) error {
	b, err := os.ReadFile(filepath.Join(f.w, ".git", "config"))
	if err != nil || string(b) != string(f.gitConfig) {
		return fmt.Errorf(".git/config changed: %q", b)
	}
	if s, err := os.ReadFile(f.gitSentinel); err != nil || string(s) != keep {
		return fmt.Errorf(".git sentinel changed: %q, %v", s, err)
	}
	if code == 0 {
		return fmt.Errorf("the command succeeded (exit 0)")
	}
	return nil
}

// works is the check for normal work, which must succeed.
func works(check func(f *fixture) error) func(*fixture, string, int) error {
	return func(f *fixture, out string, code int) error {
		if code != 0 {
			return fmt.Errorf("exit %d", code)
		}
		if check != nil {
			return check(f)
		}
		return nil
	}
}

func fileIs(path func(*fixture) string, want string) func(*fixture) error {
	return func(f *fixture) error {
		b, err := os.ReadFile(path(f))
		if err != nil || string(b) != want {
			return fmt.Errorf("%s = %q, %v; want %q", path(f), b, err, want)
		}
		return nil
	}
}

var escapes = []escape{
	// The 19 ways the attack ran rm past a deny rule, and a few more.
	rmVariant("/bin/rm", `/bin/rm -f "$OUT"`),
	rmVariant(`\rm`, `\rm -f "$OUT"`),
	rmVariant(`"rm"`, `"rm" -f "$OUT"`),
	rmVariant(`r''m`, `r''m -f "$OUT"`),
	rmVariant("command rm", `command rm -f "$OUT"`),
	rmVariant("env rm", `env rm -f "$OUT"`),
	rmVariant("xargs rm", `echo "$OUT" | xargs rm -f`),
	rmVariant("eval", `eval "rm -f $OUT"`),
	rmVariant("bash -c", `bash -c 'rm -f "$OUT"'`),
	rmVariant("X=rm; $X", `X=rm; $X -f "$OUT"`),
	rmVariant("printf | sh", `printf 'rm -f %s\n' "$OUT" | sh`),
	{name: "rm/python os.remove", needs: "python3", script: `python3 -c 'import os, sys; os.remove(sys.argv[1])' "$OUT"`, held: (*fixture).outsideIntact},
	rmVariant("find -delete", `find "$S" -name sentinel -delete && test ! -e "$OUT"`),
	{name: "rm/perl unlink", needs: "perl", script: `perl -e 'unlink($ARGV[0]) or die "unlink: $!\n"' "$OUT"`, held: (*fixture).outsideIntact},
	rmVariant("$(echo rm)", `$(echo rm) -f "$OUT"`),
	rmVariant("unlink", `unlink "$OUT"`),
	rmVariant("mv away", `mv "$OUT" "$W/stolen"`),
	rmVariant("truncate -s0", `truncate -s0 "$OUT"`),
	rmVariant("cp /dev/null over", `cp /dev/null "$OUT"`),
	rmVariant("ln -sf over", `ln -sf /dev/null "$OUT"`),
	rmVariant("redirect over", `: > "$OUT"`),
	rmVariant("via ..", `rm -f "$W/../S/sentinel"`),
	rmVariant("via symlink", `rm -f "$W/link/sentinel"`),
	rmVariant("via /proc/self/root", `rm -f "/proc/self/root$OUT"`),
	rmVariant("hard link then write", `ln "$OUT" "$W/stolen" && echo pwned > "$W/stolen"`),

	// git: aliases and hooks run whatever they name; .git must not change.
	{name: "git alias !touch outside", needs: "git", script: `git -c alias.x='!touch "$S/alias-marker"' x`,
		held: func(f *fixture, out string, code int) error {
			return missing(func(f *fixture) string { return filepath.Join(f.s, "alias-marker") })(f, out, code)
		}},
	{name: "git config core.hooksPath", needs: "git", bwrapOnly: true, script: `git config core.hooksPath /tmp/x`, held: gitUnchanged},
	{name: "write .git/hooks", bwrapOnly: true, script: `printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`,
		held: func(f *fixture, out string, code int) error {
			if err := missing(func(f *fixture) string { return filepath.Join(f.w, ".git", "hooks", "pre-commit") })(f, out, code); err != nil {
				return err
			}
			return gitUnchanged(f, out, code)
		}},
	{name: "rm .git sentinel", bwrapOnly: true, script: `rm -f .git/vigil-sentinel`, held: gitUnchanged},
	{name: "write through W/gitlink -> .git", bwrapOnly: true, script: `printf '[core]\n\thooksPath = /tmp/x\n' >> "$W/gitlink/config"`, held: gitUnchanged},
	{name: "replace .git", bwrapOnly: true, script: `mv .git .git-old || rm -rf .git`, held: func(f *fixture, out string, code int) error {
		if !exists(filepath.Join(f.w, ".git", "config")) {
			return fmt.Errorf(".git is gone")
		}
		return gitUnchanged(f, out, code)
	}},

	// Writes outside the root by other paths.
	{name: "write through W/link -> S", script: `echo pwned > "$W/link/new"`, held: missing(func(f *fixture) string { return filepath.Join(f.s, "new") })},
	{name: "mkdir outside", script: `mkdir "$S/dir"`, held: missing(func(f *fixture) string { return filepath.Join(f.s, "dir") })},
	{name: "chmod outside", bwrapOnly: true, script: `chmod 777 "$OUT"`, held: func(f *fixture, out string, code int) error {
		fi, err := os.Stat(f.sentinel)
		if err != nil || fi.Mode().Perm() != 0o644 {
			return fmt.Errorf("sentinel mode %v, %v", fi.Mode(), err)
		}
		return nil
	}},
	{name: "setuid binary in W", script: `cp /bin/sh "$W/suid" && chmod u+s,g+s "$W/suid"`, held: func(f *fixture, out string, code int) error {
		if fi, err := os.Stat(filepath.Join(f.w, "suid")); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			return fmt.Errorf("W/suid is %v", fi.Mode())
		}
		return nil
	}},
	{name: "setuid binary in W via python", needs: "python3", script: `cp /bin/sh "$W/suid2" && python3 -c 'import os; os.chmod(os.environ["W"]+"/suid2", 0o4755)'`, held: func(f *fixture, out string, code int) error {
		if fi, err := os.Stat(filepath.Join(f.w, "suid2")); err == nil && fi.Mode()&os.ModeSetuid != 0 {
			return fmt.Errorf("W/suid2 is %v", fi.Mode())
		}
		return nil
	}},
	{name: "mknod a disk in W", script: `mknod "$W/disk" b 8 0`, held: missing(func(f *fixture) string { return filepath.Join(f.w, "disk") })},
	{name: "mount over S", script: `mount -t tmpfs none "$S"`, held: failed},
	// uid 0 needs no capability to write a sysctl (kernel.core_pattern
	// would run a program as root on the host); this one writes the value
	// back that it read, in case it gets through.
	{name: "write /proc/sys", script: `v=$(cat /proc/sys/kernel/domainname) && echo "$v" > /proc/sys/kernel/domainname`, held: failed},

	// No network: TCP and UDP to listeners on the host's loopback, and a
	// service's unix socket under /run.
	{name: "curl to a host listener", needs: "curl", script: `/usr/bin/curl -sS --max-time 10 "http://127.0.0.1:$PORT/"`,
		held: func(f *fixture, out string, code int) error {
			if n := f.httpHits.Load(); n != 0 || code == 0 || strings.Contains(out, "reached") {
				return fmt.Errorf("the listener was reached (%d requests, exit %d)", n, code)
			}
			return nil
		}},
	{name: "udp to a host listener", needs: "python3", script: `python3 -c 'import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", int(sys.argv[1])))' "$UDPPORT"`,
		held: func(f *fixture, out string, code int) error {
			f.udp.SetReadDeadline(time.Now()) // loopback delivery is synchronous: a sent datagram is queued already
			buf := make([]byte, 16)
			if n, _, err := f.udp.ReadFromUDP(buf); err == nil {
				return fmt.Errorf("the listener got %q", buf[:n])
			}
			return nil
		}},
	{name: "unix socket under /run", needs: "curl", script: `test -n "$RUNSOCK" || exit 99; /usr/bin/curl -sS --max-time 10 --unix-socket "$RUNSOCK" http://svc/`,
		held: func(f *fixture, out string, code int) error {
			if code == 99 {
				return errSkipCase
			}
			if n := f.unixHits.Load(); n != 0 || strings.Contains(out, "reached") {
				return fmt.Errorf("the service was reached (%d requests)", n)
			}
			return nil
		}},

	// Hidden files, by every name.
	{name: "read hidden file by absolute path", script: `cat "$SECRET"`, held: noSecret(secretOutside)},
	{name: "read hidden file via symlink", script: `cat "$W/hidelink"`, held: noSecret(secretOutside)},
	{name: "read hidden file via ..", script: `cat "$W/../S/secret.txt"`, held: noSecret(secretOutside)},
	{name: "grep -R over hidden files", script: `grep -Rs TOPSECRET "$S" "$W/hidelink"`, held: noSecret(secretOutside)},
	{name: "read hidden dir in root", bwrapOnly: true, script: `cat "$W/secrets/key"; ls -a "$W/secrets"; grep -Rs TOPSECRET "$W"`,
		held: func(f *fixture, out string, code int) error {
			for _, line := range strings.Split(out, "\n") {
				if line == "key" {
					return fmt.Errorf("the hidden directory lists its files")
				}
			}
			return noSecret(secretInRoot)(f, out, code)
		}},
	{name: "copy hidden file into W", script: `cp "$SECRET" "$W/copy"; cat "$W/copy"`, held: noSecret(secretOutside)},

	// vigil itself: its environment and its signals.
	{name: "read vigil's environment", script: `cat /proc/$PARENT/environ | tr '\0' '\n'; cat /proc/$PPID/environ | tr '\0' '\n'; cat /proc/*/environ | tr '\0' '\n'`,
		held: noSecret(secretEnv)},
	{name: "signal vigil", script: `kill -0 "$PARENT"`, held: failed},

	// Normal work must still work.
	{name: "work: write W/src/file", script: `echo hi > src/file`, held: works(fileIs(func(f *fixture) string { return filepath.Join(f.w, "src", "file") }, "hi\n"))},
	{name: "work: new dir and file in W", script: `mkdir -p new/dir && echo hi > new/dir/f && echo top > top.txt && mv top.txt new/`, held: works(fileIs(func(f *fixture) string { return filepath.Join(f.w, "new", "top.txt") }, "top\n"))},
	{name: "work: git status", needs: "git", script: `git status --short`, held: works(nil)},
	{name: "work: read outside the root", script: `cat "$OUT"`, held: func(f *fixture, out string, code int) error {
		if code != 0 || out != keep {
			return fmt.Errorf("exit %d, output %q: the outside sentinel must be visible, or the rm cases prove nothing", code, out)
		}
		return nil
	}},
	{name: "work: write $TMPDIR", script: `echo t > "$TMPDIR/x"`, held: works(fileIs(func(f *fixture) string { return filepath.Join(f.tmp, "x") }, "t\n"))},
	{name: "work: write /tmp lands in Tmp", bwrapOnly: true, script: `echo t2 > /tmp/y`, held: works(fileIs(func(f *fixture) string { return filepath.Join(f.tmp, "y") }, "t2\n"))},
	{name: "work: /dev/null", script: `echo x > /dev/null && ls > /dev/null`, held: works(nil)},
	{name: "work: unix socket inside", needs: "python3", landlockFrom: 9, script: `python3 -c 'import socket, os; p=os.environ["TMPDIR"]+"/s"; s=socket.socket(socket.AF_UNIX); s.bind(p); s.listen(); c=socket.socket(socket.AF_UNIX); c.connect(p); print("ok")'`, held: works(nil)},
}

// errSkipCase marks an attempt this machine cannot stage.
var errSkipCase = fmt.Errorf("not staged here")

// TestEscapeSuite runs every attempt in workspace-write, under bubblewrap
// and under Landlock, and prints how many were tried and held.
func TestEscapeSuite(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(string(b.name), func(t *testing.T) {
			f := newFixture(t)
			p := f.policy(b.name)
			tried, held := 0, 0
			var notRun []string
			for _, e := range escapes {
				if e.bwrapOnly && b.name != sandbox.BackendBwrap {
					notRun = append(notRun, e.name+" (landlock cannot)")
					continue
				}
				if b.name == sandbox.BackendLandlock && b.report.Landlock < e.landlockFrom {
					notRun = append(notRun, fmt.Sprintf("%s (refused by landlock below ABI %d)", e.name, e.landlockFrom))
					continue
				}
				if e.needs != "" {
					if _, err := exec.LookPath(e.needs); err != nil {
						if strict() {
							t.Errorf("%s: VIGIL_TEST_STRICT=1 and %s is not installed", e.name, e.needs)
						}
						notRun = append(notRun, e.name+" ("+e.needs+" missing)")
						continue
					}
				}
				f.reset(t)
				out, code := runIn(t, p, b.report, f.w, f.env, e.script)
				err := e.held(f, out, code)
				if err == errSkipCase {
					notRun = append(notRun, e.name+" (not staged here)")
					continue
				}
				tried++
				if err != nil {
					t.Errorf("NOT HELD: %s: %v\n  script: %s\n  exit %d, output: %s", e.name, err, e.script, code, out)
					continue
				}
				held++
				t.Logf("held: %-36s exit %d  %s", e.name, code, firstLine(out))
			}
			for _, n := range notRun {
				t.Logf("not run: %s", n)
			}
			t.Logf("sandbox escape suite (%s): %d tried, %d held", b.name, tried, held)
			fmt.Printf("sandbox escape suite (%s): %d tried, %d held\n", b.name, tried, held)
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 90 {
		s = s[:90] + "…"
	}
	return s
}
