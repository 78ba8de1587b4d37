package store

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
	// Commits and Rows are how many single-row commits and batched rows
	// the measurement made.
	Commits, Rows int64
}
