package sim

import (
	"bytes"
	"encoding/gob"
	"testing"

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
