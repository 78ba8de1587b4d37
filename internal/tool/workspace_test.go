package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const secret = "TOP SECRET\n"

// env is a workspace root with a sibling directory outside it that holds a
// secret file.
type env struct {
	ws      *Workspace
	root    string
	outside string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	mustWrite(t, filepath.Join(e.outside, "secret.txt"), secret)
	if err := os.MkdirAll(e.root, 0o755); err != nil {
		t.Fatal(err)
	}
	e.ws = &Workspace{Roots: []string{e.root}}
	return e
}

func (e *env) exec(t *testing.T, name string, in map[string]any) (string, bool) {
	t.Helper()
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return e.ws.Exec(context.Background(), name, raw)
}

// ok runs a tool call that must succeed and returns its result.
func (e *env) ok(t *testing.T, name string, in map[string]any) string {
	t.Helper()
	out, isErr := e.exec(t, name, in)
	if isErr {
		t.Fatalf("%s %v: error result %q", name, in, out)
	}
	return out
}

// fails runs a tool call that must fail with a message holding every want.
func (e *env) fails(t *testing.T, name string, in map[string]any, want ...string) string {
	t.Helper()
	out, isErr := e.exec(t, name, in)
	if !isErr {
		t.Fatalf("%s %v: succeeded with %q, want an error", name, in, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("%s %v: error %q lacks %q", name, in, out, w)
		}
	}
	return out
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func readFile(dir, rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, rel))
	return string(b), err
}

// assertSecretIntact checks that nothing outside the root changed.
func (e *env) assertSecretIntact(t *testing.T) {
	t.Helper()
	got, err := readFile(e.outside, "secret.txt")
	if err != nil || got != secret {
		t.Fatalf("outside file changed: %q, %v", got, err)
	}
	entries, err := os.ReadDir(e.outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, en := range entries {
			names = append(names, en.Name())
		}
		t.Fatalf("files appeared outside the root: %v", names)
	}
}

func TestEscapesAreRefused(t *testing.T) {
	e := newEnv(t)
	outsideSecret := filepath.Join(e.outside, "secret.txt")
	// Symlinks created inside the root, pointing outside.
	mustSymlink(t, outsideSecret, filepath.Join(e.root, "file-link"))
	mustSymlink(t, e.outside, filepath.Join(e.root, "dir-link"))
	mustSymlink(t, "../outside", filepath.Join(e.root, "rel-dir-link"))
	mustSymlink(t, filepath.Join(e.outside, "not-yet"), filepath.Join(e.root, "dangling"))
	mustWrite(t, filepath.Join(e.root, "sub", "ok.txt"), "fine\n")

	w := func(p string) map[string]any { return map[string]any{"file_path": p, "content": "pwned\n"} }
	r := func(p string) map[string]any { return map[string]any{"file_path": p} }
	ed := func(p string) map[string]any {
		return map[string]any{"file_path": p, "old_string": "TOP", "new_string": "NOT"}
	}
	cases := []struct {
		name, tool string
		in         map[string]any
		path       string // the path the message must name
	}{
		{"dotdot read", "Read", r("../outside/secret.txt"), "../outside/secret.txt"},
		{"dotdot deep", "Read", r("sub/../../outside/secret.txt"), "sub/../../outside/secret.txt"},
		{"dotdot write", "Write", w("../outside/new.txt"), "../outside/new.txt"},
		{"absolute read", "Read", r(outsideSecret), outsideSecret},
		{"absolute write", "Write", w(filepath.Join(e.outside, "new.txt")), filepath.Join(e.outside, "new.txt")},
		{"absolute edit", "Edit", ed(outsideSecret), outsideSecret},
		{"symlinked file read", "Read", r("file-link"), "file-link"},
		{"symlinked file write", "Write", w("file-link"), "file-link"},
		{"symlinked file edit", "Edit", ed("file-link"), "file-link"},
		{"symlinked dir read", "Read", r("dir-link/secret.txt"), "dir-link/secret.txt"},
		{"relative symlinked dir read", "Read", r("rel-dir-link/secret.txt"), "rel-dir-link/secret.txt"},
		{"symlinked parent write", "Write", w("dir-link/new.txt"), "dir-link/new.txt"},
		{"symlinked parent mkdir", "Write", w("dir-link/a/b/new.txt"), "dir-link/a/b/new.txt"},
		{"dangling symlink write", "Write", w("dangling"), "dangling"},
		{"glob path", "Glob", map[string]any{"pattern": "*", "path": "dir-link"}, "dir-link"},
		{"glob pattern", "Glob", map[string]any{"pattern": "../outside/*"}, "outside"},
		{"glob absolute pattern", "Glob", map[string]any{"pattern": e.outside + "/*"}, e.outside},
		{"grep path", "Grep", map[string]any{"pattern": "SECRET", "path": "../outside"}, "../outside"},
		{"grep symlinked file", "Grep", map[string]any{"pattern": "SECRET", "path": "file-link"}, "file-link"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := e.fails(t, c.tool, c.in, "outside the workspace", e.root)
			if !strings.Contains(out, c.path) && !strings.Contains(out, "symlink") {
				t.Fatalf("message %q names neither %q nor the symlink", out, c.path)
			}
			if strings.Contains(out, "SECRET") {
				t.Fatalf("secret leaked: %q", out)
			}
			e.assertSecretIntact(t)
		})
	}
}

func TestSymlinkInsideRootIsFollowed(t *testing.T) {
	e := newEnv(t)
	mustWrite(t, filepath.Join(e.root, "real", "a.txt"), "hello\n")
	mustSymlink(t, "real", filepath.Join(e.root, "alias"))
	mustSymlink(t, "real/a.txt", filepath.Join(e.root, "a-link"))

	if out := e.ok(t, "Read", map[string]any{"file_path": "alias/a.txt"}); out != "     1\thello" {
		t.Fatalf("Read through a symlinked dir = %q", out)
	}
	e.ok(t, "Write", map[string]any{"file_path": "a-link", "content": "bye\n"})
	// The write went to the target; the link stays a link.
	if got, _ := readFile(e.root, "real/a.txt"); got != "bye\n" {
		t.Fatalf("target holds %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(e.root, "a-link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("a-link is no longer a symlink: %v", err)
	}
	// Writing through a dangling symlink creates its target.
	mustSymlink(t, "real/new.txt", filepath.Join(e.root, "new-link"))
	e.ok(t, "Write", map[string]any{"file_path": "new-link", "content": "new\n"})
	if got, _ := readFile(e.root, "real/new.txt"); got != "new\n" {
		t.Fatalf("dangling link target holds %q", got)
	}
}

// Walking a directory does not follow a symlink that leads outside.
func TestSearchDoesNotFollowSymlinksOut(t *testing.T) {
	e := newEnv(t)
	mustWrite(t, filepath.Join(e.root, "in.txt"), "SECRET inside\n")
	mustSymlink(t, filepath.Join(e.outside, "secret.txt"), filepath.Join(e.root, "file-link.txt"))
	mustSymlink(t, e.outside, filepath.Join(e.root, "dir-link"))

	out := e.ok(t, "Grep", map[string]any{"pattern": "SECRET", "output_mode": "content"})
	if out != "in.txt:1:SECRET inside" {
		t.Fatalf("Grep = %q", out)
	}
	out = e.ok(t, "Glob", map[string]any{"pattern": "**/*.txt"})
	if strings.Contains(out, "secret.txt") {
		t.Fatalf("Glob descended into a symlinked directory: %q", out)
	}
}

func TestAddedRootsAreAllowed(t *testing.T) {
	e := newEnv(t)
	extra := filepath.Join(filepath.Dir(e.root), "extra")
	mustWrite(t, filepath.Join(extra, "notes.md"), "one\ntwo\n")
	e.ws.Roots = append(e.ws.Roots, extra)

	if out := e.ok(t, "Read", map[string]any{"file_path": filepath.Join(extra, "notes.md"), "offset": 2}); out != "     2\ttwo" {
		t.Fatalf("Read = %q", out)
	}
	e.ok(t, "Write", map[string]any{"file_path": filepath.Join(extra, "new", "x.txt"), "content": "x"})
	if got, _ := readFile(extra, "new/x.txt"); got != "x" {
		t.Fatalf("written %q", got)
	}
	// Relative paths still resolve against the first root.
	e.fails(t, "Read", map[string]any{"file_path": "notes.md"}, "does not exist")
	// A reach from the added root to its outside sibling is still refused,
	// and the message lists every root.
	e.fails(t, "Read", map[string]any{"file_path": filepath.Join(extra, "..", "outside", "secret.txt")},
		"outside the workspace", e.root, extra)

	out := e.ok(t, "Glob", map[string]any{"pattern": "**/*", "path": extra})
	if !strings.Contains(out, filepath.Join(extra, "notes.md")) {
		t.Fatalf("Glob in added root = %q, want absolute paths", out)
	}
	out = e.ok(t, "Grep", map[string]any{"pattern": "two", "path": extra, "output_mode": "content"})
	if out != filepath.Join(extra, "notes.md")+":2:two" {
		t.Fatalf("Grep in added root = %q", out)
	}
}

// A root named through a symlink (as /tmp is on macOS) works, and paths
// under its resolved form are inside too.
func TestRootBehindSymlink(t *testing.T) {
	e := newEnv(t)
	link := filepath.Join(filepath.Dir(e.root), "root-link")
	mustSymlink(t, e.root, link)
	mustWrite(t, filepath.Join(e.root, "a.txt"), "a\n")
	e.ws.Roots = []string{link}

	e.ok(t, "Read", map[string]any{"file_path": "a.txt"})
	e.ok(t, "Read", map[string]any{"file_path": filepath.Join(link, "a.txt")})
	e.ok(t, "Read", map[string]any{"file_path": filepath.Join(e.root, "a.txt")})
	if out := e.ok(t, "Glob", map[string]any{"pattern": "*.txt"}); out != "a.txt" {
		t.Fatalf("Glob = %q", out)
	}
	e.fails(t, "Read", map[string]any{"file_path": filepath.Join(link, "..", "outside", "secret.txt")},
		"outside the workspace")
}

func TestRelativeRoot(t *testing.T) {
	e := newEnv(t)
	t.Chdir(filepath.Dir(e.root))
	e.ws.Roots = []string{"root"}
	e.ok(t, "Write", map[string]any{"file_path": "x.txt", "content": "x"})
	if got, _ := readFile(e.root, "x.txt"); got != "x" {
		t.Fatalf("x.txt = %q", got)
	}
	e.fails(t, "Read", map[string]any{"file_path": "../outside/secret.txt"}, "outside the workspace")
}

// One Workspace serves concurrent calls.
func TestConcurrentExec(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("f%d.txt", i)
			raw, _ := json.Marshal(map[string]any{"file_path": name, "content": name})
			if out, isErr := e.ws.Exec(context.Background(), "Write", raw); isErr {
				t.Errorf("Write: %s", out)
			}
			if out, isErr := e.ws.Exec(context.Background(), "Grep", json.RawMessage(`{"pattern":"f"}`)); isErr {
				t.Errorf("Grep: %s", out)
			}
		})
	}
	wg.Wait()
	out := e.ok(t, "Glob", map[string]any{"pattern": "f*.txt"})
	if n := len(strings.Split(out, "\n")); n != 8 {
		t.Fatalf("Glob found %d files: %q", n, out)
	}
}
