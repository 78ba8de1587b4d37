package store

import (
	"maps"
	"testing"
)

// Stats.Since is what was written between two readings, by table too (a
// table written before only drops out); Add sums two stores' readings.
func TestStatsSinceAndAdd(t *testing.T) {
	before := Stats{Commits: 1, Appends: 2, Rows: 5, Tables: map[string]int64{"steps": 2, "notes": 3}}
	after := Stats{Commits: 4, Appends: 6, Rows: 12, Tables: map[string]int64{"steps": 5, "notes": 3, "runs": 4}}
	d := after.Since(before)
	if d.Commits != 3 || d.Appends != 4 || d.Rows != 7 || !maps.Equal(d.Tables, map[string]int64{"steps": 3, "runs": 4}) {
		t.Errorf("since: %+v", d)
	}
	if z := before.Since(before); z.Rows != 0 || z.Tables != nil {
		t.Errorf("nothing written: %+v", z)
	}
	sum := before.Add(Stats{Commits: 1, Rows: 1, Tables: map[string]int64{"runs": 1}})
	if sum.Commits != 2 || sum.Appends != 2 || sum.Rows != 6 || !maps.Equal(sum.Tables, map[string]int64{"steps": 2, "notes": 3, "runs": 1}) {
		t.Errorf("add: %+v", sum)
	}
	if before.Tables["runs"] != 0 || len(before.Tables) != 2 {
		t.Errorf("Add changed its receiver's tables: %v", before.Tables)
	}
}
