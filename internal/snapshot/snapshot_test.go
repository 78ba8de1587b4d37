package snapshot_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/sim"
	"github.com/vigilrun/vigil/internal/snapshot"
)

// TestRoundTripSimulated: the states of simulated sessions come back from
// their snapshots as the same states, and a JSON snapshot of an earlier
// version decodes to the same state too. The simulator checks the same at
// each of its crashes; this runs it over a few seeds with every crash
// checked, and reports the seed of a failure.
func TestRoundTripSimulated(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		res := sim.Run(sim.Options{Seed: seed})
		if res.Violations > 0 {
			t.Fatalf("seed %d: %d violations, first %+v", seed, res.Violations, res.First)
		}
	}
}

// TestSnapshotsOfEncodingJSON: a snapshot written by encoding/json (every
// earlier version) decodes to the same state, and so does a new one.
func TestSnapshotsOfEncodingJSON(t *testing.T) {
	c := core.New(core.Config{})
	s := core.NewState()
	out := c.Step(s, simTime, core.CreateSession{Session: core.Session{ID: "s1", Title: "old"}, Prompt: "hello"})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	old, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got := core.NewState()
	if err := snapshot.Decode(old, got); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(got)
	if string(again) != string(old) {
		t.Errorf("JSON snapshot decoded to\n%s\nwant\n%s", again, old)
	}
	b, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	back := core.NewState()
	if err := snapshot.Decode(b, back); err != nil {
		t.Fatal(err)
	}
	if j, _ := json.Marshal(back); string(j) != string(old) {
		t.Errorf("snapshot decoded to\n%s\nwant\n%s", j, old)
	}
	if err := snapshot.Decode([]byte(`{"seq":"x"}`), core.NewState()); err == nil {
		t.Error("a corrupt snapshot decoded")
	}
}

var simTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// FuzzDecode: no input makes Decode panic.
func FuzzDecode(f *testing.F) {
	s := core.NewState()
	s.Agents["main"] = &core.Agent{ID: "main", Transcript: []chat.Message{{Role: chat.RoleUser, Content: []chat.Block{chat.Text("hi")}}}}
	b, err := snapshot.Encode(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"seq":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = snapshot.Decode(data, core.NewState())
	})
}
