package permission

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// glob agrees with the regular expression its pattern stands for: * is any
// run of characters, everything else is literal.
func TestGlobMatchesItsRegexp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alphabet := rapid.SampledFrom([]string{"a", "b", "*", " ", "/", "."})
		pattern := strings.Join(rapid.SliceOfN(alphabet, 0, 8).Draw(t, "pattern"), "")
		s := strings.Join(rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", " ", "/", "."}), 0, 10).Draw(t, "subject"), "")
		parts := strings.Split(pattern, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile("^(?s:" + strings.Join(parts, ".*") + ")$")
		if got, want := glob(pattern, s), re.MatchString(s); got != want {
			t.Fatalf("glob(%q, %q) = %v, the regexp says %v", pattern, s, got, want)
		}
	})
}
