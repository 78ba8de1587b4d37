// Package cmdenv builds the environment of the programs vigil starts for
// agents: shell commands and provider CLIs. It is an allowlist: a program
// gets the variables every program needs (PATH, HOME, the locale, the
// terminal, the user, the shell, the time zone), the names a person listed
// in the configuration, and nothing else of vigil's own environment — not
// vigil's database address, token or provider keys, which a command's output
// would carry into the transcript, the store and the model.
package cmdenv

import (
	"fmt"
	"slices"
	"strings"
)

// Base are the variables every program gets from vigil's environment, when
// they are set.
func Base() []string {
	return []string{"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "COLORTERM", "NO_COLOR", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ"}
}

// Spec says what a program gets besides Base.
type Spec struct {
	// Names are more variables to pass when set (from the configuration).
	Names []string
	// Prefixes pass every variable whose name starts with one of them
	// (a provider CLI's own settings: "ANTHROPIC_", "CLAUDE_").
	Prefixes []string
	// Drop are names that never pass, whatever else says.
	Drop []string
	// Set are entries ("NAME=value") to set, replacing any passed value.
	Set []string
}

// Build returns the environment for a program from environ (os.Environ()
// in production): Base and LC_* variables, then spec's names and prefixes,
// then spec.Set. Names that start with VIGIL_ never pass (Check refuses
// them in a configuration).
func Build(environ []string, spec Spec) []string {
	allow := append(Base(), spec.Names...)
	out := make([]string, 0, len(allow)+len(spec.Set))
	set := map[string]bool{}
	for _, kv := range spec.Set {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || set[name] || strings.HasPrefix(name, "VIGIL_") || slices.Contains(spec.Drop, name) {
			continue
		}
		if slices.Contains(allow, name) || strings.HasPrefix(name, "LC_") || hasPrefix(name, spec.Prefixes) {
			out = append(out, kv)
		}
	}
	return append(out, spec.Set...)
}

func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Check validates names a person lists to pass to commands: each is a
// plain variable name, and none is one of vigil's own (VIGIL_*).
func Check(names []string) error {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "= \t\n\x00") {
			return fmt.Errorf("command_env: %q is not a variable name", n)
		}
		if strings.HasPrefix(n, "VIGIL_") {
			return fmt.Errorf("command_env: %q is vigil's own setting and never reaches a command", n)
		}
	}
	return nil
}
