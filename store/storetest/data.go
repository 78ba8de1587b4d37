package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

func testLarge(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "s", "node-a", base)
	// A 4 MiB record of arbitrary bytes (zeros and invalid UTF-8 included).
	big := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	big[0], big[len(big)-1] = 0, 0xff
	one := []store.Record{{Session: "s", Seq: 1, At: base, Type: "big", Data: big}}
	appendOK(t, s, "s", l.Epoch, one, nil)
	got := list(t, s, "s")
	checkRecords(t, "4 MiB record", got, one)

	// A step of 5,000 records.
	many := recs("s", 2, 5000, "batch")
	for i := range many {
		many[i].Data = append(many[i].Data, bytes.Repeat([]byte{' '}, 300-len(many[i].Data))...)
	}
	appendOK(t, s, "s", l.Epoch, many, nil)
	if n := lastSeq(t, s, "s"); n != 5001 {
		t.Fatalf("last seq %d, want 5001", n)
	}
	got = list(t, s, "s")
	checkRecords(t, "after the batch", got, append(one, many...))
	checkGlobal(t, "after the batch", got)
	page, err := s.EventList(ctx, &store.EventListParams{Session: "s", AfterSeq: 4000, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "page of the batch", page, many[3999:4099])
	all, err := s.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: got[1].Global, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "global page of the batch", all, many[1:11])
	// A big snapshot too.
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: l.Epoch, Seq: 5001, Data: big}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.SnapshotLoad(ctx, "s")
	if err != nil || !bytes.Equal(snap.Data, big) {
		t.Fatalf("big snapshot: %v", err)
	}
}

func testSnapshot(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "s", "node-a", base)
	_, err := s.SnapshotLoad(ctx, "s")
	wantErr(t, "load before any save", err, store.ErrNotFound)
	save := func(seq int64, data string) {
		t.Helper()
		if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: l.Epoch, Seq: seq, Data: []byte(data)}); err != nil {
			t.Fatalf("save at %d: %v", seq, err)
		}
	}
	load := func(wantSeq int64, want string) {
		t.Helper()
		snap, err := s.SnapshotLoad(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if snap.Session != "s" || snap.Seq != wantSeq || string(snap.Data) != want {
			t.Fatalf("snapshot %s@%d %q, want s@%d %q", snap.Session, snap.Seq, snap.Data, wantSeq, want)
		}
	}
	save(5, "five")
	load(5, "five")
	save(3, "three") // older: ignored
	load(5, "five")
	save(8, "eight")
	load(8, "eight")
	// Per session.
	_, err = s.SnapshotLoad(ctx, "other")
	wantErr(t, "load of another session", err, store.ErrNotFound)
	o := acquire(t, s, "other", "node-a", base)
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "other", Epoch: o.Epoch, Seq: 1, Data: []byte("o")}); err != nil {
		t.Fatal(err)
	}
	load(8, "eight")
}

// testTailLoadMany: TailLoadMany reads what SnapshotLoad and EventList
// after the snapshot read, for many sessions at once, in the order first
// named, a step that begins at or before the snapshot cut at it, and
// Limit honoured.
func testTailLoadMany(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := acquire(t, s, "a", "node-a", base)
	ra := recs("a", 1, 10, "a")
	for _, step := range [][2]int{{0, 3}, {3, 6}, {6, 7}, {7, 10}} {
		appendOK(t, s, "a", a.Epoch, ra[step[0]:step[1]], nil)
	}
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "a", Epoch: a.Epoch, Seq: 5, Data: []byte("a@5")}); err != nil {
		t.Fatal(err)
	}
	b := acquire(t, s, "b", "node-a", base)
	rb := recs("b", 1, 4, "b")
	appendOK(t, s, "b", b.Epoch, rb, nil)
	c := acquire(t, s, "c", "node-a", base)
	appendOK(t, s, "c", c.Epoch, recs("c", 1, 2, "c"), nil)
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "c", Epoch: c.Epoch, Seq: 2, Data: []byte("c@2")}); err != nil {
		t.Fatal(err)
	}
	all := map[string][]store.Record{"a": list(t, s, "a")[5:], "b": list(t, s, "b"), "c": nil, "none": nil}
	snaps := map[string]string{"a": "a@5", "c": "c@2"}
	load := func(limit int) []store.Tail {
		t.Helper()
		tails, err := s.TailLoadMany(ctx, &store.TailLoadManyParams{Sessions: []string{"a", "b", "none", "a", "c"}, Limit: limit})
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		var order []string
		for _, tl := range tails {
			order = append(order, tl.Session)
			what := fmt.Sprintf("limit %d: tail of %s", limit, tl.Session)
			switch want := snaps[tl.Session]; {
			case want == "" && tl.Snapshot != nil:
				t.Errorf("%s: snapshot %+v, want none", what, tl.Snapshot)
			case want != "" && (tl.Snapshot == nil || string(tl.Snapshot.Data) != want || tl.Snapshot.Session != tl.Session):
				t.Errorf("%s: snapshot %+v, want %s", what, tl.Snapshot, want)
			}
			want := all[tl.Session]
			if limit > 0 && len(want) > limit {
				want = want[:limit]
			}
			checkRecords(t, what, tl.Records, want)
		}
		if !slices.Equal(order, []string{"a", "b", "none", "c"}) {
			t.Fatalf("limit %d: tails of %v, want a, b, none, c", limit, order)
		}
		return tails
	}
	complete := func(tails []store.Tail) []bool {
		var out []bool
		for _, tl := range tails {
			out = append(out, tl.Complete)
		}
		return out
	}
	if got := complete(load(0)); !slices.Equal(got, []bool{true, true, true, true}) {
		t.Errorf("without a limit: complete %v, want all", got)
	}
	if got := complete(load(6)); !slices.Equal(got, []bool{true, true, true, true}) {
		t.Errorf("limit 6, 5 and 4 records: complete %v, want all", got)
	}
	if got := complete(load(2)); !slices.Equal(got, []bool{false, false, true, true}) {
		t.Errorf("limit 2, 5 and 4 records: complete %v, want a and b cut", got)
	}
	load(5) // a's 5 records: complete either way

	// MaxBytes: the tails read are the first ones named, each one's
	// records the first of them; all but the last are complete. The first
	// session's snapshot is read whatever its size.
	for _, max := range []int{1, 3, 10, 40, 80, 120, 200, 400, 1 << 20} {
		tails, err := s.TailLoadMany(ctx, &store.TailLoadManyParams{Sessions: []string{"a", "b", "none", "c"}, MaxBytes: max})
		if err != nil {
			t.Fatalf("max %d bytes: %v", max, err)
		}
		if len(tails) == 0 {
			t.Fatalf("max %d bytes: no tail; want a's at least", max)
		}
		for i, tl := range tails {
			what := fmt.Sprintf("max %d bytes: tail %d", max, i)
			if name := []string{"a", "b", "none", "c"}[i]; tl.Session != name {
				t.Fatalf("%s of %s, want %s", what, tl.Session, name)
			}
			if want := snaps[tl.Session]; (want == "") != (tl.Snapshot == nil) || (tl.Snapshot != nil && string(tl.Snapshot.Data) != want) {
				t.Errorf("%s: snapshot %+v, want %q", what, tl.Snapshot, want)
			}
			want := all[tl.Session]
			if len(tl.Records) > len(want) || (tl.Complete && len(tl.Records) != len(want)) {
				t.Errorf("%s: %d records, complete %v, of %d", what, len(tl.Records), tl.Complete, len(want))
				continue
			}
			checkRecords(t, what, tl.Records, want[:len(tl.Records)])
			if !tl.Complete && i < len(tails)-1 {
				t.Errorf("%s: not complete, and the call read on", what)
			}
		}
		if max == 1 && (len(tails) != 1 || tails[0].Complete || len(tails[0].Records) != 0) {
			t.Errorf("max 1 byte: %d tails, the first complete %v with %d records; want a's snapshot alone", len(tails), tails[0].Complete, len(tails[0].Records))
		}
		if max == 1<<20 && (len(tails) != 4 || !slices.Equal(complete(tails), []bool{true, true, true, true})) {
			t.Errorf("max 1 MiB: %d tails, complete %v; want all 4, complete", len(tails), complete(tails))
		}
	}
	if tails, err := s.TailLoadMany(ctx, &store.TailLoadManyParams{}); err != nil || len(tails) != 0 {
		t.Errorf("no sessions: %v, %v", tails, err)
	}
}

func sameSession(a, b store.SessionRow) bool {
	return a.ID == b.ID && a.Title == b.Title && a.Owner == b.Owner && a.Provider == b.Provider && a.Model == b.Model &&
		a.Cwd == b.Cwd && a.Closed == b.Closed && a.Created.Equal(b.Created) && a.Updated.Equal(b.Updated) &&
		a.LastSeq == b.LastSeq && a.InputTokens == b.InputTokens && a.OutputTokens == b.OutputTokens &&
		slices.Equal(a.NeedsYou, b.NeedsYou)
}

// testNeedsYou: a session row's reasons for a person to act are stored
// with it, in order and verbatim, and read back by SessionGet and
// SessionList; a later step (with events or with rows only) replaces them,
// and a row with none clears them.
func testNeedsYou(t *testing.T, s store.Store) {
	ctx := t.Context()
	get := func(what string, want []string) {
		t.Helper()
		got, err := s.SessionGet(ctx, "s1")
		if err != nil || !slices.Equal(got.NeedsYou, want) {
			t.Fatalf("%s: session s1's needs_you %q, %v; want %q", what, got.NeedsYou, err, want)
		}
		list, err := s.SessionList(ctx, &store.SessionListParams{})
		if err != nil {
			t.Fatalf("%s: list: %v", what, err)
		}
		for _, r := range list {
			if want := []string(nil); r.ID == "s2" && !slices.Equal(r.NeedsYou, want) {
				t.Fatalf("%s: session s2's needs_you %q; want none", what, r.NeedsYou)
			}
		}
		if len(list) != 2 || list[1].ID != "s1" || !slices.Equal(list[1].NeedsYou, want) {
			t.Fatalf("%s: list %+v; want s1's needs_you %q", what, list, want)
		}
	}
	row := store.SessionRow{ID: "s1", Created: base, Updated: base, LastSeq: 1,
		NeedsYou: []string{"approval p1: Bash (main)", "run failed: worker", `quote " comma, back\slash é 🙂`}}
	l := acquire(t, s, "s1", "node-a", base)
	appendOK(t, s, "s1", l.Epoch, recs("s1", 1, 1, "create"), &store.Projection{Session: &row})
	other := store.SessionRow{ID: "s2", Created: base.Add(time.Hour), Updated: base.Add(time.Hour), LastSeq: 1}
	appendOK(t, s, "s2", acquire(t, s, "s2", "node-a", base).Epoch, recs("s2", 1, 1, "create"), &store.Projection{Session: &other})
	get("created", row.NeedsYou)

	row.NeedsYou, row.LastSeq = []string{"budget spent: main"}, 2
	appendOK(t, s, "s1", l.Epoch, recs("s1", 2, 1, "step"), &store.Projection{Session: &row})
	get("replaced", row.NeedsYou)

	// Rows alone, with no event (a projection written after its steps).
	row.NeedsYou = []string{"approval p2: Write (a1)", "budget spent: main"}
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s1", Epoch: l.Epoch, Projection: &store.Projection{Session: &row}}); err != nil {
		t.Fatal(err)
	}
	get("replaced by rows alone", row.NeedsYou)

	row.NeedsYou, row.LastSeq = nil, 3
	appendOK(t, s, "s1", l.Epoch, recs("s1", 3, 1, "step"), &store.Projection{Session: &row})
	get("cleared", nil)
}

func sameRun(a, b store.RunRow) bool {
	return a.Session == b.Session && a.Agent == b.Agent && a.Seq == b.Seq && a.Kind == b.Kind && a.Status == b.Status &&
		a.Started.Equal(b.Started) && a.Ended.Equal(b.Ended) && a.Reply == b.Reply && a.Error == b.Error &&
		a.InputTokens == b.InputTokens && a.OutputTokens == b.OutputTokens
}

func sameTask(a, b store.TaskRow) bool {
	if (a.Exit == nil) != (b.Exit == nil) || (a.Exit != nil && *a.Exit != *b.Exit) {
		return false
	}
	return a.Session == b.Session && a.ID == b.ID && a.Kind == b.Kind && a.Owner == b.Owner && a.Agent == b.Agent &&
		a.Status == b.Status && a.Command == b.Command && a.Started.Equal(b.Started) && a.Ended.Equal(b.Ended)
}

func sameItem(a, b store.ItemRow) bool {
	return a.Session == b.Session && a.ID == b.ID && a.Agent == b.Agent && a.Kind == b.Kind && a.Priority == b.Priority &&
		a.From == b.From && a.Enqueued.Equal(b.Enqueued)
}

func checkRows[R any](t testing.TB, what string, got []R, err error, same func(a, b R) bool, want ...R) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if !same(got[i], want[i]) {
			t.Fatalf("%s: row %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func testProjections(t *testing.T, s store.Store) {
	ctx := t.Context()
	h := func(n int) time.Time { return base.Add(time.Duration(n) * time.Hour) }
	s1 := store.SessionRow{ID: "s1", Title: "first", Owner: "alice", Provider: "anthropic", Model: "m", Cwd: "/w", Created: h(0), Updated: h(0), LastSeq: 1, InputTokens: 10, OutputTokens: 20}
	s2 := store.SessionRow{ID: "s2", Title: "second", Owner: "bob", Closed: true, Created: h(1), Updated: h(1), LastSeq: 1}
	s3 := store.SessionRow{ID: "s3", Title: "third", Owner: "alice", Created: h(2), Updated: h(2), LastSeq: 1}
	epochs := map[string]int64{}
	for _, row := range []store.SessionRow{s2, s1, s3} {
		epochs[row.ID] = acquire(t, s, row.ID, "node-a", base).Epoch
		appendOK(t, s, row.ID, epochs[row.ID], recs(row.ID, 1, 1, "create"), &store.Projection{Session: &row})
	}
	sessions := func(p *store.SessionListParams, want ...store.SessionRow) {
		t.Helper()
		got, err := s.SessionList(ctx, p)
		checkRows(t, fmt.Sprintf("sessions %+v", *p), got, err, sameSession, want...)
	}
	sessions(&store.SessionListParams{}, s3, s2, s1)
	sessions(&store.SessionListParams{Owner: "alice"}, s3, s1)
	sessions(&store.SessionListParams{Open: true}, s3, s1)
	sessions(&store.SessionListParams{Owner: "bob", Open: true})
	sessions(&store.SessionListParams{Owner: "nobody"})
	got, err := s.SessionGet(ctx, "s2")
	if err != nil || !sameSession(*got, s2) {
		t.Fatalf("session s2: %+v, %v", got, err)
	}
	_, err = s.SessionGet(ctx, "s9")
	wantErr(t, "session of unknown id", err, store.ErrNotFound)

	// A later step replaces the row.
	s1b := s1
	s1b.Title, s1b.Updated, s1b.LastSeq, s1b.Closed, s1b.InputTokens = "renamed", h(5), 4, true, 99
	exit0, exit3 := 0, 3
	runs1 := []store.RunRow{
		{Session: "s1", Agent: "main", Seq: 1, Kind: "prompt", Status: "running", Started: h(0)},
		{Session: "s1", Agent: "a1", Seq: 1, Kind: "task", Status: "running", Started: h(0)},
	}
	tasks1 := []store.TaskRow{
		{Session: "s1", ID: "t2", Kind: "agent", Owner: "main", Agent: "a1", Status: "running", Started: h(0)},
		{Session: "s1", ID: "t1", Kind: "shell", Owner: "main", Status: "running", Command: "make test", Started: h(0)},
	}
	agents1 := []store.AgentRow{
		{Session: "s1", ID: "main", Name: "main", State: "running", Runs: 0, Inbox: 1},
		{Session: "s1", ID: "a1", Name: "helper", Owner: "main", Task: "t2", State: "running"},
	}
	items1 := []store.ItemRow{
		{Session: "s1", ID: "i1", Agent: "main", Kind: "prompt", Priority: "next", From: "user", Enqueued: h(0)},
		{Session: "s1", ID: "i2", Agent: "a1", Kind: "message", Priority: "now", From: "main", Enqueued: h(0)},
	}
	appendOK(t, s, "s1", epochs["s1"], recs("s1", 2, 2, "step"), &store.Projection{Session: &s1, Agents: agents1, Runs: runs1, Tasks: tasks1, Items: items1})

	runs2 := []store.RunRow{
		{Session: "s1", Agent: "main", Seq: 1, Kind: "prompt", Status: "completed", Started: h(0), Ended: h(1), Reply: "done", InputTokens: 5, OutputTokens: 6},
		{Session: "s1", Agent: "main", Seq: 2, Kind: "notification", Status: "running", Started: h(1)},
		{Session: "s1", Agent: "a10", Seq: 1, Kind: "task", Status: "failed", Started: h(1), Ended: h(2), Error: "boom"},
		{Session: "s1", Agent: "a2", Seq: 1, Kind: "task", Status: "running", Started: h(1)},
	}
	tasks2 := []store.TaskRow{
		{Session: "s1", ID: "t3", Kind: "shell", Owner: "a1", Status: "exited", Command: "true", Started: h(1), Ended: h(2), Exit: &exit0},
		{Session: "s1", ID: "t2", Kind: "agent", Owner: "main", Agent: "a1", Status: "completed", Started: h(0), Ended: h(2)},
		{Session: "s1", ID: "t1", Kind: "shell", Owner: "main", Status: "exited", Command: "make test", Started: h(0), Ended: h(3), Exit: &exit3},
	}
	agents2 := []store.AgentRow{{Session: "s1", ID: "main", Name: "main", State: "idle", Runs: 1, InputTokens: 5, OutputTokens: 6}}
	// i1 is taken by a run, i9 (never written) removed: both leave; i3
	// is enqueued and waits.
	items2 := []store.ItemRow{
		{Session: "s1", ID: "i3", Agent: "main", Kind: "notification", Priority: "later", Enqueued: h(2)},
	}
	appendOK(t, s, "s1", epochs["s1"], recs("s1", 4, 1, "step"), &store.Projection{Session: &s1b, Agents: agents2, Runs: runs2, Tasks: tasks2,
		Items: items2, ItemsGone: []string{"i1", "i9"}})

	got, err = s.SessionGet(ctx, "s1")
	if err != nil || !sameSession(*got, s1b) {
		t.Fatalf("session s1 after update: %+v, %v", got, err)
	}
	sessions(&store.SessionListParams{Open: true}, s3)
	sessions(&store.SessionListParams{Owner: "alice"}, s3, s1b)

	runs, err := s.RunList(ctx, "s1")
	checkRows(t, "runs", runs, err, sameRun, runs1[1], runs2[2], runs2[3], runs2[0], runs2[1])
	tasks, err := s.TaskList(ctx, "s1")
	checkRows(t, "tasks (creation order)", tasks, err, sameTask, tasks2[1], tasks2[2], tasks2[0])
	for _, sess := range []string{"s2", "s9"} {
		if runs, err := s.RunList(ctx, sess); err != nil || len(runs) != 0 {
			t.Fatalf("runs of %s: %+v, %v", sess, runs, err)
		}
		if tasks, err := s.TaskList(ctx, sess); err != nil || len(tasks) != 0 {
			t.Fatalf("tasks of %s: %+v, %v", sess, tasks, err)
		}
		if notes, err := s.NoteList(ctx, sess); err != nil || len(notes) != 0 {
			t.Fatalf("notes of %s: %+v, %v", sess, notes, err)
		}
	}

	if al, ok := s.(AgentLister); ok {
		got, err := al.AgentList(ctx, "s1")
		checkRows(t, "agents", got, err, func(a, b store.AgentRow) bool { return a == b }, agents2[0], agents1[1])
	} else {
		t.Log("store has no AgentList: agent rows not checked")
	}
	if il, ok := s.(ItemLister); ok {
		got, err := il.ItemList(ctx, "s1")
		checkRows(t, "items (those that wait, in enqueue order)", got, err, sameItem, items1[1], items2[0])
	} else {
		t.Log("store has no ItemList: the items that left their inbox are not checked")
	}

	// An append without a projection leaves the rows alone.
	appendOK(t, s, "s1", epochs["s1"], recs("s1", 5, 1, "bare"), nil)
	appendOK(t, s, "s1", epochs["s1"], recs("s1", 6, 1, "empty"), &store.Projection{})
	if got, err := s.SessionGet(ctx, "s1"); err != nil || !sameSession(*got, s1b) {
		t.Fatalf("session s1 after bare appends: %+v, %v", got, err)
	}
}

func testErrors(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "s", "A", base)
	_, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "B", TTL: ttl, Now: base})
	wantErr(t, "lease held", err, store.ErrLeaseHeld)
	_, err = store.RenewOne(ctx, s, "s", "A", l.Epoch+1, ttl, base)
	wantErr(t, "renew fenced", err, store.ErrFenced)
	_, err = s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: l.Epoch + 1, Records: recs("s", 1, 1, "x")})
	wantErr(t, "append fenced", err, store.ErrFenced)
	err = s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: l.Epoch + 1, Seq: 1})
	wantErr(t, "snapshot fenced", err, store.ErrFenced)
	_, err = s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: recs("s", 2, 1, "x")})
	wantErr(t, "append conflict", err, store.ErrConflict)
	_, err = s.SnapshotLoad(ctx, "s")
	wantErr(t, "no snapshot", err, store.ErrNotFound)
	_, err = s.SessionGet(ctx, "s")
	wantErr(t, "no session", err, store.ErrNotFound)
	// Sentinels stay distinct.
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFenced) {
		t.Errorf("not-found error %v matches other sentinels", err)
	}
}

func testClose(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "s", "A", base)
	appendOK(t, s, "s", l.Epoch, recs("s", 1, 1, "x"), nil)
	var watch <-chan struct{}
	w, isWatcher := s.(store.Watcher)
	if isWatcher {
		var err error
		if watch, err = w.Watch(ctx); err != nil {
			t.Fatalf("watch: %v", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", what, err)
		}
	}
	_, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "A", TTL: ttl, Now: base})
	check("LeaseAcquire", err)
	_, err = s.LeaseRenew(ctx, &store.LeaseRenewParams{Owner: "A", Leases: []store.LeaseRef{{Session: "s", Epoch: l.Epoch}}, TTL: ttl, Now: base})
	check("LeaseRenew", err)
	check("LeaseRelease", s.LeaseRelease(ctx, &store.LeaseReleaseParams{Owner: "A", Leases: []store.LeaseRef{{Session: "s", Epoch: l.Epoch}}}))
	_, err = s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: recs("s", 2, 1, "x")})
	check("EventAppend", err)
	_, err = s.EventList(ctx, &store.EventListParams{Session: "s"})
	check("EventList", err)
	_, err = s.EventListAll(ctx, &store.EventListAllParams{})
	check("EventListAll", err)
	_, err = s.LastSeq(ctx, "s")
	check("LastSeq", err)
	check("SnapshotSave", s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "s", Epoch: l.Epoch, Seq: 1}))
	_, err = s.SnapshotLoad(ctx, "s")
	check("SnapshotLoad", err)
	_, err = s.TailLoadMany(ctx, &store.TailLoadManyParams{Sessions: []string{"s"}})
	check("TailLoadMany", err)
	_, err = s.SessionList(ctx, &store.SessionListParams{})
	check("SessionList", err)
	_, err = s.SessionGet(ctx, "s")
	check("SessionGet", err)
	_, err = s.RunList(ctx, "s")
	check("RunList", err)
	_, err = s.TaskList(ctx, "s")
	check("TaskList", err)
	_, err = s.NoteList(ctx, "s")
	check("NoteList", err)
	check("NodeBeat", s.NodeBeat(ctx, &store.Node{ID: "n"}))
	_, err = s.NodeList(ctx)
	check("NodeList", err)
	check("NodeLeave", s.NodeLeave(ctx, "n"))
	_, err = s.LeaseList(ctx)
	check("LeaseList", err)
	check("OutputSave", s.OutputSave(ctx, &store.OutputSaveParams{Session: "s", Task: "t", Data: []byte("x")}))
	_, err = s.OutputRead(ctx, &store.OutputReadParams{Session: "s", Task: "t"})
	check("OutputRead", err)
	if isWatcher {
		waitClosed(t, watch, "watch of a closed store")
		_, err = w.Watch(ctx)
		check("Watch", err)
	}
}

// testText: text a database cannot hold (a NUL byte in JSON data or in a
// projected title) is either kept exactly or refused with ErrRefused; a
// refused append keeps nothing, and the next good append goes on.
func testText(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := acquire(t, s, "s", "A", base)
	appendOK(t, s, "s", l.Epoch, recs("s", 1, 1, "ok"), nil)
	for i, tc := range []struct {
		name string
		rec  store.Record
		proj *store.Projection
	}{
		{"NUL escape in data", store.Record{Session: "s", Type: "test.event", Data: []byte(`{"text":"a\u0000b"}`)}, nil},
		{"NUL byte in a title", store.Record{Session: "s", Type: "test.event", Data: []byte(`{}`)},
			&store.Projection{Session: &store.SessionRow{ID: "s", Title: "a\x00b", Created: base, Updated: base, LastSeq: 2}}},
	} {
		seq := int64(2 + i)
		tc.rec.Seq, tc.rec.At = seq, base
		if tc.proj != nil {
			tc.proj.Session.LastSeq = seq
		}
		_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: []store.Record{tc.rec}, Projection: tc.proj})
		got := list(t, s, "s")
		switch {
		case err == nil:
			if len(got) != int(seq) || string(got[seq-1].Data) != string(tc.rec.Data) && !jsonEqual(got[seq-1].Data, tc.rec.Data) {
				t.Fatalf("%s: kept %d records, last %s; want it kept exactly", tc.name, len(got), got[len(got)-1].Data)
			}
			if tc.proj != nil {
				row, err := s.SessionGet(ctx, "s")
				if err != nil || row.Title != tc.proj.Session.Title {
					t.Fatalf("%s: session row %+v, %v; want the title kept exactly", tc.name, row, err)
				}
			}
		case errors.Is(err, store.ErrRefused):
			if len(got) != int(seq-1) {
				t.Fatalf("%s: refused, but %d records are stored; want %d", tc.name, len(got), seq-1)
			}
			// The refusal is of this write only: the same seq goes on.
			appendOK(t, s, "s", l.Epoch, recs("s", seq, 1, "after"), nil)
		default:
			t.Fatalf("%s: append = %v; want success or ErrRefused", tc.name, err)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
