// Package text shapes text that vigil shows to people and to models. It is
// pure: no I/O.
package text

import (
	"strings"
	"unicode/utf8"
)

// Ellipsis ends a text that Cut or FirstLine shortened.
const Ellipsis = "…"

// FirstLine returns the first line of s, with the space around it trimmed,
// cut as Cut does.
func FirstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return Cut(s, n)
}

// Cut returns s in at most n bytes: a longer s is cut and ends in Ellipsis.
// A cut never splits a UTF-8 encoded character.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	more := Ellipsis
	cut := n - len(more)
	if cut < 0 {
		// No room for the ellipsis.
		cut, more = max(n, 0), ""
	}
	// Back up to the start of the character the cut falls in (a valid one
	// has at most UTFMax-1 continuation bytes).
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + more
}

// OneLine puts s on one line, its line ends marked "⏎"; when that is
// longer than n bytes it keeps at most the first n-1, never cutting a
// character, and ends in Ellipsis.
func OneLine(s string, n int) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ⏎ ")
	if len(s) <= n {
		return s
	}
	cut := max(n-1, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}
