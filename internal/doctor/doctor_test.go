package doctor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// An empty report says so in text and writes "findings": [] (never null)
// in JSON, which scripts index without a check.
func TestEmptyReport(t *testing.T) {
	var r Report
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if got := text.String(); got != "read 0 file(s), 0 session(s): nothing found\n" {
		t.Fatalf("text: %q", got)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if f, ok := back["findings"].([]any); !ok || len(f) != 0 {
		t.Fatalf("findings: %#v in %s", back["findings"], js.String())
	}
}

// A finding's text names the file of evidence read from another file
// (a subagent's transcript), shows the stall, the recovered reply and the
// action; its JSON carries the kind and the times.
func TestFindingText(t *testing.T) {
	at := time.Date(2026, 11, 29, 19, 20, 39, 0, time.UTC)
	r := Report{Read: []string{"/p/s.jsonl", "/p/s/subagents/agent-a.jsonl"}, Sessions: 1, Findings: []Finding{{
		Kind: StrandedReply, Source: "claude-code", Session: "s", File: "/p/s.jsonl", Start: at, Stall: 90 * time.Second,
		Summary:  "a reply was never announced",
		Evidence: []Evidence{{File: "/p/s.jsonl", Line: 3, Text: "SendMessage", Why: "the send"}, {File: "/p/s/subagents/agent-a.jsonl", Line: 9, Text: "reply", Why: "the reply"}},
		Action:   "paste it", Recovered: "the number is 7",
	}}}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 finding(s)", "1. stranded-reply  claude-code session s", "line 3: the send", "agent-a.jsonl line 9: the reply", "stall: 1m30s", "| the number is 7", "what to do: paste it"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Findings) != 1 || back.Findings[0].Kind != StrandedReply || !back.Findings[0].Start.Equal(at) || back.Findings[0].Stall != 90*time.Second {
		t.Fatalf("JSON round trip: %+v", back.Findings)
	}
}

// Sort orders by source, session, start and kind.
func TestSort(t *testing.T) {
	at := time.Unix(100, 0)
	r := Report{Findings: []Finding{
		{Source: "vigil", Session: "a", Start: at},
		{Source: "claude-code", Session: "b", Start: at.Add(time.Second)},
		{Source: "claude-code", Session: "b", Start: at, Kind: MissedWake},
		{Source: "claude-code", Session: "a", Start: at.Add(time.Hour)},
	}}
	r.Sort()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Source+"/"+f.Session+"/"+f.Start.Sub(at).String())
	}
	if strings.Join(got, " ") != "claude-code/a/1h0m0s claude-code/b/0s claude-code/b/1s vigil/a/0s" {
		t.Fatalf("order: %v", got)
	}
}
