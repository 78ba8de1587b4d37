package vigil

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/shell"
	"github.com/vigilrun/vigil/store/memstore"
)

// A successor started in another cgroup than the vigil it follows (another
// terminal, another service) still ends what that vigil left under its
// own cgroup root: the data directory lists every root its runtimes used.
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
	data := t.TempDir()
	rt := openWith(t, memstore.New(), sc, func(o *Options) { o.DataDir = data })
	// The earlier vigil's root, elsewhere, and a foreground command it left
	// there (never recorded in the store).
	old := filepath.Join(base, fmt.Sprintf("vigil-test-old-%d", rand.Uint64()))
	t.Cleanup(func() { shell.KillCgroup(old, time.Minute) })
	must(t, recordRoot(data, old))
	p, err := shell.Start(shell.Spec{Command: "setsid -f sleep 300 </dev/null >/dev/null 2>&1; sleep 300", Cgroup: filepath.Join(old, "s1", "tool-a0-tu1")})
	must(t, err)
	a := &actor{rt: rt, id: core.SessionID("s1")}
	if n := a.killSessionGroups(nil); n < 1 {
		t.Fatalf("the sweep ended %d processes; want the earlier vigil's command", n)
	}
	if res := p.Wait(); res.Signal == "" && res.ExitCode == 0 {
		t.Fatalf("the command was not killed: %+v", res)
	}
	if pids, _ := shell.CgroupProcs(filepath.Join(old, "s1")); len(pids) > 0 {
		t.Fatalf("processes %v outlived the sweep", pids)
	}
}
