package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/pgtest"
)

// vigil bench --nodes prints 1 node and N nodes side by side for each
// session count; --idle-cluster prints the transactions/s of idle
// sessions over the nodes. Both on small settings.
func TestBenchNodesAndIdleCluster(t *testing.T) {
	dsn := pgtest.Fresh(t) // the server the scratch databases are made on
	var out, errs bytes.Buffer
	e := &env{stdout: &out, stderr: &errs, getenv: func(string) string { return "" }}
	code := runMain(context.Background(), e, []string{"bench", "--postgres", dsn, "--nodes", "2", "--load", "1,2",
		"--load-notifications", "24", "--load-workers", "2"})
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	s := out.String()
	t.Log(s)
	rows := 0
	for line := range strings.Lines(s) {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "1" || f[0] == "2") && strings.Count(line, "|") == 3 {
			rows++
		}
	}
	if !strings.Contains(s, "1 node ") || !strings.Contains(s, "2 nodes") || rows != 2 {
		t.Errorf("want a header of 1 node and 2 nodes and 2 rows, got %d rows", rows)
	}
	out.Reset()
	code = runMain(context.Background(), e, []string{"bench", "--postgres", dsn, "--idle-cluster", "6", "--idle-settle", "0s", "--idle-window", "1s"})
	if code != 0 || !strings.Contains(out.String(), "transactions committed in 1s") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	t.Log(out.String())
	if code := runMain(context.Background(), e, []string{"bench", "--nodes", "-1"}); code != 2 {
		t.Errorf("--nodes -1: exit %d, want 2", code)
	}
}
