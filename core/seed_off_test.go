//go:build !seedbugs

package core

import (
	"encoding/json"
	"testing"
	"time"
)

// A log or snapshot written by a seedbugs build still loads in the default
// build: the notified-flag bug's event decodes as a no-op, and the flag in
// an agent of a snapshot is ignored.
func TestSeedBugRecordsLoadWithoutSeedBugs(t *testing.T) {
	h := newHarness(t, Config{})
	h.step(UserPrompt{Text: "hi"})
	body, err := DecodeBody("bug.notified-flag", []byte(`{"agent":"a0","value":true}`))
	if err != nil {
		t.Fatal(err)
	}
	before, seq := stateJSON(h.s), h.s.Seq
	Apply(h.s, Event{Seq: seq + 1, At: time.Now(), Body: body})
	h.s.Seq = seq
	if after := stateJSON(h.s); after != before {
		t.Fatalf("the legacy event changed the state:\n%s\n%s", before, after)
	}
	var snap map[string]any
	if err := json.Unmarshal([]byte(before), &snap); err != nil {
		t.Fatal(err)
	}
	snap["agents"].(map[string]any)["a0"].(map[string]any)["notified"] = true
	b, _ := json.Marshal(snap)
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("a snapshot with the flag does not decode: %v", err)
	}
	if got := stateJSON(&s); got != before {
		t.Fatalf("the flag in a snapshot changed the state:\n%s\n%s", before, got)
	}
}
