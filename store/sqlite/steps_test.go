package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// hold runs a job that keeps the writer busy until release is called, so
// that the writes queued meanwhile form one group.
func hold(t *testing.T, s *Store) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.write(context.Background(), "hold", func(*writer) error {
			close(held)
			<-done
			return nil
		})
	}()
	<-held
	return func() {
		close(done)
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// waitQueued waits (bounded) until n jobs are queued behind a held one.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := 0; len(s.jobs) < n; i++ {
		if i > 50_000_000 {
			t.Fatalf("only %d jobs queued, want %d", len(s.jobs), n)
		}
		runtime.Gosched()
	}
}

func lease(t *testing.T, s *Store, sess string) int64 {
	t.Helper()
	l, err := s.LeaseAcquire(context.Background(), &store.LeaseAcquireParams{Session: sess, Owner: "n", TTL: time.Hour, Now: time.Unix(1e9, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Epoch
}

// TestLeaseRowsCounted: the writer counts its lease writes in Stats, as
// rows of leases, each once (a release was counted twice).
func TestLeaseRowsCounted(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), nil)
	before := s.Stats()
	epoch := lease(t, s, "s")
	if err := s.LeaseRelease(context.Background(), &store.LeaseReleaseParams{Owner: "n", Leases: []store.LeaseRef{{Session: "s", Epoch: epoch}}}); err != nil {
		t.Fatal(err)
	}
	d := s.Stats().Since(before)
	if d.Rows != 2 || d.Tables["leases"] != 2 || len(d.Tables) != 1 {
		t.Errorf("an acquire and a release: %d rows, by table %v; want 2 of leases", d.Rows, d.Tables)
	}
}

// TestOneRowPerStep: a step of several events is one stored row, its
// projection rows are one row each, and the Stats say so.
func TestOneRowPerStep(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), nil)
	ctx := context.Background()
	epoch := lease(t, s, "s")
	before := s.Stats()
	at := time.Unix(1e9, 0)
	recs := make([]store.Record, 14)
	for i := range recs {
		recs[i] = store.Record{Session: "s", Seq: int64(i + 1), At: at, Type: "e", Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	res, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: epoch, Records: recs, Projection: &store.Projection{
		Session: &store.SessionRow{ID: "s", Created: at, Updated: at, LastSeq: 14},
		Notes:   []store.NoteRow{{Session: "s", Task: "t1", Run: 1, New: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}; !slices.Equal(res.Globals, want) {
		t.Errorf("globals %v", res.Globals)
	}
	d := s.Stats()
	if got := d.Rows - before.Rows; got != 3 {
		t.Errorf("%d rows for a step of 14 events, a session row and a note; want 3", got)
	}
	if d.Commits-before.Commits != 1 || d.Appends-before.Appends != 1 {
		t.Errorf("stats %+v after %+v", d, before)
	}
	var n int
	if err := s.rdb.QueryRow(`SELECT COUNT(*) FROM steps`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d step rows, %v", n, err)
	}
	got, err := s.EventList(ctx, &store.EventListParams{Session: "s", AfterSeq: 5, Limit: 4})
	if err != nil || len(got) != 4 || got[0].Seq != 6 || got[3].Seq != 9 || got[0].Global != 6 || string(got[0].Data) != `{"i":5}` {
		t.Errorf("list after 5, limit 4: %+v, %v", got, err)
	}
	all, err := s.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: 12})
	if err != nil || len(all) != 2 || all[0].Seq != 13 || all[0].Session != "s" {
		t.Errorf("list all after 12: %+v, %v", all, err)
	}
}

// TestGroupCoalesces: appends that share a commit write each projection
// row once per key (the last one) and all their steps in one statement,
// a duplicate notification within the group is reported to the append
// that repeated it, and an item one append enqueues and a later one takes
// is never written.
func TestGroupCoalesces(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), nil)
	ctx := context.Background()
	at := time.Unix(1e9, 0)
	const sessions = 6
	epochs := map[string]int64{}
	for i := range sessions {
		epochs[fmt.Sprint("c", i)] = lease(t, s, fmt.Sprint("c", i))
	}
	release := hold(t, s)
	before := s.Stats()
	var wg sync.WaitGroup
	results := make([]*store.AppendResult, sessions+2)
	errs := make([]error, sessions+2)
	for i := range sessions {
		sess := fmt.Sprint("c", i)
		wg.Go(func() {
			results[i], errs[i] = s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: epochs[sess],
				Records: []store.Record{{Seq: 1, At: at, Type: "e"}, {Seq: 2, At: at, Type: "e"}},
				Projection: &store.Projection{
					Session: &store.SessionRow{ID: sess, Title: "first", Created: at, Updated: at, LastSeq: 2},
					Notes:   []store.NoteRow{{Session: sess, Task: "t1", Run: 1, New: true, Status: "completed"}},
				}})
		})
	}
	waitQueued(t, s, sessions)
	// Two more steps of c0 in the same group: the second's title wins, and
	// its new note t1#1 repeats the first's. The first enqueues items i1
	// and i2, the second takes i1.
	for k, title := range []string{"second", "third"} {
		wg.Go(func() {
			seq := int64(3 + k)
			pr := &store.Projection{
				Session: &store.SessionRow{ID: "c0", Title: title, Created: at, Updated: at, LastSeq: seq},
				Notes:   []store.NoteRow{{Session: "c0", Task: "t1", Run: 1, New: k == 1, Status: "delivered"}},
			}
			if k == 0 {
				pr.Items = []store.ItemRow{{Session: "c0", ID: "i1", Agent: "main", Enqueued: at}, {Session: "c0", ID: "i2", Agent: "main", Enqueued: at}}
			} else {
				pr.ItemsGone = []string{"i1"}
			}
			results[sessions+k], errs[sessions+k] = s.EventAppend(ctx, &store.EventAppendParams{Session: "c0", Epoch: epochs["c0"],
				Records: []store.Record{{Seq: seq, At: at, Type: "e"}}, Projection: pr})
		})
		waitQueued(t, s, sessions+k+1)
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	after := s.Stats()
	if c := after.Commits - before.Commits; c != 2 {
		t.Errorf("%d commits, want 2 (the held job's and the group's)", c)
	}
	// 8 steps, 6 session rows, 6 notes and item i2: c0's three steps wrote
	// its session row and its note once each, and i1 not at all.
	if r := after.Rows - before.Rows; r != 21 {
		t.Errorf("%d rows, want 21", r)
	}
	if items, err := s.ItemList(ctx, "c0"); err != nil || len(items) != 1 || items[0].ID != "i2" {
		t.Errorf("c0's items %+v, %v; want i2 alone", items, err)
	}
	if !slices.Equal(results[sessions+1].DuplicateNotes, []string{"t1#1"}) || len(results[0].DuplicateNotes)+len(results[sessions].DuplicateNotes) != 0 {
		t.Errorf("duplicates %v %v %v", results[0].DuplicateNotes, results[sessions].DuplicateNotes, results[sessions+1].DuplicateNotes)
	}
	row, err := s.SessionGet(ctx, "c0")
	if err != nil || row.Title != "third" || row.LastSeq != 4 {
		t.Errorf("c0's row %+v, %v", row, err)
	}
	notes, err := s.NoteList(ctx, "c0")
	if err != nil || len(notes) != 1 || notes[0].Status != "delivered" {
		t.Errorf("c0's notes %+v, %v", notes, err)
	}
	if n, err := s.LastSeq(ctx, "c0"); err != nil || n != 4 {
		t.Errorf("c0's last seq %d, %v", n, err)
	}
}

// TestGroupSplitsOnFailedFlush: when writing a group's staged rows fails,
// its jobs are committed one by one, so only the job whose row failed
// loses its write.
func TestGroupSplitsOnFailedFlush(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), nil)
	ctx := context.Background()
	at := time.Unix(1e9, 0)
	for i := range 4 {
		sess := fmt.Sprint("f", i)
		if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: lease(t, s, sess),
			Records: []store.Record{{Seq: 1, At: at, Type: "e"}}}); err != nil {
			t.Fatal(err)
		}
	}
	release := hold(t, s)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 3 {
		sess := fmt.Sprint("f", i)
		wg.Go(func() {
			_, errs[i] = s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: 1,
				Records: []store.Record{{Seq: 2, At: at, Type: "e"}}})
		})
	}
	waitQueued(t, s, 3)
	wg.Go(func() {
		// A staged step whose position is taken: the insert fails at flush.
		errs[3] = s.write(ctx, "bad", func(w *writer) error {
			w.g.steps = append(w.g.steps, []any{int64(1), "f3", int64(2), int64(2), []byte{1, 0}})
			return nil
		})
	})
	waitQueued(t, s, 4)
	release()
	wg.Wait()
	for i := range 3 {
		if errs[i] != nil {
			t.Errorf("append f%d: %v", i, errs[i])
		}
		if n, err := s.LastSeq(ctx, fmt.Sprint("f", i)); err != nil || n != 2 {
			t.Errorf("f%d's last seq %d, %v", i, n, err)
		}
	}
	if errs[3] == nil {
		t.Error("the failing write succeeded")
	}
	if n, err := s.LastSeq(ctx, "f3"); err != nil || n != 1 {
		t.Errorf("f3's last seq %d, %v", n, err)
	}
}

// TestMigrateEvents opens a database of schema version 1, whose log is one
// row per event: its events come back with the same sequences, globals,
// times and bodies, and new steps continue after them.
func TestMigrateEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	if err := createFile(path); err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(&connector{drv: newDriver(), dsn: path, init: []string{"PRAGMA journal_mode = WAL"}})
	v1, err := migrations.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 1, 0, 0, 0, 5, time.UTC)
	for _, q := range []string{string(v1), "CREATE TABLE schema_version (version INTEGER NOT NULL)", "INSERT INTO schema_version VALUES (1)",
		"INSERT INTO leases VALUES ('a', 'n', 1, 0)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range []struct {
		sess string
		seq  int64
	}{{"a", 1}, {"b", 1}, {"a", 2}, {"a", 3}, {"b", 2}} {
		if _, err := db.Exec(`INSERT INTO events (session, seq, at, type, data) VALUES (?, ?, ?, ?, ?)`,
			e.sess, e.seq, at.UnixNano(), "t", fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path, nil)
	ctx := context.Background()
	all, err := s.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil || len(all) != 5 {
		t.Fatalf("list all: %+v, %v", all, err)
	}
	for i, r := range all {
		if r.Global != int64(i+1) || !r.At.Equal(at) || string(r.Data) != fmt.Sprintf(`{"n":%d}`, i) || r.Type != "t" {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if n, err := s.LastSeq(ctx, "a"); err != nil || n != 3 {
		t.Errorf("a's last seq %d, %v", n, err)
	}
	res, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "a", Epoch: 1, Records: []store.Record{{Seq: 4, At: at, Type: "t"}}})
	if err != nil || !slices.Equal(res.Globals, []int64{6}) {
		t.Errorf("append after migration: %+v, %v", res, err)
	}
	var tables int
	if err := s.rdb.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'events'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("events table left: %d, %v", tables, err)
	}
}

func TestWrittenTable(t *testing.T) {
	for q, want := range map[string]string{
		"INSERT INTO steps (glast, session) VALUES (?, ?)": "steps",
		"INSERT INTO notes(session) VALUES (?)":            "notes",
		"\n\t\tUPDATE leases SET expires = ?":              "leases",
		"DELETE FROM items WHERE (session, id) IN (?)":     "items",
		"SELECT 1": "other",
	} {
		if got := writtenTable(q); got != want {
			t.Errorf("writtenTable(%q) = %q, want %q", q, got, want)
		}
	}
}
