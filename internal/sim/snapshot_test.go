package sim

import (
	"bytes"
	"encoding/gob"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// TestSnapshotCheckCatchesALossyCodec: with a snapshot codec that loses
// part of the state (encoding/gob drops a pointer to a zero value: a
// task's exit code 0 comes back as none), the simulator reports a
// violation of the snapshot check. Seed 1032 crashes after a command
// exited 0.
func TestSnapshotCheckCatchesALossyCodec(t *testing.T) {
	gobCodec := &codec{
		encode: func(s *core.State) ([]byte, error) {
			var b bytes.Buffer
			err := gob.NewEncoder(&b).Encode(s)
			return b.Bytes(), err
		},
		decode: func(b []byte, s *core.State) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(s) },
	}
	if res := Run(Options{Seed: 1032}); res.Violations != 0 {
		t.Fatalf("seed 1032 with the real codec: %+v", res.First)
	}
	res := Run(Options{Seed: 1032, codec: gobCodec})
	if res.First == nil || res.First.Rule != "snapshot" {
		t.Fatalf("a lossy snapshot codec went unnoticed: %+v", res.First)
	}
	t.Logf("caught: %s", res.First.Detail)
}

// TestEncoderCheckCatchesAnEditInPlace: a core that changes a message of
// a transcript in place, which snapshot.Encoder relies on it never doing,
// makes the Encoder write a stale section again; the simulator's
// checkEncoder reports it as a violation of the snapshot check.
func TestEncoderCheckCatchesAnEditInPlace(t *testing.T) {
	for seed := int64(encoderSeeds); seed <= 50*encoderSeeds; seed += encoderSeeds {
		edited := false
		edit := func(s *core.State) {
			if edited {
				return
			}
			for _, id := range s.Order {
				tr := s.Agents[id].Transcript
				// A message of a section the Encoder has kept for a while.
				if len(tr) < 9 {
					continue
				}
				for i := range tr[0].Content {
					if b := &tr[0].Content[i]; b.Type == chat.BlockText {
						b.Text += " (edited in place)"
						edited = true
						return
					}
				}
			}
		}
		res := Run(Options{Seed: seed, afterStep: edit})
		if !edited {
			continue
		}
		if res.First == nil || res.First.Rule != "snapshot" || !strings.Contains(res.First.Detail, "changed in place") {
			t.Fatalf("seed %d: a message edited in place went unnoticed: %+v", seed, res.First)
		}
		t.Logf("seed %d: caught: %s", seed, res.First.Detail)
		return
	}
	t.Fatalf("no seed checked of 1-%d had a transcript of 9 messages to edit", 50*encoderSeeds)
}
