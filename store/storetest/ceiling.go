package storetest

import (
	"testing"

	"github.com/vigilrun/vigil/store"
)

// CheckCeiling fails t unless c, a backend's ceiling measurement, made
// both of its measurements and timed its single-row commits
// (CommitP50 <= CommitP99 <= CommitMax, all above zero, and CommitP99ByTime
// between CommitP50 and CommitMax).
func CheckCeiling(t testing.TB, c store.Ceiling) {
	t.Helper()
	if c.Commits == 0 || c.Rows == 0 || c.CommitsPerSec <= 0 || c.RowsPerSec <= 0 {
		t.Fatalf("ceiling %+v: a measurement is missing", c)
	}
	if c.CommitP50 <= 0 || c.CommitP50 > c.CommitP99 || c.CommitP99 > c.CommitMax {
		t.Fatalf("ceiling commit latencies p50 %s p99 %s max %s: want 0 < p50 <= p99 <= max", c.CommitP50, c.CommitP99, c.CommitMax)
	}
	if c.CommitP99ByTime < c.CommitP50 || c.CommitP99ByTime > c.CommitMax {
		t.Fatalf("ceiling commit p99 by time %s: want between p50 %s and max %s", c.CommitP99ByTime, c.CommitP50, c.CommitMax)
	}
}
