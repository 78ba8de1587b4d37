package tool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// maxBraceAlternatives bounds the patterns one glob expands to.
	maxBraceAlternatives = 256
	// grepLineBytes bounds the bytes of one line that Grep matches against.
	grepLineBytes = 1 << 20
)

// glob is a compiled file pattern: alternatives (from {a,b}) of /-separated
// segments, where a "**" segment matches any number of path segments.
type glob struct {
	alts     [][]string
	maxDepth int // the most segments a match can have; -1 with **
}

func compileGlob(pattern string) (*glob, error) {
	exps, err := expandBraces(pattern)
	if err != nil {
		return nil, err
	}
	g := &glob{}
	for _, e := range exps {
		segs := strings.Split(e, "/")
		for _, s := range segs {
			if _, err := path.Match(s, ""); err != nil {
				return nil, fmt.Errorf("invalid glob pattern %q: %v", pattern, err)
			}
			if s == "**" {
				g.maxDepth = -1
			}
		}
		if g.maxDepth >= 0 {
			g.maxDepth = max(g.maxDepth, len(segs))
		}
		g.alts = append(g.alts, segs)
	}
	return g, nil
}

// match reports whether the /-separated relative path matches.
func (g *glob) match(rel string) bool {
	name := strings.Split(rel, "/")
	for _, a := range g.alts {
		if matchSegs(a, name) {
			return true
		}
	}
	return false
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// expandBraces expands {a,b} alternatives, nested ones included. Braces
// without a comma stay literal.
func expandBraces(s string) ([]string, error) {
	open, depth := -1, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				continue
			}
			depth--
			if depth > 0 {
				continue
			}
			prefix, inner, suffix := s[:open], s[open+1:i], s[i+1:]
			alts := splitTopCommas(inner)
			var out []string
			if len(alts) == 1 {
				rest, err := expandBraces(suffix)
				if err != nil {
					return nil, err
				}
				for _, r := range rest {
					out = append(out, prefix+"{"+inner+"}"+r)
				}
				return out, nil
			}
			for _, a := range alts {
				exp, err := expandBraces(prefix + a + suffix)
				if err != nil {
					return nil, err
				}
				out = append(out, exp...)
				if len(out) > maxBraceAlternatives {
					return nil, fmt.Errorf("the pattern expands to more than %d alternatives", maxBraceAlternatives)
				}
			}
			return out, nil
		}
	}
	return []string{s}, nil
}

// splitTopCommas splits s at the commas outside nested braces.
func splitTopCommas(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func hasMeta(seg string) bool { return strings.ContainsAny(seg, `*?[{\`) }

// dirParam resolves the optional directory or file parameter name, the
// working directory when absent, and checks that it exists.
func dirParam(f *fsys, in args, name string) (resolved, string, fs.FileInfo, error) {
	p, ok := in.str(name)
	if !ok || p == "" {
		p = "."
	}
	r, err := f.target(p)
	if err != nil {
		return resolved{}, p, nil, err
	}
	fi, err := os.Stat(r.real)
	if errors.Is(err, fs.ErrNotExist) {
		return resolved{}, p, nil, fmt.Errorf("path %s does not exist", p)
	}
	if err != nil {
		return resolved{}, p, nil, fmt.Errorf("stat %s: %v", p, unwrapPath(err))
	}
	return r, p, fi, nil
}

type globHit struct {
	path  string
	mtime time.Time
}

func execGlob(ctx context.Context, f *fsys, in args) (string, error) {
	pattern, _ := in.str("pattern")
	if pattern == "" {
		return "", errors.New("the pattern is empty")
	}
	dir, dirName, fi, err := dirParam(f, in, "path")
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("path %s is not a directory", dirName)
	}

	// Walk from the longest literal prefix of the pattern.
	segs := strings.Split(filepath.ToSlash(pattern), "/")
	i := 0
	for i < len(segs) && !hasMeta(segs[i]) {
		i++
	}
	prefix, rest := strings.Join(segs[:i], "/"), strings.Join(segs[i:], "/")
	baseName := prefix
	if !filepath.IsAbs(prefix) {
		baseName = filepath.Join(dir.real, prefix)
	}
	if prefix == "" && i > 0 {
		baseName = "/"
	}
	base, err := f.resolve(baseName)
	if err != nil {
		return "", fmt.Errorf("pattern %s: %w", pattern, err)
	}
	if rest == "" {
		fi, err := os.Lstat(base.real)
		if err != nil || fi.IsDir() {
			return "No files found", nil
		}
		if f.hide(base.real, false) {
			return "No files found\n" + f.hiddenNote(), nil
		}
		return f.display(base.real), nil
	}
	g, err := compileGlob(rest)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(base.real); err != nil || !fi.IsDir() {
		return "No files found", nil
	}

	var hits []globHit
	n := 0
	err = filepath.WalkDir(base.real, func(p string, d fs.DirEntry, err error) error {
		if n++; n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if p == base.real {
				return err
			}
			return nil // an unreadable subdirectory: skip it
		}
		rel, _ := filepath.Rel(base.real, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" || (g.maxDepth >= 0 && strings.Count(rel, "/")+1 >= g.maxDepth) {
				return filepath.SkipDir
			}
			return nil
		}
		if !g.match(rel) || f.hide(p, d.Type()&fs.ModeSymlink != 0) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		hits = append(hits, globHit{path: f.display(p), mtime: info.ModTime()})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("glob %s: %v", pattern, unwrapPath(err))
	}
	if len(hits) == 0 {
		return withNote("No files found", f.hiddenNote()), nil
	}
	slices.SortFunc(hits, func(a, b globHit) int {
		if c := b.mtime.Compare(a.mtime); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
	total := len(hits)
	if total > globMaxResults {
		hits = hits[:globMaxResults]
	}
	var b strings.Builder
	for i, h := range hits {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(h.path)
	}
	if total > globMaxResults {
		fmt.Fprintf(&b, "\n[showing the %d most recently modified of %d files; use a narrower pattern or path]",
			globMaxResults, total)
	}
	return withNote(b.String(), f.hiddenNote()), nil
}

// withNote appends a note on a line of its own, when there is one.
func withNote(s, note string) string {
	if note == "" {
		return s
	}
	return s + "\n" + note
}

// grepOut collects Grep's output lines up to head_limit.
type grepOut struct {
	lines []string
	limit int // 0: no limit
	cut   bool
}

// add appends lines and reports whether there is room for more.
func (o *grepOut) add(lines ...string) bool {
	for _, l := range lines {
		if o.limit > 0 && len(o.lines) >= o.limit {
			o.cut = true
			return false
		}
		o.lines = append(o.lines, l)
	}
	return o.limit == 0 || len(o.lines) < o.limit
}

type grepper struct {
	re       *regexp.Regexp
	mode     string
	context  int
	filter   *glob
	nameOnly bool // filter matches the base name, not the relative path
}

func execGrep(ctx context.Context, f *fsys, in args) (string, error) {
	pattern, _ := in.str("pattern")
	if in.boolean("case_insensitive") {
		pattern = "(?i)" + pattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return "", fmt.Errorf("invalid regular expression: %v", err)
	}
	gr := grepper{re: re, mode: "files_with_matches"}
	if m, ok := in.str("output_mode"); ok {
		gr.mode = m
	}
	if c, ok := in.integer("context"); ok && gr.mode == "content" {
		gr.context = int(c)
	}
	if gl, ok := in.str("glob"); ok && gl != "" {
		if gr.filter, err = compileGlob(gl); err != nil {
			return "", err
		}
		gr.nameOnly = !strings.Contains(gl, "/")
	}
	out := &grepOut{}
	if hl, ok := in.integer("head_limit"); ok {
		out.limit = int(hl)
	}

	base, baseName, fi, err := dirParam(f, in, "path")
	if err != nil {
		return "", err
	}
	root, err := base.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	switch {
	case fi.Mode().IsRegular():
		if err := gr.file(ctx, root, base.rel, f.display(base.real), out); err != nil {
			return "", err
		}
	case fi.IsDir():
		err := filepath.WalkDir(base.real, func(p string, d fs.DirEntry, err error) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err != nil {
				if p == base.real {
					return err
				}
				return nil // an unreadable subdirectory: skip it
			}
			if d.IsDir() {
				if d.Name() == ".git" && p != base.real {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil // symlinks, devices, pipes
			}
			if gr.filter != nil {
				name := d.Name()
				if !gr.nameOnly {
					name, _ = filepath.Rel(base.real, p)
					name = filepath.ToSlash(name)
				}
				if !gr.filter.match(name) {
					return nil
				}
			}
			if f.hide(p, false) {
				return nil
			}
			rel, _ := filepath.Rel(base.root, p)
			if err := gr.file(ctx, root, rel, f.display(p), out); err != nil {
				return err
			}
			if out.cut {
				return filepath.SkipAll
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("grep %s: %v", baseName, unwrapPath(err))
		}
	default:
		return "", fmt.Errorf("path %s is not a regular file or directory", baseName)
	}

	if len(out.lines) == 0 {
		if gr.mode == "files_with_matches" {
			return withNote("No files found", f.hiddenNote()), nil
		}
		return withNote("No matches found", f.hiddenNote()), nil
	}
	s := strings.Join(out.lines, "\n")
	if out.cut {
		s += fmt.Sprintf("\n[output cut at head_limit %d]", out.limit)
	}
	return withNote(s, f.hiddenNote()), nil
}

// file searches one file; rel is its path in root, disp the path to show.
// Binary files are skipped; files that cannot be read are skipped too.
func (gr *grepper) file(ctx context.Context, root *os.Root, rel, disp string, out *grepOut) error {
	file, err := root.Open(rel)
	if err != nil {
		return nil
	}
	defer file.Close()
	lr := newLineReader(file, grepLineBytes)
	if lr.sniffBinary() {
		return nil
	}
	var (
		lines   []string // this file's output, kept until the file proves to be text
		count   int
		before  []string // the last context lines not shown, numbered
		after   int      // context lines still to show after a match
		shown   = 0      // the last line number shown
		n       int
		matched bool
	)
	for {
		line, cut, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil // binary or unreadable: skip the file
		}
		n++
		if n%ctxEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if !gr.re.Match(line) {
			if gr.mode == "content" && gr.context > 0 {
				text := disp + "-" + strconv.Itoa(n) + "-" + clip(line, cut)
				if after > 0 {
					lines = append(lines, text)
					shown = n
					after--
				} else {
					before = append(before, text)
					if len(before) > gr.context {
						before = before[1:]
					}
				}
			}
			continue
		}
		matched = true
		count++
		if gr.mode == "files_with_matches" {
			break
		}
		if gr.mode == "content" {
			first := n - len(before)
			// Separate groups that do not touch, in this file or after another file's.
			if gr.context > 0 && ((len(lines) > 0 && first > shown+1) || (len(lines) == 0 && len(out.lines) > 0)) {
				lines = append(lines, "--")
			}
			lines = append(lines, before...)
			before = before[:0]
			lines = append(lines, disp+":"+strconv.Itoa(n)+":"+clip(line, cut))
			shown = n
			after = gr.context
		}
	}
	if !matched {
		return nil
	}
	switch gr.mode {
	case "files_with_matches":
		out.add(disp)
	case "count":
		out.add(disp + ":" + strconv.Itoa(count))
	default:
		out.add(lines...)
	}
	return nil
}
