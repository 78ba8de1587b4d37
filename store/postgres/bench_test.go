package postgres

import (
	"testing"

	"github.com/vigilrun/vigil/store/storetest"
)

// BenchmarkAppend appends steps of 6 events of ~300 bytes plus a projection
// from 8 concurrent sessions; an op is one step.
func BenchmarkAppend(b *testing.B) {
	storetest.BenchAppend(b, openTest(b, testDB(b)), 8, 6, 300)
}

// BenchmarkReplay reads a session of 100,000 events back; an op is a full
// replay.
func BenchmarkReplay(b *testing.B) {
	storetest.BenchReplay(b, openTest(b, testDB(b)), 100_000)
}

// BenchmarkDurableNotifications appends the step that ends a subagent run
// (run.ended, notification.written, the run row and the new note row) from
// 8 concurrent sessions.
func BenchmarkDurableNotifications(b *testing.B) {
	storetest.BenchNotifications(b, openTest(b, testDB(b)), 8)
}
