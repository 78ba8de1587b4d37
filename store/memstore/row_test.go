package memstore

import (
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// sameRow compares rows as a database stores them: an instant is the same
// in any location and with or without a monotonic reading, no reasons are
// an empty list, and a note's New is not stored.
func TestSameRow(t *testing.T) {
	now := time.Now()
	if !sameRow(store.RunRow{Started: now}, store.RunRow{Started: now.Round(0).In(time.FixedZone("x", 3600))}) {
		t.Error("one instant in two locations differs")
	}
	if sameRow(store.RunRow{Started: now}, store.RunRow{Started: now.Add(1)}) {
		t.Error("instants a nanosecond apart are the same")
	}
	if !sameRow(store.SessionRow{ID: "s"}, store.SessionRow{ID: "s", NeedsYou: []string{}}) {
		t.Error("no reasons and an empty list differ")
	}
	if !sameRow(store.NoteRow{Task: "t", New: true}, store.NoteRow{Task: "t"}) {
		t.Error("a note's New made it differ")
	}
	one, two := 1, 2
	if sameRow(store.TaskRow{Exit: &one}, store.TaskRow{Exit: &two}) || !sameRow(store.TaskRow{Exit: &one}, store.TaskRow{Exit: new(1)}) {
		t.Error("exit codes compared by pointer")
	}
}
