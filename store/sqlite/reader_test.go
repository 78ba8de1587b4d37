package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// appendSteps writes n one-record steps of session sess.
func appendSteps(t *testing.T, s *Store, sess string, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "node", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: l.Epoch, Records: []store.Record{{Seq: int64(i), At: now, Type: "t", Data: []byte(`{"i":1}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// files hashes every file of dir, with its modification time.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = fi.ModTime().String() + " " + string(sum[:])
	}
	return out
}

// A Reader sees what a Store still open wrote (its commits in the
// write-ahead log), cannot write even with query_only turned off, and
// leaves a closed store's files exactly as they were.
func TestReader(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	s := openTest(t, path, nil)
	appendSteps(t, s, "s1", 5)
	want, err := s.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: want[1].Global, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Global != want[2].Global || got[1].Seq != 4 || string(got[0].Data) != `{"i":1}` {
		t.Fatalf("read %+v, the store has %+v", got, want)
	}
	if _, err := r.db.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.ExecContext(ctx, "CREATE TABLE reader_was_here (x)"); err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("a write through the reader: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	r, err = OpenReader(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.EventListAll(ctx, &store.EventListAllParams{}); err != nil || len(got) != len(want) {
		t.Fatalf("after the close: %d records, %v", len(got), err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	after := files(t, dir)
	if len(after) != len(before) {
		t.Fatalf("files before %v, after %v", before, after)
	}
	for name, h := range before {
		if after[name] != h {
			t.Errorf("%s changed", name)
		}
	}
}

// A file that is not a store, or a directory, is refused with a clear
// error.
func TestReaderRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := OpenReader(ctx, dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("a directory: %v", err)
	}
	if _, err := OpenReader(ctx, filepath.Join(dir, "none.db")); err == nil {
		t.Fatal("a missing file was opened")
	}
	other := filepath.Join(dir, "other.db")
	db := sql.OpenDB(&connector{drv: newDriver(), dsn: other})
	if _, err := db.ExecContext(ctx, "CREATE TABLE notes (x)"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReader(ctx, other); err == nil || !strings.Contains(err.Error(), "no steps table") {
		t.Fatalf("a file without steps: %v", err)
	}
}
