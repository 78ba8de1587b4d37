// Package rowcount counts the rows a store backend writes, by table: what
// store.Stats.Tables reports.
package rowcount

import (
	"maps"
	"sync"
)

// Tables is a count of rows by table, safe for concurrent use. The zero
// value counts nothing yet.
type Tables struct {
	mu sync.Mutex
	n  map[string]int64
}

// Add counts the rows of each table of m (a group's counts).
func (t *Tables) Add(m map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for table, n := range m {
		if n == 0 {
			continue
		}
		if t.n == nil {
			t.n = map[string]int64{}
		}
		t.n[table] += n
	}
}

// Read returns a copy of the counts; nil when there are none.
func (t *Tables) Read() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.n) == 0 {
		return nil
	}
	return maps.Clone(t.n)
}
