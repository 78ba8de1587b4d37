package permission

import "strings"

// maxLaunched is how many words after a launcher (sudo, env, xargs, ...)
// bashDenies tries as the start of the command it launches: enough for the
// launcher's options and their values.
const maxLaunched = 32

// maxForms bounds the forms of one command that bashDenies tries, so that
// the work stays linear in the command's length: a command that chains
// more launchers than that is matched only by the forms tried.
const maxForms = 1024

// bashDenies reports whether the pattern of a Bash deny rule matches the
// command line: the line as written, any command it chains (split at the
// characters of shellMeta), and each of those unwrapped. Unwrapping takes
// off quotes and backslashes (\rm, "rm", 'r'm), leading variable
// assignments, the directory of the program (/bin/rm) and launchers with
// their options (command, env, sudo, xargs, sh -c ...: see launches). A
// pattern whose program is a path (/usr/bin/curl *) also matches the
// program by its base name.
//
// This is a first filter, not a boundary: a command line can always hide
// the program it runs from a pattern (X=rm; $X, a copy of rm under another
// name, an interpreter).
func bashDenies(pattern, line string) bool {
	pats := []string{pattern}
	if b := patternBase(pattern); b != pattern {
		pats = append(pats, b)
	}
	match := func(s string) bool {
		for _, p := range pats {
			if glob(p, s) {
				return true
			}
		}
		return false
	}
	cmd := strings.TrimSpace(line)
	if match(cmd) {
		return true
	}
	for _, part := range strings.FieldsFunc(cmd, func(r rune) bool { return strings.ContainsRune(shellMeta, r) }) {
		if match(strings.TrimSpace(part)) || unwrapped(dequote(part), match) {
			return true
		}
	}
	return false
}

// patternBase returns a Bash pattern with the directory taken off its
// program: "/usr/bin/curl *" gives "curl *". Other patterns come back as
// they are.
func patternBase(pattern string) string {
	prog, rest, spaced := strings.Cut(pattern, " ")
	i := strings.LastIndexByte(prog, '/')
	if i < 0 || i == len(prog)-1 || strings.Contains(prog, "*") {
		return pattern
	}
	if !spaced {
		return prog[i+1:]
	}
	return prog[i+1:] + " " + rest
}

// dequote drops the characters that quote in a shell word (' " \), which
// hide a program's name from a pattern without changing it.
func dequote(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\'', '"', '\\':
			return -1
		}
		return r
	}, s)
}

// unwrapped reports whether match accepts one of the commands a segment
// (one command of a line, dequoted) runs: the segment from its first word
// that is not a variable assignment, the same with the program's directory
// taken off, and, after a launcher, the rest of the segment from each of
// the next maxLaunched words, up to maxForms forms. Each form is a suffix
// of the segment with its whitespace normalised.
func unwrapped(segment string, match func(string) bool) bool {
	words := strings.Fields(segment)
	if len(words) == 0 {
		return false
	}
	s := strings.Join(words, " ")
	starts := make([]int, len(words)) // offset of each word in s
	for i, off := 0, 0; i < len(words); i++ {
		starts[i] = off
		off += len(words[i]) + 1
	}
	reach := make([]bool, len(words))
	reach[0] = true
	forms := 0
	for i, w := range words {
		if !reach[i] {
			continue
		}
		if forms++; forms > maxForms {
			return false
		}
		if isAssignment(w) {
			if i+1 < len(words) {
				reach[i+1] = true
			}
			continue
		}
		if match(s[starts[i]:]) {
			return true
		}
		prog := w
		if j := strings.LastIndexByte(w, '/'); j >= 0 && j < len(w)-1 {
			prog = w[j+1:]
			if match(s[starts[i]+j+1:]) {
				return true
			}
		}
		if launches(prog) {
			for k := i + 1; k < len(words) && k <= i+maxLaunched; k++ {
				reach[k] = true
			}
		}
	}
	return false
}

// isAssignment reports whether a shell word assigns a variable (NAME=value).
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// launches reports whether the program runs a command given in its
// arguments: shell keywords and builtins that do, privilege and scheduling
// wrappers, shells with -c, and the usual runners of other commands.
func launches(prog string) bool {
	switch prog {
	case "!", "then", "do", "else", "elif", "if", "while", "until", "time",
		"command", "builtin", "exec", "eval", "source", ".",
		"sudo", "doas", "su", "env", "nice", "ionice", "nohup", "setsid", "stdbuf", "unbuffer",
		"timeout", "taskset", "chrt", "flock", "chroot", "nsenter", "unshare", "watch", "strace", "ltrace",
		"xargs", "parallel", "find", "busybox",
		"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh":
		return true
	}
	return false
}
