package store

import (
	"slices"
	"time"
)

// Ceiling is what the disk under a store can do with the store's own
// driver and settings, measured beside a workload so that the workload's
// figures can be read as a fraction of it. Backends measure it with a
// function of their own (sqlite.MeasureCeiling, postgres.MeasureCeiling)
// on a scratch table, never on the store's tables.
type Ceiling struct {
	// CommitsPerSec is how many single-row transactions (one INSERT of a
	// row the size of a stored event, then COMMIT) one connection commits
	// per second, one after the other: the cost of a durable commit.
	CommitsPerSec float64
	// RowsPerSec is how many such rows per second are inserted in large
	// transactions (about a thousand rows each, in multi-row INSERTs): the
	// disk's throughput when commits are amortised.
	RowsPerSec float64
	// RowBytes is the size of the data column of each row inserted.
	RowBytes int
	// CommitP50, CommitP99 and CommitMax are the latencies of the
	// single-row commits, from BEGIN to the end of COMMIT: the least a
	// durable step waits for, and how far the disk's own tail reaches.
	CommitP50, CommitP99, CommitMax time.Duration
	// CommitP99ByTime is the 99th percentile of the single-row commits'
	// latencies weighted by their length: a moment picked at random falls,
	// 1 time in 100, in a commit at least this long. A write that arrives
	// then waits for that commit to end, then for its own; a disk whose few
	// slow commits take much of its time (an fsync stalled for 50 ms among
	// thousands of 0.3 ms ones) shows it here, where CommitP99, counting
	// commits, hides it.
	CommitP99ByTime time.Duration
	// Commits and Rows are how many single-row commits and batched rows
	// the measurement made.
	Commits, Rows int64
}

// SetCommitTimes sets CommitP50, CommitP99, CommitMax and CommitP99ByTime
// from the latencies of the single-row commits, which it sorts; a
// backend's ceiling measurement calls it.
func (c *Ceiling) SetCommitTimes(times []time.Duration) {
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	at := func(q float64) time.Duration { return times[min(len(times)-1, int(q*float64(len(times))))] }
	c.CommitP50, c.CommitP99, c.CommitMax = at(0.50), at(0.99), times[len(times)-1]
	var total, tail time.Duration
	for _, d := range times {
		total += d
	}
	for i := len(times) - 1; i >= 0; i-- {
		if tail += times[i]; tail >= total/100 {
			c.CommitP99ByTime = times[i]
			break
		}
	}
}
