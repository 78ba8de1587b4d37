package store

import (
	"reflect"
	"testing"
	"time"
)

// TestPending: rows of a key are written once, with the last values; what
// was new stays an insert; an item's status change folds into its pending
// complete row.
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
		Items:   []ItemRow{{ID: "i1", Agent: "a0", Kind: "message", Status: "queued", Enqueued: at}},
		Notes:   []NoteRow{{Task: "t1", Run: 1, Status: "completed", Delivery: "queued", New: true}},
	})
	x.Add(&Projection{
		Session: &SessionRow{ID: "s", LastSeq: 7},
		Agents:  []AgentRow{{ID: "a0", State: "idle"}},
		Runs:    []RunRow{{Agent: "a0", Seq: 1, Status: "completed"}, {Agent: "a0", Seq: 2, Status: "running"}},
		Tasks:   []TaskRow{{ID: "t2", Status: "running"}},
		Items:   []ItemRow{{ID: "i1", Agent: "a0", Status: "taken", Run: 2, StatusOnly: true}, {ID: "i0", Status: "removed", StatusOnly: true}},
		Notes:   []NoteRow{{Task: "t1", Run: 1, Status: "completed", Delivery: "delivered", DeliveredRun: 2}, {Task: "t0", Run: 1, Delivery: "dropped"}},
	})
	got := x.Take()
	want := &Projection{
		Session: &SessionRow{ID: "s", LastSeq: 7},
		Agents:  []AgentRow{{ID: "a0", State: "idle"}, {ID: "a1", State: "idle"}},
		Runs:    []RunRow{{Agent: "a0", Seq: 1, Status: "completed"}, {Agent: "a0", Seq: 2, Status: "running"}},
		Tasks:   []TaskRow{{ID: "t2", Status: "running"}},
		Items: []ItemRow{{ID: "i1", Agent: "a0", Kind: "message", Status: "taken", Run: 2, Enqueued: at},
			{ID: "i0", Status: "removed", StatusOnly: true}},
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
}
