package vigil

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// A successor started in another cgroup than the vigil it follows (another
// terminal, another service) still ends what that vigil left under its
// own cgroup root: the data directory lists every root its runtimes used.
// A takeover looks for the session's directory under each root itself, or
// takes what its recovery pass listed (scanGroups): a directory the
// listing did not have is not looked for.
func TestSuccessorSweepsEveryRecordedRoot(t *testing.T) {
	base, err := shell.CgroupBase()
	if err != nil {
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("no writable cgroup v2 here: %v", err)
		}
		t.Skipf("SKIP: no writable cgroup v2 here (%v)", err)
	}
	sc, err := script.Parse([]byte("name: none\nagents:\n  main:\n    turns:\n      - say: hi\n"))
	must(t, err)
	for _, how := range []string{"stat", "scan", "scan before"} {
		t.Run(how, func(t *testing.T) {
			data := t.TempDir()
			rt := openWith(t, memstore.New(), sc, func(o *Options) { o.DataDir = data })
			// The earlier vigil's root, elsewhere, and a foreground command
			// it left there (never recorded in the store).
			old := filepath.Join(base, fmt.Sprintf("vigil-test-old-%d", rand.Uint64()))
			t.Cleanup(func() { shell.KillCgroup(old, time.Minute) })
			must(t, recordRoot(data, old))
			before := rt.scanGroups()
			p, err := shell.Start(shell.Spec{Command: "setsid -f sleep 300 </dev/null >/dev/null 2>&1; sleep 300", Cgroup: filepath.Join(old, "s1", "tool-a0-tu1")})
			must(t, err)
			a := &actor{rt: rt, id: core.SessionID("s1")}
			var scan *groupScan
			switch how {
			case "scan":
				if scan = rt.scanGroups(); scan == nil || !slices.Contains(scan.roots, old) {
					t.Fatalf("scan %+v: want the earlier vigil's root %s listed", scan, old)
				}
			case "scan before":
				// The listing is what the pass goes by: a directory made
				// after it is not looked for (at Open, nothing makes one).
				if n := a.killSessionGroups(nil, before); n != 0 {
					t.Fatalf("a sweep by a listing taken before the command ended %d processes; want none (it looked for the directory itself)", n)
				}
				if pids, _ := shell.CgroupProcs(filepath.Join(old, "s1")); len(pids) == 0 {
					t.Fatal("no process in the session's group after a sweep that should not have seen it; want the command's")
				}
			}
			if n := a.killSessionGroups(nil, scan); n < 1 {
				t.Fatalf("the sweep ended %d processes; want the earlier vigil's command", n)
			}
			if res := p.Wait(); res.Signal == "" && res.ExitCode == 0 {
				t.Fatalf("the command was not killed: %+v", res)
			}
			if pids, _ := shell.CgroupProcs(filepath.Join(old, "s1")); len(pids) > 0 {
				t.Fatalf("processes %v outlived the sweep", pids)
			}
		})
	}
}

// Where the kernel gives Landlock but no bubblewrap, the default is still
// workspace-write, with .git writable and said so (Landlock cannot keep a
// path read-only inside a writable root); with neither, full-access, said
// loudly; an explicit confined mode the kernel cannot give is refused.
func TestIsolationDefaults(t *testing.T) {
	landlock := sandbox.Report{Landlock: 7, Seccomp: true, Executable: "/usr/bin/vigil"}
	iso, err := isolationFor(Sandbox{}, landlock, Containment{Cgroups: true})
	if err != nil || iso.Sandbox != string(sandbox.WorkspaceWrite) || !iso.WritableGit || !strings.Contains(iso.Warning, ".git is writable") {
		t.Fatalf("Landlock only: %+v, %v", iso, err)
	}
	iso, err = isolationFor(Sandbox{}, sandbox.Report{}, Containment{})
	if err != nil || iso.Sandbox != string(sandbox.FullAccess) || !strings.Contains(iso.Warning, "NO SANDBOX") || !strings.Contains(iso.Warning, "process group only") {
		t.Fatalf("no sandbox: %+v, %v", iso, err)
	}
	if _, err := isolationFor(Sandbox{Mode: "workspace-write"}, sandbox.Report{}, Containment{}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("explicit workspace-write without a sandbox: %v; want it refused", err)
	}
}

// TestRootsMemo: the data directory's cgroup roots are read again only
// when the file changed, and a root recorded since is seen.
func TestRootsMemo(t *testing.T) {
	dir := t.TempDir()
	var m rootsMemo
	if got := m.get(dir); got != nil || m.readCount != 0 {
		t.Fatalf("no file: roots %v, %d reads; want none", got, m.readCount)
	}
	must(t, recordRoot(dir, "/sys/fs/cgroup/vigil-one"))
	for range 3 {
		if got := m.get(dir); !slices.Equal(got, []string{"/sys/fs/cgroup/vigil-one"}) {
			t.Fatalf("roots %v, want vigil-one", got)
		}
	}
	if m.readCount != 1 {
		t.Errorf("3 gets of an unchanged file read it %d times, want 1", m.readCount)
	}
	must(t, recordRoot(dir, "/sys/fs/cgroup/vigil-two"))
	if got := m.get(dir); !slices.Equal(got, []string{"/sys/fs/cgroup/vigil-one", "/sys/fs/cgroup/vigil-two"}) || m.readCount != 2 {
		t.Errorf("after a root was recorded: roots %v, %d reads; want both, 2", got, m.readCount)
	}
}
