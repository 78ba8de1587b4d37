package permission

import (
	"encoding/json"
	"path"
	"strings"

	"github.com/vigilrun/vigil/internal/tool/toolinfo"
)

// Path is a file path as rules see it: the names of one file that a rule
// may be written against. PathIn builds it from a path as written; the file
// tools build it from the path once resolved (symlinks followed).
type Path struct {
	// Rel is the path relative to the session's first root (its working
	// directory), slash-separated and clean, without "..": the name
	// relative rules match, allow and deny alike. Empty when the path is
	// not under the first root ("." is the root itself).
	Rel string
	// Abs are absolute, clean, slash-separated names of the path: as
	// configured and, when a root is reached through a symlink, as
	// resolved. Absolute rules match them, allow and deny alike.
	Abs []string
	// Other are names only deny rules read: the path as written, a
	// relative path that climbs out of the first root, the path relative
	// to the other roots.
	Other []string
}

// PathIn returns the names of the path p, written by a model for a session
// whose roots are roots (absolute; the first is the working directory).
// It is lexical: ".." is resolved by cleaning, symlinks are not seen. With
// no roots an absolute path has only its absolute name and a relative one
// only its relative name.
func PathIn(roots []string, p string) Path {
	c := cleanPath(p)
	out := Path{Other: []string{p}}
	climbs := c == ".." || strings.HasPrefix(c, "../")
	if len(roots) == 0 {
		switch {
		case path.IsAbs(c):
			out.Abs = []string{c}
		case climbs:
			out.Other = append(out.Other, c)
		default:
			out.Rel = c
		}
		return out
	}
	abs := c
	if !path.IsAbs(abs) {
		abs = path.Join(cleanPath(roots[0]), c)
	}
	out.Abs = []string{abs}
	for i, r := range roots {
		rel, ok := relUnder(cleanPath(r), abs)
		switch {
		case !ok:
		case i == 0:
			out.Rel = rel
		default:
			out.Other = append(out.Other, rel)
		}
	}
	if !path.IsAbs(c) && out.Rel == "" {
		out.Other = append(out.Other, c)
	}
	return out
}

// relUnder returns the slash-separated p relative to root when p is root
// or below it; both are clean and absolute.
func relUnder(root, p string) (string, bool) {
	switch {
	case p == root:
		return ".", true
	case root == "/":
		return p[1:], strings.HasPrefix(p, "/")
	case strings.HasPrefix(p, root+"/"):
		return p[len(root)+1:], true
	}
	return "", false
}

// pathOf returns the path of a file tool's call: file_path, notebook_path
// or path (Glob's and Grep's directory). A Glob or Grep without a path
// has none: its subject is its pattern.
func pathOf(tool string, input json.RawMessage) (string, bool) {
	if !isPathTool(tool) {
		return "", false
	}
	var in struct {
		Command      string `json:"command"`
		FilePath     string `json:"file_path"`
		NotebookPath string `json:"notebook_path"`
		Path         string `json:"path"`
	}
	_ = json.Unmarshal(input, &in)
	switch {
	case in.Command != "": // Subject reads a command first
		return "", false
	case in.FilePath != "":
		return in.FilePath, true
	case in.NotebookPath != "":
		return in.NotebookPath, true
	case in.Path != "":
		return in.Path, true
	}
	return "", false
}

// denyCovers reports whether a deny rule on the tool named rule covers a
// call of tool: the same tool, or a rule on Read for the tools that read
// files, a rule on Write, Edit or MultiEdit for those that edit them.
func denyCovers(rule, tool string) bool {
	if rule == tool {
		return true
	}
	r, t := toolinfo.Of(rule), toolinfo.Of(tool)
	return r.DenyCoversFiles && t.FileTool() && r.Files == t.Files
}

// pathMax is the longest path the kernel opens (Linux's PATH_MAX): a deny
// rule is matched against the directories above a path up to that length,
// which covers every directory a real path has and keeps the work bounded
// for a path of any length.
const pathMax = 4096

// denyCoversPath reports whether the deny rule covers a call of the file
// tool named tool on p: the rule names the tool or one it covers, and its
// pattern matches a name of p, as given or cleaned, or of a directory
// above it (up to pathMax bytes long).
func denyCoversPath(rule, tool string, p Path) bool {
	name, pattern, ok := parse(rule)
	if !ok || !denyCovers(name, tool) {
		return false
	}
	if pattern == "" {
		return true
	}
	match := func(n string) bool {
		if n == "" {
			return false
		}
		if glob(pattern, n) {
			return true
		}
		c := cleanPath(n)
		if c != n && glob(pattern, c) {
			return true
		}
		// The directories above, from the top down.
		for i := 1; i < len(c) && i <= pathMax; i++ {
			if c[i] == '/' && glob(pattern, c[:i]) {
				return true
			}
		}
		return false
	}
	if match(p.Rel) {
		return true
	}
	for _, n := range p.Abs {
		if match(n) {
			return true
		}
	}
	for _, n := range p.Other {
		if match(n) {
			return true
		}
	}
	return false
}

// allowCoversPath reports whether the allow rule allows a call of the file
// tool named tool on p: the rule names exactly the tool, and its pattern
// matches Rel when it is relative (so that "Write(*)" means everything
// under the working directory, not everything anywhere) or an absolute
// name when it starts with /. A Rel that climbs out with ".." never
// matches.
func allowCoversPath(rule, tool string, p Path) bool {
	name, pattern, ok := parse(rule)
	if !ok || name != tool {
		return false
	}
	if pattern == "" {
		return true
	}
	if !path.IsAbs(pattern) {
		if p.Rel == "" {
			return false
		}
		rel := cleanPath(p.Rel)
		return rel != ".." && !strings.HasPrefix(rel, "../") && !path.IsAbs(rel) && glob(pattern, rel)
	}
	for _, n := range p.Abs {
		if path.IsAbs(n) && glob(pattern, cleanPath(n)) {
			return true
		}
	}
	return false
}
