package sqlite

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// TestMigrateFromVersion3 opens a database of schema version 3, whose
// sessions have no needs_you column: its rows come back unchanged with
// none, and new rows store their reasons. Its items table holds the items
// that left their inbox too (version 5 keeps the inboxes only): they go,
// the ones that wait stay.
func TestMigrateFromVersion3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	if err := createFile(path); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := sql.OpenDB(&connector{drv: newDriver(), dsn: path, init: []string{"PRAGMA journal_mode = WAL"}})
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	exec("CREATE TABLE schema_version (version INTEGER NOT NULL)")
	for v, name := range []string{"migrations/0001_init.sql", "migrations/0002_steps.sql", "migrations/0003_cluster.sql"} {
		body, err := migrations.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		exec(string(body))
		if post := afterMigration[v+1]; post != nil {
			if err := post(ctx, conn); err != nil {
				t.Fatal(err)
			}
		}
		exec("INSERT INTO schema_version VALUES (?)", v+1)
	}
	at := time.Date(2026, 11, 1, 0, 0, 0, 5, time.UTC)
	exec(`INSERT INTO sessions (id, title, owner, provider, model, cwd, closed, created, updated, last_seq, input_tokens, output_tokens)
		VALUES ('old', 'before', 'alice', 'script', 'm', '/w', 0, ?, ?, 7, 10, 20)`, at.UnixNano(), at.Add(time.Hour).UnixNano())
	exec("INSERT INTO leases VALUES ('old', 'n', 1, 0)")
	exec(`INSERT INTO items (session, id, agent, kind, priority, sender, status, run, enqueued) VALUES
		('old', 'i1', 'a0', 'prompt', 'next', 'user', 'taken', 1, ?), ('old', 'i2', 'a0', 'message', 'later', 'a1', 'queued', 0, ?)`, at.UnixNano(), at.UnixNano())
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, path, nil)
	want := store.SessionRow{ID: "old", Title: "before", Owner: "alice", Provider: "script", Model: "m", Cwd: "/w",
		Created: at, Updated: at.Add(time.Hour), LastSeq: 7, InputTokens: 10, OutputTokens: 20}
	got, err := s.SessionGet(ctx, "old")
	if err != nil || got.Title != want.Title || !got.Updated.Equal(want.Updated) || got.LastSeq != 7 || got.OutputTokens != 20 || got.NeedsYou != nil {
		t.Fatalf("a version 3 row after the migration: %+v, %v; want %+v", got, err, want)
	}
	var version int
	names, _ := fs.Glob(migrations, "migrations/*.sql")
	if err := s.rdb.QueryRow(`SELECT MAX(version) FROM schema_version`).Scan(&version); err != nil || version != len(names) {
		t.Errorf("schema version %d, %v; want %d", version, err, len(names))
	}
	items, err := s.ItemList(ctx, "old")
	if err != nil || len(items) != 1 || items[0].ID != "i2" || items[0].Priority != "later" || !items[0].Enqueued.Equal(at) {
		t.Errorf("items after the migration: %+v, %v; want i2 alone (i1 was taken)", items, err)
	}
	want.NeedsYou, want.LastSeq = []string{"approval p1: Bash (main)"}, 8
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "old", Epoch: 1,
		Records: []store.Record{{Seq: 1, At: at, Type: "t"}}, Projection: &store.Projection{Session: &want}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.SessionList(ctx, &store.SessionListParams{})
	if err != nil || len(list) != 1 || !slices.Equal(list[0].NeedsYou, want.NeedsYou) {
		t.Fatalf("after an append: %+v, %v; want needs_you %q", list, err, want.NeedsYou)
	}
}
