package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vigilrun/vigil/store"
)

// Fault is a way to break a backend's storage that the backend's own test
// knows how to cause: a full disk, a read-only file, a lost server.
type Fault struct {
	// Break makes the storage fail.
	Break func(t *testing.T)
	// Heal undoes Break.
	Heal func(t *testing.T)
	// Want is the error (errors.Is) a write returns while broken.
	Want error
	// MayRecover allows the write during the fault to succeed, for a
	// backend that retries transparently (a reconnect); it must then be
	// stored.
	MayRecover bool
}

// bigRecs returns n records of size bytes: large enough to need new pages.
func bigRecs(sess string, from int64, n, size int) []store.Record {
	rs := recs(sess, from, n, "big")
	for i := range rs {
		rs[i].Data = append(rs[i].Data, bytes.Repeat([]byte{byte('a' + i%26)}, size)...)
	}
	return rs
}

// RunFault writes to s, breaks its storage with f, checks that a write
// fails with f.Want and keeps nothing of itself, heals the storage and
// checks that writes go on with every committed event and row intact.
func RunFault(t *testing.T, s store.Store, f Fault) {
	ctx := context.Background()
	l := acquire(t, s, "f", "node-a", base)
	before := bigRecs("f", 1, 3, 1<<10)
	firstNote := note("f", "t1", 1, "completed", true)
	appendOK(t, s, "f", l.Epoch, before, &store.Projection{
		Session: &store.SessionRow{ID: "f", Title: "before", Created: base, Updated: base, LastSeq: 3},
		Notes:   []store.NoteRow{firstNote},
	})

	f.Break(t)
	during := bigRecs("f", 4, 2, 256<<10)
	duringNote := note("f", "t2", 1, "completed", true)
	_, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "f", Epoch: l.Epoch, Records: during, Projection: &store.Projection{
		Session: &store.SessionRow{ID: "f", Title: "during", Created: base, Updated: base, LastSeq: 5},
		Notes:   []store.NoteRow{duringNote},
	}})
	kept := before
	notes := []store.NoteRow{firstNote}
	title := "before"
	switch {
	case err == nil && f.MayRecover:
		t.Log("the write during the fault succeeded (the backend recovered)")
		kept = append(kept, during...)
		notes = append(notes, duringNote)
		title = "during"
	case err == nil:
		t.Fatalf("append during the fault succeeded, want %v", f.Want)
	default:
		wantErr(t, "append during the fault", err, f.Want)
		t.Logf("append during the fault: %v", err)
	}
	if err != nil || !f.MayRecover {
		// A snapshot write fails the same way (the fault may be
		// one-shot, so only when the append failed).
		err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "f", Epoch: l.Epoch, Seq: 3, Data: bytes.Repeat([]byte("s"), 256<<10)})
		if err == nil && !f.MayRecover {
			t.Fatalf("snapshot during the fault succeeded, want %v", f.Want)
		}
		if err != nil && !errors.Is(err, f.Want) {
			t.Fatalf("snapshot during the fault: %v, want %v", err, f.Want)
		}
	}
	f.Heal(t)

	// Exactly the acknowledged writes are there.
	checkRecords(t, "log after healing", list(t, s, "f"), kept)
	checkNotes(t, s, "f", notes...)
	if row, err := s.SessionGet(ctx, "f"); err != nil || row.Title != title {
		t.Fatalf("session row after healing: %+v, %v (want title %q)", row, err, title)
	}
	// And writes go on.
	next := int64(len(kept)) + 1
	after := bigRecs("f", next, 2, 256<<10)
	appendOK(t, s, "f", l.Epoch, after, &store.Projection{Notes: []store.NoteRow{note("f", "t3", 1, "completed", true)}})
	if err := s.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "f", Epoch: l.Epoch, Seq: next + 1, Data: []byte(fmt.Sprint(next + 1))}); err != nil {
		t.Fatalf("snapshot after healing: %v", err)
	}
	got := list(t, s, "f")
	checkRecords(t, "log after healing and writing", got, append(kept, after...))
	checkGlobal(t, "log after healing and writing", got)
}
