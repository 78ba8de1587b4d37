package store

import (
	"testing"
	"time"
)

func TestSetCommitTimes(t *testing.T) {
	var c Ceiling
	c.SetCommitTimes(nil)
	if c.CommitP50 != 0 || c.CommitP99 != 0 || c.CommitMax != 0 {
		t.Fatalf("no commits gave %+v", c)
	}
	times := make([]time.Duration, 0, 200)
	for i := 200; i >= 1; i-- { // out of order: it sorts
		times = append(times, time.Duration(i)*time.Millisecond)
	}
	c.SetCommitTimes(times)
	if c.CommitP50 != 101*time.Millisecond || c.CommitP99 != 199*time.Millisecond || c.CommitMax != 200*time.Millisecond {
		t.Fatalf("p50 %s p99 %s max %s, want 101ms 199ms 200ms", c.CommitP50, c.CommitP99, c.CommitMax)
	}
	c.SetCommitTimes([]time.Duration{3 * time.Millisecond})
	if c.CommitP50 != 3*time.Millisecond || c.CommitP99 != 3*time.Millisecond || c.CommitMax != 3*time.Millisecond {
		t.Fatalf("one commit gave %+v", c)
	}
}
