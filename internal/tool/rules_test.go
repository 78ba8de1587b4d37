package tool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/permission"
)

const (
	gitConfig = "[core]\n\tbare = false\n"
	secretKey = "SECRET KEY\n"
)

// repo is a workspace root laid out as the attack found it: a .git, a
// secrets directory, and symlinks inside the root that lead to both.
type repo struct {
	root, base string
}

func newRepo(t *testing.T) *repo {
	t.Helper()
	base := t.TempDir()
	r := &repo{root: filepath.Join(base, "root"), base: base}
	mustWrite(t, filepath.Join(r.root, ".git", "config"), gitConfig)
	mustWrite(t, filepath.Join(r.root, ".git", "hooks", "README"), "hooks\n")
	mustWrite(t, filepath.Join(r.root, "src", "a.go"), "package a\n")
	mustWrite(t, filepath.Join(r.root, "secrets", "key.txt"), secretKey)
	mustWrite(t, filepath.Join(r.root, "secrets", "deep", "more.txt"), secretKey)
	mustWrite(t, filepath.Join(r.root, "public", "readme.txt"), "nothing SECRET here\n")
	mustSymlink(t, "../.git", filepath.Join(r.root, "src", "gitlink"))
	mustSymlink(t, "secrets", filepath.Join(r.root, "link"))
	mustSymlink(t, "secrets/key.txt", filepath.Join(r.root, "keylink.txt"))
	mustSymlink(t, filepath.Join(r.root, "secrets", "key.txt"), filepath.Join(r.root, "public", "abs-keylink.txt"))
	mustSymlink(t, "../.git/hooks/pre-commit", filepath.Join(r.root, "src", "hook-to-be"))
	return r
}

func (r *repo) path(rel string) string { return filepath.Join(r.root, rel) }

func run(ws *Workspace, name string, in map[string]any) (string, bool) {
	raw, _ := json.Marshal(in)
	return ws.Exec(context.Background(), name, raw)
}

// intact checks that .git/config and the secrets are unchanged and that no
// hook appeared.
func (r *repo) intact(t *testing.T) {
	t.Helper()
	for rel, want := range map[string]string{".git/config": gitConfig, "secrets/key.txt": secretKey} {
		if got, err := readFile(r.root, rel); err != nil || got != want {
			t.Fatalf("%s changed: %q, %v", rel, got, err)
		}
	}
	if _, err := os.Lstat(r.path(".git/hooks/pre-commit")); err == nil {
		t.Fatal("a pre-commit hook appeared")
	}
}

func write(p string) map[string]any {
	return map[string]any{"file_path": p, "content": "[core]\n\thooksPath = /tmp/evil\n"}
}
func edit(p, old string) map[string]any {
	return map[string]any{"file_path": p, "old_string": old, "new_string": "pwned"}
}
func read(p string) map[string]any { return map[string]any{"file_path": p} }

// escape is one attempt to get past the rules; it must be refused with a
// message holding every want, and leave the repo intact.
type escape struct {
	name string
	ws   *Workspace
	tool string
	in   map[string]any
	want []string
}

// TestRulesHoldOnResolvedPaths is the escape suite of the file tools: the
// attack's cases (a write through a symlink into .git allowed by Write(src/*),
// a denied file read by absolute path and through symlinks) and their
// variants. It prints how many were tried and held.
func TestRulesHoldOnResolvedPaths(t *testing.T) {
	n := len(escapeCases(t, newRepo(t)))
	held := 0
	for i := range n {
		// Each case gets a repo of its own, so that one that gets through
		// does not make the others fail.
		r := newRepo(t)
		c := escapeCases(t, r)[i]
		t.Run(c.name, func(t *testing.T) {
			out, isErr := run(c.ws, c.tool, c.in)
			if !isErr {
				t.Fatalf("%s %v succeeded: %q", c.tool, c.in, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Fatalf("%s %v: %q lacks %q", c.tool, c.in, out, w)
				}
			}
			if strings.Contains(out, "SECRET KEY") {
				t.Fatalf("secret leaked: %q", out)
			}
			r.intact(t)
			if got, _ := readFile(r.root, "src/a.go"); got != "package a\n" {
				t.Fatalf("src/a.go changed: %q", got)
			}
			held++
		})
	}
	t.Logf("file-tool escape cases: %d tried, %d held", n, held)
	if held != n {
		t.Fatalf("%d of %d escape cases held", held, n)
	}
}

// escapeCases are the escape suite's cases on the repo r.
func escapeCases(t *testing.T, r *repo) []escape {
	t.Helper()
	linkRoot := filepath.Join(r.base, "root-link")
	mustSymlink(t, r.root, linkRoot)
	perms := func(mode string, allow, deny []string) *Workspace {
		return &Workspace{Roots: []string{r.root}, Permissions: &Permissions{Mode: mode, Allow: allow, Deny: deny}}
	}
	srcWriter := perms(permission.ModeAsk, []string{"Write(src/*)", "Edit(src/*)"}, nil)
	srcWriterAuto := perms(permission.ModeAuto, []string{"Write(src/*)", "Edit(src/*)"}, nil)
	noSecrets := perms(permission.ModeAsk, nil, []string{"Read(secrets/*)"})
	noSecretsDir := perms(permission.ModeBypass, nil, []string{"Read(secrets)", "Edit(secrets)"})
	noSecretsLinked := &Workspace{Roots: []string{linkRoot}, Permissions: &Permissions{Mode: permission.ModeAsk, Deny: []string{"Read(secrets/*)"}}}
	noSecretsAbs := perms(permission.ModeAsk, nil, []string{"Read(" + r.root + "/secrets/*)"})
	noGitApproved := &Workspace{Roots: []string{r.root}, Permissions: &Permissions{Mode: permission.ModeAsk, Deny: []string{"Write(.git/*)"}, Approved: true}}
	protectedGit := &Workspace{Roots: []string{r.root}, ReadOnlyPaths: []string{r.path(".git")}}
	protectedGitRel := &Workspace{Roots: []string{r.root}, ReadOnlyPaths: []string{".git"}, Permissions: &Permissions{Mode: permission.ModeAcceptEdits}}
	readOnly := &Workspace{Roots: []string{r.root}, ReadOnly: true}
	gitCfg := r.path(".git/config")
	key := r.path("secrets/key.txt")

	cases := []escape{
		// The attack: Write(src/*) and src/gitlink -> ../.git.
		{"gitlink write", srcWriter, "Write", write("src/gitlink/config"), []string{"resolves to .git/config", `"Write(src/*)"`, "does not cover", "with the path .git/config"}},
		{"gitlink write auto", srcWriterAuto, "Write", write("src/gitlink/config"), []string{"resolves to .git/config", "does not cover", "mode auto refuses"}},
		{"gitlink edit", srcWriter, "Edit", edit("src/gitlink/config", "bare"), []string{"resolves to .git/config", `"Edit(src/*)"`}},
		{"gitlink new hook", srcWriter, "Write", write("src/gitlink/hooks/pre-commit"), []string{"resolves to .git/hooks/pre-commit"}},
		{"dangling link to a hook", srcWriter, "Write", write("src/hook-to-be"), []string{"resolves to .git/hooks/pre-commit"}},
		{"absolute gitlink write", srcWriter, "Write", write(r.path("src/gitlink/config")), []string{"resolves to .git/config"}},
		// .. climbing.
		{"dotdot write", srcWriter, "Write", write("src/../.git/config"), []string{"no rule allows it", "nobody approved"}},
		{"dotdot deep write", srcWriter, "Write", write("src/x/../../.git/hooks/pre-commit"), []string{"nobody approved"}},
		{"dotdot from outside", srcWriter, "Write", write("../root/.git/config"), []string{"nobody approved"}},
		// Deny Read(secrets/*) by every name.
		{"deny relative", noSecrets, "Read", read("secrets/key.txt"), []string{`"Read(secrets/*)"`}},
		{"deny dot slash", noSecrets, "Read", read("./secrets/key.txt"), []string{`"Read(secrets/*)"`}},
		{"deny double slash", noSecrets, "Read", read("secrets//key.txt"), []string{`"Read(secrets/*)"`}},
		{"deny dotdot", noSecrets, "Read", read("src/../secrets/key.txt"), []string{`"Read(secrets/*)"`}},
		{"deny dotdot from outside", noSecrets, "Read", read("../root/secrets/key.txt"), []string{`"Read(secrets/*)"`}},
		{"deny absolute", noSecrets, "Read", read(key), []string{`"Read(secrets/*)"`}},
		{"deny absolute via root link", noSecretsLinked, "Read", read(filepath.Join(linkRoot, "secrets/key.txt")), []string{`"Read(secrets/*)"`}},
		{"deny resolved absolute under a root link", noSecretsLinked, "Read", read(key), []string{`"Read(secrets/*)"`}},
		{"deny file symlink", noSecrets, "Read", read("keylink.txt"), []string{"resolves to secrets/key.txt", `"Read(secrets/*)"`}},
		{"deny absolute file symlink", noSecrets, "Read", read("public/abs-keylink.txt"), []string{"resolves to secrets/key.txt"}},
		{"deny dir symlink", noSecrets, "Read", read("link/key.txt"), []string{"resolves to secrets/key.txt"}},
		{"deny dir symlink deep", noSecrets, "Read", read("link/deep/more.txt"), []string{"resolves to secrets/deep/more.txt"}},
		{"deny absolute rule, relative path", noSecretsAbs, "Read", read("link/key.txt"), []string{"resolves to secrets/key.txt"}},
		{"deny directory rule", noSecretsDir, "Read", read("link/deep/more.txt"), []string{`"Read(secrets)"`}},
		{"deny edit rule covers write", noSecretsDir, "Write", write("link/key.txt"), []string{`"Edit(secrets)"`}},
		{"deny grep path", noSecrets, "Grep", map[string]any{"pattern": "SECRET", "path": "keylink.txt"}, []string{"resolves to secrets/key.txt"}},
		{"deny grep dir path", noSecretsDir, "Grep", map[string]any{"pattern": "SECRET", "path": "link"}, []string{`"Read(secrets)"`}},
		{"deny glob dir path", noSecretsDir, "Glob", map[string]any{"pattern": "*", "path": "link"}, []string{`"Read(secrets)"`}},
		// A person approved the call as written: a deny rule still holds.
		{"approved gitlink write, deny rule", noGitApproved, "Write", write("src/gitlink/config"), []string{"resolves to .git/config", `"Write(.git/*)"`}},
		// Write protection of .git (sandbox mode workspace-write).
		{"protected write", protectedGit, "Write", write(".git/config"), []string{"write-protected"}},
		{"protected new hook", protectedGit, "Write", write(".git/hooks/pre-commit"), []string{"write-protected"}},
		{"protected edit", protectedGit, "Edit", edit(".git/config", "bare"), []string{"write-protected"}},
		{"protected via gitlink", protectedGit, "Write", write("src/gitlink/config"), []string{"resolves to .git/config", "write-protected"}},
		{"protected via dangling link", protectedGit, "Write", write("src/hook-to-be"), []string{"write-protected"}},
		{"protected absolute", protectedGit, "Write", write(gitCfg), []string{"write-protected"}},
		{"protected dotdot", protectedGit, "Write", write("src/../.git/config"), []string{"write-protected"}},
		{"protected relative, accept-edits", protectedGitRel, "Write", write("src/gitlink/config"), []string{"write-protected"}},
		// Read-only sandbox.
		{"read-only write", readOnly, "Write", write("src/b.go"), []string{"read-only"}},
		{"read-only edit", readOnly, "Edit", edit("src/a.go", "package"), []string{"read-only"}},
	}
	return cases
}

// The core's decision on the attack's calls, as written, is what made them
// dangerous: the Workspace's check is the one that holds.
func TestCoreDecisionAsWrittenAllowsTheAttack(t *testing.T) {
	in, _ := json.Marshal(write("src/gitlink/config"))
	if d, _ := permission.Decide(permission.ModeAsk, []string{"Write(src/*)"}, nil, "Write", in); d != permission.Allow {
		t.Fatalf("Decide on the path as written = %s; the test no longer shows the attack", d)
	}
}

// What the rules and the mode allow still runs, through symlinks inside the
// root too.
func TestRulesLetAllowedCallsRun(t *testing.T) {
	r := newRepo(t)
	mustWrite(t, r.path("lib/util.go"), "package lib\n")
	mustSymlink(t, "../lib", r.path("src/lib"))
	ws := &Workspace{Roots: []string{r.root}, Permissions: &Permissions{
		Mode: permission.ModeAsk, Allow: []string{"Write(src/*)", "Write(lib/*)", "Write(" + r.root + "/docs/*)"}, Deny: []string{"Read(secrets/*)"},
	}}
	for _, c := range []struct {
		tool string
		in   map[string]any
		file string
	}{
		{"Write", write("src/b.go"), "src/b.go"},
		{"Write", write(r.path("src/c.go")), "src/c.go"},                     // absolute path, relative rule
		{"Write", write("src/lib/util.go"), "lib/util.go"},                   // through a symlink, into another allowed place
		{"Write", write("docs/x.md"), "docs/x.md"},                           // relative path, absolute rule
		{"Read", read("public/readme.txt"), ""},                              // reads are allowed
		{"Glob", map[string]any{"pattern": "*.txt", "path": "public"}, ""},   // so are searches
		{"Grep", map[string]any{"pattern": "nothing", "path": "public"}, ""}, // of what is not denied
	} {
		out, isErr := run(ws, c.tool, c.in)
		if isErr {
			t.Fatalf("%s %v: %s", c.tool, c.in, out)
		}
		if c.file != "" {
			if _, err := os.Stat(r.path(c.file)); err != nil {
				t.Fatalf("%s %v did not write %s: %v", c.tool, c.in, c.file, err)
			}
		}
	}
	// Not covered by a rule and not approved: refused. Approved: runs.
	if out, isErr := run(ws, "Write", write("notes.txt")); !isErr || !strings.Contains(out, "nobody approved") {
		t.Fatalf("unapproved write = %q, %v", out, isErr)
	}
	ws.Permissions.Approved = true
	if out, isErr := run(ws, "Write", write("notes.txt")); isErr {
		t.Fatalf("approved write: %s", out)
	}
	// Mode accept-edits allows every write in the workspace by itself:
	// only write protection keeps .git out of reach.
	mode := &Workspace{Roots: []string{r.root}, Permissions: &Permissions{Mode: permission.ModeAcceptEdits}}
	if out, isErr := run(mode, "Write", write("src/gitlink/config")); isErr {
		t.Fatalf("accept-edits write: %s", out)
	}
}

// Relative rules are anchored at the first root: in another root they
// allow nothing, while deny rules still read the path relative to it.
func TestRulesAcrossRoots(t *testing.T) {
	r := newRepo(t)
	other := filepath.Join(r.base, "other")
	mustWrite(t, filepath.Join(other, "secrets", "x.txt"), secretKey)
	mustWrite(t, filepath.Join(other, "src", "y.go"), "package y\n")
	ws := &Workspace{Roots: []string{r.root, other}, Permissions: &Permissions{
		Mode: permission.ModeAsk, Allow: []string{"Write(src/*)"}, Deny: []string{"Read(secrets/*)"},
	}}
	if out, isErr := run(ws, "Write", write(filepath.Join(other, "src", "y.go"))); !isErr {
		t.Fatalf("Write(src/*) allowed a write in another root: %q", out)
	}
	if out, isErr := run(ws, "Read", read(filepath.Join(other, "secrets", "x.txt"))); !isErr || strings.Contains(out, "SECRET") {
		t.Fatalf("Read(secrets/*) did not deny the other root's secrets: %q", out)
	}
	ws.Permissions.Allow = []string{"Write(" + other + "/src/*)"}
	if out, isErr := run(ws, "Write", write(filepath.Join(other, "src", "y.go"))); isErr {
		t.Fatalf("absolute rule: %s", out)
	}
}

// Glob and Grep never list or print what a deny rule covers, and say how
// many entries they left out and by which rule.
func TestSearchHidesDeniedEntries(t *testing.T) {
	r := newRepo(t)
	ws := &Workspace{Roots: []string{r.root}, Permissions: &Permissions{Mode: permission.ModeAsk, Deny: []string{"Read(secrets/*)"}}}
	denied := []string{"secrets/key.txt", "secrets/deep/more.txt", "keylink.txt", "abs-keylink.txt", "link/key.txt", "SECRET KEY"}
	cases := []struct {
		tool   string
		in     map[string]any
		hidden string // the note
		shows  string // what must still be shown; empty for nothing
	}{
		{"Glob", map[string]any{"pattern": "**/*.txt"}, "[4 entries hidden by the deny rule \"Read(secrets/*)\"]", "public/readme.txt"},
		{"Glob", map[string]any{"pattern": "secrets/*"}, "[1 entry hidden", ""},
		{"Glob", map[string]any{"pattern": "secrets/key.txt"}, "[1 entry hidden", ""},
		{"Glob", map[string]any{"pattern": r.root + "/secrets/**"}, "[2 entries hidden", ""},
		{"Glob", map[string]any{"pattern": "link/*"}, "[1 entry hidden", ""},
		{"Glob", map[string]any{"pattern": "**/*", "path": "link"}, "[2 entries hidden", ""},
		{"Glob", map[string]any{"pattern": "*.txt", "path": "public"}, "[1 entry hidden", "public/readme.txt"},
		{"Grep", map[string]any{"pattern": "SECRET", "output_mode": "content"}, "[2 entries hidden", "public/readme.txt:1:nothing SECRET here"},
		{"Grep", map[string]any{"pattern": "SECRET"}, "[2 entries hidden", "public/readme.txt"},
		{"Grep", map[string]any{"pattern": "SECRET", "output_mode": "count"}, "[2 entries hidden", "public/readme.txt:1"},
		{"Grep", map[string]any{"pattern": "KEY", "path": "link", "output_mode": "content"}, "[2 entries hidden", ""},
		{"Grep", map[string]any{"pattern": "KEY", "glob": "*.txt", "output_mode": "content", "context": 2}, "[2 entries hidden", ""},
	}
	for _, c := range cases {
		out, isErr := run(ws, c.tool, c.in)
		if isErr {
			t.Fatalf("%s %v: %s", c.tool, c.in, out)
		}
		for _, d := range denied {
			if strings.Contains(out, d) {
				t.Fatalf("%s %v shows %q: %q", c.tool, c.in, d, out)
			}
		}
		if !strings.Contains(out, c.hidden) {
			t.Fatalf("%s %v: %q lacks the note %q", c.tool, c.in, out, c.hidden)
		}
		if c.shows != "" && !strings.Contains(out, c.shows) {
			t.Fatalf("%s %v: %q lacks %q", c.tool, c.in, out, c.shows)
		}
	}
	// Two rules are counted apart.
	ws.Permissions.Deny = []string{"Read(secrets/*)", "Grep(public/*)"}
	out, _ := run(ws, "Grep", map[string]any{"pattern": "SECRET"})
	if want := `[3 entries hidden by deny rules: 1 by "Grep(public/*)", 2 by "Read(secrets/*)"]`; !strings.Contains(out, want) {
		t.Fatalf("Grep = %q, want %q", out, want)
	}
	// Without deny rules nothing is hidden and no note is added.
	ws.Permissions.Deny = nil
	if out, _ := run(ws, "Grep", map[string]any{"pattern": "SECRET KEY"}); !strings.Contains(out, "secrets/key.txt") || strings.Contains(out, "hidden") {
		t.Fatalf("Grep without rules = %q", out)
	}
}

// Write and Edit replace a file by renaming a new one over it, so a hard
// link into .git (which no path check can see) is cut, not written
// through.
func TestHardLinkIsCutNotWrittenThrough(t *testing.T) {
	r := newRepo(t)
	if err := os.Link(r.path(".git/config"), r.path("src/cfg")); err != nil {
		t.Skipf("hard links: %v", err)
	}
	ws := &Workspace{Roots: []string{r.root}, ReadOnlyPaths: []string{".git"}}
	if out, isErr := run(ws, "Write", write("src/cfg")); isErr {
		t.Fatalf("Write src/cfg: %s", out)
	}
	if out, isErr := run(ws, "Edit", edit("src/cfg", "hooksPath")); isErr {
		t.Fatalf("Edit src/cfg: %s", out)
	}
	r.intact(t)
}

// The read-only sandbox still reads and searches.
func TestReadOnlyStillReads(t *testing.T) {
	r := newRepo(t)
	ws := &Workspace{Roots: []string{r.root}, ReadOnly: true}
	for _, c := range []struct {
		tool string
		in   map[string]any
	}{
		{"Read", read("src/a.go")},
		{"Glob", map[string]any{"pattern": "**/*.go"}},
		{"Grep", map[string]any{"pattern": "package"}},
	} {
		if out, isErr := run(ws, c.tool, c.in); isErr {
			t.Fatalf("%s: %s", c.tool, out)
		}
	}
}

func TestResolve(t *testing.T) {
	r := newRepo(t)
	ws := &Workspace{Roots: []string{r.root}}
	real, err := filepath.EvalSymlinks(r.path(".git"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ws.Resolve("src/gitlink/config"); err != nil || got != filepath.Join(real, "config") {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	if _, err := ws.Resolve("../outside"); err == nil {
		t.Fatal("Resolve of a path outside the roots succeeded")
	}
}

func TestBadWriteProtectedPath(t *testing.T) {
	r := newRepo(t)
	ws := &Workspace{Roots: []string{r.root}, ReadOnlyPaths: []string{""}}
	if out, isErr := run(ws, "Read", read("src/a.go")); !isErr || !strings.Contains(out, "write-protected path") {
		t.Fatalf("Exec with an empty write-protected path = %q, %v", out, isErr)
	}
}
