package claudecode

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// subSep splits a fuzz input into a main transcript and a subagent's.
var subSep = []byte("\n--subagent--\n")

// FuzzScan feeds arbitrary bytes to the reader and the checks as a main
// transcript and a subagent's: they must never panic, and every line is
// either read or warned about.
func FuzzScan(f *testing.F) {
	// Small seeds: the fuzzer makes little progress on inputs of hundreds
	// of kilobytes. The first lines of a real session and of its subagent.
	mains, _ := filepath.Glob("testdata/cli/unmodified/*.jsonl")
	subs, _ := filepath.Glob("testdata/cli/unmodified/*/subagents/*.jsonl")
	if len(mains) == 1 && len(subs) == 1 {
		m, _ := os.ReadFile(mains[0])
		s, _ := os.ReadFile(subs[0])
		f.Add(append(append(headLines(m, 4<<10), subSep...), headLines(s, 4<<10)...))
	}
	samples, _ := filepath.Glob("testdata/samples/*/*.jsonl")
	for _, p := range samples {
		b, _ := os.ReadFile(p)
		f.Add(headLines(b, 8<<10))
	}
	f.Add([]byte(`{"type":"queue-operation","operation":"enqueue","timestamp":"2026-01-01T00:00:00Z","content":"<task-notification><task-id>x</task-id>"}` + "\n" + `{"type":"queue-operation","operation":"dequeue"}`))
	f.Add([]byte("{\"type\":\"user\"\x00}\n\xff\n{"))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		mainPart, subPart, _ := bytes.Cut(data, subSep)
		es, warns, err := readEntries(bytes.NewReader(mainPart), "main.jsonl", 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		if len(es)+len(warns) > bytes.Count(mainPart, []byte("\n"))+1 {
			t.Fatalf("%d entries and %d warnings from %d lines", len(es), len(warns), bytes.Count(mainPart, []byte("\n"))+1)
		}
		ss, _, err := readEntries(bytes.NewReader(subPart), "sub.jsonl", 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		s := &session{id: "fuzz", file: "main.jsonl", entries: es}
		agent := "afuzz"
		for _, e := range ss {
			if e.AgentID != "" {
				agent = e.AgentID
				break
			}
		}
		s.subs = []*subagent{{id: agent, file: "sub.jsonl", entries: ss}}
		for _, opts := range []Options{{Now: func() time.Time { return now }}, {MissedWakeAfter: time.Nanosecond, Now: func() time.Time { return now }}} {
			for _, f := range check(s, opts.withDefaults()) {
				if f.Kind == "" || f.Summary == "" || len(f.Evidence) == 0 {
					t.Fatalf("incomplete finding %+v", f)
				}
			}
		}
	})
}

// headLines returns the whole lines of b that fit in n bytes, skipping lines
// longer than 1 KiB.
func headLines(b []byte, n int) []byte {
	var out []byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 1024 {
			continue
		}
		if len(out)+len(l)+1 > n {
			break
		}
		out = append(append(out, l...), '\n')
	}
	return out
}
