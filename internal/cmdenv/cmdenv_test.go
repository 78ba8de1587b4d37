package cmdenv

import (
	"slices"
	"strings"
	"testing"
)

// The attack's environment: vigil's database URL with a password and the
// variables whose names say they hold secrets. None reaches a command.
func TestBuildIsAnAllowlist(t *testing.T) {
	environ := []string{
		"PATH=/bin", "HOME=/h", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=u", "SHELL=/bin/bash", "TMPDIR=/tmp/x",
		"VIGIL_DB=postgres://vigil:password@db/vigil", "VIGIL_TOKEN=t", "DATABASE_URL=postgres://x:y@z/w", "PASSWORD=p",
		"SECRET=s", "MY_PASSWD=m", "SERVICE_CREDENTIALS=c", "ANTHROPIC_API_KEY=sk", "OPENAI_API_KEY=o", "GITHUB_TOKEN=g",
		"GOPATH=/go", "AWS_SECRET_ACCESS_KEY=a", "NOT_AN_ENTRY",
	}
	got := Build(environ, Spec{Names: []string{"GOPATH", "VIGIL_DB"}})
	want := []string{"PATH=/bin", "HOME=/h", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=u", "SHELL=/bin/bash", "TMPDIR=/tmp/x", "GOPATH=/go"}
	if !slices.Equal(got, want) {
		t.Fatalf("Build =\n%v\nwant\n%v", got, want)
	}
	for _, kv := range got {
		if strings.Contains(kv, "password") || strings.Contains(kv, "sk") && strings.HasPrefix(kv, "ANTHROPIC") {
			t.Fatalf("a secret passed: %s", kv)
		}
	}
}

func TestBuildPrefixesAndSet(t *testing.T) {
	environ := []string{"PATH=/bin", "ANTHROPIC_BASE_URL=http://x", "CLAUDE_CONFIG_DIR=/c", "CLAUDE_CODE_ENTRYPOINT=cli", "TMPDIR=/tmp", "VIGIL_SESSION=old"}
	got := Build(environ, Spec{Prefixes: []string{"ANTHROPIC_", "CLAUDE_"}, Drop: []string{"CLAUDE_CODE_ENTRYPOINT"}, Set: []string{"TMPDIR=/private", "VIGIL_SESSION=s1"}})
	want := []string{"PATH=/bin", "ANTHROPIC_BASE_URL=http://x", "CLAUDE_CONFIG_DIR=/c", "TMPDIR=/private", "VIGIL_SESSION=s1"}
	if !slices.Equal(got, want) {
		t.Fatalf("Build = %v, want %v", got, want)
	}
}

func TestCheck(t *testing.T) {
	if err := Check([]string{"GOPATH", "CARGO_HOME"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"VIGIL_DB", "A=B", ""} {
		if Check([]string{bad}) == nil {
			t.Errorf("Check(%q) passed", bad)
		}
	}
}
