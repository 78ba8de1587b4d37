package core

import (
	"testing"

	"pgregory.net/rapid"
)

// A notification key survives its text form, the form it has in storage
// and on the wire.
func TestNoteKeyTextRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := NoteKey{
			Task: TaskID(rapid.StringMatching(`[a-z0-9#]{1,12}`).Draw(t, "task")),
			Run:  rapid.IntRange(0, 1<<20).Draw(t, "run"),
		}
		b, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got NoteKey
		if err := got.UnmarshalText(b); err != nil {
			t.Fatalf("unmarshal %q: %v", b, err)
		}
		if got != k {
			t.Fatalf("round trip of %+v gave %+v (text %q)", k, got, b)
		}
	})
}

// MarshalText writes the String form, byte for byte.
func TestNoteKeyMarshalTextIsString(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := NoteKey{Task: TaskID(rapid.String().Draw(t, "task")), Run: rapid.Int().Draw(t, "run")}
		b, err := k.MarshalText()
		if err != nil || string(b) != k.String() {
			t.Fatalf("MarshalText(%+v) = %q, %v; String is %q", k, b, err, k.String())
		}
	})
}
