package vigil

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/store"
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
