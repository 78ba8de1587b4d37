package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func envOf(m map[string]string) Env { return func(k string) string { return m[k] } }

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLayersAndEnvironment(t *testing.T) {
	home, proj := t.TempDir(), t.TempDir()
	write(t, filepath.Join(home, ".config/vigil/config.yaml"), `
provider: anthropic
model: big
subagent_model: small
allow: ["Bash(go test *)"]
providers:
  anthropic: {model: m1}
  ollama: {kind: openai, base_url: "http://localhost:11434/v1", model: qwen}
`)
	write(t, filepath.Join(proj, ".vigil/config.yaml"), "model: project-model\ndeny: [\"Bash(rm *)\"]\n")
	env := envOf(map[string]string{"HOME": home, "ANTHROPIC_API_KEY": "sk-secret-123", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"})
	c, err := Load(env, Files(env, proj)...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "project-model" || c.SubagentModel != "small" || c.Provider != "anthropic" || len(c.Allow) != 1 || len(c.Deny) != 1 {
		t.Fatalf("merged config: %+v", c)
	}
	if c.Providers["anthropic"].BaseURL != "http://127.0.0.1:9/" || !c.HasKey("anthropic") {
		t.Fatalf("environment not applied: %+v", c.Providers["anthropic"])
	}
	if len(c.Sources) != 2 {
		t.Fatalf("sources = %v", c.Sources)
	}
	for _, name := range []string{"anthropic", "ollama"} {
		p, err := c.Build(name, nil)
		if err != nil || p == nil {
			t.Fatalf("build %s: %v", name, err)
		}
	}
}

func TestDefaultsAndErrors(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.DefaultProvider(); got != "" {
		t.Fatalf("default without keys = %q", got)
	}
	_, err = c.Build("anthropic", nil)
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Fatalf("missing key error = %v", err)
	}
	c, _ = Load(envOf(map[string]string{"OPENAI_API_KEY": "k"}))
	if got := c.DefaultProvider(); got != "openai" {
		t.Fatalf("default with an OpenAI key = %q", got)
	}
	dir := t.TempDir()
	bad := File{Path: filepath.Join(dir, "c.yaml")}
	write(t, bad.Path, "providers: {x: {kind: nope}}")
	if _, err := Load(envOf(nil), bad); err == nil {
		t.Fatal("unknown kind accepted")
	}
	write(t, bad.Path, "modle: typo")
	if _, err := Load(envOf(nil), bad); err == nil {
		t.Fatal("unknown field accepted")
	}
	write(t, bad.Path, "")
	if _, err := Load(envOf(nil), bad); err != nil {
		t.Fatalf("empty file: %v", err)
	}
}

func TestKeyNeverInErrors(t *testing.T) {
	c, _ := Load(envOf(map[string]string{"ANTHROPIC_API_KEY": "sk-very-secret"}))
	_, err := c.Build("nope", nil)
	if err == nil || strings.Contains(err.Error(), "sk-very-secret") {
		t.Fatalf("err = %v", err)
	}
}

// A project's config file (a repository someone cloned) cannot choose the
// program vigil runs, where the API key goes, or looser permissions.
func TestProjectFileIsNotTrusted(t *testing.T) {
	dir := t.TempDir()
	proj := File{Path: filepath.Join(dir, ".vigil/config.yaml"), Project: true}
	for _, body := range []string{
		"providers: {cc: {kind: claude-code, path: ./evil.sh}}",
		"providers: {anthropic: {base_url: \"http://127.0.0.1:1\"}}",
		"providers: {anthropic: {api_key_env: HOME}}",
		"permission_mode: bypass",
		"allow: [\"Bash\"]",
	} {
		write(t, proj.Path, body)
		_, err := Load(envOf(map[string]string{"ANTHROPIC_API_KEY": "k"}), proj)
		if err == nil || !strings.Contains(err.Error(), "a project file may set only") {
			t.Errorf("project file %q accepted: %v", body, err)
		}
	}
	write(t, proj.Path, "model: m\nsubagent_model: s\nprovider: anthropic\ndeny: [\"Bash(curl *)\"]")
	c, err := Load(envOf(nil), proj)
	if err != nil || c.Model != "m" || len(c.Deny) != 1 {
		t.Fatalf("allowed project settings: %+v %v", c, err)
	}
}
