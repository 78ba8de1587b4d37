package vigil

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// By default an agent's commands and file tools run in workspace-write:
// they write the session's directory, not what lies outside it, not its
// .git, and not vigil's data; in bypass mode too, where no rule is asked.
// needWorkspaceSandbox skips, loudly, unless VIGIL_TEST_STRICT=1, when
// rt's default sandbox is not workspace-write with read-only paths inside
// the workspace: no sandbox at all, or Landlock without bubblewrap, which
// leaves .git and protected paths writable (rt says so in its warning).
func needWorkspaceSandbox(t *testing.T, rt *Runtime) {
	t.Helper()
	iso := rt.Isolation()
	if iso.Sandbox == string(sandbox.WorkspaceWrite) && !iso.WritableGit {
		return
	}
	if os.Getenv("VIGIL_TEST_STRICT") == "1" {
		t.Fatalf("the default sandbox here is %s, writable .git %v: %s", iso.Sandbox, iso.WritableGit, iso.Warning)
	}
	t.Skipf("SKIP: no sandbox that keeps paths inside the workspace read-only on this machine (%s; %s)", iso.Kernel, iso.Warning)
}

func TestSandboxByDefault(t *testing.T) {
	cwd, outside := t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(cwd, ".git", "hooks"), 0o755))
	must(t, os.WriteFile(filepath.Join(cwd, ".git", "config"), []byte("[core]\n"), 0o644))
	sentinel := filepath.Join(outside, "sentinel")
	must(t, os.WriteFile(sentinel, []byte("keep"), 0o644))
	data := t.TempDir()
	sc, err := script.Parse([]byte(`
name: sandbox
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "rm -f ` + sentinel + `; echo pwned >> .git/config; cat ` + filepath.Join(data, "token") + `; echo ok > inside.txt"}
          - Bash: {command: "/usr/bin/curl -sS --max-time 5 http://127.0.0.1:1/ || echo NO-NETWORK"}
          - Write: {file_path: ".git/hooks/pre-commit", content: "#!/bin/sh\ntouch /tmp/pwned\n"}
      - say: "done"
`))
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(data, "token"), []byte("SECRET-TOKEN"), 0o600))
	rt := openWith(t, memstore.New(), sc, func(o *Options) { o.DataDir = data })
	needWorkspaceSandbox(t, rt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Cwd: cwd, Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))
	var tr bytes.Buffer
	must(t, rt.Transcript(ctx, &tr, &TranscriptParams{Session: sess.ID, Agent: "main"}))
	if b, err := os.ReadFile(sentinel); err != nil || string(b) != "keep" {
		t.Errorf("a command removed a file outside the session's directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, ".git", "config")); string(b) != "[core]\n" {
		t.Errorf("a command wrote .git/config: %q", b)
	}
	if _, err := os.Stat(filepath.Join(cwd, ".git", "hooks", "pre-commit")); err == nil {
		t.Errorf("the Write tool planted a git hook")
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "inside.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("a command could not write its own directory: %q, %v", b, err)
	}
	for _, leak := range []string{"SECRET-TOKEN"} {
		if strings.Contains(tr.String(), leak) {
			t.Errorf("a command read vigil's data directory: %s", leak)
		}
	}
	if !strings.Contains(tr.String(), "NO-NETWORK") {
		t.Errorf("a confined command reached the network:\n%s", tr.String())
	}
}

// A session whose directory is reached through a symlink runs its
// commands there (the sandbox binds real paths); vigil's configuration
// directory inside a root stays read-only, so a command cannot turn the
// sandbox off for the next session.
func TestSandboxSymlinkedCwdAndProtect(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(real, link))
	conf := filepath.Join(real, ".config", "vigil")
	must(t, os.MkdirAll(conf, 0o700))
	sc, err := script.Parse([]byte(`
name: symlinked
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "echo ok > inside.txt; printf 'sandbox: {mode: full-access}\n' > .config/vigil/config.yaml || echo PROTECTED"}
          - Write: {file_path: ".config/vigil/project-rules.yaml", content: "x"}
      - say: "done"
`))
	must(t, err)
	rt := openWith(t, memstore.New(), sc, func(o *Options) { o.Sandbox.Protect = []string{conf} })
	needWorkspaceSandbox(t, rt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Cwd: link, Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))
	var tr bytes.Buffer
	must(t, rt.Transcript(ctx, &tr, &TranscriptParams{Session: sess.ID, Agent: "main"}))
	if b, err := os.ReadFile(filepath.Join(real, "inside.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("a command could not write a symlinked working directory: %q, %v\n%s", b, err, tr.String())
	}
	for _, f := range []string{"config.yaml", "project-rules.yaml"} {
		if _, err := os.Stat(filepath.Join(conf, f)); err == nil {
			t.Errorf("an agent wrote vigil's configuration: %s", f)
		}
	}
	if !strings.Contains(tr.String(), "PROTECTED") {
		t.Errorf("the write to vigil's configuration did not fail:\n%s", tr.String())
	}
}
