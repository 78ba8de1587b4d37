package tool

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vigilrun/vigil/internal/permission"
)

// Permissions are a session's permission mode and rules, as the Workspace
// checks them again against the paths a call resolves to.
//
// The core decides a call from its input as the model wrote it
// (permission.Decide or DecideIn), before any file is looked at. The
// Workspace then resolves the path ("..", symlinks, absolute forms) and
// decides again on the path it will really touch, with
// permission.DecidePath, the names of the resolved path anchored as the
// rules are (relative rules at the first root, absolute rules on absolute
// paths):
//
//   - a deny rule that covers the path, as written or resolved, refuses
//     the call, approved or not;
//   - a call nobody approved (Approved false) runs only when the resolved
//     path is allowed on its own: by the tool's kind, the mode or an
//     allow rule. A call that an allow rule let through on the path as
//     written but that resolves outside the rule is refused, and the
//     result tells the model the real path to ask with.
type Permissions struct {
	// Mode is the session's permission mode (permission.ModeAsk, ...).
	Mode string
	// Allow and Deny are the session's rules.
	Allow, Deny []string
	// Approved is set when a person approved this very call (the core
	// asked, and the answer was yes): the resolved path then needs no
	// allow rule, but a deny rule still refuses it.
	Approved bool
}

// rules is what a call is held to besides confinement to the roots.
type rules struct {
	tool     string       // the tool being run
	perms    *Permissions // nil: no rule is checked
	readOnly bool
	// protect are the write-protected paths: as configured (absolute,
	// clean) and resolved.
	protect []protected
	// hidden counts the entries of a listing left out, by deny rule.
	hidden map[string]int
}

type protected struct{ given, real string }

// edits reports whether the tool changes files.
func (r *rules) edits() bool { return Edits(r.tool) }

// target resolves the path a call names, as resolve does, and checks it
// against the session's rules and, for Write and Edit, the write
// protection.
func (f *fsys) target(path string) (resolved, error) {
	r, err := f.resolve(path)
	if err != nil {
		return resolved{}, err
	}
	if err := f.permit(path, r); err != nil {
		return resolved{}, err
	}
	if f.rules.edits() {
		if err := f.writable(path, r); err != nil {
			return resolved{}, err
		}
	}
	return r, nil
}

// permit checks a resolved path against the session's rules (see
// Permissions).
func (f *fsys) permit(path string, r resolved) error {
	p, tool := f.rules.perms, f.rules.tool
	if p == nil {
		return nil
	}
	written := permission.PathIn(slashed(f.given), path)
	real := f.names(r.real)
	shown := f.display(r.real)
	if rule, ok := permission.Denied(p.Deny, tool, written); ok {
		return fmt.Errorf("%s %s is denied by the rule %q (the path resolves to %s)", tool, path, rule, shown)
	}
	if rule, ok := permission.Denied(p.Deny, tool, real); ok {
		return fmt.Errorf("%s %s is denied: the path resolves to %s, which the deny rule %q covers", tool, path, shown, rule)
	}
	if p.Approved {
		return nil
	}
	v := permission.DecidePath(p.Mode, p.Allow, p.Deny, tool, real)
	if v.Decision == permission.Allow {
		return nil
	}
	mode := p.Mode
	if !permission.ValidMode(mode) {
		mode = permission.ModeAsk // as Decide reads it
	}
	why := "mode " + mode + " asks a person first"
	if v.Decision == permission.Deny {
		why = "mode " + mode + " refuses what no rule allows"
	}
	if w := permission.DecidePath(p.Mode, p.Allow, p.Deny, tool, written); w.Decision == permission.Allow && w.Rule != "" {
		return fmt.Errorf("%s %s is refused: the path resolves to %s, which the rule %q does not cover, and %s. Call %s again with the path %s so that the real path is asked for",
			tool, path, shown, w.Rule, why, tool, shown)
	}
	return fmt.Errorf("%s %s is refused: no rule allows it (the path resolves to %s), %s, and nobody approved this call", tool, path, shown, why)
}

// writable checks that Write or Edit may change the path: the workspace
// is not read-only, and neither the path as written nor as resolved lies
// in a write-protected path.
func (f *fsys) writable(path string, r resolved) error {
	if f.rules.readOnly {
		return fmt.Errorf("%s %s is refused: the session's sandbox is read-only", f.rules.tool, path)
	}
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(f.given[0], abs)
	}
	abs = filepath.Clean(abs)
	for _, p := range f.rules.protect {
		both := []string{p.given, p.real}
		if within(both, abs) || within(both, r.real) {
			return fmt.Errorf("%s %s is refused: the path resolves to %s, inside %s, which is write-protected in this sandbox mode",
				f.rules.tool, path, f.display(r.real), p.given)
		}
	}
	return nil
}

// hide reports whether a deny rule hides an entry from a listing (Glob,
// Grep), and counts it. p is the entry's path under a resolved directory;
// link says it is a symlink, whose target is checked too.
func (f *fsys) hide(p string, link bool) bool {
	perms := f.rules.perms
	if perms == nil || len(perms.Deny) == 0 {
		return false
	}
	rule, ok := permission.Denied(perms.Deny, f.rules.tool, f.names(p))
	if !ok && link {
		if real, err := evalExisting(p); err == nil {
			rule, ok = permission.Denied(perms.Deny, f.rules.tool, f.names(real))
		}
	}
	if !ok {
		return false
	}
	if f.rules.hidden == nil {
		f.rules.hidden = map[string]int{}
	}
	f.rules.hidden[rule]++
	return true
}

// hiddenNote says how many entries deny rules hid, and by which rules,
// without naming them; empty when none was hidden.
func (f *fsys) hiddenNote() string {
	if len(f.rules.hidden) == 0 {
		return ""
	}
	rules := slices.Sorted(maps.Keys(f.rules.hidden))
	total := 0
	var parts []string
	for _, rule := range rules {
		n := f.rules.hidden[rule]
		total += n
		parts = append(parts, fmt.Sprintf("%d by %q", n, rule))
	}
	word := "entries"
	if total == 1 {
		word = "entry"
	}
	if len(rules) == 1 {
		return fmt.Sprintf("[%d %s hidden by the deny rule %q]", total, word, rules[0])
	}
	return fmt.Sprintf("[%d %s hidden by deny rules: %s]", total, word, strings.Join(parts, ", "))
}

// names returns the names of a resolved path as rules match it: relative
// to the first root, absolute (resolved, and under each root as
// configured), and relative to the other roots.
func (f *fsys) names(real string) permission.Path {
	p := permission.Path{Abs: []string{filepath.ToSlash(real)}}
	for i, root := range f.real {
		rel, ok := relWithin(root, real)
		if !ok {
			continue
		}
		rel = filepath.ToSlash(rel)
		if i == 0 {
			p.Rel = rel
		} else {
			p.Other = append(p.Other, rel)
		}
		if g := filepath.Join(f.given[i], rel); g != real {
			p.Abs = append(p.Abs, filepath.ToSlash(g))
		}
	}
	return p
}

// protectPaths resolves the write-protected paths; relative ones are
// relative to the first root.
func protectPaths(given []string, paths []string) ([]protected, error) {
	var out []protected
	for _, p := range paths {
		if p == "" {
			return nil, errors.New("a write-protected path is empty")
		}
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(given[0], abs)
		}
		abs = filepath.Clean(abs)
		real, err := evalExisting(abs)
		if err != nil {
			return nil, fmt.Errorf("write-protected path %q: %w", p, err)
		}
		out = append(out, protected{given: abs, real: real})
	}
	return out, nil
}

func slashed(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.ToSlash(p)
	}
	return out
}
