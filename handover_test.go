package vigil

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/sqlite"
)

// lastRecovered returns the data of a session's last "recovered" event as
// readers get it, and its timeline line.
func lastRecovered(t *testing.T, rt *Runtime, id SessionID) (map[string]any, string) {
	t.Helper()
	events, err := rt.EventList(context.Background(), id, 0)
	must(t, err)
	tl := NewTimeline()
	var data map[string]any
	var line string
	for _, e := range events {
		l, ok, err := tl.Line(e)
		must(t, err)
		if e.Type != "recovered" {
			continue
		}
		data = nil
		must(t, json.Unmarshal(e.Data, &data))
		if ok {
			line = l.Text
		}
	}
	if data == nil {
		t.Fatalf("session %s has no recovered event", id)
	}
	return data, line
}

// TestStopIsAHandover: after a clean stop (Close, as SIGTERM does), the
// next process on the store logs each session as resumed from a clean
// stop, at info, never "owner died" or any warning, and the recovery's
// event says so too: cause "handover", the previous owner, and a timeline
// line that speaks of a clean stop. A crash (leases left held) is told
// apart in both: "owner died" at warn, and cause "owner-died".
func TestStopIsAHandover(t *testing.T) {
	for _, c := range []struct {
		name   string
		crash  bool
		msg    string
		level  slog.Level
		cause  string
		phrase string
	}{
		{"clean", false, "resuming a session stopped cleanly", slog.LevelInfo, core.TakeoverHandover, "after a clean stop"},
		{"crash", true, "taking over a session whose owner died", slog.LevelWarn, core.TakeoverOwnerDied, "after a crash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "vigil.db"), nil)
			must(t, err)
			t.Cleanup(func() { sq.Close() })
			var st store.Store = sq
			if c.crash {
				st = noRelease{sq}
			}
			first := deadNode(t)
			logs := newLogRecorder(t)
			rt := releaseRuntime(t, st, first, logs)
			ids := createMixed(t, rt, 2)
			must(t, rt.Close())
			logs.take()

			rt2 := releaseRuntime(t, sq, "vigil:successor", logs)
			recs := logs.take()
			if !c.crash {
				if w := warnings(recs, rt2.iso.Warning); len(w) > 0 {
					t.Errorf("resuming sessions stopped cleanly logged at warn or above: %v", w)
				}
			}
			for _, r := range recs {
				if !c.crash && strings.Contains(r.msg, "died") || c.crash && strings.Contains(r.msg, "cleanly") {
					t.Errorf("record %v after a %s stop", r, c.name)
				}
			}
			got := withMessage(recs, c.msg)
			if len(got) != len(ids) {
				t.Errorf("%d records %q, want one per session (%d): %v", len(got), c.msg, len(ids), recs)
			}
			for _, r := range got {
				if r.level != c.level {
					t.Errorf("record %v at %s, want %s", r, r.level, c.level)
				}
			}
			for _, id := range ids {
				data, line := lastRecovered(t, rt2, id)
				if data["cause"] != c.cause || data["previous"] != first {
					t.Errorf("session %s: recovered event %v; want cause %q, previous %q", id, data, c.cause, first)
				}
				if !strings.Contains(line, c.phrase) || !strings.Contains(line, first) {
					t.Errorf("session %s: timeline %q; want it to say %q and name %s", id, line, c.phrase, first)
				}
			}
		})
	}
}
