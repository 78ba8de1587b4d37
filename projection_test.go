package vigil

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// noRows is a store whose appends drop their projection rows: a node that
// died before it wrote them.
type noRows struct{ *memstore.Store }

func (s noRows) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	q := *p
	q.Projection = nil
	return s.Store.EventAppend(ctx, &q)
}

// projectionMatches checks that the store's rows of the session say what
// its state says: every run, task and notification, with its status.
func projectionMatches(t *testing.T, st *memstore.Store, s *core.State) {
	t.Helper()
	ctx := context.Background()
	id := string(s.Session.ID)
	runs, err := st.RunList(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range runs {
		got[fmt.Sprintf("%s#%d", r.Agent, r.Seq)] = r.Status
	}
	n := 0
	for _, aid := range s.Order {
		for _, r := range s.Agents[aid].Runs {
			n++
			if k := fmt.Sprintf("%s#%d", aid, r.Seq); got[k] != string(r.Status) {
				t.Errorf("run %s: stored %q, state %q", k, got[k], r.Status)
			}
		}
	}
	if len(runs) != n {
		t.Errorf("%d runs stored, %d in the state", len(runs), n)
	}
	tasks, err := st.TaskList(ctx, id)
	if err != nil || len(tasks) != len(s.TaskOrder) {
		t.Errorf("%d tasks stored, %d in the state (%v)", len(tasks), len(s.TaskOrder), err)
	}
	for _, tr := range tasks {
		if want := s.Tasks[core.TaskID(tr.ID)].Status; tr.Status != string(want) {
			t.Errorf("task %s: stored %q, state %q", tr.ID, tr.Status, want)
		}
	}
	ns, err := st.NoteList(ctx, id)
	if err != nil || len(ns) != len(s.NoteOrder) {
		t.Errorf("%d notes stored, %d in the state (%v)", len(ns), len(s.NoteOrder), err)
	}
	for _, nr := range ns {
		if want := s.Note(core.NoteKey{Task: core.TaskID(nr.Task), Run: nr.Run}); nr.Delivery != string(want.Delivery) {
			t.Errorf("note %s: stored delivery %q, state %q", nr.Key(), nr.Delivery, want.Delivery)
		}
	}
	row, err := st.SessionGet(ctx, id)
	if err != nil || row.LastSeq != s.Seq {
		t.Errorf("session row %+v (%v), want last seq %d", row, err, s.Seq)
	}
}

// TestProjectionAtQuiescence: the rows of a session are written, at the
// latest, when it becomes quiescent, and say what its state says (an
// agent's task said "running" after its run ended, before this test).
func TestProjectionAtQuiescence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, st := openScript(t, "internal/examples/coordinator.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		s, err := rt.State(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		projectionMatches(t, st, s)
	})
}

// TestProjectionRecovered: a node wrote a session's log but none of its
// rows, and died; the node that takes the session over projects the log
// again, so the rows say what the state says.
func TestProjectionRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Load("internal/examples/coordinator.yaml")
		if err != nil {
			t.Fatal(err)
		}
		st := memstore.New()
		first := openWith(t, noRows{st}, sc, nil)
		ctx := context.Background()
		sess, err := first.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		if err := first.WaitQuiescent(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		if runs, _ := st.RunList(ctx, string(sess.ID)); len(runs) != 0 {
			t.Fatalf("the first node wrote %d run rows", len(runs))
		}
		first.Close()
		// The session row is missing too, so the second node is told
		// which session to take.
		second := openWith(t, st, sc, nil)
		if _, err := second.adopt(ctx, core.SessionID(sess.ID), nil); err != nil {
			t.Fatal(err)
		}
		if err := second.WaitQuiescent(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		s, err := second.State(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		projectionMatches(t, st, s)
	})
}

// TestProjectionTimerWritesBusyRows: a busy session's rows that no due
// step writes (a background command runs, nothing else happens) are
// written by the timer, the session's lag after the last write.
func TestProjectionTimerWritesBusyRows(t *testing.T) {
	sc, err := script.Parse([]byte(`
name: busy
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "sleep 600", run_in_background: true}
      - say: "waiting"
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := &armedClock{manualClock: &manualClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, armed: make(chan time.Duration, 64)}
	st := memstore.New()
	// The runtime's Close stops the sleep with SIGTERM and kills it after a
	// grace period on this clock. One run in three here hung when the
	// clock stood still (the SIGTERM, sent just after the start, did not
	// end the sandboxed command), so the clock moves while Close waits
	// (cleanups run last first: the mover starts before, and stops after,
	// the Close).
	closed := make(chan struct{})
	t.Cleanup(func() { close(closed) })
	rt := openWith(t, st, sc, func(o *Options) { o.Clock = clock })
	t.Cleanup(func() {
		go func() {
			for {
				select {
				case <-closed:
					return
				case <-time.After(10 * time.Millisecond):
					clock.advance(time.Second)
				}
			}
		}()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	for armed := false; !armed; {
		select {
		case d := <-clock.armed:
			armed = d == projLag(core.SessionID(sess.ID))
		case <-ctx.Done():
			t.Fatal("no projection timer was armed")
		}
	}
	// The clock has not moved since the session was created: the task's
	// row waits for the timer.
	if tasks, _ := st.TaskList(ctx, string(sess.ID)); len(tasks) != 0 {
		t.Fatalf("task rows written before they were due: %+v", tasks)
	}
	clock.advance(projLag(core.SessionID(sess.ID)))
	for i := 0; ; i++ {
		tasks, err := st.TaskList(ctx, string(sess.ID))
		must(t, err)
		if len(tasks) == 1 && tasks[0].Status == "running" {
			break
		}
		if i > 50_000_000 || ctx.Err() != nil {
			t.Fatalf("the timer did not write the task's row: %+v", tasks)
		}
		runtime.Gosched()
	}
}

// laggingRows is a store whose appends, while lag is set, write
// projection rows with the session's creation only: a node that died with
// its rows behind its log. It counts the reads that a takeover's
// projection would repeat.
type laggingRows struct {
	*memstore.Store
	lag                     atomic.Bool
	sessionGets, eventLists atomic.Int64
	tailLoads               atomic.Int64
}

func (s *laggingRows) TailLoadMany(ctx context.Context, p *store.TailLoadManyParams) ([]store.Tail, error) {
	s.tailLoads.Add(1)
	return s.Store.TailLoadMany(ctx, p)
}

func (s *laggingRows) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	q := *p
	if s.lag.Load() && !slices.ContainsFunc(p.Records, func(r store.Record) bool { return r.Type == (&core.SessionCreated{}).Type() }) {
		q.Projection = nil
	}
	return s.Store.EventAppend(ctx, &q)
}

// SnapshotSave saves nothing while the rows lag: as after a crash, the
// clean stop's snapshots are not there either.
func (s *laggingRows) SnapshotSave(ctx context.Context, p *store.SnapshotSaveParams) error {
	if s.lag.Load() {
		return nil
	}
	return s.Store.SnapshotSave(ctx, p)
}

func (s *laggingRows) SessionGet(ctx context.Context, id string) (*store.SessionRow, error) {
	s.sessionGets.Add(1)
	return s.Store.SessionGet(ctx, id)
}

func (s *laggingRows) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	s.eventLists.Add(1)
	return s.Store.EventList(ctx, p)
}

// TestOpenProjectsFromWhatItRead: Open's takeovers project what the
// session rows miss from the rows the listing read and the log the
// takeover read, without reading either again (before, each takeover read
// the session's row and its log a second time: a fifth of Open's cost at
// 10,000 sessions), and the rows then say what the state says. The log is
// read once for all of them (TailLoadMany), not once per session.
func TestOpenProjectsFromWhatItRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Load("internal/examples/coordinator.yaml")
		must(t, err)
		st := &laggingRows{Store: memstore.New()}
		st.lag.Store(true)
		ctx := context.Background()
		first := openWith(t, st, sc, nil)
		var ids []SessionID
		for range 3 {
			sess, err := first.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
			must(t, err)
			ids = append(ids, sess.ID)
		}
		for _, id := range ids {
			must(t, first.WaitQuiescent(ctx, id))
		}
		must(t, first.Close())
		for _, id := range ids {
			row, err := st.Store.SessionGet(ctx, string(id))
			must(t, err)
			if last, _ := st.LastSeq(ctx, string(id)); row.LastSeq >= last {
				t.Fatalf("session %s: its row covers the log (seq %d of %d): the rows should lag", id, row.LastSeq, last)
			}
		}

		st.lag.Store(false)
		st.sessionGets.Store(0)
		st.eventLists.Store(0)
		second := openWith(t, st, sc, nil)
		if n, m, k := st.sessionGets.Load(), st.eventLists.Load(), st.tailLoads.Load(); n != 0 || m != 0 || k != 1 {
			t.Errorf("Open of %d sessions read %d session rows, listed events %d times and loaded tails %d times; want 0, 0 and 1", len(ids), n, m, k)
		}
		for _, id := range ids {
			must(t, second.WaitQuiescent(ctx, id))
			s, err := second.State(ctx, id)
			must(t, err)
			projectionMatches(t, st.Store, s)
		}
	})
}

// Sessions' lags are spread over half of projectionLag up to it, so that
// sessions started together do not write their rows together.
func TestProjLagSpread(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := projLag(core.SessionID(fmt.Sprintf("s%03d", i)))
		if d < projectionLag/2 || d >= projectionLag {
			t.Fatalf("lag %s outside [%s, %s)", d, projectionLag/2, projectionLag)
		}
		seen[d.Truncate(50*time.Millisecond)] = true
	}
	if len(seen) < 8 { // ten 50 ms buckets
		t.Fatalf("200 sessions' lags fall in %d of ten 50 ms buckets", len(seen))
	}
}

// slowScenario's main agent answers a prompt after an hour: while it
// thinks, its session is not quiescent.
const slowScenario = "name: slow\nagents:\n  main:\n    turns:\n      - delay: 1h\n        say: \"done\"\n"

// TestCleanStopSavesSnapshot: a clean stop saves a snapshot of each
// session behind its last one (any event since, and one per KiB of it),
// so that the next owner reads it instead of replaying them; a large
// session a few events behind gets none, and the next owner replays those
// few. The sessions are not quiescent (their model calls are in flight),
// so they save none at rest.
func TestCleanStopSavesSnapshot(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	rt := openWith(t, st, mustParse(t, slowScenario), nil)
	busy, err := rt.CreateSession(ctx, &SessionParams{Prompt: "think"})
	must(t, err)
	// A prompt of 256 KiB: its transcript keeps the state that large.
	large, err := rt.CreateSession(ctx, &SessionParams{Prompt: strings.Repeat("big ", 64<<10)})
	must(t, err)
	for i := range 32 {
		must(t, rt.Hold(ctx, busy.ID, &HoldParams{By: "test", Reason: fmt.Sprint(i)}))
		must(t, rt.Resume(ctx, busy.ID, "test"))
	}
	if snap, err := st.SnapshotLoad(ctx, string(busy.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a session that is not at rest got a snapshot: %+v, %v", snap, err)
	}
	// snapped checks that id's snapshot is at its last seq, and returns it.
	snapped := func(id SessionID, when string) *store.Snapshot {
		t.Helper()
		last, err := st.LastSeq(ctx, string(id))
		must(t, err)
		snap, err := st.SnapshotLoad(ctx, string(id))
		if err != nil || snap.Seq != last {
			t.Fatalf("%s: snapshot of %s %+v, %v; want one at its last seq %d", when, id, snap, err, last)
		}
		return snap
	}
	must(t, rt.Close())
	snapped(busy.ID, "after a clean stop")
	largeSnap := snapped(large.ID, "after a clean stop")

	// The next owner starts from them, commits its recovery step and
	// stops: the small session is snapshotted again, the large one,
	// behind by fewer events than its size in KiB, is not.
	rt = openWith(t, st, mustParse(t, slowScenario), nil)
	s, err := rt.SessionStatus(ctx, busy.ID)
	must(t, err)
	if s.Hold != nil {
		t.Errorf("the busy session after the restart: held %+v, want released", s.Hold)
	}
	must(t, rt.Close())
	snapped(busy.ID, "after the second clean stop")
	last, err := st.LastSeq(ctx, string(large.ID))
	must(t, err)
	snap, err := st.SnapshotLoad(ctx, string(large.ID))
	must(t, err)
	if last == largeSnap.Seq || snap.Seq != largeSnap.Seq {
		t.Errorf("the large session after the second stop: last seq %d, snapshot at %d (was %d); want the old one, a few events behind", last, snap.Seq, largeSnap.Seq)
	}
}

// TestSnapshotAtRest: a commit that leaves a session quiescent saves a
// snapshot once restSnapshotMin events or more passed since the last one,
// and one per KiB of the last snapshot when that is more, so that a
// restart after a crash (which saves nothing at stop) replays fewer than
// restSnapshotMin events of an idle session, and a large idle state is
// not written again every restSnapshotMin events.
func TestSnapshotAtRest(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	rt := openWith(t, st, mustParse(t, idleScenario), nil)
	small, err := rt.CreateSession(ctx, &SessionParams{Prompt: "hi"})
	must(t, err)
	// A prompt of 256 KiB: its transcript keeps the state that large.
	large, err := rt.CreateSession(ctx, &SessionParams{Prompt: strings.Repeat("big ", 64<<10)})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, small.ID))
	must(t, rt.WaitQuiescent(ctx, large.ID))
	// inputs sends n events to id, holds and resumes in turn, and returns
	// the session's last seq and its snapshot's seq (0: none).
	sent := map[SessionID]int{}
	inputs := func(id SessionID, n int) (last, snapped int64) {
		t.Helper()
		for range n {
			sent[id]++
			if sent[id]%2 == 1 {
				must(t, rt.Hold(ctx, id, &HoldParams{By: "test"}))
			} else {
				must(t, rt.Resume(ctx, id, "test"))
			}
		}
		must(t, rt.WaitQuiescent(ctx, id))
		last, err := st.LastSeq(ctx, string(id))
		must(t, err)
		snap, err := st.SnapshotLoad(ctx, string(id))
		switch {
		case errors.Is(err, store.ErrNotFound):
			return last, 0
		case err != nil:
			t.Fatal(err)
		}
		return last, snap.Seq
	}

	for range 3 {
		last, snapped := inputs(small.ID, restSnapshotMin)
		if last-snapped >= restSnapshotMin {
			t.Fatalf("small session at rest: last seq %d, snapshot at %d; want fewer than %d events after it", last, snapped, restSnapshotMin)
		}
	}

	last, snapped := inputs(large.ID, restSnapshotMin)
	if snapped == 0 || last-snapped >= restSnapshotMin {
		t.Fatalf("large session's first snapshot at rest: last seq %d, snapshot at %d", last, snapped)
	}
	snap, err := st.SnapshotLoad(ctx, string(large.ID))
	must(t, err)
	every := len(snap.Data) / 1024 // events per snapshot of this size
	if every <= 2*restSnapshotMin {
		t.Fatalf("large session's snapshot is %d bytes; the test needs more than %d KiB", len(snap.Data), 2*restSnapshotMin)
	}
	first := snapped
	last, snapped = inputs(large.ID, every-int(last-first)-1)
	if snapped != first {
		t.Fatalf("large session: a new snapshot at %d after %d events, before one per KiB of the last (%d)", snapped, last-first, every)
	}
	last, snapped = inputs(large.ID, 2)
	if snapped == first || last-snapped >= restSnapshotMin {
		t.Fatalf("large session: last seq %d, snapshot at %d after %d events; want a new one at rest past %d", last, snapped, last-first, every)
	}

	// A crash: the store takes no more writes, so the stop saves nothing.
	// The next owner reads the snapshots and replays the few events after.
	last, _ = inputs(small.ID, 3)
	st.FailWrites(store.ErrUnavailable)
	must(t, rt.Close())
	st.FailWrites(nil)
	if got, err := st.LastSeq(ctx, string(small.ID)); err != nil || got != last {
		t.Fatalf("the crashed runtime wrote at its stop: last seq %d -> %d, %v", last, got, err)
	}
	rt = openWith(t, st, mustParse(t, idleScenario), nil)
	s, err := rt.SessionStatus(ctx, small.ID)
	must(t, err)
	if s.Hold == nil {
		t.Errorf("the small session after the crash is not held (its last input was a hold)")
	}
}
