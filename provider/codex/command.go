package codex

import (
	"regexp"
	"strings"
)

// shellWrapper matches how Codex words a command it asks to run: the
// model's command line as the one argument of a login shell's -c. Only
// the system's shells, by absolute path: a ./bash of the model's making
// is judged with its whole line.
var shellWrapper = regexp.MustCompile(`^/(?:usr/)?bin/(?:bash|sh|zsh) -l?c (.+)$`)

// modelCommand returns the command line the model asked for, out of
// Codex's "/bin/bash -lc '<line>'", so that vigil's Bash rules see what
// the model wrote; a command in any other form comes back as it is.
func modelCommand(cmd string) string {
	m := shellWrapper.FindStringSubmatch(cmd)
	if m == nil {
		return cmd
	}
	if line, ok := shellWord(m[1]); ok {
		return line
	}
	return cmd
}

// shellWord reads s as exactly one POSIX shell word and returns its
// value: single quotes keep everything, double quotes let a backslash
// escape $ ` " \ and a newline, a bare backslash escapes the next
// character. ok is false when s is not one complete word (a space outside
// quotes, an unclosed quote, a trailing backslash).
func shellWord(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return "", false
			}
		case '\\':
			if i+1 >= len(s) {
				return "", false
			}
			i++
			b.WriteByte(s[i])
		case ' ', '\t', '\n', ';', '&', '|', '<', '>', '(', ')':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
