package postgres

import (
	"context"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/storetest"
)

// testDB creates a database of the test's own (see internal/pgtest).
func testDB(t testing.TB) string { return pgtest.Fresh(t) }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func openTest(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, &Options{
		MaxConns: 8,
		Logger:   slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, testDB(t)) })
}

// TestConformanceShared runs the checks of two stores (nodes) on one
// database.
func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, storetest.Shared{
		Open: func(t *testing.T) (store.Store, store.Store) {
			dsn := testDB(t)
			return openTest(t, dsn), openTest(t, dsn)
		},
		WatchesOthers: true,
	})
}

// TestMigrateTwice opens a migrated database again, and two stores at once.
func TestMigrateTwice(t *testing.T) {
	dsn := testDB(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			s, err := Open(context.Background(), dsn, nil)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s := openTest(t, dsn)
	// Each version migrated once.
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var n, distinct int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT version) FROM schema_version`).Scan(&n, &distinct); err != nil || n != len(names) || distinct != n {
		t.Fatalf("schema_version: %d rows of %d versions, %v; want %d", n, distinct, err, len(names))
	}
}

// TestSnapshotsLZ4: on a server built with lz4, snapshots are stored
// compressed with it (schema 6); a server without keeps pglz, and the
// migration does not fail.
func TestSnapshotsLZ4(t *testing.T) {
	dsn := testDB(t)
	s := openTest(t, dsn)
	ctx := context.Background()
	// Whether the server has lz4: a scratch table tells.
	_, probe := s.pool.Exec(ctx, `CREATE TEMP TABLE lz4_probe (b bytea COMPRESSION lz4)`)
	var method string
	if err := s.pool.QueryRow(ctx, `SELECT attcompression FROM pg_attribute WHERE attrelid = 'snapshots'::regclass AND attname = 'data'`).Scan(&method); err != nil {
		t.Fatal(err)
	}
	switch {
	case probe == nil && method != "l":
		t.Errorf("the server has lz4, and the snapshots' compression is %q, want l (lz4)", method)
	case probe != nil && method != "" && method != "\x00":
		t.Errorf("the server has no lz4 (%v), and the snapshots' compression is %q, want the default", probe, method)
	}
	if probe != nil {
		t.Logf("this server has no lz4: %v", probe)
	}
}

// The ceiling measures both figures and the single commits' latencies.
func TestMeasureCeiling(t *testing.T) {
	c, err := MeasureCeiling(context.Background(), testDB(t), nil, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckCeiling(t, c)
}
