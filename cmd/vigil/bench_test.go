package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
)

// vigil bench --load and --idle print one row per cell and the idle
// figures, on small settings.
func TestBenchLoadAndIdle(t *testing.T) {
	var out, errs bytes.Buffer
	e := &env{stdout: &out, stderr: &errs, getenv: func(string) string { return "" }}
	code := runMain(context.Background(), e, []string{"bench", "--store", "memory,sqlite-full", "--load", "1,2",
		"--load-notifications", "24", "--load-workers", "2", "--ceiling", "20ms", "--idle", "3", "--idle-inputs", "2"})
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	s := out.String()
	t.Log(s)
	for _, want := range []string{"wake p99", "rows/notif", "ceil rows/s", "ceil commit p99", "by time", "idle: 3 sessions on memory", "idle: 3 sessions on sqlite-full", "Open of 3 sessions"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	rows := 0
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) == 19 && (f[0] == "memory" || f[0] == "sqlite-full") {
			rows++
			if f[0] == "memory" && (f[9] != "n/a" || f[14] != "n/a" || f[15] != "n/a") {
				t.Errorf("memory has a disk ceiling: %s", line)
			}
			if f[0] == "sqlite-full" && (f[9] == "n/a" || !strings.HasSuffix(f[14], "ms") || f[14] == "0.00ms" || !strings.HasSuffix(f[15], "ms") || f[15] == "0.00ms") {
				t.Errorf("sqlite has no disk ceiling or no commit latency: %s", line)
			}
		}
	}
	if rows != 4 {
		t.Errorf("%d load rows, want 4", rows)
	}
	// The rows by table: a line per cell, each table with its share.
	_, tables, ok := strings.Cut(s, "rows/notif by table")
	if !ok {
		t.Fatal("no rows/notif by table")
	}
	cells := 0
	for line := range strings.Lines(tables) {
		f := strings.Fields(line)
		if len(f) > 2 && (f[0] == "memory" || f[0] == "sqlite-full") {
			cells++
			if !slices.Contains(f, "steps") || !slices.Contains(f, "notes") {
				t.Errorf("a cell's rows by table lack steps or notes: %s", line)
			}
		}
	}
	if cells != 4 {
		t.Errorf("%d cells of rows by table, want 4", cells)
	}
	if code := runMain(context.Background(), e, []string{"bench", "--load", "1,x"}); code != 2 {
		t.Errorf("--load 1,x: exit %d, want 2", code)
	}
	if code := runMain(context.Background(), e, []string{"bench", "--load", "1", "--load-think", "-1s"}); code != 2 {
		t.Errorf("--load-think -1s: exit %d, want 2", code)
	}
}
