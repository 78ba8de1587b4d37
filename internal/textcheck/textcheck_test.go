package textcheck

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

type inner struct {
	Cmd string `json:"command"`
}

type sample struct {
	Text  string          `json:"text"`
	Dirs  []string        `json:"dirs"`
	Input json.RawMessage `json:"input"`
	In    *inner          `json:"in"`
	Any   any
	Meta  map[string]string `json:"meta"`
	Blob  []byte            `json:"blob"`
	priv  string
}

func TestCheckNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		v     sample
		field string
		off   int
		nul   bool
	}{
		{sample{Text: "a\x00b"}, "text", 1, true},
		{sample{Dirs: []string{"ok", "b\xffad"}}, "dirs[1]", 1, false},
		{sample{Input: json.RawMessage(`{"c":"x\u0000"}`)}, "input", 7, true},
		{sample{In: &inner{Cmd: "\x00"}}, "in.command", 0, true},
		{sample{Any: inner{Cmd: "z\x00"}}, "any.command", 1, true},
		{sample{Meta: map[string]string{"k": "\xc3"}}, "meta.k", 0, false},
	} {
		err := Check(tc.v)
		var p *Problem
		if !errors.As(err, &p) {
			t.Errorf("Check(%+v) = %v, want a Problem", tc.v, err)
			continue
		}
		if p.Field != tc.field || p.Offset != tc.off || p.NUL != tc.nul {
			t.Errorf("Check(%+v) = %+v, want field %q offset %d nul %v", tc.v, p, tc.field, tc.off, tc.nul)
		}
	}
}

func TestCheckPassesCleanText(t *testing.T) {
	v := sample{Text: "héllo ✓", Dirs: []string{"/a"}, Input: json.RawMessage(`{"c":"\\u0000 is text"}`),
		Blob: []byte{0, 0xff}, priv: "\x00", Meta: map[string]string{"k": "v"}}
	if err := Check(v); err != nil {
		t.Fatalf("Check(clean) = %v", err)
	}
	if got, changed := Clean(v); changed || got.Text != v.Text {
		t.Fatalf("Clean(clean) changed it: %+v", got)
	}
}

func TestCleanReplacesAndCopies(t *testing.T) {
	in := &inner{Cmd: "rm\x00"}
	v := sample{Text: "a\x00b\xff", Dirs: []string{"x", "\x00"}, Input: json.RawMessage(`{"c":"x\u0000y"}`), In: in,
		Meta: map[string]string{"k\x00": "v"}}
	got, changed := Clean(v)
	if !changed {
		t.Fatal("Clean reported no change")
	}
	if err := Check(got); err != nil {
		t.Fatalf("cleaned value still fails: %v", err)
	}
	if got.Text != "a\uFFFDb\uFFFD" || got.Dirs[1] != "\uFFFD" || got.In.Cmd != "rm\uFFFD" || got.Meta["k\uFFFD"] != "v" {
		t.Fatalf("Clean = %+v", got)
	}
	var m map[string]string
	if err := json.Unmarshal(got.Input, &m); err != nil || m["c"] != "x\uFFFDy" {
		t.Fatalf("cleaned JSON = %s (%v)", got.Input, err)
	}
	if v.Text != "a\x00b\xff" || in.Cmd != "rm\x00" || v.Dirs[1] != "\x00" {
		t.Fatal("Clean modified its argument")
	}
}

func TestCleanInterfaceValue(t *testing.T) {
	var x any = inner{Cmd: "\x00"}
	got, changed := Clean(x)
	if !changed || got.(inner).Cmd != "\uFFFD" {
		t.Fatalf("Clean(any) = %#v, %v", got, changed)
	}
}

func FuzzCleanIsClean(f *testing.F) {
	f.Add("a\x00b", []byte(`{"x":"\u0000"}`))
	f.Add("\xff\xfe", []byte(`not json \x00`))
	f.Add("ok", []byte(`"\\u0000"`))
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		v := sample{Text: s, Input: raw, Dirs: []string{s}}
		got, _ := Clean(v)
		if err := Check(got); err != nil {
			t.Fatalf("Clean(%q, %q) left %v", s, raw, err)
		}
		if Check(v) == nil && got.Text != s {
			t.Fatalf("Clean changed clean text %q", s)
		}
	})
}

// Inner is an exported type to embed.
type Inner struct{ Cmd string }

// embeds embeds an unexported and an exported struct: only the exported
// one is looked at.
type embeds struct {
	inner
	Inner
}

// The fast walk (bad) and the walk that names fields (check) agree on
// every value: Check's fast path keeps its answers.
func FuzzFastWalkAgrees(f *testing.F) {
	f.Add("a\x00b", []byte(`{"x":"\u0000"}`), "k")
	f.Add("\xff\xfe", []byte(`not json \x00`), "\xc3")
	f.Add("ok", []byte(`"\\u0000"`), "")
	f.Add("ok", []byte(`\\\u0000`), "v")
	f.Fuzz(func(t *testing.T, s string, raw []byte, k string) {
		for _, v := range []any{
			sample{Text: s, Input: raw, Dirs: []string{"ok", s}, Meta: map[string]string{k: s}},
			sample{In: &inner{Cmd: s}, Any: []any{k, inner{Cmd: s}}},
			sample{Meta: map[string]string{k: "v"}, Blob: raw, priv: s},
			embeds{inner: inner{Cmd: s}, Inner: Inner{Cmd: k}},
			map[string][]string{k: {s}},
			json.RawMessage(raw),
			[2]string{k, s},
		} {
			rv := reflect.ValueOf(v)
			if got, want := bad(rv), check(rv, "") != nil; got != want {
				t.Fatalf("bad(%#v) = %v, check says %v", v, got, want)
			}
		}
	})
}

func TestNulEscape(t *testing.T) {
	for in, want := range map[string]int{
		``: -1, `\u0000`: 0, `x\u0000`: 1, `\\u0000`: -1, `\\\u0000`: 2, `\u000`: -1,
		`\`: -1, `ab\`: -1, `\n\u0000`: 2, `"a\"\u0000"`: 4, `\u00000`: 0,
	} {
		if got := nulEscape([]byte(in)); got != want {
			t.Errorf("nulEscape(%s) = %d, want %d", in, got, want)
		}
	}
}

// benchOutcome is shaped like the outcomes the runtime cleans on every
// effect: a model's answer with text and tool calls.
type benchBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type benchOutcome struct {
	Agent   string `json:"agent"`
	Call    string `json:"call"`
	Content []benchBlock
	Usage   struct{ In, Out int64 }
	Meta    map[string]string
}

func benchValue() any {
	v := benchOutcome{Agent: "a3", Call: "c17", Meta: map[string]string{"model": "m"}}
	v.Content = append(v.Content, benchBlock{Type: "text", Text: strings.Repeat("héllo wörld, ", 40)})
	for i := range 10 {
		v.Content = append(v.Content, benchBlock{Type: "tool_use", ID: "m" + strconv.Itoa(i), Name: "SendMessage",
			Input: json.RawMessage(`{"to":"w` + strconv.Itoa(i) + `","message":"again, with \"quotes\" and \\ backslashes"}`)})
	}
	return v
}

// BenchmarkCheck is Check on clean text, the runtime's common case: it
// must not allocate.
func BenchmarkCheck(b *testing.B) {
	v := benchValue()
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClean is Clean on a clean outcome, as actor.submitEffect calls
// it for every effect outcome.
func BenchmarkClean(b *testing.B) {
	v := benchValue()
	b.ReportAllocs()
	for b.Loop() {
		if _, changed := Clean(v); changed {
			b.Fatal("changed")
		}
	}
}
