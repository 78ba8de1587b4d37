package store

import (
	"reflect"
	"testing"
	"time"
)

// TestPending: rows of a key are written once, with the last values; what
// was new stays an insert; an item that leaves its inbox while its row is
// pending is never written, one written before is deleted.
func TestPending(t *testing.T) {
	at := time.Unix(1e9, 0)
	var x Pending
	if !x.Empty() {
		t.Fatal("new Pending not empty")
	}
	x.Add(&Projection{
		Session: &SessionRow{ID: "s", LastSeq: 3},
		Agents:  []AgentRow{{ID: "a0", State: "running"}, {ID: "a1", State: "idle"}},
		Runs:    []RunRow{{Agent: "a0", Seq: 1, Status: "running"}},
		Items:   []ItemRow{{ID: "i1", Agent: "a0", Kind: "message", Enqueued: at}, {ID: "i2", Agent: "a0", Kind: "prompt", Enqueued: at}},
		Notes:   []NoteRow{{Task: "t1", Run: 1, Status: "completed", Delivery: "queued", New: true}},
	})
	x.Add(&Projection{
		Session:   &SessionRow{ID: "s", LastSeq: 7},
		Agents:    []AgentRow{{ID: "a0", State: "idle"}},
		Runs:      []RunRow{{Agent: "a0", Seq: 1, Status: "completed"}, {Agent: "a0", Seq: 2, Status: "running"}},
		Tasks:     []TaskRow{{ID: "t2", Status: "running"}},
		Items:     []ItemRow{{ID: "i3", Agent: "a1", Kind: "message", Enqueued: at}},
		ItemsGone: []string{"i1", "i0"},
		Notes:     []NoteRow{{Task: "t1", Run: 1, Status: "completed", Delivery: "delivered", DeliveredRun: 2}, {Task: "t0", Run: 1, Delivery: "dropped"}},
	})
	got := x.Take()
	want := &Projection{
		Session:   &SessionRow{ID: "s", LastSeq: 7},
		Agents:    []AgentRow{{ID: "a0", State: "idle"}, {ID: "a1", State: "idle"}},
		Runs:      []RunRow{{Agent: "a0", Seq: 1, Status: "completed"}, {Agent: "a0", Seq: 2, Status: "running"}},
		Tasks:     []TaskRow{{ID: "t2", Status: "running"}},
		Items:     []ItemRow{{ID: "i2", Agent: "a0", Kind: "prompt", Enqueued: at}, {ID: "i3", Agent: "a1", Kind: "message", Enqueued: at}},
		ItemsGone: []string{"i0"},
		Notes: []NoteRow{{Task: "t1", Run: 1, Status: "completed", Delivery: "delivered", DeliveredRun: 2, New: true},
			{Task: "t0", Run: 1, Delivery: "dropped"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged\n%+v\nwant\n%+v", got, want)
	}
	if !x.Empty() {
		t.Error("Take left rows")
	}
	x.Add(&Projection{Agents: []AgentRow{{ID: "a0"}}})
	if x.Empty() || len(x.Take().Agents) != 1 {
		t.Error("Pending not reusable after Take")
	}
	// An item enqueued and taken between two writes: nothing to write.
	x.Add(&Projection{Items: []ItemRow{{ID: "i5", Agent: "a0"}}})
	x.Add(&Projection{ItemsGone: []string{"i5"}})
	if !x.Empty() {
		t.Errorf("an item enqueued and taken before its row was written leaves %+v", x.Take())
	}
}
