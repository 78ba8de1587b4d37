package tool

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tree writes files under dir, giving the i-th an mtime i minutes after a
// fixed time, so later files are newer.
func tree(t *testing.T, dir string, files ...string) {
	t.Helper()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < len(files); i += 2 {
		p := filepath.Join(dir, files[i])
		mustWrite(t, p, files[i+1])
		mt := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
}

func TestExpandBraces(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"*.go", []string{"*.go"}},
		{"*.{ts,tsx}", []string{"*.ts", "*.tsx"}},
		{"{a,b}/{c,d}", []string{"a/c", "a/d", "b/c", "b/d"}},
		{"x{a,{b,c}}y", []string{"xay", "xby", "xcy"}},
		{"{solo}.go", []string{"{solo}.go"}},
		{"{a,b", []string{"{a,b"}},
		{`\{a,b}`, []string{`\{a,b}`}},
	} {
		got, err := expandBraces(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("expandBraces(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := expandBraces(strings.Repeat("{a,b}", 10)); err == nil {
		t.Error("no error for 1024 alternatives")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"*.go", "a.go", true},
		{"*.go", "sub/a.go", false},
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/z/a.go", true},
		{"src/**/test/*.go", "src/test/a.go", true},
		{"src/**/test/*.go", "src/a/b/test/a.go", true},
		{"src/**/test/*.go", "src/a/b/tests/a.go", false},
		{"**", "any/thing", true},
		{"a?c", "abc", true},
		{"[ab].txt", "c.txt", false},
		{"*.{md,txt}", "r.txt", true},
	} {
		g, err := compileGlob(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.match(c.path); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

func TestGlob(t *testing.T) {
	e := newEnv(t)
	tree(t, e.root,
		"old.go", "",
		"pkg/a.go", "",
		"pkg/a_test.go", "",
		"pkg/deep/b.go", "",
		"web/app.ts", "",
		"web/app.tsx", "",
		"README.md", "",
		".git/hooks/x.go", "",
	)
	glob := func(in map[string]any) string { t.Helper(); return e.ok(t, "Glob", in) }

	if got, want := glob(map[string]any{"pattern": "**/*.go"}), "pkg/deep/b.go\npkg/a_test.go\npkg/a.go\nold.go"; got != want {
		t.Fatalf("**/*.go = %q, want %q (newest first, .git skipped)", got, want)
	}
	if got := glob(map[string]any{"pattern": "*.go"}); got != "old.go" {
		t.Fatalf("*.go = %q", got)
	}
	if got := glob(map[string]any{"pattern": "*.go", "path": "pkg"}); got != "pkg/a_test.go\npkg/a.go" {
		t.Fatalf("*.go in pkg = %q", got)
	}
	if got := glob(map[string]any{"pattern": "web/*.{ts,tsx}"}); got != "web/app.tsx\nweb/app.ts" {
		t.Fatalf("braces = %q", got)
	}
	if got := glob(map[string]any{"pattern": "pkg/deep/b.go"}); got != "pkg/deep/b.go" {
		t.Fatalf("literal = %q", got)
	}
	if got := glob(map[string]any{"pattern": filepath.Join(e.root, "pkg", "*_test.go")}); got != "pkg/a_test.go" {
		t.Fatalf("absolute pattern = %q", got)
	}
	if got := glob(map[string]any{"pattern": "**/*.rs"}); got != "No files found" {
		t.Fatalf("no match = %q", got)
	}
	if got := glob(map[string]any{"pattern": "nodir/**"}); got != "No files found" {
		t.Fatalf("missing prefix = %q", got)
	}
	e.fails(t, "Glob", map[string]any{"pattern": "[x"}, "invalid glob pattern")
	e.fails(t, "Glob", map[string]any{"pattern": "*", "path": "README.md"}, "not a directory")
	e.fails(t, "Glob", map[string]any{"pattern": "*", "path": "missing"}, "missing does not exist")
}

func TestGlobCapsResults(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.root, "many")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range globMaxResults + 5 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(e.ok(t, "Glob", map[string]any{"pattern": "many/*"}), "\n")
	if len(lines) != globMaxResults+1 {
		t.Fatalf("got %d lines", len(lines))
	}
	if note := lines[len(lines)-1]; note != "[showing the 1000 most recently modified of 1005 files; use a narrower pattern or path]" {
		t.Fatalf("note = %q", note)
	}
}

func TestGrep(t *testing.T) {
	e := newEnv(t)
	tree(t, e.root,
		"a.go", "package a\n\nfunc Hello() {}\n",
		"b.go", "package b\n// hello there\nvar x = 1\nvar y = 2\nvar z = 3\nvar w = 4\n// HELLO again\n",
		"notes.txt", "hello from text\n",
		"sub/deep/c.txt", "nothing\nhello deep\n",
		"bin.dat", "hello\x00binary",
		".git/config", "hello git\n",
	)
	grep := func(in map[string]any) string { t.Helper(); return e.ok(t, "Grep", in) }

	if got, want := grep(map[string]any{"pattern": "hello"}), "b.go\nnotes.txt\nsub/deep/c.txt"; got != want {
		t.Fatalf("files_with_matches = %q, want %q", got, want)
	}
	if got, want := grep(map[string]any{"pattern": "hello", "case_insensitive": true, "output_mode": "count"}),
		"a.go:1\nb.go:2\nnotes.txt:1\nsub/deep/c.txt:1"; got != want {
		t.Fatalf("count = %q, want %q", got, want)
	}
	if got, want := grep(map[string]any{"pattern": `(?i)hello`, "output_mode": "content", "glob": "*.go"}),
		"a.go:3:func Hello() {}\nb.go:2:// hello there\nb.go:7:// HELLO again"; got != want {
		t.Fatalf("content = %q, want %q", got, want)
	}
	want := strings.Join([]string{
		"a.go-2-",
		"a.go:3:func Hello() {}",
		"--",
		"b.go-1-package b",
		"b.go:2:// hello there",
		"b.go-3-var x = 1",
		"--",
		"b.go-6-var w = 4",
		"b.go:7:// HELLO again",
	}, "\n")
	if got := grep(map[string]any{"pattern": "hello", "case_insensitive": true, "output_mode": "content",
		"context": 1, "glob": "*.go"}); got != want {
		t.Fatalf("context = %q, want %q", got, want)
	}
	if got := grep(map[string]any{"pattern": "hello", "glob": "sub/**/*.txt"}); got != "sub/deep/c.txt" {
		t.Fatalf("path glob = %q", got)
	}
	if got := grep(map[string]any{"pattern": "hello", "path": "sub", "output_mode": "content"}); got != "sub/deep/c.txt:2:hello deep" {
		t.Fatalf("path dir = %q", got)
	}
	if got := grep(map[string]any{"pattern": "var", "path": "b.go", "output_mode": "content", "head_limit": 2}); got !=
		"b.go:3:var x = 1\nb.go:4:var y = 2\n[output cut at head_limit 2]" {
		t.Fatalf("head_limit = %q", got)
	}
	if got := grep(map[string]any{"pattern": "hello", "head_limit": 3}); got != "b.go\nnotes.txt\nsub/deep/c.txt" {
		t.Fatalf("head_limit not reached = %q", got)
	}
	if got := grep(map[string]any{"pattern": "zebra"}); got != "No files found" {
		t.Fatalf("no match = %q", got)
	}
	if got := grep(map[string]any{"pattern": "zebra", "output_mode": "content"}); got != "No matches found" {
		t.Fatalf("no match content = %q", got)
	}
	// The .git directory is skipped, unless it is the path searched.
	if got := grep(map[string]any{"pattern": "git", "path": ".git"}); got != ".git/config" {
		t.Fatalf(".git as path = %q", got)
	}
	e.fails(t, "Grep", map[string]any{"pattern": "a(b"}, "invalid regular expression")
	e.fails(t, "Grep", map[string]any{"pattern": "a", "path": "missing"}, "missing does not exist")
	e.fails(t, "Grep", map[string]any{"pattern": "a", "glob": "[x"}, "invalid glob pattern")
}
