package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A saved rule applies to its project and the directories below, not to
// others; saving twice keeps one copy; the file is private.
func TestProjectRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil", "project-rules.yaml")
	if err := SaveProjectRule(path, "/src/app", "Bash(go test ./...)"); err != nil {
		t.Fatal(err)
	}
	if err := SaveProjectRule(path, "/src/app/", "Bash(go test ./...)"); err != nil {
		t.Fatal(err)
	}
	if err := SaveProjectRule(path, "/src/other", "Bash(make)"); err != nil {
		t.Fatal(err)
	}
	if err := SaveProjectRule(path, "relative", "Bash(make)"); err == nil {
		t.Fatal("a relative project directory was accepted")
	}
	r, err := LoadProjectRules(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.For("/src/app/cmd"); !slices.Equal(got, []string{"Bash(go test ./...)"}) {
		t.Errorf("rules for /src/app/cmd: %q", got)
	}
	if got := r.For("/src/application"); len(got) != 0 {
		t.Errorf("rules for a sibling with the same prefix: %q", got)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("rules file mode: %v %v", fi.Mode(), err)
	}
}
