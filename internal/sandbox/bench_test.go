package sandbox_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// The start-up cost of a sandbox: run /bin/true directly, under
// bubblewrap and under the Landlock helper, in workspace-write with a git
// root and a private tmp. Run with -benchtime=200x.

func BenchmarkStartDirect(b *testing.B) {
	benchStart(b, sandbox.Report{}, sandbox.FullAccess)
}

func BenchmarkStartBwrap(b *testing.B) {
	benchStart(b, bwrapReport(b), sandbox.WorkspaceWrite)
}

func BenchmarkStartBwrapContain(b *testing.B) {
	benchStart(b, bwrapReport(b), sandbox.FullAccess, func(p *sandbox.Policy) { p.Contain = true })
}

func BenchmarkStartLandlock(b *testing.B) {
	benchStart(b, landlockReport(b), sandbox.WorkspaceWrite, func(p *sandbox.Policy) { p.WritableGit = true })
}

func BenchmarkProbe(b *testing.B) {
	for b.Loop() {
		sandbox.Probe(context.Background())
	}
}

func benchStart(b *testing.B, r sandbox.Report, m sandbox.Mode, opts ...func(*sandbox.Policy)) {
	base := testBase(b)
	w, tmp := filepath.Join(base, "w"), filepath.Join(base, "tmp")
	mkdir(b, filepath.Join(w, ".git"))
	mkdir(b, tmp)
	p := sandbox.Policy{Mode: m, Roots: []string{w}, Tmp: tmp}
	for _, o := range opts {
		o(&p)
	}
	for b.Loop() {
		cmd := exec.Command("/bin/true")
		cmd.Dir = w
		if err := sandbox.Wrap(cmd, p, r); err != nil {
			b.Fatal(err)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}
