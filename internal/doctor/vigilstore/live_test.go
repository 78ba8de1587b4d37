//go:build !vigil_mattn

// The store stays open while the reader reads it: with -tags vigil_mattn
// the store would be the cgo SQLite and the reader the pure-Go one, two
// builds holding one file in one process, which store/sqlite warns against
// (each keeps its own POSIX locks).

package vigilstore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/sqlite"
)

// TestWhileVigilRuns reads a store that a vigil still has open: its last
// commits are in the write-ahead log, and the reader sees them.
func TestWhileVigilRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := runOn(t, ctx, st, dir)
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("no write-ahead log beside a store in use: %v", err)
	}
	want, err := st.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	got, err := ro.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || got[len(got)-1].Type != "session.closed" {
		t.Fatalf("read %d records, the store has %d", len(got), len(want))
	}
	rep, err := Scan(ctx, ro, Options{Name: path})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 {
		t.Fatalf("session %s:\n%s", id, text(t, rep))
	}
	if _, err := ro.db.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.db.ExecContext(ctx, "CREATE TABLE doctor_was_here (x)"); err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("a write on the read-only connection: %v", err)
	}
}
