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
	if c.CommitP99ByTime != 199*time.Millisecond { // 200+199 ms are the first 1% of 20.1 s
		t.Fatalf("p99 by time %s, want 199ms", c.CommitP99ByTime)
	}
	// A disk that stalls: 1,000 commits of 1 ms and 10 of 50 ms. One
	// commit in 100 is slow, but a third of the time is spent in them.
	times = times[:0]
	for i := range 1010 {
		times = append(times, time.Millisecond)
		if i%101 == 0 {
			times[i] = 50 * time.Millisecond
		}
	}
	c.SetCommitTimes(times)
	if c.CommitP99 != time.Millisecond || c.CommitP99ByTime != 50*time.Millisecond {
		t.Fatalf("stalling disk: p99 %s, by time %s; want 1ms, 50ms", c.CommitP99, c.CommitP99ByTime)
	}
	c.SetCommitTimes([]time.Duration{3 * time.Millisecond})
	if c.CommitP50 != 3*time.Millisecond || c.CommitP99 != 3*time.Millisecond || c.CommitMax != 3*time.Millisecond {
		t.Fatalf("one commit gave %+v", c)
	}
}
