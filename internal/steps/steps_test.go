package steps

import (
	"bytes"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	recs := []store.Record{
		{Seq: 7, At: at, Type: "run.started", Data: []byte(`{"agent":"a1"}`)},
		{Seq: 8, Type: "tick", Data: nil},
		{Seq: 9, At: at.Add(time.Second), Type: "", Data: []byte("\x00binary\xff")},
	}
	b, err := Encode(nil, recs)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Count(b); err != nil || n != 3 {
		t.Fatalf("count %d, %v", n, err)
	}
	got, err := Decode(nil, "s1", 7, 100, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d records", len(got))
	}
	for i, r := range got {
		w := recs[i]
		if r.Session != "s1" || r.Seq != w.Seq || r.Global != 100+int64(i) || !r.At.Equal(w.At) || r.Type != w.Type || !bytes.Equal(r.Data, w.Data) {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
	}
	if !got[1].At.IsZero() {
		t.Errorf("zero time came back as %v", got[1].At)
	}
}

func TestRejects(t *testing.T) {
	if _, err := Encode(nil, []store.Record{{At: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}}); err == nil {
		t.Error("a time out of range was encoded")
	}
	good, _ := Encode(nil, []store.Record{{Seq: 1, Type: "x", Data: []byte("{}")}})
	for _, bad := range [][]byte{nil, {2}, good[:len(good)-1], append(append([]byte{}, good...), 0)} {
		if _, err := Decode(nil, "s", 1, 1, bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzDecode: no input panics, and whatever decodes encodes back to a
// step that decodes to as many records.
func FuzzDecode(f *testing.F) {
	good, _ := Encode(nil, []store.Record{{Seq: 1, At: time.Unix(5, 0), Type: "x", Data: []byte("{}")}, {Seq: 2, Type: "y"}})
	f.Add(good)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Decode(nil, "s", 1, 1, data)
		if err != nil {
			return
		}
		again, err := Encode(nil, recs)
		if err != nil {
			t.Fatalf("decoded records do not encode: %v", err)
		}
		back, err := Decode(nil, "s", 1, 1, again)
		if err != nil || len(back) != len(recs) {
			t.Fatalf("re-encoded step does not decode: %v", err)
		}
	})
}

// BenchmarkEncode: a step of a busy session's size (14 records of some 190
// bytes: what a notification costs), encoded into a new value as the
// stores do.
func BenchmarkEncode(b *testing.B) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	recs := make([]store.Record, 14)
	for i := range recs {
		recs[i] = store.Record{Seq: int64(i + 1), At: at, Type: "transcript.appended", Data: bytes.Repeat([]byte("x"), 190)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(nil, recs); err != nil {
			b.Fatal(err)
		}
	}
}
