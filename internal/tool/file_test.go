package tool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	e := newEnv(t)
	var lines []string
	for i := 1; i <= 2500; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	mustWrite(t, filepath.Join(e.root, "big.txt"), strings.Join(lines, "\n")+"\n")
	mustWrite(t, filepath.Join(e.root, "small.txt"), "alpha\n\tbeta\r\ngamma") // no final newline
	mustWrite(t, filepath.Join(e.root, "empty.txt"), "")

	if got, want := e.ok(t, "Read", map[string]any{"file_path": "small.txt"}),
		"     1\talpha\n     2\t\tbeta\n     3\tgamma"; got != want {
		t.Fatalf("Read small = %q, want %q", got, want)
	}
	abs := filepath.Join(e.root, "small.txt")
	if got := e.ok(t, "Read", map[string]any{"file_path": abs, "offset": 2, "limit": 1}); got !=
		"     2\t\tbeta\n[showing lines 2-2 of 3; read on with offset 3]" {
		t.Fatalf("Read offset/limit = %q", got)
	}

	got := e.ok(t, "Read", map[string]any{"file_path": "big.txt"})
	out := strings.Split(got, "\n")
	if len(out) != 2001 || out[0] != "     1\tline 1" || out[1999] != "  2000\tline 2000" {
		t.Fatalf("Read big: %d lines, first %q, last %q", len(out), out[0], out[len(out)-2])
	}
	if out[2000] != "[showing lines 1-2000 of 2500; read on with offset 2001]" {
		t.Fatalf("Read big note = %q", out[2000])
	}
	got = e.ok(t, "Read", map[string]any{"file_path": "big.txt", "offset": 2400})
	if out := strings.Split(got, "\n"); len(out) != 101 || out[100] != "  2500\tline 2500" {
		t.Fatalf("Read big tail: %d lines, last %q", len(out), out[len(out)-1])
	}

	if got := e.ok(t, "Read", map[string]any{"file_path": "empty.txt"}); got != "[empty.txt is empty]" {
		t.Fatalf("Read empty = %q", got)
	}
	if got := e.ok(t, "Read", map[string]any{"file_path": "small.txt", "offset": 9}); !strings.Contains(got, "has 3 lines; offset 9 is past the end") {
		t.Fatalf("Read past end = %q", got)
	}
}

func TestReadCutsLongLines(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("é", 5000) // 2 bytes a rune
	mustWrite(t, filepath.Join(e.root, "long.txt"), long+"\nshort\n"+strings.Repeat("x", 200000)+"\n")
	got := e.ok(t, "Read", map[string]any{"file_path": "long.txt"})
	lines := strings.Split(got, "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines", len(lines))
	}
	want := "     1\t" + strings.Repeat("é", maxLineRunes) + " … [line cut at 2000 characters]"
	if lines[0] != want {
		t.Fatalf("line 1 = %.40q… (%d bytes)", lines[0], len(lines[0]))
	}
	if lines[1] != "     2\tshort" {
		t.Fatalf("line 2 = %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "     3\txxx") || !strings.HasSuffix(lines[2], "[line cut at 2000 characters]") {
		t.Fatalf("line 3 = %.40q", lines[2])
	}
}

func TestReadRefusals(t *testing.T) {
	e := newEnv(t)
	mustWrite(t, filepath.Join(e.root, "bin.dat"), "ELF\x00\x01\x02")
	// A NUL byte beyond the first bytes sniffed is caught too.
	mustWrite(t, filepath.Join(e.root, "late.dat"), strings.Repeat("text\n", 5000)+"\x00")
	mustWrite(t, filepath.Join(e.root, "dir", "f"), "")

	e.fails(t, "Read", map[string]any{"file_path": "bin.dat"}, "bin.dat is a binary file")
	e.fails(t, "Read", map[string]any{"file_path": "late.dat"}, "late.dat is a binary file")
	e.fails(t, "Read", map[string]any{"file_path": "dir"}, "dir is a directory")
	e.fails(t, "Read", map[string]any{"file_path": "nope.txt"}, "nope.txt does not exist")
	e.fails(t, "Read", map[string]any{"file_path": ""}, "empty")
	e.fails(t, "Read", map[string]any{"file_path": "dir/f/x"}, "not a directory")
}

func TestWrite(t *testing.T) {
	e := newEnv(t)
	out := e.ok(t, "Write", map[string]any{"file_path": "a/b/c.txt", "content": "hello\n"})
	if out != "Created a/b/c.txt (6 bytes)" {
		t.Fatalf("Write = %q", out)
	}
	path := filepath.Join(e.root, "a", "b", "c.txt")
	if got, _ := os.ReadFile(path); string(got) != "hello\n" {
		t.Fatalf("content %q", got)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(e.root, "a", "b")); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o700 != 0o700 {
		t.Fatalf("parent dir: %v, %v", fi, err)
	}

	// Overwrite keeps the existing mode and leaves no temporary file.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	out = e.ok(t, "Write", map[string]any{"file_path": path, "content": ""})
	if out != "Wrote "+path+" (0 bytes)" {
		t.Fatalf("Write = %q", out)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after overwrite: size %d mode %v", fi.Size(), fi.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want 1 (a temporary file was left)", len(entries))
	}

	e.fails(t, "Write", map[string]any{"file_path": "a/b", "content": "x"}, "a/b is a directory")
	e.fails(t, "Write", map[string]any{"file_path": "a/b/c.txt/d", "content": "x"}, "not a directory")
}

func TestEdit(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.root, "main.go")
	mustWrite(t, path, "package main\n\nfunc a() { x := 1 }\nfunc b() { x := 1 }\n")
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string, all bool) map[string]any {
		return map[string]any{"file_path": "main.go", "old_string": old, "new_string": new, "replace_all": all}
	}

	e.fails(t, "Edit", edit("x := 1", "x := 2", false), "old_string occurs 2 times in main.go; give more context or set replace_all")
	e.fails(t, "Edit", edit("y := 1", "y := 2", false), "old_string not found in main.go")
	e.fails(t, "Edit", edit("x", "x", false), "identical")
	e.fails(t, "Edit", edit("", "x", false), "old_string is empty")
	e.fails(t, "Edit", map[string]any{"file_path": "none.go", "old_string": "a", "new_string": "b"}, "none.go does not exist")
	if got, _ := readFile(e.root, "main.go"); got != "package main\n\nfunc a() { x := 1 }\nfunc b() { x := 1 }\n" {
		t.Fatalf("a failed Edit changed the file: %q", got)
	}

	if out := e.ok(t, "Edit", edit("func a() { x := 1 }", "func a() { x := 3 }", false)); out != "Edited main.go: replaced 1 occurrence" {
		t.Fatalf("Edit = %q", out)
	}
	if out := e.ok(t, "Edit", edit("x := ", "y := ", true)); out != "Edited main.go: replaced 2 occurrences" {
		t.Fatalf("Edit replace_all = %q", out)
	}
	if got, _ := readFile(e.root, "main.go"); got != "package main\n\nfunc a() { y := 3 }\nfunc b() { y := 1 }\n" {
		t.Fatalf("content %q", got)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, want 0755 kept", fi.Mode())
	}

	mustWrite(t, filepath.Join(e.root, "bin.dat"), "a\x00b")
	e.fails(t, "Edit", map[string]any{"file_path": "bin.dat", "old_string": "a", "new_string": "c"}, "binary")
}
