package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/internal/steps"
	"github.com/vigilrun/vigil/store"
)

// TestMigrateEvents opens a database at schema version 1 whose log is in
// the events table: the migration turns each event into a step of one
// record, encoded exactly as internal/steps encodes it, and the log reads
// back the same, with its globals, and goes on after them.
func TestMigrateEvents(t *testing.T) {
	dsn := testDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	v1, err := migrations.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(v1)+`;
		CREATE TABLE schema_version (version INT NOT NULL);
		INSERT INTO schema_version (version) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000/16) // a length of three varint bytes
	big[7] = 0
	ns := func(t time.Time) *int64 { n := t.UnixNano(); return &n }
	type old struct {
		rec store.Record
		at  *int64
	}
	events := []old{
		{store.Record{Session: "a", Seq: 1, Global: 1, Type: "session.created", Data: []byte(`{"title":"old"}`)}, nil},
		{store.Record{Session: "b", Seq: 1, Global: 2, At: time.Unix(0, 0).UTC(), Type: "", Data: []byte{}}, ns(time.Unix(0, 0))},
		{store.Record{Session: "a", Seq: 2, Global: 3, At: time.Unix(0, -1).UTC(), Type: "ünïcode.type", Data: []byte(`{"k":"\u00e9"}`)}, ns(time.Unix(0, -1))},
		{store.Record{Session: "b", Seq: 2, Global: 4, At: time.Unix(0, math.MaxInt64).UTC(), Type: "big", Data: big}, ns(time.Unix(0, math.MaxInt64))},
		{store.Record{Session: "a", Seq: 3, Global: 5, At: time.Unix(0, math.MinInt64).UTC(), Type: "t", Data: []byte("x")}, ns(time.Unix(0, math.MinInt64))},
		{store.Record{Session: "a", Seq: 4, Global: 7, At: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC), Type: "run.ended", Data: []byte(`{"seq":4}`)}, ns(time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC))},
	}
	for _, e := range events {
		r := e.rec
		if _, err := conn.Exec(ctx, `INSERT INTO events (global, session, seq, at, type, data) VALUES ($1, $2, $3, $4, $5, $6)`,
			r.Global, r.Session, r.Seq, e.at, r.Type, r.Data); err != nil {
			t.Fatal(err)
		}
	}
	// Global 6 was taken by an append that rolled back.
	if _, err := conn.Exec(ctx, `UPDATE event_counter SET last = 7`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO leases (session, owner, epoch, expires) VALUES ('a', 'A', 3, 0)`); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, dsn)
	var gone bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('events') IS NULL`).Scan(&gone); err != nil || !gone {
		t.Fatalf("events table still there (%v)", err)
	}
	// Each event is a step of its own, encoded by the shared codec's rules.
	for _, e := range events {
		var last, global, glast int64
		var data []byte
		if err := conn.QueryRow(ctx, `SELECT last, global, glast, data FROM steps WHERE session = $1 AND seq = $2`, e.rec.Session, e.rec.Seq).
			Scan(&last, &global, &glast, &data); err != nil {
			t.Fatalf("step %s#%d: %v", e.rec.Session, e.rec.Seq, err)
		}
		want, err := steps.Encode(nil, []store.Record{e.rec})
		if err != nil {
			t.Fatal(err)
		}
		if last != e.rec.Seq || global != e.rec.Global || glast != e.rec.Global || !bytes.Equal(data, want) {
			t.Fatalf("step %s#%d: last %d, global %d..%d, data %.40x; want %d, %d..%d, %.40x", e.rec.Session, e.rec.Seq,
				last, global, glast, data, e.rec.Seq, e.rec.Global, e.rec.Global, want)
		}
	}

	per := map[string][]store.Record{}
	var all []store.Record
	for _, e := range events {
		per[e.rec.Session] = append(per[e.rec.Session], e.rec)
		all = append(all, e.rec)
	}
	checkSame := func(what string, got, want []store.Record) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Session != w.Session || g.Seq != w.Seq || g.Global != w.Global || !g.At.Equal(w.At) || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("%s: record %d is %s#%d@%d %v %q %.20q, want %s#%d@%d %v %q %.20q", what, i,
					g.Session, g.Seq, g.Global, g.At, g.Type, g.Data, w.Session, w.Seq, w.Global, w.At, w.Type, w.Data)
			}
		}
	}
	for sess, want := range per {
		got, err := s.EventList(ctx, &store.EventListParams{Session: sess})
		if err != nil {
			t.Fatal(err)
		}
		checkSame("list "+sess, got, want)
		if n, err := s.LastSeq(ctx, sess); err != nil || n != want[len(want)-1].Seq {
			t.Fatalf("last seq of %s: %d, %v", sess, n, err)
		}
	}
	got, err := s.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	checkSame("list all", got, all)
	got, err = s.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: 2, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkSame("list all after 2, limit 2", got, all[2:4])

	// The log goes on after the old globals.
	next := []store.Record{
		{Session: "a", Seq: 5, At: time.Unix(1, 0).UTC(), Type: "new", Data: []byte(`{"n":5}`)},
		{Session: "a", Seq: 6, At: time.Unix(2, 0).UTC(), Type: "new", Data: []byte(`{"n":6}`)},
	}
	res, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "a", Epoch: 3, Records: next})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Globals, []int64{8, 9}) {
		t.Fatalf("globals after migration: %v, want [8 9]", res.Globals)
	}
	next[0].Global, next[1].Global = 8, 9
	got, err = s.EventList(ctx, &store.EventListParams{Session: "a", AfterSeq: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkSame("list a after 3", got, append([]store.Record{per["a"][3]}, next...))
}

// blockWriter holds event_counter's row lock from another connection and
// makes the writer commit one append (of session sess, which must be
// leased at epoch) that waits for it: until release is called, the writer
// is stuck in that group and every later append queues. release returns
// the blocking append's error.
func blockWriter(t *testing.T, s *Store, dsn, sess string, epoch int64) (release func() error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT last FROM event_counter FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	last, err := s.LastSeq(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: epoch, Records: rec(last+1, "blocker")})
		done <- err
	}()
	// Wait for the writer's backend to wait for the lock (asked on another
	// connection: a transaction sees one snapshot of pg_stat_activity).
	for {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%event_counter%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return func() error {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		return <-done
	}
}

// queued is an append started in the background.
type queued struct {
	res  *store.AppendResult
	err  error
	done chan struct{}
}

// enqueue starts an append and waits until it is in the writer's queue, so
// that appends queue in the order enqueue is called.
func enqueue(t *testing.T, s *Store, p *store.EventAppendParams) *queued {
	t.Helper()
	n := len(s.jobs)
	q := &queued{done: make(chan struct{})}
	go func() {
		defer close(q.done)
		q.res, q.err = s.EventAppend(context.Background(), p)
	}()
	for len(s.jobs) == n {
		time.Sleep(100 * time.Microsecond)
	}
	return q
}

func (q *queued) wait() (*store.AppendResult, error) {
	<-q.done
	return q.res, q.err
}

func stepRecs(sess string, from int64, n int, tag string) []store.Record {
	out := make([]store.Record, n)
	for i := range out {
		seq := from + int64(i)
		out[i] = store.Record{Session: sess, Seq: seq, At: time.Unix(0, seq).UTC(), Type: "test",
			Data: fmt.Appendf(nil, `{"session":%q,"seq":%d,"tag":%q}`, sess, seq, tag)}
	}
	return out
}

// TestGroupRefusals commits appends queued together as one group: one is
// fenced, some conflict (with the log or with an earlier append of the
// group), one writes a notification twice; the refused ones write nothing
// and the others commit in one transaction, in queue order. Then one
// append of a group breaks the transaction (a constraint the database
// checks): it alone fails and the rest of its group commits.
func TestGroupRefusals(t *testing.T) {
	dsn := testDB(t)
	s := openTest(t, dsn)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	epochs := map[string]int64{}
	for _, sess := range []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "A", TTL: time.Minute, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		epochs[sess] = l.Epoch
	}
	// s2's lease went to B: A's epoch is stale.
	if _, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s2", Owner: "B", TTL: time.Minute, Now: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	note := func(sess, task string, run int, delivery string, isNew bool) store.NoteRow {
		return store.NoteRow{Session: sess, Task: task, Run: run, Owner: "main", Status: "completed", Delivery: delivery, Written: now, New: isNew}
	}
	title := func(sess, title string, last int64) *store.SessionRow {
		return &store.SessionRow{ID: sess, Title: title, Created: now, Updated: now, LastSeq: last}
	}

	release := blockWriter(t, s, dsn, "s0", epochs["s0"])
	before := s.Stats()
	q := []*queued{
		enqueue(t, s, &store.EventAppendParams{Session: "s1", Epoch: epochs["s1"], Records: stepRecs("s1", 1, 2, "ok"),
			Projection: &store.Projection{Session: title("s1", "first", 2), Notes: []store.NoteRow{note("s1", "t1", 1, "queued", true)}}}),
		enqueue(t, s, &store.EventAppendParams{Session: "s2", Epoch: epochs["s2"], Records: stepRecs("s2", 1, 1, "fenced"),
			Projection: &store.Projection{Session: title("s2", "fenced", 1), Notes: []store.NoteRow{note("s2", "t9", 1, "queued", true)}}}),
		enqueue(t, s, &store.EventAppendParams{Session: "s3", Epoch: epochs["s3"], Records: stepRecs("s3", 2, 1, "gap"),
			Projection: &store.Projection{Session: title("s3", "gap", 2)}}),
		enqueue(t, s, &store.EventAppendParams{Session: "s1", Epoch: epochs["s1"], Records: stepRecs("s1", 3, 1, "ok"),
			Projection: &store.Projection{Session: title("s1", "second", 3), Notes: []store.NoteRow{
				note("s1", "t1", 2, "queued", true), note("s1", "t1", 1, "queued", true), note("s1", "t1", 1, "delivered", false)}}}),
		enqueue(t, s, &store.EventAppendParams{Session: "s4", Epoch: epochs["s4"], Records: stepRecs("s4", 1, 1, "ok")}),
		enqueue(t, s, &store.EventAppendParams{Session: "s1", Epoch: epochs["s1"], Records: stepRecs("s1", 3, 1, "dup"),
			Projection: &store.Projection{Session: title("s1", "dup", 3)}}),
		enqueue(t, s, &store.EventAppendParams{Session: "s3", Epoch: epochs["s3"], Records: stepRecs("s3", 1, 2, "ok"),
			Projection: &store.Projection{Session: title("s3", "ok", 2)}}),
	}
	if err := release(); err != nil {
		t.Fatalf("blocking append: %v", err)
	}
	var res []*store.AppendResult
	var errs []error
	for _, x := range q {
		r, err := x.wait()
		res, errs = append(res, r), append(errs, err)
	}
	for i, want := range []error{nil, store.ErrFenced, store.ErrConflict, nil, nil, store.ErrConflict, nil} {
		if want == nil && errs[i] != nil || want != nil && !errors.Is(errs[i], want) {
			t.Fatalf("append %d: %v, want %v", i, errs[i], want)
		}
	}
	after := s.Stats()
	if c, a := after.Commits-before.Commits, after.Appends-before.Appends; c != 2 || a != 5 {
		t.Fatalf("the blocking append and the group: %d commits of %d appends, want 2 of 5", c, a)
	}
	// Globals: contiguous, in queue order, after the blocking append's.
	base := res[0].Globals[0] - 1
	for i, want := range map[int][]int64{0: {base + 1, base + 2}, 3: {base + 3}, 4: {base + 4}, 6: {base + 5, base + 6}} {
		if !slices.Equal(res[i].Globals, want) {
			t.Fatalf("append %d: globals %v, want %v", i, res[i].Globals, want)
		}
	}
	if !slices.Equal(res[3].DuplicateNotes, []string{"t1#1"}) || len(res[0].DuplicateNotes) != 0 {
		t.Fatalf("duplicates %v and %v, want none and [t1#1]", res[0].DuplicateNotes, res[3].DuplicateNotes)
	}
	wantLog := map[string][]store.Record{
		"s1": append(stepRecs("s1", 1, 2, "ok"), stepRecs("s1", 3, 1, "ok")...),
		"s2": nil,
		"s3": stepRecs("s3", 1, 2, "ok"),
		"s4": stepRecs("s4", 1, 1, "ok"),
	}
	for sess, want := range wantLog {
		got, err := s.EventList(ctx, &store.EventListParams{Session: sess})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, want %d", sess, len(got), len(want))
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("%s: record %d is %d %s, want %d %s", sess, i, got[i].Seq, got[i].Data, want[i].Seq, want[i].Data)
			}
		}
	}
	for sess, want := range map[string]string{"s1": "second", "s3": "ok"} {
		if row, err := s.SessionGet(ctx, sess); err != nil || row.Title != want {
			t.Fatalf("session %s: %+v, %v; want title %q", sess, row, err, want)
		}
	}
	if _, err := s.SessionGet(ctx, "s2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the fenced append's session row: %v", err)
	}
	notes, err := s.NoteList(ctx, "s1")
	if err != nil || len(notes) != 2 || notes[0].Run != 1 || notes[0].Delivery != "delivered" || notes[1].Run != 2 {
		t.Fatalf("notes of s1: %+v, %v; want t1#1 delivered, then t1#2", notes, err)
	}
	if notes, err := s.NoteList(ctx, "s2"); err != nil || len(notes) != 0 {
		t.Fatalf("notes of the fenced session: %+v, %v", notes, err)
	}

	// A constraint the database checks and the store does not: an append
	// that breaks it breaks its group's statement.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE runs ADD CONSTRAINT no_poison CHECK (reply <> 'poison')`); err != nil {
		t.Fatal(err)
	}
	run := func(sess, reply string) *store.Projection {
		return &store.Projection{Runs: []store.RunRow{{Session: sess, Agent: "main", Seq: 1, Kind: "prompt", Status: "completed", Started: now, Reply: reply}}}
	}
	release = blockWriter(t, s, dsn, "s0", epochs["s0"])
	q = []*queued{
		enqueue(t, s, &store.EventAppendParams{Session: "s5", Epoch: epochs["s5"], Records: stepRecs("s5", 1, 1, "ok"), Projection: run("s5", "fine")}),
		enqueue(t, s, &store.EventAppendParams{Session: "s6", Epoch: epochs["s6"], Records: stepRecs("s6", 1, 1, "poison"), Projection: run("s6", "poison")}),
		enqueue(t, s, &store.EventAppendParams{Session: "s7", Epoch: epochs["s7"], Records: stepRecs("s7", 1, 1, "ok"), Projection: run("s7", "fine")}),
		enqueue(t, s, &store.EventAppendParams{Session: "s5", Epoch: epochs["s5"], Records: stepRecs("s5", 2, 1, "ok")}),
		enqueue(t, s, &store.EventAppendParams{Session: "s7", Epoch: epochs["s7"], Records: stepRecs("s7", 2, 1, "ok")}),
	}
	if err := release(); err != nil {
		t.Fatalf("blocking append: %v", err)
	}
	for i, x := range q {
		_, err := x.wait()
		if i == 1 {
			if !errors.Is(err, store.ErrRefused) || !strings.Contains(err.Error(), "no_poison") {
				t.Fatalf("the poisoned append: %v, want ErrRefused", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("append %d of the poisoned group: %v", i, err)
		}
	}
	for sess, want := range map[string]int64{"s5": 2, "s6": 0, "s7": 2} {
		if n, err := s.LastSeq(ctx, sess); err != nil || n != want {
			t.Fatalf("last seq of %s: %d, %v; want %d", sess, n, err, want)
		}
	}
	if runs, err := s.RunList(ctx, "s6"); err != nil || len(runs) != 0 {
		t.Fatalf("runs of the poisoned session: %+v, %v", runs, err)
	}
	all, err := s.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Global <= all[i-1].Global {
			t.Fatalf("global %d after %d", all[i].Global, all[i-1].Global)
		}
	}
}

// TestTwoNodesGlobalOrder has two stores ("nodes") on one database append
// to sessions of their own while a reader on a third follows the whole
// log by AfterGlobal in small pages: it must see every committed record
// exactly once, each session's in order, never skipping one that commits
// after a higher global was visible.
func TestTwoNodesGlobalOrder(t *testing.T) {
	dsn := testDB(t)
	nodes := []*Store{openTest(t, dsn), openTest(t, dsn)}
	reader := openTest(t, dsn)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const perNode, stepsEach = 6, 40
	type sess struct {
		s     *Store
		name  string
		epoch int64
	}
	var all []sess
	for n, s := range nodes {
		for i := range perNode {
			name := fmt.Sprintf("n%d-s%d", n, i)
			l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: name, Owner: fmt.Sprint("node", n), TTL: time.Hour, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, sess{s, name, l.Epoch})
		}
	}
	total := 0
	var writers sync.WaitGroup
	errs := make(chan error, len(all)+1)
	for k, x := range all {
		n := 1 + k%3 // steps of 1 to 3 records
		total += n * stepsEach
		writers.Go(func() {
			for i := range stepsEach {
				if _, err := x.s.EventAppend(ctx, &store.EventAppendParams{Session: x.name, Epoch: x.epoch,
					Records: stepRecs(x.name, int64(i*n+1), n, "w")}); err != nil {
					errs <- fmt.Errorf("append %s: %w", x.name, err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()

	after, seen := int64(0), 0
	last := map[string]int64{}
	for seen < total {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		page, err := reader.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: after, Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if r.Global <= after {
				t.Fatalf("global %d after %d", r.Global, after)
			}
			if r.Seq != last[r.Session]+1 {
				t.Fatalf("skipped: %s#%d after %s#%d (global %d after %d)", r.Session, r.Seq, r.Session, last[r.Session], r.Global, after)
			}
			after, last[r.Session] = r.Global, r.Seq
			seen++
		}
		if len(page) == 0 && finished {
			break
		}
	}
	writers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if seen != total {
		t.Fatalf("the reader saw %d of %d records", seen, total)
	}
	var commits int64
	for _, s := range nodes {
		commits += s.Stats().Commits
	}
	t.Logf("%d records in %d commits of two nodes", total, commits)
}
