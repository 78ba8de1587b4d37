package vigil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// A full disk while a session works: requests get a clear error and keep
// nothing; effect outcomes wait; once the disk has room the session goes on
// and nothing committed is lost.
func TestFullDiskPausesAndResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, st := openScript(t, "internal/examples/coordinator.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		id := sess.ID
		synctest.Wait() // the workers' slow rounds are in flight
		before, _ := st.LastSeq(ctx, string(id))
		st.FailWrites(store.ErrFull)
		time.Sleep(1500 * time.Millisecond) // w1 answers into the full disk
		_, err = rt.Prompt(ctx, id, &PromptParams{Text: "are you there?"})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "storage full") || !strings.Contains(err.Error(), "nothing of this request was kept") {
			t.Fatalf("prompt during a full disk: %v", err)
		}
		if after, _ := st.LastSeq(ctx, string(id)); after != before {
			t.Fatalf("events were committed while the disk was full: %d -> %d", before, after)
		}
		st.FailWrites(nil)
		must(t, rt.WaitQuiescent(ctx, id))
		s, _ := rt.State(ctx, id)
		checkDelivered(t, s)
		if len(s.NoteOrder) != 5 {
			t.Fatalf("%d notifications after the disk had room again, want 5", len(s.NoteOrder))
		}
		// The state the runtime holds is the one the store rebuilds.
		stored, err := loadState(ctx, st, string(id))
		if err != nil {
			t.Fatal(err)
		}
		if stored.Seq != s.Seq || len(stored.NoteOrder) != 5 {
			t.Fatalf("store has seq %d, runtime %d", stored.Seq, s.Seq)
		}
	})
}

// outageStore fails reads of a session's log (SnapshotLoad, EventList)
// while readsDown is set; memstore.FailWrites fails the writes.
type outageStore struct {
	*memstore.Store
	readsDown atomic.Bool
}

func (s *outageStore) SnapshotLoad(ctx context.Context, session string) (*store.Snapshot, error) {
	if s.readsDown.Load() {
		return nil, fmt.Errorf("snapshot of %s: %w", session, store.ErrUnavailable)
	}
	return s.Store.SnapshotLoad(ctx, session)
}

func (s *outageStore) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	if s.readsDown.Load() {
		return nil, fmt.Errorf("events of %s: %w", p.Session, store.ErrUnavailable)
	}
	return s.Store.EventList(ctx, p)
}

// A step whose commit failed is never shown by a read (rule 8): before, the
// actor kept the stepped state until the store took writes again, and a
// read in between showed what the store did not keep (a prompt answered
// "nothing of this request was kept" sat in the session's view; on a
// cluster, a task the client then asked about was gone once the state was
// reloaded). Reads show the stored state when the store still answers
// reads, and fail with a clear error when it does not.
func TestReadsNeverShowUnstoredSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Load("internal/examples/coordinator.yaml")
		if err != nil {
			t.Fatal(err)
		}
		st := &outageStore{Store: memstore.New()}
		rt := openWith(t, st, sc, nil)
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		id := sess.ID
		must(t, rt.WaitQuiescent(ctx, id))
		stored := func() int64 {
			n, err := st.Store.LastSeq(ctx, string(id))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := stored()

		st.FailWrites(store.ErrUnavailable)
		if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "not kept"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("prompt while the store refuses writes: %v", err)
		}
		s, err := rt.State(ctx, id)
		if err != nil {
			t.Fatalf("read while the store refuses writes but answers reads: %v", err)
		}
		if s.Seq != before || stored() != before {
			t.Fatalf("a read after the failed commit shows seq %d; the store holds %d (was %d)", s.Seq, stored(), before)
		}

		// The store answers again, and the session with it; then it fails
		// reads too: the state cannot be read back, and reads say so.
		st.FailWrites(nil)
		time.Sleep(time.Second) // the retry reloads the state
		if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "kept"}); err != nil {
			t.Fatalf("prompt once the store answers: %v", err)
		}
		must(t, rt.WaitQuiescent(ctx, id))
		st.FailWrites(store.ErrUnavailable)
		st.readsDown.Store(true)
		if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "not kept either"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("prompt while the store is down: %v", err)
		}
		if s, err := rt.State(ctx, id); err == nil {
			t.Fatalf("a read while the store is down showed seq %d (stored %d), want an error", s.Seq, stored())
		} else if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "could not be stored") {
			t.Fatalf("read while the store is down: %v; want unavailable, saying the last step could not be stored", err)
		}

		// Reads come back before writes: the retry reads the state back,
		// and reads show it, while steps still wait.
		st.readsDown.Store(false)
		time.Sleep(3 * time.Second) // a retry or two, well inside the lease
		if s, err := rt.State(ctx, id); err != nil {
			t.Fatalf("read once the store answers reads but refuses writes: %v", err)
		} else if s.Seq != stored() {
			t.Fatalf("read once the store answers reads but refuses writes: seq %d, stored %d", s.Seq, stored())
		}

		// The store answers again: the session goes on from what it holds.
		st.FailWrites(nil)
		time.Sleep(5 * time.Second) // the next retry (its wait has grown to 3.2 s) reloads the state
		if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "kept too"}); err != nil {
			t.Fatalf("prompt once the store answers: %v", err)
		}
		must(t, rt.WaitQuiescent(ctx, id))
		s, err = rt.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Seq != stored() {
			t.Fatalf("runtime at seq %d, store at %d", s.Seq, stored())
		}
	})
}
