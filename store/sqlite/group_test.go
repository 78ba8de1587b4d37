package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// TestGroupCommit holds the writer with a job, queues appends (good ones,
// a fenced one, a conflicting one and one that breaks the transaction),
// then lets the writer go: they must share one commit, each refusal must
// roll back only itself, and the broken job must not take the others down.
func TestGroupCommit(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), nil)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(sess string, seq int64) []store.Record {
		return []store.Record{{Session: sess, Seq: seq, At: now, Type: "t", Data: []byte(fmt.Sprintf(`{"seq":%d}`, seq))}}
	}
	const good = 6
	epochs := map[string]int64{}
	for i := range good + 2 {
		sess := fmt.Sprintf("g%d", i)
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "n", TTL: time.Minute, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		epochs[sess] = l.Epoch
	}
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "g7", Epoch: epochs["g7"], Records: rec("g7", 1)}); err != nil {
		t.Fatal(err)
	}

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	holdDone := make(chan error, 1)
	go func() {
		holdDone <- s.write(ctx, "hold", func(*writer) error {
			once.Do(func() { close(held) })
			<-release
			return nil
		})
	}()
	<-held
	before := s.commits.Load()

	type result struct {
		name string
		err  error
	}
	results := make(chan result, good+3)
	for i := range good {
		sess := fmt.Sprintf("g%d", i)
		go func() {
			_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: epochs[sess], Records: rec(sess, 1),
				Projection: &store.Projection{Notes: []store.NoteRow{{Session: sess, Task: "t1", Run: 1, New: true}}}})
			results <- result{sess, err}
		}()
	}
	go func() {
		_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "g6", Epoch: epochs["g6"] + 1, Records: rec("g6", 1)})
		results <- result{"fenced", err}
	}()
	go func() {
		_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "g7", Epoch: epochs["g7"], Records: rec("g7", 1)})
		results <- result{"conflict", err}
	}()
	go func() {
		err := s.write(ctx, "broken", func(w *writer) error {
			_, err := w.exec(`INSERT INTO no_such_table VALUES (1)`)
			return err
		})
		results <- result{"broken", err}
	}()
	// Wait (bounded) until all of them are queued behind the held job.
	for i := 0; len(s.jobs) < good+3; i++ {
		if i > 50_000_000 {
			t.Fatalf("only %d jobs queued", len(s.jobs))
		}
		runtime.Gosched()
	}
	close(release)
	if err := <-holdDone; err != nil {
		t.Fatal(err)
	}
	for range good + 3 {
		r := <-results
		switch r.name {
		case "fenced":
			if !errors.Is(r.err, store.ErrFenced) {
				t.Errorf("fenced append: %v", r.err)
			}
		case "conflict":
			if !errors.Is(r.err, store.ErrConflict) {
				t.Errorf("conflicting append: %v", r.err)
			}
		case "broken":
			if r.err == nil || logical(r.err) {
				t.Errorf("broken job: %v", r.err)
			}
		default:
			if r.err != nil {
				t.Errorf("append %s: %v", r.name, r.err)
			}
		}
	}
	// The held job's group, then one commit for all the others (after the
	// broken job was answered and the rest run again).
	if n := s.commits.Load() - before; n != 2 {
		t.Errorf("%d commits, want 2", n)
	}
	for i := range good + 2 {
		sess := fmt.Sprintf("g%d", i)
		want := int64(1)
		if i == good {
			want = 0
		}
		if n, err := s.LastSeq(ctx, sess); err != nil || n != want {
			t.Errorf("last seq of %s: %d, %v; want %d", sess, n, err, want)
		}
	}
}

// TestGroupCommitWindow has the writer wait for more jobs after the first:
// concurrent appends share far fewer commits than there are appends.
func TestGroupCommitWindow(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "vigil.db"), &Options{GroupCommitWindow: 20 * time.Millisecond})
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const sessions, steps = 8, 10
	epochs := make([]int64, sessions)
	for i := range sessions {
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: fmt.Sprint("w", i), Owner: "n", TTL: time.Minute, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		epochs[i] = l.Epoch
	}
	before := s.commits.Load()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			for seq := int64(1); seq <= steps; seq++ {
				_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: fmt.Sprint("w", i), Epoch: epochs[i],
					Records: []store.Record{{Seq: seq, At: now, Type: "t", Data: []byte("{}")}}})
				if err != nil {
					errs <- err
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
	commits := s.commits.Load() - before
	if commits > sessions*steps/2 {
		t.Errorf("%d commits for %d appends", commits, sessions*steps)
	}
	t.Logf("%d appends in %d commits", sessions*steps, commits)
	all, err := s.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil || len(all) != sessions*steps {
		t.Fatalf("list all: %d, %v", len(all), err)
	}
}
