package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/vigilrun/vigil/store"
)

func testConcurrentSessions(t *testing.T, s store.Store) {
	const sessions, steps, per = 12, 25, 3
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		sess := fmt.Sprintf("c%02d", i)
		l := acquire(t, s, sess, "node-a", base)
		wg.Go(func() {
			for step := range steps {
				from := int64(step*per + 1)
				_, err := s.EventAppend(context.Background(), &store.EventAppendParams{
					Session: sess, Epoch: l.Epoch, Records: recs(sess, from, per, "c"),
					Projection: &store.Projection{
						Session: &store.SessionRow{ID: sess, Created: base, Updated: base, LastSeq: from + per - 1},
						Runs:    []store.RunRow{{Session: sess, Agent: "main", Seq: step + 1, Kind: "prompt", Status: "completed", Started: base}},
						Notes:   []store.NoteRow{note(sess, "t1", step+1, "completed", true)},
					},
				})
				if err != nil {
					errs <- fmt.Errorf("append %s step %d: %w", sess, step, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := listAll(t, s)
	checkGlobal(t, "list all", all)
	if len(all) != sessions*steps*per {
		t.Fatalf("list all: %d records, want %d", len(all), sessions*steps*per)
	}
	next := map[string]int64{}
	for _, r := range all {
		if r.Seq != next[r.Session]+1 {
			t.Fatalf("global order has %s#%d after %s#%d", r.Session, r.Seq, r.Session, next[r.Session])
		}
		next[r.Session] = r.Seq
	}
	for i := range sessions {
		sess := fmt.Sprintf("c%02d", i)
		got := list(t, s, sess)
		checkRecords(t, "list "+sess, got, recs(sess, 1, steps*per, "c"))
		notes, err := s.NoteList(t.Context(), sess)
		if err != nil || len(notes) != steps {
			t.Fatalf("notes of %s: %d, %v", sess, len(notes), err)
		}
		runs, err := s.RunList(t.Context(), sess)
		if err != nil || len(runs) != steps {
			t.Fatalf("runs of %s: %d, %v", sess, len(runs), err)
		}
	}
}

// testConcurrentSameSession has several writers race for the same session
// (as after a bug or a split brain with the same epoch): the log must stay
// contiguous and every seq must have exactly one winner.
func testConcurrentSameSession(t *testing.T, s store.Store) {
	const writers = 6
	l := acquire(t, s, "s", "node-a", base)

	// Rounds: every writer appends the same two seqs at once; exactly one
	// wins, the others get ErrConflict.
	const rounds = 15
	for round := range rounds {
		from := int64(2*round + 1)
		start := make(chan struct{})
		results := make(chan error, writers)
		for w := range writers {
			go func() {
				<-start
				_, err := s.EventAppend(context.Background(), &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: recs("s", from, 2, fmt.Sprint(w))})
				if err != nil {
					err = fmt.Errorf("writer %d: %w", w, err)
				}
				results <- err
			}()
		}
		close(start)
		wins := 0
		for range writers {
			err := <-results
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrConflict):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners, want 1", round, wins)
		}
	}

	// Free for all: writers read the last seq and append after it until
	// the log is long enough; each remembers what it won.
	const target = 2*rounds + 60
	won := make([][]int64, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for {
				last, err := s.LastSeq(context.Background(), "s")
				if err != nil {
					errs <- err
					return
				}
				if last >= target {
					return
				}
				_, err = s.EventAppend(context.Background(), &store.EventAppendParams{Session: "s", Epoch: l.Epoch, Records: recs("s", last+1, 2, fmt.Sprintf("w%d", w))})
				switch {
				case err == nil:
					won[w] = append(won[w], last+1, last+2)
				case errors.Is(err, store.ErrConflict):
					runtime.Gosched()
				default:
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := list(t, s, "s")
	n := int64(len(got))
	if n < target {
		t.Fatalf("log has %d records, want at least %d", n, target)
	}
	checkContiguous(t, "s", got, n)
	owner := map[int64]int{}
	for w, seqs := range won {
		for _, q := range seqs {
			if prev, dup := owner[q]; dup {
				t.Fatalf("seq %d won by writers %d and %d", q, prev, w)
			}
			owner[q] = w
		}
	}
	for _, r := range got[2*rounds:] {
		w, ok := owner[r.Seq]
		if !ok {
			t.Fatalf("seq %d stored but no writer won it", r.Seq)
		}
		if want := recs("s", r.Seq, 1, fmt.Sprintf("w%d", w))[0]; string(r.Data) != string(want.Data) {
			t.Fatalf("seq %d holds %s, but writer %d won it", r.Seq, r.Data, w)
		}
	}
	if len(owner) != int(n)-2*rounds {
		t.Fatalf("%d seqs won, %d stored", len(owner), int(n)-2*rounds)
	}
}

// testReplayWhileWriting has readers follow the log by cursor while
// writers append to several sessions; a reader must see every record once,
// in order, with no gap (a row committed late under a lower Global would
// show up as a gap in its session's seqs).
func testReplayWhileWriting(t *testing.T, s store.Store) {
	const sessions, steps, per = 4, 60, 3
	const total = sessions * steps * per
	epochs := map[string]int64{}
	for i := range sessions {
		sess := fmt.Sprintf("r%d", i)
		epochs[sess] = acquire(t, s, sess, "node-a", base).Epoch
	}
	writersDone := make(chan struct{})
	errs := make(chan error, sessions+2)
	var writers, readers sync.WaitGroup
	for sess, epoch := range epochs {
		writers.Go(func() {
			for step := range steps {
				_, err := s.EventAppend(context.Background(), &store.EventAppendParams{Session: sess, Epoch: epoch, Records: recs(sess, int64(step*per+1), per, "r")})
				if err != nil {
					errs <- fmt.Errorf("append %s: %w", sess, err)
					return
				}
			}
		})
	}
	go func() { writers.Wait(); close(writersDone) }()

	// follow reads pages from fetch until it has want records or the
	// writers are done and a read comes back empty.
	follow := func(name string, want int, fetch func() ([]store.Record, error), check func(store.Record) error) {
		seen := 0
		for seen < want {
			done := false
			select {
			case <-writersDone:
				done = true
			default:
			}
			page, err := fetch()
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			for _, r := range page {
				if err := check(r); err != nil {
					errs <- fmt.Errorf("%s after %d records: %w", name, seen, err)
					return
				}
				seen++
			}
			if len(page) == 0 {
				if done {
					errs <- fmt.Errorf("%s: writers done, read %d of %d records", name, seen, want)
					return
				}
				runtime.Gosched()
			}
		}
	}

	// One reader follows one session by seq.
	readers.Go(func() {
		after := int64(0)
		follow("follow r0", steps*per, func() ([]store.Record, error) {
			return s.EventList(context.Background(), &store.EventListParams{Session: "r0", AfterSeq: after, Limit: 7})
		}, func(r store.Record) error {
			if r.Session != "r0" || r.Seq != after+1 {
				return fmt.Errorf("got %s#%d after seq %d", r.Session, r.Seq, after)
			}
			if d := sameRecord(r, recs("r0", r.Seq, 1, "r")[0]); d != "" {
				return errors.New(d)
			}
			after = r.Seq
			return nil
		})
	})
	// One follows the whole store by Global.
	readers.Go(func() {
		after := int64(0)
		last := map[string]int64{}
		follow("follow all", total, func() ([]store.Record, error) {
			return s.EventListAll(context.Background(), &store.EventListAllParams{AfterGlobal: after, Limit: 11})
		}, func(r store.Record) error {
			if r.Global <= after {
				return fmt.Errorf("global %d after %d", r.Global, after)
			}
			if r.Seq != last[r.Session]+1 {
				return fmt.Errorf("skipped: %s#%d after %s#%d", r.Session, r.Seq, r.Session, last[r.Session])
			}
			after, last[r.Session] = r.Global, r.Seq
			return nil
		})
	})
	writers.Wait()
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
