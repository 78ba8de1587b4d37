package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFirstLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"  padded  \n", 10, "padded"},
		{"first\nsecond", 20, "first"},
		{"first \r\nsecond", 20, "first"},
		{"exactly ten", 11, "exactly ten"},
		{"a longer line than that", 10, "a longe…"},
		{"héllo wörld", 8, "héll…"}, // é is 2 bytes: "héll" is 5
		{"ééééé", 8, "éé…"},         // the cut at 5 falls inside the third é
		{"日本語のテキスト", 10, "日本…"},     // 3-byte characters
		{"🙂🙂🙂", 8, "🙂…"},            // a 4-byte character, cut inside the second
		{"abcdef", 3, "…"},          // room for the ellipsis only
		{"abcdef", 2, "ab"},         // no room for it
		{"ééé", 1, ""},              // no room for one character
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"", 5, ""},
	} {
		got := FirstLine(c.in, c.n)
		if got != c.want {
			t.Errorf("FirstLine(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if len(got) > max(c.n, 0) {
			t.Errorf("FirstLine(%q, %d) = %q: %d bytes", c.in, c.n, got, len(got))
		}
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"two\nlines kept", 20, "two\nlines kept"},
		{"a longer text than that", 10, "a longe…"},
		{"ééééé", 8, "éé…"},
		{"  kept as is  ", 14, "  kept as is  "},
	} {
		if got := Cut(c.in, c.n); got != c.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func FuzzFirstLine(f *testing.F) {
	for _, s := range []string{"", "ascii line", "héllo\nwörld", "日本語のテキスト", "🙂🙂🙂", "\xff\xfe broken"} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 200
		got := FirstLine(s, n)
		if len(got) > max(n, 0) {
			t.Fatalf("FirstLine(%q, %d) = %q: %d bytes", s, n, got, len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("FirstLine(%q, %d) = %q split a character", s, n, got)
		}
		if strings.Contains(got, "\n") {
			t.Fatalf("FirstLine(%q, %d) = %q has a line break", s, n, got)
		}
		if base := strings.TrimSuffix(got, Ellipsis); !strings.HasPrefix(strings.TrimSpace(s), base) {
			t.Fatalf("FirstLine(%q, %d) = %q is not a prefix of the line", s, n, got)
		}
		cut := Cut(s, n)
		if len(cut) > max(n, 0) || (utf8.ValidString(s) && !utf8.ValidString(cut)) || !strings.HasPrefix(s, strings.TrimSuffix(cut, Ellipsis)) {
			t.Fatalf("Cut(%q, %d) = %q", s, n, cut)
		}
	})
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{" a\nb ", 20, "a ⏎ b"},
		{"abcdef", 4, "abc…"},
		{"ééé", 4, "é…"},
		{"abc", 0, "…"},
	} {
		if got := OneLine(c.in, c.n); got != c.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
