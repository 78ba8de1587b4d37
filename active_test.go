package vigil

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/store/memstore"
)

// TestRecoveryKeepsActiveTime: a restart takes every session over, and
// that is none of the sessions' activity: each keeps the Updated (last
// active) it had, an hour before the restart, rather than all becoming
// the restart's time; the next prompt makes a session active again.
func TestRecoveryKeepsActiveTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		sc := mustParse(t, idleScenario)
		first := openWith(t, st, sc, nil)
		var ids []SessionID
		for range 3 {
			sess, err := first.CreateSession(ctx, &SessionParams{Prompt: "hello"})
			must(t, err)
			must(t, first.WaitQuiescent(ctx, sess.ID))
			ids = append(ids, sess.ID)
			time.Sleep(time.Minute)
		}
		before := map[SessionID]time.Time{}
		list, err := first.SessionList(ctx, nil)
		must(t, err)
		for _, s := range list {
			before[s.ID] = s.Updated
		}
		time.Sleep(time.Hour)
		must(t, first.Close())

		restart := time.Now()
		second := openWith(t, st, sc, nil)
		for _, id := range ids {
			must(t, second.WaitQuiescent(ctx, id))
			s, err := second.State(ctx, id)
			must(t, err)
			if s.Incarnation != 1 {
				t.Fatalf("session %s: incarnation %d, want 1 (taken over by the restart)", id, s.Incarnation)
			}
		}
		list, err = second.SessionList(ctx, nil)
		must(t, err)
		if len(list) != len(ids) {
			t.Fatalf("%d sessions listed, want %d", len(list), len(ids))
		}
		for _, s := range list {
			if !s.Updated.Equal(before[s.ID]) {
				t.Errorf("session %s: updated %v after the restart at %v; want %v, its last activity", s.ID, s.Updated, restart, before[s.ID])
			}
		}

		time.Sleep(time.Minute)
		_, err = second.Prompt(ctx, ids[0], &PromptParams{Text: "again"})
		must(t, err)
		must(t, second.WaitQuiescent(ctx, ids[0]))
		got, err := second.SessionList(ctx, nil)
		must(t, err)
		for _, s := range got {
			if s.ID == ids[0] && !s.Updated.After(restart) {
				t.Errorf("session %s: updated %v after a prompt at %v; want the prompt's time", s.ID, s.Updated, time.Now())
			}
		}
	})
}
