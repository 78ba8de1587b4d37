package main

import (
	"strings"
	"testing"

	"github.com/vigilrun/vigil/core"
)

// columnAt is where word begins in line, or -1.
func columnAt(line, word string) int { return strings.Index(line, word) }

// show and status say what each agent waits on: a worker with a long name
// waits for a person's answer (NEEDS YOU), its run in progress counts in
// RUNS, its task's owner reads main, and the columns stay aligned.
func TestShowAndStatusSayWhy(t *testing.T) {
	ts := newTestServer(t, nil)
	id := strings.TrimSpace(ts.ok(t, "new", "go", "--provider", "why", "--permission-mode", "ask"))
	waitEvent(t, ts.rt, id, func(e core.Event) bool { _, ok := e.Body.(*core.ApprovalRequested); return ok })
	out := ts.ok(t, "show", id)
	if want := "waiting for its task t1 (long-named-worker)"; !strings.Contains(out, want) {
		t.Errorf("show before the hold lacks %q:\n%s", want, out)
	}
	ts.ok(t, "hold", id, "--reason", "reviewing")
	ts.ok(t, "send", id, "and the docs")

	out = ts.ok(t, "show", id)
	lines := strings.Split(out, "\n")
	var head, main, worker, taskHead, task string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "AGENT "):
			head = l
		case strings.HasPrefix(l, "main "):
			main = l
		case strings.HasPrefix(l, "  long-named-worker "):
			worker = l
		case strings.HasPrefix(l, "TASK "):
			taskHead = l
		case strings.HasPrefix(l, "t1 "):
			task = l
		}
	}
	if head == "" || main == "" || worker == "" || taskHead == "" || task == "" {
		t.Fatalf("show lacks a row:\n%s", out)
	}
	for _, col := range []struct{ name, main, worker string }{{"ID", "a0", "a1"}, {"STATE", "idle", "waiting"}, {"TASK", "", "t1"}} {
		at := columnAt(head, col.name)
		if col.main != "" && columnAt(main, " "+col.main+" ")+1 != at {
			t.Errorf("main's %s is not under its header:\n%s\n%s", col.name, head, main)
		}
		if columnAt(worker, " "+col.worker+" ")+1 != at {
			t.Errorf("long-named-worker's %s is not under its header:\n%s\n%s", col.name, head, worker)
		}
	}
	runs := columnAt(head, "RUNS")
	if worker[runs:runs+1] != "1" || main[runs:runs+1] != "1" {
		t.Errorf("RUNS of the worker (run 1 in progress) and of main (run 1 ended):\n%s\n%s\n%s", head, main, worker)
	}
	doing := columnAt(head, "DOING")
	if want := "run 1 round 1: NEEDS YOU: waiting for approval p1 (Bash: rm -rf build), denied at "; !strings.HasPrefix(worker[doing:], want) {
		t.Errorf("the worker's DOING, want %q:\n%s\n%s", want, head, worker)
	}
	if want := "1 user prompt held by user (reviewing)"; main[doing:] != want {
		t.Errorf("main's DOING %q, want %q", main[doing:], want)
	}
	if owner := columnAt(taskHead, "OWNER"); !strings.HasPrefix(task[owner:], "main ") {
		t.Errorf("the task's OWNER is not main:\n%s\n%s", taskHead, task)
	}
	if !strings.Contains(out, "p1  long-named-worker wants Bash") {
		t.Errorf("show names the approval's agent by its id:\n%s", out)
	}

	out = ts.ok(t, "status", id)
	for _, want := range []string{
		"long-named-worker  waiting  NEEDS YOU: waiting for approval p1 (Bash: rm -rf build), denied at ",
		"main               idle     1 user prompt held by user (reviewing)",
		"main (a0, idle): 1 item(s), 1 held, not draining: 1 user prompt held by user (reviewing) (clears on resume of the user queue)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " until ") {
		t.Errorf("status gives a deadline apart from what it is the deadline of:\n%s", out)
	}
}
