// Package storetest is the conformance suite every store.Store backend
// passes: Run checks the log, sequence conflicts, notification uniqueness,
// leases and fencing, concurrency, replay, large payloads, snapshots,
// projections, nodes, the lease list, task outputs, Watch, Close and error
// wrapping. RunShared checks two stores on one database (two nodes):
// global order with writers on both, and what one sees of the other's
// writes. RunFault checks what a backend does when its storage fills up or
// goes away, with a fault the backend's own test knows how to cause.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// AgentLister is implemented by backends that can list a session's agent
// rows (in creation order). Run checks it when the store has it.
type AgentLister interface {
	AgentList(ctx context.Context, session string) ([]store.AgentRow, error)
}

// ItemLister is implemented by backends that can list a session's inbox item
// rows (in enqueue order). Run checks it when the store has it.
type ItemLister interface {
	ItemList(ctx context.Context, session string) ([]store.ItemRow, error)
}

// Run runs the conformance suite. open returns a new, empty store for each
// subtest and arranges for it to be closed and removed when t ends; the
// suite may close it earlier.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"AppendList", testAppendList},
		{"SeqConflict", testSeqConflict},
		{"NoteUnique", testNoteUnique},
		{"Lease", testLease},
		{"LeaseSteal", testLeaseSteal},
		{"LeaseRelease", testLeaseRelease},
		{"LeaseRenewMany", testLeaseRenewMany},
		{"LeaseAcquireMany", testLeaseAcquireMany},
		{"ProjectionOnly", testProjectionOnly},
		{"Stats", testStats},
		{"UnchangedRows", testUnchangedRows},
		{"Fencing", testFencing},
		{"ConcurrentSessions", testConcurrentSessions},
		{"ConcurrentSameSession", testConcurrentSameSession},
		{"ReplayWhileWriting", testReplayWhileWriting},
		{"Large", testLarge},
		{"Snapshot", testSnapshot},
		{"TailLoadMany", testTailLoadMany},
		{"Projections", testProjections},
		{"NeedsYou", testNeedsYou},
		{"Errors", testErrors},
		{"Text", testText},
		{"Nodes", testNodes},
		{"LeaseList", testLeaseList},
		{"Output", testOutput},
		{"Watch", testWatch},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// base is the suite's clock origin: fixed, with nanoseconds, so that times
// must round-trip exactly.
var base = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

const ttl = time.Minute

func acquire(t testing.TB, s store.Store, sess, owner string, now time.Time) *store.Lease {
	t.Helper()
	l, err := s.LeaseAcquire(context.Background(), &store.LeaseAcquireParams{Session: sess, Owner: owner, TTL: ttl, Now: now})
	if err != nil {
		t.Fatalf("acquire %s for %s: %v", sess, owner, err)
	}
	return l
}

// recs returns n records of sess from seq from, tagged so a reader can tell
// who wrote them.
func recs(sess string, from int64, n int, tag string) []store.Record {
	out := make([]store.Record, n)
	for i := range out {
		seq := from + int64(i)
		out[i] = store.Record{
			Session: sess, Seq: seq, At: base.Add(time.Duration(seq)*time.Millisecond + time.Duration(seq)),
			Type: "test.event", Data: fmt.Appendf(nil, `{"session":%q,"seq":%d,"tag":%q}`, sess, seq, tag),
		}
	}
	return out
}

func appendOK(t testing.TB, s store.Store, sess string, epoch int64, rs []store.Record, p *store.Projection) *store.AppendResult {
	t.Helper()
	res, err := s.EventAppend(context.Background(), &store.EventAppendParams{Session: sess, Epoch: epoch, Records: rs, Projection: p})
	if err != nil {
		t.Fatalf("append %s seq %d..: %v", sess, rs[0].Seq, err)
	}
	if res == nil {
		t.Fatalf("append %s: nil result", sess)
	}
	return res
}

func list(t testing.TB, s store.Store, sess string) []store.Record {
	t.Helper()
	got, err := s.EventList(context.Background(), &store.EventListParams{Session: sess})
	if err != nil {
		t.Fatalf("list %s: %v", sess, err)
	}
	return got
}

func listAll(t testing.TB, s store.Store) []store.Record {
	t.Helper()
	got, err := s.EventListAll(context.Background(), &store.EventListAllParams{})
	if err != nil {
		t.Fatalf("list all: %v", err)
	}
	return got
}

func lastSeq(t testing.TB, s store.Store, sess string) int64 {
	t.Helper()
	n, err := s.LastSeq(context.Background(), sess)
	if err != nil {
		t.Fatalf("last seq of %s: %v", sess, err)
	}
	return n
}

// sameRecord reports how got differs from want, ignoring Global.
func sameRecord(got, want store.Record) string {
	switch {
	case got.Session != want.Session:
		return fmt.Sprintf("session %q, want %q", got.Session, want.Session)
	case got.Seq != want.Seq:
		return fmt.Sprintf("seq %d, want %d", got.Seq, want.Seq)
	case !got.At.Equal(want.At):
		return fmt.Sprintf("at %v, want %v", got.At, want.At)
	case got.Type != want.Type:
		return fmt.Sprintf("type %q, want %q", got.Type, want.Type)
	case !bytes.Equal(got.Data, want.Data):
		return fmt.Sprintf("data %.60q (%d bytes), want %.60q (%d bytes)", got.Data, len(got.Data), want.Data, len(want.Data))
	}
	return ""
}

func checkRecords(t testing.TB, what string, got, want []store.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := sameRecord(got[i], want[i]); d != "" {
			t.Fatalf("%s: record %d: %s", what, i, d)
		}
	}
}

// checkGlobal fails unless rs have positive, strictly increasing Global.
func checkGlobal(t testing.TB, what string, rs []store.Record) {
	t.Helper()
	prev := int64(0)
	for i, r := range rs {
		if r.Global <= prev {
			t.Fatalf("%s: record %d (%s#%d) has global %d after %d", what, i, r.Session, r.Seq, r.Global, prev)
		}
		prev = r.Global
	}
}

// checkContiguous fails unless rs are seq 1..n of one session.
func checkContiguous(t testing.TB, sess string, rs []store.Record, n int64) {
	t.Helper()
	if int64(len(rs)) != n {
		t.Fatalf("%s: %d records, want %d", sess, len(rs), n)
	}
	for i, r := range rs {
		if r.Seq != int64(i)+1 || r.Session != sess {
			t.Fatalf("%s: record %d is %s#%d", sess, i, r.Session, r.Seq)
		}
	}
}

func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
	// Wrapped with context, not the bare sentinel.
	if err == want {
		t.Errorf("%s: error %q is not wrapped with context", what, err)
	}
}

func testAppendList(t *testing.T, s store.Store) {
	ctx := t.Context()
	epochs := map[string]int64{}
	for _, sess := range []string{"s1", "s2", "s3"} {
		epochs[sess] = acquire(t, s, sess, "node-a", base).Epoch
	}
	var all []store.Record
	per := map[string][]store.Record{}
	add := func(sess string, from int64, n int) {
		rs := recs(sess, from, n, "x")
		if sess == "s2" {
			for i := range rs {
				rs[i].Session = "" // the store fills it in
			}
		}
		res := appendOK(t, s, sess, epochs[sess], rs, nil)
		if len(res.Globals) != len(rs) {
			t.Fatalf("append %s: %d globals returned for %d records", sess, len(res.Globals), len(rs))
		}
		for i := range rs {
			rs[i].Session = sess
			rs[i].Global = res.Globals[i]
		}
		all = append(all, rs...)
		per[sess] = append(per[sess], rs...)
	}
	add("s1", 1, 3)
	add("s2", 1, 2)
	add("s1", 4, 1)
	add("s3", 1, 5)
	add("s2", 3, 2)
	// A time in another zone round-trips to the same instant.
	zoned := recs("s3", 6, 1, "zoned")
	zoned[0].At = time.Date(2026, 3, 1, 14, 0, 0, 987654321, time.FixedZone("X", 5*3600+1800))
	appendOK(t, s, "s3", epochs["s3"], zoned, nil)
	all = append(all, zoned...)
	per["s3"] = append(per["s3"], zoned...)
	// The zero time and no data round-trip too.
	empty := []store.Record{{Session: "s1", Seq: 5, Type: "empty"}}
	appendOK(t, s, "s1", epochs["s1"], empty, nil)
	all = append(all, empty...)
	per["s1"] = append(per["s1"], empty...)

	for sess, want := range per {
		got := list(t, s, sess)
		checkRecords(t, "list "+sess, got, want)
		checkGlobal(t, "list "+sess, got)
		if n := lastSeq(t, s, sess); n != want[len(want)-1].Seq {
			t.Errorf("last seq of %s = %d, want %d", sess, n, want[len(want)-1].Seq)
		}
	}
	got := listAll(t, s)
	checkRecords(t, "list all", got, all) // sequential appends: global order is append order
	checkGlobal(t, "list all", got)
	for i, r := range got {
		if i < len(all) && all[i].Global != 0 && r.Global != all[i].Global {
			t.Errorf("record %s#%d: stored at global %d, the append said %d", r.Session, r.Seq, r.Global, all[i].Global)
		}
	}

	if n := lastSeq(t, s, "nobody"); n != 0 {
		t.Errorf("last seq of unknown session = %d, want 0", n)
	}
	if rs := list(t, s, "nobody"); len(rs) != 0 {
		t.Errorf("list of unknown session: %d records", len(rs))
	}

	// AfterSeq and Limit.
	page, err := s.EventList(ctx, &store.EventListParams{Session: "s3", AfterSeq: 2, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "list s3 after 2 limit 2", page, per["s3"][2:4])
	page, err = s.EventList(ctx, &store.EventListParams{Session: "s3", AfterSeq: 6})
	if err != nil || len(page) != 0 {
		t.Fatalf("list s3 after its end: %d records, %v", len(page), err)
	}
	// AfterGlobal and Limit.
	page, err = s.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: got[4].Global, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "list all after 5th limit 3", page, all[5:8])
	page, err = s.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: got[len(got)-1].Global})
	if err != nil || len(page) != 0 {
		t.Fatalf("list all after the end: %d records, %v", len(page), err)
	}
}

func testSeqConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "s", "node-a", base)
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: recs("s", 2, 1, "x")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("first append at seq 2: %v, want ErrConflict", err)
	}
	good := recs("s", 1, 3, "good")
	appendOK(t, s, "s", l.Epoch, good, &store.Projection{
		Session: &store.SessionRow{ID: "s", Title: "good", Created: base, Updated: base, LastSeq: 3},
		Notes:   []store.NoteRow{{Session: "s", Task: "t1", Run: 1, Owner: "main", Status: "completed", Delivery: "queued", Written: base, New: true}},
	})
	bad := func(seqs ...int64) []store.Record {
		var out []store.Record
		for _, q := range seqs {
			out = append(out, recs("s", q, 1, "bad")...)
		}
		return out
	}
	cases := map[string][]store.Record{
		"gap":               bad(5),
		"duplicate":         bad(3),
		"restart":           bad(1),
		"gap inside batch":  bad(4, 5, 7),
		"dup inside batch":  bad(4, 4),
		"backwards batch":   bad(4, 6, 5),
		"overlapping batch": bad(3, 4),
	}
	for name, rs := range cases {
		_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: rs, Projection: &store.Projection{
			Session: &store.SessionRow{ID: "s", Title: "bad", Created: base, Updated: base.Add(time.Hour), LastSeq: 9},
			Runs:    []store.RunRow{{Session: "s", Agent: "main", Seq: 1, Kind: "prompt", Status: "running", Started: base}},
			Tasks:   []store.TaskRow{{Session: "s", ID: "t9", Kind: "shell", Owner: "main", Status: "running", Started: base}},
			Notes: []store.NoteRow{
				{Session: "s", Task: "t2", Run: 1, Owner: "main", Status: "completed", Delivery: "queued", Written: base, New: true},
				{Session: "s", Task: "t1", Run: 1, Owner: "main", Status: "completed", Delivery: "delivered", Written: base},
			},
		}})
		wantErr(t, name, err, store.ErrConflict)
	}
	// Nothing of the failed batches was kept: events, globals or rows.
	checkRecords(t, "list after conflicts", list(t, s, "s"), good)
	if n := lastSeq(t, s, "s"); n != 3 {
		t.Fatalf("last seq = %d, want 3", n)
	}
	checkRecords(t, "list all after conflicts", listAll(t, s), good)
	row, err := s.SessionGet(ctx, "s")
	if err != nil || row.Title != "good" || row.LastSeq != 3 {
		t.Fatalf("session after conflicts: %+v, %v", row, err)
	}
	if runs, err := s.RunList(ctx, "s"); err != nil || len(runs) != 0 {
		t.Fatalf("runs after conflicts: %+v, %v", runs, err)
	}
	if tasks, err := s.TaskList(ctx, "s"); err != nil || len(tasks) != 0 {
		t.Fatalf("tasks after conflicts: %+v, %v", tasks, err)
	}
	notes, err := s.NoteList(ctx, "s")
	if err != nil || len(notes) != 1 || notes[0].Delivery != "queued" {
		t.Fatalf("notes after conflicts: %+v, %v", notes, err)
	}
	// The log goes on where it was.
	next := recs("s", 4, 2, "next")
	appendOK(t, s, "s", l.Epoch, next, nil)
	checkRecords(t, "list after recovery", list(t, s, "s"), append(good, next...))
	checkGlobal(t, "list all after recovery", listAll(t, s))
}

func note(sess, task string, run int, status string, isNew bool) store.NoteRow {
	return store.NoteRow{
		Session: sess, Task: task, Run: run, Owner: "main", Status: status, Delivery: "queued",
		Written: base.Add(time.Duration(run) * time.Second), New: isNew,
	}
}

func sameNote(a, b store.NoteRow) bool {
	a.New, b.New = false, false
	return a.Session == b.Session && a.Task == b.Task && a.Run == b.Run && a.Owner == b.Owner &&
		a.Status == b.Status && a.Delivery == b.Delivery && a.DeliveredRun == b.DeliveredRun &&
		a.Dropped == b.Dropped && a.Written.Equal(b.Written)
}

func checkNotes(t testing.TB, s store.Store, sess string, want ...store.NoteRow) {
	t.Helper()
	got, err := s.NoteList(context.Background(), sess)
	if err != nil {
		t.Fatalf("notes of %s: %v", sess, err)
	}
	if len(got) != len(want) {
		t.Fatalf("notes of %s: %+v, want %+v", sess, got, want)
	}
	for i := range got {
		if !sameNote(got[i], want[i]) {
			t.Fatalf("notes of %s: note %d is %+v, want %+v", sess, i, got[i], want[i])
		}
	}
}

func testNoteUnique(t *testing.T, s store.Store) {
	l := acquire(t, s, "s", "node-a", base)
	first := note("s", "t1", 1, "completed", true)
	res := appendOK(t, s, "s", l.Epoch, recs("s", 1, 2, "run end"), &store.Projection{Notes: []store.NoteRow{first}})
	if len(res.DuplicateNotes) != 0 {
		t.Fatalf("first write reported duplicates %v", res.DuplicateNotes)
	}
	// The same key again, with other content: a no-op, reported.
	again := note("s", "t1", 1, "failed", true)
	again.Owner = "a9"
	res = appendOK(t, s, "s", l.Epoch, recs("s", 3, 1, "run end again"), &store.Projection{Notes: []store.NoteRow{again}})
	if !slices.Equal(res.DuplicateNotes, []string{"t1#1"}) {
		t.Fatalf("second write: duplicates %v, want [t1#1]", res.DuplicateNotes)
	}
	if n := lastSeq(t, s, "s"); n != 3 {
		t.Fatalf("the step with a duplicate note was not appended: last seq %d", n)
	}
	checkNotes(t, s, "s", first)

	// Other keys of the same task, a shell exit (run 0), and a key twice in one step.
	t1r2, t2r0, t3r1 := note("s", "t1", 2, "completed", true), note("s", "t2", 0, "exited", true), note("s", "t3", 1, "completed", true)
	t3dup := note("s", "t3", 1, "failed", true)
	res = appendOK(t, s, "s", l.Epoch, recs("s", 4, 1, "more"), &store.Projection{Notes: []store.NoteRow{t1r2, t2r0, t3r1, t3dup}})
	if !slices.Equal(res.DuplicateNotes, []string{"t3#1"}) {
		t.Fatalf("step with a key twice: duplicates %v, want [t3#1]", res.DuplicateNotes)
	}
	checkNotes(t, s, "s", first, t1r2, t2r0, t3r1)

	// An update (not New) changes the row in place and keeps the write order.
	upd := first
	upd.New, upd.Delivery, upd.DeliveredRun = false, "delivered", 3
	drop := t2r0
	drop.New, drop.Delivery, drop.Dropped = false, "dropped", "owner closed"
	res = appendOK(t, s, "s", l.Epoch, recs("s", 5, 1, "delivered"), &store.Projection{Notes: []store.NoteRow{upd, drop}})
	if len(res.DuplicateNotes) != 0 {
		t.Fatalf("update reported duplicates %v", res.DuplicateNotes)
	}
	checkNotes(t, s, "s", upd, t1r2, drop, t3r1)

	// Keys are per session.
	l2 := acquire(t, s, "other", "node-a", base)
	res = appendOK(t, s, "other", l2.Epoch, recs("other", 1, 1, "x"), &store.Projection{Notes: []store.NoteRow{note("other", "t1", 1, "completed", true)}})
	if len(res.DuplicateNotes) != 0 {
		t.Fatalf("same key in another session reported duplicate: %v", res.DuplicateNotes)
	}
	checkNotes(t, s, "other", note("other", "t1", 1, "completed", true))
}

func testLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	acq := func(owner string, now time.Time) (*store.Lease, error) {
		return s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: owner, TTL: ttl, Now: now})
	}
	renew := func(owner string, epoch int64, now time.Time) (*store.Lease, error) {
		return store.RenewOne(ctx, s, "s", owner, epoch, ttl, now)
	}
	at := func(d time.Duration) time.Time { return base.Add(d) }

	a, err := acq("A", at(0))
	if err != nil {
		t.Fatal(err)
	}
	if a.Session != "s" || a.Owner != "A" || a.Epoch != 1 || !a.Expires.Equal(at(ttl)) {
		t.Fatalf("first lease %+v, want s/A epoch 1 expiring at %v", a, at(ttl))
	}
	_, err = acq("B", at(time.Second))
	wantErr(t, "B while A holds", err, store.ErrLeaseHeld)

	// Renewal pushes the expiry.
	r, err := renew("A", 1, at(10*time.Second))
	if err != nil || r.Epoch != 1 || !r.Expires.Equal(at(70*time.Second)) {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	_, err = acq("B", at(65*time.Second))
	wantErr(t, "B before the renewed expiry", err, store.ErrLeaseHeld)
	var held *store.LeaseHeldError
	if !errors.As(err, &held) || held.Owner != "A" || !held.Expires.Equal(at(70*time.Second)) {
		t.Fatalf("lease held error = %#v, want owner A until %v", err, at(70*time.Second))
	}
	// Stealing from an owner that is not the holder changes nothing.
	_, err = s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "B", TTL: ttl, Now: at(66 * time.Second), Steal: "C"})
	wantErr(t, "B stealing from C", err, store.ErrLeaseHeld)

	// Expired: B takes it with the next epoch; A is fenced.
	b, err := acq("B", at(71*time.Second))
	if err != nil || b.Epoch != 2 || b.Owner != "B" {
		t.Fatalf("B after expiry: %+v, %v", b, err)
	}
	_, err = renew("A", 1, at(72*time.Second))
	wantErr(t, "renew by the old owner", err, store.ErrFenced)
	_, err = acq("A", at(72*time.Second))
	wantErr(t, "A while B holds", err, store.ErrLeaseHeld)

	// The holder re-acquiring bumps the epoch; its old epoch is stale.
	b3, err := acq("B", at(73*time.Second))
	if err != nil || b3.Epoch != 3 {
		t.Fatalf("B again: %+v, %v", b3, err)
	}
	_, err = renew("B", 2, at(74*time.Second))
	wantErr(t, "renew by a stale epoch of the holder", err, store.ErrFenced)
	if r, err := renew("B", 3, at(74*time.Second)); err != nil || r.Epoch != 3 {
		t.Fatalf("renew B epoch 3: %+v, %v", r, err)
	}

	// Releasing a lost lease is not an error and releases nothing.
	if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "A", Leases: []store.LeaseRef{{Session: "s", Epoch: 1}}}); err != nil {
		t.Fatalf("release of a lost lease: %v", err)
	}
	if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "B", Leases: []store.LeaseRef{{Session: "s", Epoch: 2}}}); err != nil {
		t.Fatalf("release by a stale epoch: %v", err)
	}
	_, err = acq("A", at(75*time.Second))
	wantErr(t, "A after stale releases", err, store.ErrLeaseHeld)

	// Release, then anyone acquires at once.
	if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "B", Leases: []store.LeaseRef{{Session: "s", Epoch: 3}}}); err != nil {
		t.Fatal(err)
	}
	a4, err := acq("A", at(76*time.Second))
	if err != nil || a4.Epoch != 4 || a4.Owner != "A" {
		t.Fatalf("A after release: %+v, %v", a4, err)
	}
	_, err = renew("B", 3, at(77*time.Second))
	wantErr(t, "renew after release", err, store.ErrFenced)

	// Leases are per session.
	o := acquire(t, s, "other", "B", at(77*time.Second))
	if o.Epoch != 1 {
		t.Fatalf("other session: epoch %d, want 1", o.Epoch)
	}
}

func testFencing(t *testing.T, s store.Store) {
	ctx := t.Context()
	// A session nobody holds a lease on cannot be written.
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "nolease", Epoch: 0, Records: recs("nolease", 1, 1, "x")}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("append without a lease: %v, want ErrFenced", err)
	}
	// Node A owns the session and writes.
	a := acquire(t, s, "s", "node-a", base)
	stepA := recs("s", 1, 2, "A")
	appendOK(t, s, "s", a.Epoch, stepA, &store.Projection{Session: &store.SessionRow{ID: "s", Title: "A", Created: base, Updated: base, LastSeq: 2}})
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: a.Epoch, Seq: 2, Data: []byte("A@2")}); err != nil {
		t.Fatal(err)
	}

	// A pauses (GC, partition) with its next step prepared; its lease
	// expires and node B takes over.
	paused := make(chan struct{})
	woke := make(chan error, 3)
	go func() {
		<-paused
		late := recs("s", 3, 2, "A-late")
		_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: a.Epoch, Records: late, Projection: &store.Projection{
			Session: &store.SessionRow{ID: "s", Title: "A-late", Created: base, Updated: base, LastSeq: 4},
			Notes:   []store.NoteRow{note("s", "t1", 1, "completed", true)},
		}})
		woke <- err
		woke <- s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: a.Epoch, Seq: 99, Data: []byte("A@99")})
		_, err = store.RenewOne(ctx, s, "s", "node-a", a.Epoch, ttl, base.Add(3*ttl))
		woke <- err
	}()

	b := acquire(t, s, "s", "node-b", base.Add(2*ttl))
	if b.Epoch <= a.Epoch {
		t.Fatalf("successor epoch %d not above %d", b.Epoch, a.Epoch)
	}
	if n := lastSeq(t, s, "s"); n != 2 {
		t.Fatalf("B sees last seq %d", n)
	}
	stepB := recs("s", 3, 1, "B")
	appendOK(t, s, "s", b.Epoch, stepB, &store.Projection{Session: &store.SessionRow{ID: "s", Title: "B", Created: base, Updated: base, LastSeq: 3}})
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: b.Epoch, Seq: 3, Data: []byte("B@3")}); err != nil {
		t.Fatal(err)
	}

	// A wakes up late and tries to go on.
	close(paused)
	wantErr(t, "late append", <-woke, store.ErrFenced)
	wantErr(t, "late snapshot", <-woke, store.ErrFenced)
	wantErr(t, "late renew", <-woke, store.ErrFenced)
	// Even a write that would not conflict by sequence is fenced.
	_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: a.Epoch, Records: recs("s", 4, 1, "A-late")})
	wantErr(t, "late append at the next seq", err, store.ErrFenced)

	// Nothing of A's late writes is stored.
	checkRecords(t, "log after fencing", list(t, s, "s"), append(stepA, stepB...))
	checkRecords(t, "global log after fencing", listAll(t, s), append(stepA, stepB...))
	if row, err := s.SessionGet(ctx, "s"); err != nil || row.Title != "B" || row.LastSeq != 3 {
		t.Fatalf("session row after fencing: %+v, %v", row, err)
	}
	checkNotes(t, s, "s")
	snap, err := s.SnapshotLoad(ctx, "s")
	if err != nil || snap.Seq != 3 || string(snap.Data) != "B@3" {
		t.Fatalf("snapshot after fencing: %+v, %v", snap, err)
	}
	// B goes on.
	appendOK(t, s, "s", b.Epoch, recs("s", 4, 1, "B"), nil)

	// Fencing is by epoch, not by the wall clock: an expired lease nobody
	// took over still writes.
	c := acquire(t, s, "quiet", "node-a", base)
	appendOK(t, s, "quiet", c.Epoch, recs("quiet", 1, 1, "after expiry"), nil)
}

// testLeaseSteal: a lease whose owner is known to be gone can be taken
// before it expires, with the next epoch, and the old owner is fenced.
func testLeaseSteal(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := acquire(t, s, "s", "dead", base)
	l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "heir", TTL: ttl, Now: base.Add(time.Second), Steal: "dead"})
	if err != nil || l.Epoch != a.Epoch+1 || l.Owner != "heir" {
		t.Fatalf("steal: %+v, %v", l, err)
	}
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: a.Epoch, Records: recs("s", 1, 1, "x")}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the robbed owner's append: %v, want ErrFenced", err)
	}
	appendOK(t, s, "s", l.Epoch, recs("s", 1, 1, "y"), nil)
}

// testLeaseRelease: a released lease is free at once for any owner,
// without Steal or waiting, and the acquisition says it was released and
// by whom; an expired or stolen one says who held it and that it was not
// released. The releaser cannot renew it any more, even before anyone
// takes it; releasing a lease lost or at a stale epoch is not an error and
// releases nothing. One call releases many leases.
func testLeaseRelease(t *testing.T, s store.Store) {
	ctx := t.Context()
	release := func(what, sess, owner string, epoch int64) {
		t.Helper()
		if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: owner, Leases: []store.LeaseRef{{Session: sess, Epoch: epoch}}}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	want := func(what string, l *store.Lease, owner string, epoch int64, prev string, released bool) {
		t.Helper()
		if l.Owner != owner || l.Epoch != epoch || l.Previous != prev || l.Released != released {
			t.Fatalf("%s: lease %+v, want owner %s epoch %d previous %q released %v", what, l, owner, epoch, prev, released)
		}
	}
	a := acquire(t, s, "s", "A", base)
	want("first lease", a, "A", 1, "", false)

	// Released: B takes it at once, long before A's expiry.
	release("release by the holder", "s", "A", a.Epoch)
	if _, err := store.RenewOne(ctx, s, "s", "A", a.Epoch, ttl, base.Add(time.Second)); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("renew of a released lease, nobody took it: %v, want ErrFenced", err)
	}
	b := acquire(t, s, "s", "B", base.Add(2*time.Second))
	want("B after A released", b, "B", 2, "A", true)
	if !b.Expires.Equal(base.Add(2*time.Second + ttl)) {
		t.Fatalf("B's lease expires %v, want %v", b.Expires, base.Add(2*time.Second+ttl))
	}

	// A released lease it lost, again and at a stale epoch: no error, and
	// B keeps it.
	release("second release by A", "s", "A", a.Epoch)
	release("release by B at a stale epoch", "s", "B", a.Epoch)
	_, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "C", TTL: ttl, Now: base.Add(3 * time.Second)})
	wantErr(t, "C while B holds after stale releases", err, store.ErrLeaseHeld)
	var held *store.LeaseHeldError
	if !errors.As(err, &held) || held.Owner != "B" {
		t.Fatalf("lease held error = %#v, want owner B", err)
	}
	if r, err := store.RenewOne(ctx, s, "s", "B", b.Epoch, ttl, base.Add(3*time.Second)); err != nil || r.Epoch != b.Epoch {
		t.Fatalf("B renews after the stale releases: %+v, %v", r, err)
	}

	// Expired, not released: C says B held it and did not release it.
	c := acquire(t, s, "s", "C", base.Add(3*time.Second+ttl))
	want("C after B's lease expired", c, "C", 3, "B", false)

	// Stolen: the robbed owner is the previous one, not released.
	d, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "D", TTL: ttl, Now: base.Add(4*time.Second + ttl), Steal: "C"})
	if err != nil {
		t.Fatal(err)
	}
	want("D stealing from C", d, "D", 4, "C", false)

	// The releaser itself may take it back; then the releaser is the
	// previous owner.
	release("release by D", "s", "D", d.Epoch)
	d2 := acquire(t, s, "s", "D", base.Add(5*time.Second+ttl))
	want("D again after its release", d2, "D", 5, "D", true)
	if _, err := store.RenewOne(ctx, s, "s", "D", d2.Epoch, ttl, base.Add(6*time.Second+ttl)); err != nil {
		t.Fatalf("renew of the lease taken back: %v", err)
	}

	// A session whose lease was never held: nothing to release.
	release("release of a session never leased", "never", "A", 1)
	want("first lease after a release of nothing", acquire(t, s, "never", "B", base), "B", 1, "", false)

	// Many at once, more than one statement's worth in a backend that
	// chunks: the ones A holds at their epochs are released; one at a
	// stale epoch, one B holds and one never leased are left as they are.
	const n = 1200
	refs := make([]store.LeaseRef, 0, n+1)
	for i := range n {
		l := acquire(t, s, fmt.Sprintf("m%04d", i), "A", base)
		refs = append(refs, store.LeaseRef{Session: l.Session, Epoch: l.Epoch})
	}
	refs[1].Epoch++
	acquire(t, s, "held-by-b", "B", base)
	refs = append(refs, store.LeaseRef{Session: "held-by-b", Epoch: 1}, store.LeaseRef{Session: "never-leased", Epoch: 1})
	if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "A", Leases: refs}); err != nil {
		t.Fatalf("release of %d leases: %v", len(refs), err)
	}
	now := base.Add(time.Second)
	for i := range n {
		sess := fmt.Sprintf("m%04d", i)
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "C", TTL: ttl, Now: now})
		if i == 1 {
			wantErr(t, "C taking the lease named at a stale epoch", err, store.ErrLeaseHeld)
			continue
		}
		if err != nil {
			t.Fatalf("C after A released %d leases at once: %s: %v", n, sess, err)
		}
		want("C after the release of many", l, "C", 2, "A", true)
	}
	_, err = s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "held-by-b", Owner: "C", TTL: ttl, Now: now})
	wantErr(t, "C taking B's lease A named", err, store.ErrLeaseHeld)
	if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "A"}); err != nil {
		t.Fatalf("release of no lease: %v", err)
	}
}

// testLeaseRenewMany renews many leases of one owner at once: the ones it
// still holds at their epochs are extended, and every other is reported
// lost, whoever holds it now.
func testLeaseRenewMany(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 1200 // more than one statement's worth in a backend that chunks
	var refs []store.LeaseRef
	for i := range n {
		l := acquire(t, s, fmt.Sprintf("r%04d", i), "A", base)
		refs = append(refs, store.LeaseRef{Session: l.Session, Epoch: l.Epoch})
	}
	// r0001 is taken by B after expiry; r0002 is asked for at a wrong
	// epoch; r0003 was never leased; r0004 was released.
	if _, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "r0001", Owner: "B", TTL: ttl, Now: base.Add(2 * ttl)}); err != nil {
		t.Fatal(err)
	}
	refs[2].Epoch++
	refs[3] = store.LeaseRef{Session: "never-leased", Epoch: 1}
	if err := s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "A", Leases: []store.LeaseRef{{Session: "r0004", Epoch: refs[4].Epoch}}}); err != nil {
		t.Fatal(err)
	}
	now := base.Add(10 * time.Second)
	res, err := s.LeaseRenew(ctx, &store.LeaseRenewParams{Owner: "A", Leases: refs, TTL: ttl, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Expires.Equal(now.Add(ttl)) {
		t.Errorf("expires %v, want %v", res.Expires, now.Add(ttl))
	}
	lost := []string{"r0001", "r0002", "never-leased", "r0004"}
	slices.Sort(res.Lost)
	slices.Sort(lost)
	if !slices.Equal(res.Lost, lost) {
		t.Errorf("lost %v, want %v", res.Lost, lost)
	}
	if len(res.Renewed) != n-4 {
		t.Errorf("%d renewed, want %d", len(res.Renewed), n-4)
	}
	// A renewed lease holds past its first expiry; B's was not touched.
	if _, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "r0005", Owner: "C", TTL: ttl, Now: base.Add(ttl + time.Second)}); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("renewed lease taken before its new expiry: %v", err)
	}
	if _, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "r0001", Owner: "C", TTL: ttl, Now: base.Add(2*ttl + time.Second)}); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("B's lease was changed by A's renewal: %v", err)
	}
	// An empty renewal is no error.
	if res, err := s.LeaseRenew(ctx, &store.LeaseRenewParams{Owner: "A", TTL: ttl, Now: now}); err != nil || len(res.Renewed)+len(res.Lost) != 0 {
		t.Errorf("empty renewal: %+v, %v", res, err)
	}
}

// testLeaseAcquireMany acquires many leases for one owner at once: as
// LeaseAcquire would one by one, each new, expired, released or already
// its own lease is granted (with the holder before, and whether it
// released it), and each another owner holds is reported held, untouched.
func testLeaseAcquireMany(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 1200 // more than one statement's worth in a backend that chunks
	var sessions []string
	for i := range n {
		sessions = append(sessions, fmt.Sprintf("m%04d", i))
	}
	// m0000 is held by B; m0001 was B's and expired; m0002 was released
	// by B; m0003 is A's own; the rest are new. m0004 is named twice.
	acquire(t, s, "m0000", "B", base.Add(time.Minute))
	acquire(t, s, "m0001", "B", base)
	released := acquire(t, s, "m0002", "B", base.Add(time.Minute))
	if err := store.ReleaseOne(ctx, s, "m0002", "B", released.Epoch); err != nil {
		t.Fatal(err)
	}
	own := acquire(t, s, "m0003", "A", base)
	now := base.Add(time.Minute + time.Second)
	res, err := s.LeaseAcquireMany(ctx, &store.LeaseAcquireManyParams{Owner: "A", Sessions: append(slices.Clone(sessions), "m0004"), TTL: ttl, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Held) != 1 || res.Held[0].Session != "m0000" || res.Held[0].Owner != "B" || !res.Held[0].Expires.Equal(base.Add(time.Minute+ttl)) {
		t.Errorf("held %+v, want m0000 held by B until %v", res.Held, base.Add(time.Minute+ttl))
	}
	if len(res.Leases) != n-1 {
		t.Fatalf("%d leases acquired, want %d", len(res.Leases), n-1)
	}
	got := map[string]store.Lease{}
	for _, l := range res.Leases {
		if _, twice := got[l.Session]; twice {
			t.Errorf("lease of %s acquired twice", l.Session)
		}
		got[l.Session] = l
		if l.Owner != "A" || !l.Expires.Equal(now.Add(ttl)) {
			t.Errorf("lease %+v, want A's until %v", l, now.Add(ttl))
		}
	}
	for sess, want := range map[string]store.Lease{
		"m0001": {Epoch: 2, Previous: "B"},
		"m0002": {Epoch: 2, Previous: "B", Released: true},
		"m0003": {Epoch: own.Epoch + 1, Previous: "A"},
		"m0004": {Epoch: 1},
		"m1199": {Epoch: 1},
	} {
		if l := got[sess]; l.Epoch != want.Epoch || l.Previous != want.Previous || l.Released != want.Released {
			t.Errorf("lease of %s %+v, want epoch %d previous %q released %v", sess, l, want.Epoch, want.Previous, want.Released)
		}
	}
	// The leases are A's: they fence, renew, and B's stays B's.
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "m0003", Epoch: own.Epoch, Records: recs("m0003", 1, 1, "x")}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("append under A's epoch before the acquisition: %v, want ErrFenced", err)
	}
	appendOK(t, s, "m0005", 1, recs("m0005", 1, 1, "x"), nil)
	if r, err := store.RenewOne(ctx, s, "m0000", "B", 1, ttl, now); err != nil || r.Epoch != 1 {
		t.Errorf("B renews the lease A could not take: %+v, %v", r, err)
	}
	// Nothing asked, nothing acquired.
	if res, err := s.LeaseAcquireMany(ctx, &store.LeaseAcquireManyParams{Owner: "A", TTL: ttl, Now: now}); err != nil || len(res.Leases)+len(res.Held) != 0 {
		t.Errorf("empty acquisition: %+v, %v", res, err)
	}
}

// testStats: a store that counts its writes (store.StatsReader) counts a
// step as one row of steps, each projection row as one row of its table,
// a duplicate notification as none, and its Tables add up to its Rows.
func testStats(t *testing.T, s store.Store) {
	sr, ok := s.(store.StatsReader)
	if !ok {
		t.Skip("the store does not count its writes")
	}
	l := acquire(t, s, "st", "A", base)
	before := sr.Stats()
	appendOK(t, s, "st", l.Epoch, recs("st", 1, 3, "x"), &store.Projection{
		Session: &store.SessionRow{ID: "st", Title: "one", Created: base, Updated: base, LastSeq: 3},
		Agents:  []store.AgentRow{{Session: "st", ID: "main", Name: "main", State: "running"}},
		Runs:    []store.RunRow{{Session: "st", Agent: "main", Seq: 1, Kind: "prompt", Status: "running", Started: base}},
		Notes:   []store.NoteRow{note("st", "t1", 1, "completed", true)},
	})
	res := appendOK(t, s, "st", l.Epoch, recs("st", 4, 1, "x"), &store.Projection{
		Session: &store.SessionRow{ID: "st", Title: "two", Created: base, Updated: base, LastSeq: 4},
		Notes:   []store.NoteRow{note("st", "t1", 1, "completed", true)},
	})
	if len(res.DuplicateNotes) != 1 {
		t.Fatalf("duplicate notes %v", res.DuplicateNotes)
	}
	d := sr.Stats().Since(before)
	if d.Appends != 2 || d.Commits < 1 || d.Commits > 2 {
		t.Errorf("%d appends in %d commits; want 2 in 1 or 2", d.Appends, d.Commits)
	}
	for table, want := range map[string]int64{"steps": 2, "sessions": 2, "agents": 1, "runs": 1, "notes": 1} {
		if got := d.Tables[table]; got != want {
			t.Errorf("%d rows of %s; want %d (all: %v)", got, table, want, d.Tables)
		}
	}
	var sum int64
	for _, n := range d.Tables {
		sum += n
	}
	if sum != d.Rows {
		t.Errorf("tables %v add up to %d rows; Rows says %d", d.Tables, sum, d.Rows)
	}
}

// testUnchangedRows: a projection row written again with the values it
// holds already (a step projects what it touched, changed or not) is
// neither written nor counted in Stats, and a changed one is.
func testUnchangedRows(t *testing.T, s store.Store) {
	sr, ok := s.(store.StatsReader)
	if !ok {
		t.Skip("the store does not count its writes")
	}
	l := acquire(t, s, "u", "A", base)
	exit := 0
	pr := func(title, status string, n store.NoteRow) *store.Projection {
		return &store.Projection{
			Session: &store.SessionRow{ID: "u", Title: title, Created: base, Updated: base, LastSeq: 1},
			Agents:  []store.AgentRow{{Session: "u", ID: "main", Name: "main", State: "idle", Runs: 1}},
			Runs:    []store.RunRow{{Session: "u", Agent: "main", Seq: 1, Kind: "prompt", Status: "done", Started: base, Ended: base}},
			Tasks:   []store.TaskRow{{Session: "u", ID: "t1", Kind: "shell", Owner: "main", Status: status, Started: base, Exit: &exit}},
			Items:   []store.ItemRow{{Session: "u", ID: "i1", Agent: "main", Kind: "message", Priority: "next", Enqueued: base}},
			Notes:   []store.NoteRow{n},
		}
	}
	appendOK(t, s, "u", l.Epoch, recs("u", 1, 1, "x"), pr("one", "running", note("u", "t1", 1, "completed", true)))
	before := sr.Stats()
	appendOK(t, s, "u", l.Epoch, nil, pr("one", "running", note("u", "t1", 1, "completed", false)))
	if d := sr.Stats().Since(before); d.Rows != 0 {
		t.Errorf("the same rows again: %d rows written (%v); want none", d.Rows, d.Tables)
	}
	before = sr.Stats()
	appendOK(t, s, "u", l.Epoch, nil, pr("two", "completed", note("u", "t1", 1, "delivered", false)))
	if d := sr.Stats().Since(before); d.Rows != 3 || d.Tables["sessions"] != 1 || d.Tables["tasks"] != 1 || d.Tables["notes"] != 1 {
		t.Errorf("a changed session, task and note: %d rows (%v); want one of each", d.Rows, d.Tables)
	}
	if row, err := s.SessionGet(t.Context(), "u"); err != nil || row.Title != "two" {
		t.Errorf("session row %+v, %v", row, err)
	}
	checkNotes(t, s, "u", note("u", "t1", 1, "delivered", false))
}

// testProjectionOnly appends projection rows with no records (the runtime
// writes a busy session's pending rows so): they are upserted, fenced like
// any append, and the log is unchanged.
func testProjectionOnly(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "p", "A", base)
	appendOK(t, s, "p", l.Epoch, recs("p", 1, 2, "x"), &store.Projection{Session: &store.SessionRow{ID: "p", Title: "one", Created: base, Updated: base, LastSeq: 2}})
	res := appendOK(t, s, "p", l.Epoch, nil, &store.Projection{
		Session: &store.SessionRow{ID: "p", Title: "two", Created: base, Updated: base, LastSeq: 2},
		Notes:   []store.NoteRow{note("p", "t1", 1, "completed", true)},
	})
	if len(res.Globals) != 0 || len(res.DuplicateNotes) != 0 {
		t.Errorf("projection-only append: %+v", res)
	}
	if row, err := s.SessionGet(ctx, "p"); err != nil || row.Title != "two" {
		t.Errorf("session row %+v, %v", row, err)
	}
	checkNotes(t, s, "p", note("p", "t1", 1, "completed", true))
	if n := lastSeq(t, s, "p"); n != 2 {
		t.Errorf("last seq %d after a projection-only append", n)
	}
	_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "p", Epoch: l.Epoch + 1, Projection: &store.Projection{
		Session: &store.SessionRow{ID: "p", Title: "fenced", Created: base, Updated: base, LastSeq: 2}}})
	wantErr(t, "fenced projection-only append", err, store.ErrFenced)
	if row, err := s.SessionGet(ctx, "p"); err != nil || row.Title != "two" {
		t.Errorf("a fenced projection-only append changed the row: %+v, %v", row, err)
	}
}
