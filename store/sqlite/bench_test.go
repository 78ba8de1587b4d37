package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/vigilrun/vigil/store/storetest"
)

// The driver is chosen at build time (driver_*.go); run the benchmarks
// once per driver and compare:
//
//	go test -run XXX -bench . -benchtime 2s ./store/sqlite/
//	go test -run XXX -bench . -benchtime 2s -tags vigil_mattn ./store/sqlite/

func benchStore(b *testing.B, sync string) *Store {
	b.Helper()
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), &Options{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// reportGroups reports how many steps shared a commit on average.
func reportGroups(b *testing.B, s *Store) {
	if n := s.commits.Load(); n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "steps/commit")
	}
}

// BenchmarkAppend appends steps of 6 events of ~300 bytes plus a projection
// from 8 concurrent sessions; an op is one step.
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(driverName+"/"+sync, func(b *testing.B) {
			s := benchStore(b, sync)
			storetest.BenchAppend(b, s, 8, 6, 300)
			reportGroups(b, s)
		})
	}
}

// BenchmarkAppendSerial is BenchmarkAppend from one session: no group
// commit, each step waits for its own commit.
func BenchmarkAppendSerial(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(driverName+"/"+sync, func(b *testing.B) {
			storetest.BenchAppend(b, benchStore(b, sync), 1, 6, 300)
		})
	}
}

// BenchmarkReplay reads a session of 100,000 events back; an op is a full
// replay.
func BenchmarkReplay(b *testing.B) {
	b.Run(driverName, func(b *testing.B) {
		storetest.BenchReplay(b, benchStore(b, "NORMAL"), 100_000)
	})
}

// BenchmarkSnapshotLoad reads a 64 MiB snapshot back (a session of about
// half a million events has one of that size); an op is one read.
func BenchmarkSnapshotLoad(b *testing.B) {
	b.Run(driverName, func(b *testing.B) {
		storetest.BenchSnapshotLoad(b, benchStore(b, "NORMAL"), 64<<20)
	})
}

// BenchmarkDurableNotifications appends the step that ends a subagent run
// (run.ended, notification.written, the run row and the new note row) from
// 8 concurrent sessions.
func BenchmarkDurableNotifications(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(driverName+"/"+sync, func(b *testing.B) {
			s := benchStore(b, sync)
			storetest.BenchNotifications(b, s, 8)
			reportGroups(b, s)
		})
	}
}
