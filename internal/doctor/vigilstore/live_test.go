package vigilstore

import (
	"context"
	"os"
	"path/filepath"
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
	ro, err := sqlite.OpenReader(ctx, path)
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
}
