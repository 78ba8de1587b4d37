package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// wakeGuard bounds how long a check waits for a Watch channel before it
// reports that no wake came (a hang guard, not a latency bound).
const wakeGuard = time.Minute

// waitWake waits for a receive on ch; closed is a failure.
func waitWake(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch channel was closed", what)
		}
	case <-time.After(wakeGuard):
		t.Fatalf("%s: no wake in %v", what, wakeGuard)
	}
}

// waitClosed drains ch until it is closed.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	guard := time.After(wakeGuard)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-guard:
			t.Fatalf("%s: the watch channel is still open after %v", what, wakeGuard)
		}
	}
}

// drain takes what ch holds (a coalesced or spurious wake) without
// waiting.
func drain(ch <-chan struct{}) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func sameNode(a, b store.Node) bool {
	return a.ID == b.ID && a.Address == b.Address && a.Started.Equal(b.Started) && a.Beat.Equal(b.Beat) &&
		a.Draining == b.Draining && a.Sessions == b.Sessions
}

func checkNodes(t testing.TB, what string, s store.Store, want ...store.Node) {
	t.Helper()
	got, err := s.NodeList(context.Background())
	checkRows(t, what, got, err, sameNode, want...)
}

// testNodes: a beat inserts or replaces a node's row, every field and
// time round-trips, the list is in ID order, and a leave removes the row
// (leaving a node that has none is no error).
func testNodes(t *testing.T, s store.Store) {
	ctx := t.Context()
	checkNodes(t, "no node", s)
	b := store.Node{ID: "node-b", Address: "http://10.0.0.2:7777", Started: base, Beat: base.Add(time.Second), Sessions: 3}
	a := store.Node{ID: "node-a", Address: "http://10.0.0.1:7777", Started: base.Add(-time.Hour),
		Beat: time.Date(2026, 3, 1, 14, 0, 0, 987654321, time.FixedZone("X", 5*3600+1800))}
	for _, n := range []store.Node{b, a} {
		if err := s.NodeBeat(ctx, &n); err != nil {
			t.Fatalf("beat of %s: %v", n.ID, err)
		}
	}
	checkNodes(t, "two nodes", s, a, b)

	// A later beat replaces every field.
	a2 := store.Node{ID: "node-a", Address: "", Started: base, Beat: base.Add(time.Minute), Draining: true, Sessions: 1200}
	if err := s.NodeBeat(ctx, &a2); err != nil {
		t.Fatalf("second beat of node-a: %v", err)
	}
	checkNodes(t, "after node-a beat again", s, a2, b)
	// A node with nothing but an ID.
	c := store.Node{ID: "node-c"}
	if err := s.NodeBeat(ctx, &c); err != nil {
		t.Fatalf("beat of node-c: %v", err)
	}
	checkNodes(t, "with a bare node", s, a2, b, c)

	if err := s.NodeLeave(ctx, "node-b"); err != nil {
		t.Fatalf("leave of node-b: %v", err)
	}
	checkNodes(t, "after node-b left", s, a2, c)
	for _, id := range []string{"node-b", "never"} {
		if err := s.NodeLeave(ctx, id); err != nil {
			t.Fatalf("leave of %s, which has no row: %v", id, err)
		}
	}
	checkNodes(t, "after leaves of nothing", s, a2, c)
	// A node that left may join again.
	if err := s.NodeBeat(ctx, &b); err != nil {
		t.Fatalf("beat of node-b after it left: %v", err)
	}
	checkNodes(t, "node-b back", s, a2, b, c)
}

func sameLease(a, b store.Lease) bool {
	return a.Session == b.Session && a.Owner == b.Owner && a.Epoch == b.Epoch && a.Expires.Equal(b.Expires) &&
		a.Released == b.Released && a.Previous == b.Previous
}

func checkLeases(t testing.TB, what string, s store.Store, want ...store.Lease) {
	t.Helper()
	got, err := s.LeaseList(context.Background())
	checkRows(t, what, got, err, sameLease, want...)
}

// testLeaseList: every session's lease in session order, as it is stored:
// renewed, released (free, the releaser still named, Expires zero),
// expired (listed as it was: expiry is the caller's clock's business) and
// taken over; Previous is never set.
func testLeaseList(t *testing.T, s store.Store) {
	ctx := t.Context()
	checkLeases(t, "no lease", s)
	l2 := acquire(t, s, "s2", "A", base)
	l1 := acquire(t, s, "s1", "B", base.Add(time.Second))
	l3 := acquire(t, s, "s3", "A", base)
	lease := func(l *store.Lease) store.Lease {
		return store.Lease{Session: l.Session, Owner: l.Owner, Epoch: l.Epoch, Expires: l.Expires}
	}
	checkLeases(t, "three leases", s, lease(l1), lease(l2), lease(l3))

	// Renewed: the new expiry.
	r3, err := store.RenewOne(ctx, s, "s3", "A", l3.Epoch, ttl, base.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Released: free, still naming its last owner.
	if err := store.ReleaseOne(ctx, s, "s2", "A", l2.Epoch); err != nil {
		t.Fatal(err)
	}
	released := store.Lease{Session: "s2", Owner: "A", Epoch: l2.Epoch, Released: true}
	checkLeases(t, "after renew and release", s, lease(l1), released, lease(r3))

	// Expired by a later clock, then taken over: the new holder.
	later := base.Add(time.Hour)
	n1 := acquire(t, s, "s1", "C", later)
	n2 := acquire(t, s, "s2", "C", later)
	if !n2.Released || n2.Previous != "A" {
		t.Fatalf("acquisition of the released lease: %+v, want released by A", n2)
	}
	checkLeases(t, "after take-overs", s, lease(n1), lease(n2), lease(r3))
}

// outputData returns n bytes of every value (NUL included), from seed.
func outputData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(r.Uint32())
	}
	return out
}

func saveOutput(t testing.TB, s store.Store, sess, task string, data []byte) {
	t.Helper()
	if err := s.OutputSave(context.Background(), &store.OutputSaveParams{Session: sess, Task: task, Data: data}); err != nil {
		t.Fatalf("save output of %s/%s (%d bytes): %v", sess, task, len(data), err)
	}
}

// checkOutput reads [off, off+limit) of an output and compares it with
// the range of want.
func checkOutput(t testing.TB, s store.Store, sess, task string, off, limit int64, want []byte) {
	t.Helper()
	what := fmt.Sprintf("read %s/%s offset %d limit %d", sess, task, off, limit)
	got, err := s.OutputRead(context.Background(), &store.OutputReadParams{Session: sess, Task: task, Offset: off, Limit: limit})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got.Size != int64(len(want)) {
		t.Fatalf("%s: size %d, want %d", what, got.Size, len(want))
	}
	from := min(off, int64(len(want)))
	to := int64(len(want))
	if limit > 0 && limit < to-from {
		to = from + limit
	}
	if !bytes.Equal(got.Data, want[from:to]) {
		t.Fatalf("%s: %d bytes %.40q, want %d bytes %.40q", what, len(got.Data), got.Data, to-from, want[from:to])
	}
}

// testOutput: a saved output reads back whole and by ranges (across chunk
// boundaries of any chunk size a backend may pick, at and past the end),
// every byte value kept; a save replaces the whole output, shorter or
// longer; an empty output is saved (not "not found"); outputs of other
// tasks and sessions are apart; reading one never saved is ErrNotFound.
func testOutput(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.OutputRead(ctx, &store.OutputReadParams{Session: "s", Task: "t1"})
	wantErr(t, "read of an output never saved", err, store.ErrNotFound)

	big := outputData(700_001, 1)
	saveOutput(t, s, "s", "t1", big)
	n := int64(len(big))
	checkOutput(t, s, "s", "t1", 0, 0, big)
	ranges := [][2]int64{{0, 1}, {0, 10}, {5, 100}, {n - 5, 100}, {n - 1, 0}, {n, 0}, {n, 10}, {n + 1000, 10},
		{0, math.MaxInt64}, {3, math.MaxInt64}}
	for _, boundary := range []int64{4 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 19} {
		ranges = append(ranges, [2]int64{boundary - 3, 6}, [2]int64{boundary, 1}, [2]int64{boundary - 1, 0}, [2]int64{boundary - 100, 300_000})
	}
	for _, r := range ranges {
		checkOutput(t, s, "s", "t1", r[0], r[1], big)
	}
	for _, p := range []store.OutputReadParams{{Session: "s", Task: "t1", Offset: -1}, {Session: "s", Task: "t1", Limit: -1}} {
		if _, err := s.OutputRead(ctx, &p); err == nil {
			t.Errorf("read at offset %d limit %d: no error", p.Offset, p.Limit)
		}
	}

	// Apart by task and session.
	small := []byte("a\x00b\xff\x00")
	saveOutput(t, s, "s", "t2", small)
	checkOutput(t, s, "s", "t2", 0, 0, small)
	checkOutput(t, s, "s", "t2", 1, 1, small)
	checkOutput(t, s, "s", "t1", 0, 0, big)
	_, err = s.OutputRead(ctx, &store.OutputReadParams{Session: "other", Task: "t1"})
	wantErr(t, "read of another session's task", err, store.ErrNotFound)

	// Replaced by a shorter output: nothing of the longer one is left.
	short := outputData(300_000, 2)
	saveOutput(t, s, "s", "t1", short)
	checkOutput(t, s, "s", "t1", 0, 0, short)
	checkOutput(t, s, "s", "t1", 299_990, 100, short)
	checkOutput(t, s, "s", "t1", 400_000, 10, short)
	// And by a longer one.
	long := outputData(1_100_000, 3)
	saveOutput(t, s, "s", "t1", long)
	checkOutput(t, s, "s", "t1", 0, 0, long)
	checkOutput(t, s, "s", "t1", 1_000_000, 0, long)
	// And by an empty one, then one of one byte.
	saveOutput(t, s, "s", "t1", nil)
	checkOutput(t, s, "s", "t1", 0, 0, nil)
	checkOutput(t, s, "s", "t1", 10, 10, nil)
	saveOutput(t, s, "s", "t1", []byte{0})
	checkOutput(t, s, "s", "t1", 0, 0, []byte{0})
	saveOutput(t, s, "s", "t3", []byte{})
	checkOutput(t, s, "s", "t3", 0, 5, []byte{})
}

// testWatch: for a store.Watcher, every Watch channel receives after a
// commit of events, the channel of a Watch whose context ended is closed
// and the others go on, and Close closes the rest.
func testWatch(t *testing.T, s store.Store) {
	w, ok := s.(store.Watcher)
	if !ok {
		t.Skip("not a store.Watcher")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch1, err := w.Watch(ctx)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	ch2, err := w.Watch(t.Context())
	if err != nil {
		t.Fatalf("second watch: %v", err)
	}
	l := acquire(t, s, "s", "A", base)
	for i := range 5 {
		drain(ch1)
		drain(ch2)
		appendOK(t, s, "s", l.Epoch, recs("s", int64(2*i+1), 2, "w"), nil)
		waitWake(t, ch1, fmt.Sprintf("first watcher, append %d", i))
		waitWake(t, ch2, fmt.Sprintf("second watcher, append %d", i))
	}
	cancel()
	waitClosed(t, ch1, "watch whose context ended")
	drain(ch2)
	appendOK(t, s, "s", l.Epoch, recs("s", 11, 1, "w"), nil)
	waitWake(t, ch2, "second watcher after the first ended")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ch2, "watch of a closed store")
}

// Shared is a backend whose Store values can share one database, as
// several nodes do.
type Shared struct {
	// Open returns two stores on one new, empty database, closed and
	// removed when t ends.
	Open func(t *testing.T) (store.Store, store.Store)
	// WatchesOthers says that a store.Watcher's channel receives after
	// commits of the other store too (PostgreSQL), not only its own.
	WatchesOthers bool
}

// RunShared runs the checks of two stores on one database: global order
// with writers on both, leases, nodes and outputs seen from the other
// store, and, with WatchesOthers, a commit on one waking a watcher on
// the other.
func RunShared(t *testing.T, sh Shared) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b store.Store)
	}{
		{"GlobalOrder", testSharedGlobalOrder},
		{"Leases", testSharedLeases},
		{"NodesAndOutputs", testSharedNodesOutputs},
		{"Watch", func(t *testing.T, a, b store.Store) {
			if !sh.WatchesOthers {
				t.Skip("the backend's watchers hear their own store's commits only")
			}
			testSharedWatch(t, a, b)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := sh.Open(t)
			tc.fn(t, a, b)
		})
	}
}

// testSharedGlobalOrder defines the global order and proves it with
// concurrent writers on two stores of one database: a reader following
// EventListAll by AfterGlobal, on either store, sees every record exactly
// once, in strictly increasing Global, each session's records in sequence,
// and no record ever commits later under a Global the reader has passed
// (the readers' sequences are exactly the final log).
func testSharedGlobalOrder(t *testing.T, a, b store.Store) {
	const perStore, steps = 3, 40
	type writer struct {
		s     store.Store
		sess  string
		epoch int64
	}
	var ws []writer
	total := 0
	for i, s := range []store.Store{a, b} {
		for j := range perStore {
			sess := fmt.Sprintf("g%d%d", i, j)
			ws = append(ws, writer{s, sess, acquire(t, s, sess, fmt.Sprintf("node-%d", i), base).Epoch})
		}
	}
	size := func(sess string, step int) int { return 1 + (step+len(sess))%3 }
	for _, w := range ws {
		for step := range steps {
			total += size(w.sess, step)
		}
	}
	errs := make(chan error, len(ws)+2)
	var writers, readers sync.WaitGroup
	done := make(chan struct{})
	for _, w := range ws {
		writers.Go(func() {
			seq := int64(1)
			for step := range steps {
				n := size(w.sess, step)
				if _, err := w.s.EventAppend(context.Background(), &store.EventAppendParams{Session: w.sess, Epoch: w.epoch, Records: recs(w.sess, seq, n, "g")}); err != nil {
					errs <- fmt.Errorf("append %s: %w", w.sess, err)
					return
				}
				seq += int64(n)
			}
		})
	}
	go func() { writers.Wait(); close(done) }()

	seen := make([][]store.Record, 2)
	for i, s := range []store.Store{a, b} {
		readers.Go(func() {
			after := int64(0)
			last := map[string]int64{}
			for len(seen[i]) < total {
				finished := false
				select {
				case <-done:
					finished = true
				default:
				}
				page, err := s.EventListAll(context.Background(), &store.EventListAllParams{AfterGlobal: after, Limit: 17})
				if err != nil {
					errs <- fmt.Errorf("reader %d: %w", i, err)
					return
				}
				for _, r := range page {
					if r.Global <= after {
						errs <- fmt.Errorf("reader %d: global %d after %d", i, r.Global, after)
						return
					}
					if r.Seq != last[r.Session]+1 {
						errs <- fmt.Errorf("reader %d: %s#%d after %s#%d: a record committed under a global it had passed", i, r.Session, r.Seq, r.Session, last[r.Session])
						return
					}
					after, last[r.Session] = r.Global, r.Seq
					seen[i] = append(seen[i], r)
				}
				if len(page) == 0 && finished {
					errs <- fmt.Errorf("reader %d: writers done, read %d of %d records", i, len(seen[i]), total)
					return
				}
			}
		})
	}
	writers.Wait()
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, s := range []store.Store{a, b} {
		final := listAll(t, s)
		checkGlobal(t, fmt.Sprintf("final log on store %d", i), final)
		for k, got := range seen {
			if len(got) != len(final) {
				t.Fatalf("reader %d saw %d records, the log on store %d holds %d", k, len(got), i, len(final))
			}
			for j := range got {
				if got[j].Global != final[j].Global || sameRecord(got[j], final[j]) != "" {
					t.Fatalf("reader %d record %d: %s#%d at %d; the log on store %d has %s#%d at %d", k, j,
						got[j].Session, got[j].Seq, got[j].Global, i, final[j].Session, final[j].Seq, final[j].Global)
				}
			}
		}
	}
	for _, w := range ws {
		want := int64(0)
		for step := range steps {
			want += int64(size(w.sess, step))
		}
		checkContiguous(t, w.sess, list(t, a, w.sess), want)
	}
}

// testSharedLeases: a lease taken through one store is held for the
// other, fences the other's writes, and both list it.
func testSharedLeases(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	la := acquire(t, a, "s", "node-a", base)
	_, err := b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "node-b", TTL: ttl, Now: base})
	wantErr(t, "node-b while node-a holds", err, store.ErrLeaseHeld)
	appendOK(t, a, "s", la.Epoch, recs("s", 1, 2, "a"), nil)
	want := store.Lease{Session: "s", Owner: "node-a", Epoch: la.Epoch, Expires: la.Expires}
	checkLeases(t, "store b lists node-a's lease", b, want)
	if err := store.ReleaseOne(ctx, a, "s", "node-a", la.Epoch); err != nil {
		t.Fatal(err)
	}
	lb := acquire(t, b, "s", "node-b", base.Add(time.Second))
	if !lb.Released || lb.Previous != "node-a" {
		t.Fatalf("node-b after node-a released: %+v", lb)
	}
	_, err = a.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: la.Epoch, Records: recs("s", 3, 1, "a")})
	wantErr(t, "node-a after node-b took over", err, store.ErrFenced)
	appendOK(t, b, "s", lb.Epoch, recs("s", 3, 1, "b"), nil)
	checkLeases(t, "store a lists node-b's lease", a, store.Lease{Session: "s", Owner: "node-b", Epoch: lb.Epoch, Expires: lb.Expires})
	checkContiguous(t, "s", list(t, a, "s"), 3)
}

// testSharedNodesOutputs: a node's beat and a task's output written
// through one store are read through the other.
func testSharedNodesOutputs(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	na := store.Node{ID: "node-a", Address: "http://a", Started: base, Beat: base.Add(time.Second), Sessions: 2}
	nb := store.Node{ID: "node-b", Address: "http://b", Started: base, Beat: base.Add(2 * time.Second)}
	if err := a.NodeBeat(ctx, &na); err != nil {
		t.Fatal(err)
	}
	if err := b.NodeBeat(ctx, &nb); err != nil {
		t.Fatal(err)
	}
	checkNodes(t, "nodes seen from a", a, na, nb)
	checkNodes(t, "nodes seen from b", b, na, nb)
	if err := a.NodeLeave(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	checkNodes(t, "node-a left, seen from b", b, nb)

	data := outputData(600_000, 4)
	saveOutput(t, a, "s", "t1", data)
	checkOutput(t, b, "s", "t1", 0, 0, data)
	checkOutput(t, b, "s", "t1", 262_000, 1000, data)
	saveOutput(t, b, "s", "t1", data[:10])
	checkOutput(t, a, "s", "t1", 0, 0, data[:10])

	// Saves of one output racing on both stores leave one of them whole.
	long, short := outputData(800_000, 5), outputData(300_000, 6)
	for round := range 30 {
		var wg sync.WaitGroup
		for i, s := range []store.Store{a, b} {
			data := long
			if (i+round)%2 == 1 {
				data = short
			}
			wg.Go(func() {
				if err := s.OutputSave(ctx, &store.OutputSaveParams{Session: "s", Task: "race", Data: data}); err != nil {
					t.Errorf("round %d: save on store %d: %v", round, i, err)
				}
			})
		}
		wg.Wait()
		got, err := a.OutputRead(ctx, &store.OutputReadParams{Session: "s", Task: "race"})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Data, long) && !bytes.Equal(got.Data, short) || got.Size != int64(len(got.Data)) {
			t.Fatalf("round %d: after racing saves the output is %d bytes (size %d), neither save whole", round, len(got.Data), got.Size)
		}
	}
}

// testSharedWatch: a commit of events through one store wakes a watcher
// of the other, and the reader woken then reads it.
func testSharedWatch(t *testing.T, a, b store.Store) {
	wa, ok := a.(store.Watcher)
	if !ok {
		t.Fatal("not a store.Watcher")
	}
	ch, err := wa.Watch(t.Context())
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	l := acquire(t, b, "s", "node-b", base)
	after := int64(0)
	for i := range 5 {
		drain(ch)
		appendOK(t, b, "s", l.Epoch, recs("s", int64(i+1), 1, "b"), nil)
		// Woken, a reader re-reads; a spurious wake may come first.
		for {
			waitWake(t, ch, fmt.Sprintf("watcher of store a, append %d on store b", i))
			page, err := a.EventListAll(t.Context(), &store.EventListAllParams{AfterGlobal: after})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > 0 {
				if len(page) != 1 || page[0].Seq != int64(i+1) {
					t.Fatalf("after append %d: read %d records, first %s#%d", i, len(page), page[0].Session, page[0].Seq)
				}
				after = page[0].Global
				break
			}
		}
	}
	// The store's own commits wake it too.
	la := acquire(t, a, "s2", "node-a", base)
	drain(ch)
	appendOK(t, a, "s2", la.Epoch, recs("s2", 1, 1, "a"), nil)
	waitWake(t, ch, "watcher of store a, append on store a")
}
