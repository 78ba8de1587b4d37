package main

import (
	"context"
	"strings"
	"testing"
)

// runVigil runs "vigil args..." with no config and returns its exit code
// and output.
func runVigil(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	home := t.TempDir()
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}}
	code := runMain(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// The runaway example (two agents messaging each other forever) ends by
// itself under the default budget: budget_exceeded on the timeline, the
// agents blocked, and vigil run exits 4.
func TestRunawayEndsUnderTheDefaultBudget(t *testing.T) {
	code, out, errb := runVigil(t, "run", "--memory", "--script", "examples/runaway.yaml", "Play ping-pong")
	if code != 4 || !strings.Contains(out, "budget_exceeded") || !strings.Contains(out, "blocked after") {
		t.Fatalf("exit %d\n%s\n%s", code, tail(out, 1500), errb)
	}
	t.Log(tail(out, 400))
}

// The long-session example compacts several times and ends completed.
func TestLongSessionExampleCompacts(t *testing.T) {
	code, out, errb := runVigil(t, "run", "--memory", "--script", "long-session", "Work for a long time")
	if code != 0 || strings.Count(out, "context compacted") < 3 || !strings.Contains(out, "All 80 rounds are done.") {
		t.Fatalf("exit %d\n%s\n%s", code, tail(out, 1500), errb)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
