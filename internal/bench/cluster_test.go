package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/postgres"
)

// clusterStores opens n stores on one fresh PostgreSQL database, closed at
// the end of tb.
func clusterStores(tb testing.TB, n int) ([]store.Store, string) {
	tb.Helper()
	dsn := pgtest.Fresh(tb)
	var stores []store.Store
	for range n {
		st, err := postgres.Open(context.Background(), dsn, nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	return stores, dsn
}

// LoadCluster on three nodes of one database delivers every notification
// (Load's own checks), with sessions created on every node.
func TestLoadClusterDelivers(t *testing.T) {
	stores, _ := clusterStores(t, 3)
	r, err := LoadCluster(context.Background(), ClusterConfig{Stores: stores, DataDir: t.TempDir(), N: 120, Workers: 2}, 6)
	if err != nil {
		t.Fatal(err)
	}
	if want := 6 * LoadShare(120, 6, 2); r.Notifications != want {
		t.Fatalf("%d notifications delivered, want %d", r.Notifications, want)
	}
	t.Logf("3 nodes: %d notifications, %.0f/s, wake p50 %s p99 %s", r.Notifications, r.PerSecond, r.Wake.P50, r.Wake.P99)
}

// IdleCluster counts the database's transactions over its window.
func TestIdleClusterCounts(t *testing.T) {
	stores, dsn := clusterStores(t, 3)
	r, err := IdleCluster(context.Background(), ClusterConfig{Stores: stores, DataDir: t.TempDir()}, dsn, 30, 0, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commits < 0 || r.Nodes != 3 || r.Sessions != 30 {
		t.Fatalf("%+v", r)
	}
	t.Logf("30 idle sessions over 3 nodes: %d transactions in %s (%.1f/s), per node %v", r.Commits, r.Window, r.PerSecond(), r.PerNode)
}

// BenchmarkLoadCluster: Load's workload (10 sessions, 2000 notifications)
// on 1 and 3 nodes of one PostgreSQL database.
func BenchmarkLoadCluster(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var last LoadResult
			for b.Loop() {
				stores, _ := clusterStores(b, nodes)
				r, err := LoadCluster(context.Background(), ClusterConfig{Stores: stores, DataDir: b.TempDir(), N: 2000}, 10)
				if err != nil {
					b.Fatal(err)
				}
				last = r
			}
			b.ReportMetric(last.PerSecond, "notifs/s")
			b.ReportMetric(float64(last.Wake.P99.Microseconds())/1000, "wake-p99-ms")
		})
	}
}
