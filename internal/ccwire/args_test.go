package ccwire

import (
	"slices"
	"strings"
	"testing"
)

// sdkArgv is the argv the Agent SDK 0.3.334 passed for query() with
// model, maxTurns, canUseTool, allowedTools, disallowedTools and
// permissionMode default (recorded, see the package documentation).
var sdkArgv = []string{
	"--output-format", "stream-json", "--verbose", "--input-format", "stream-json",
	"--max-turns=5", "--model=claude-sonnet-4-5", "--permission-prompt-tool=stdio",
	"--allowedTools=Read", "--disallowedTools=WebFetch", "--permission-mode=default",
}

func TestParseSDKArgs(t *testing.T) {
	if !IsStreamJSON(sdkArgv) {
		t.Fatal("the SDK's argv is not recognised as stream-json")
	}
	a, err := ParseArgs(sdkArgv)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Verbose || a.Model != "claude-sonnet-4-5" || a.MaxTurns != 5 || a.PermissionPromptTool != "stdio" || a.PermissionMode != "default" {
		t.Fatalf("parsed %+v", a)
	}
	if !slices.Equal(a.AllowedTools, []string{"Read"}) || !slices.Equal(a.DisallowedTools, []string{"WebFetch"}) {
		t.Fatalf("rules: allow %q deny %q", a.AllowedTools, a.DisallowedTools)
	}
}

func TestIsStreamJSON(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--output-format=stream-json", "--input-format=stream-json"}, true},
		{[]string{"--output-format", "stream-json"}, false},
		{[]string{"run", "--output-format", "stream-json", "x"}, false},
		{[]string{"--input-format", "stream-json", "--output-format", "json"}, false},
		{nil, false},
	} {
		if got := IsStreamJSON(c.args); got != c.want {
			t.Errorf("IsStreamJSON(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestParseArgsRefuses(t *testing.T) {
	base := []string{"--output-format", "stream-json", "--input-format", "stream-json", "--verbose"}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--fork-session"}, "--fork-session is not supported"},
		{[]string{"prompt text"}, "prompts come on stdin"},
		{[]string{"--permission-mode", "plan"}, `permission mode "plan"`},
		{[]string{"--permission-prompt-tool", "mcp__x__y"}, "only stdio"},
		{[]string{"--max-turns", "many"}, "--max-turns"},
		{[]string{"--model"}, "needs a value"},
		{[]string{"--verbose=yes"}, "takes no value"},
	} {
		_, err := ParseArgs(append(slices.Clone(base), c.extra...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.extra, err, c.want)
		}
	}
	if _, err := ParseArgs([]string{"--output-format", "stream-json", "--input-format", "stream-json"}); err == nil || !strings.Contains(err.Error(), "--verbose") {
		t.Errorf("without --verbose: %v", err)
	}
}

func TestSplitRules(t *testing.T) {
	got := splitRules("Bash(git log *),Read Edit(src/a, b)")
	want := []string{"Bash(git log *)", "Read", "Edit(src/a, b)"}
	if !slices.Equal(got, want) {
		t.Fatalf("splitRules = %q, want %q", got, want)
	}
}

func TestVigilMode(t *testing.T) {
	for in, want := range map[string]string{"": "ask", "default": "ask", "acceptEdits": "accept-edits", "bypassPermissions": "bypass", "dontAsk": "auto"} {
		if got, err := VigilMode(in); err != nil || got != want {
			t.Errorf("VigilMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := VigilMode("auto"); err == nil {
		t.Error("auto (the classifier) is accepted")
	}
}
