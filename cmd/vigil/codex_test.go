package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/provider/providertest"
)

// TestRunOnCodex runs 'vigil run --provider codex' on the real Codex CLI
// against the fake Responses API: a provider of kind codex in the config
// file names the executable and the key's variable, Codex reads its model
// provider from $CODEX_HOME, and the timeline shows the turn's answer.
func TestRunOnCodex(t *testing.T) {
	cli := codexCLI(t)
	srv := providertest.NewResponses(t)
	srv.On(providertest.LastUserContains("say hello"), providertest.TextAnswer("hello through codex"))
	home := t.TempDir()
	codexHome := filepath.Join(home, "codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(providertest.CodexConfig(srv)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgDir := filepath.Join(home, ".config", "vigil")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := "providers:\n  cx:\n    kind: codex\n    path: " + cli + "\n    api_key_env: FAKE_OPENAI_KEY\n"
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// Codex's process reads its home and key from vigil's environment; a
	// HOME of the test's own keeps the machine's shell profile out of the
	// commands Codex runs.
	t.Setenv("HOME", home)
	t.Setenv("CODEX_HOME", codexHome)
	t.Setenv("FAKE_OPENAI_KEY", "sk-test-codex-run")
	vars := map[string]string{"HOME": home, "FAKE_OPENAI_KEY": "sk-test-codex-run", "CODEX_HOME": codexHome}
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code := runMain(context.Background(), e, []string{"run", "--data", t.TempDir(), "--provider", "cx", "say hello"})
	if code != 0 {
		t.Fatalf("vigil run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "hello through codex") {
		t.Fatalf("the timeline lacks the answer:\n%s\n%s", out.String(), errb.String())
	}
	if strings.Contains(out.String()+errb.String(), "sk-test-codex-run") {
		t.Fatalf("the key was printed:\n%s\n%s", out.String(), errb.String())
	}
	if n := len(srv.Requests()); n == 0 {
		t.Fatal("Codex sent the model server nothing")
	}
}
