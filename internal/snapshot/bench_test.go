package snapshot_test

import (
	"context"
	"testing"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/bench"
	"github.com/vigilrun/vigil/internal/snapshot"
	"github.com/vigilrun/vigil/store/memstore"
)

// BenchmarkDecode decodes and encodes the state of a generated session of
// 200,000 events (bench.Generate: a main agent and ten workers), and
// encodes it again through the Encoder that encoded it, and reports the
// snapshot's MB per second.
func BenchmarkDecode(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	id, err := bench.Generate(ctx, st, 200_000, true)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := st.SnapshotLoad(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	s := core.NewState()
	if err := snapshot.Decode(snap.Data, s); err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(snap.Data)))
		for b.Loop() {
			if err := snapshot.Decode(snap.Data, core.NewState()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(snap.Data)))
		for b.Loop() {
			if _, err := snapshot.Encode(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The next snapshot of the same session through the Encoder that
	// made the last one, as a busy session's actor makes it: its
	// transcripts' full sections are written again, not encoded.
	b.Run("encode-again", func(b *testing.B) {
		e := snapshot.NewEncoder()
		if _, err := e.Encode(s); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(snap.Data)))
		for b.Loop() {
			if _, err := e.Encode(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
