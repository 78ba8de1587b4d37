package textlist

import (
	"slices"
	"testing"
)

// TestLinesRoundTrip: what Encode encodes Decode decodes, a NUL byte
// and quotes included; none is "".
func TestLinesRoundTrip(t *testing.T) {
	for _, v := range [][]string{nil, {"approval p1: Bash (main)"}, {"a\x00b", `"quoted"`, "run failed: w1"}} {
		s, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(s)
		if err != nil || !slices.Equal(got, v) {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", v, got, err)
		}
	}
	if _, err := Decode("[1"); err == nil {
		t.Fatal("Decode accepted a damaged value")
	}
}
