// Package permission decides whether a tool call may run, from a session's
// permission mode and its allow and deny rules. It is pure: no I/O.
//
// A rule names a tool and optionally a pattern over the call's subject:
// "Bash(git *)" matches Bash calls whose command starts with "git ",
// "Write(src/*)" matches writes under src/, "Read" matches every Read. In a
// pattern, * matches any run of characters (slashes and spaces included).
//
// Allow rules are read narrowly: a Bash pattern does not allow a command
// that chains, substitutes or redirects (;, &, |, $, backquotes, <, >,
// parentheses, braces, newlines) unless the rule spells the whole command,
// and a path pattern does not allow a path that climbs out with "..".
// Deny rules are read widely: a Bash deny rule matches any command a line
// chains, and a path is matched as written and cleaned.
package permission

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Decision is the verdict on a tool call.
type Decision string

// Decisions.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Ask   Decision = "ask"
)

// Modes. See Decide.
const (
	ModeAsk         = "ask"
	ModeAcceptEdits = "accept-edits"
	ModeAuto        = "auto"
	ModeBypass      = "bypass"
)

// ValidMode reports whether m names a permission mode.
func ValidMode(m string) bool {
	switch m {
	case ModeAsk, ModeAcceptEdits, ModeAuto, ModeBypass:
		return true
	}
	return false
}

// alwaysAllowed are tools that read, or only act on vigil's own state.
var alwaysAllowed = map[string]bool{
	"Read": true, "Glob": true, "Grep": true, "TaskOutput": true, "ListAgents": true,
	"Agent": true, "SendMessage": true, "TaskStop": true, "ScheduleWakeup": true,
}

var edits = map[string]bool{"Write": true, "Edit": true}

// Decide returns the decision for calling tool with input under mode and the
// rules, and a reason a person can read.
//
//   - A matching deny rule denies, in every mode.
//   - Read-only tools and vigil's orchestration tools are allowed.
//   - bypass allows everything else.
//   - A matching allow rule allows.
//   - accept-edits allows Write and Edit and asks for the rest.
//   - ask asks.
//   - auto denies what no rule allows: nobody is asked.
func Decide(mode string, allow, deny []string, tool string, input json.RawMessage) (Decision, string) {
	subject := Subject(tool, input)
	for _, r := range deny {
		if matchDeny(r, tool, subject) {
			return Deny, fmt.Sprintf("denied by rule %q", r)
		}
	}
	if alwaysAllowed[tool] {
		return Allow, "read-only or orchestration tool"
	}
	if mode == ModeBypass {
		return Allow, "mode bypass"
	}
	for _, r := range allow {
		if matchAllow(r, tool, subject) {
			return Allow, fmt.Sprintf("allowed by rule %q", r)
		}
	}
	switch mode {
	case ModeAcceptEdits:
		if edits[tool] {
			return Allow, "mode accept-edits"
		}
		return Ask, "mode accept-edits asks before " + tool
	case ModeAuto:
		return Deny, fmt.Sprintf("no allow rule matches %s (mode auto)", Describe(tool, input))
	default:
		return Ask, "mode ask"
	}
}

// Subject returns the part of a call's input that rules match: the command
// of a Bash call, the path of a file tool, the pattern of a search.
func Subject(tool string, input json.RawMessage) string {
	var in struct {
		Command      string `json:"command"`
		FilePath     string `json:"file_path"`
		NotebookPath string `json:"notebook_path"`
		Path         string `json:"path"`
		Pattern      string `json:"pattern"`
	}
	_ = json.Unmarshal(input, &in)
	switch {
	case in.Command != "":
		return in.Command
	case in.FilePath != "":
		return in.FilePath
	case in.NotebookPath != "":
		return in.NotebookPath
	case in.Path != "":
		return in.Path
	}
	return in.Pattern
}

// Describe renders a call as a rule would name it, e.g. Bash(git status).
func Describe(tool string, input json.RawMessage) string {
	s := Subject(tool, input)
	if s == "" {
		return tool
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return tool + "(" + s + ")"
}

// RuleFor returns the narrowest allow rule that allows this call again:
// the tool and its whole subject as rules match it (the trimmed command,
// the cleaned path), e.g. "Bash(go test ./...)": an allow rule that spells
// the whole command allows exactly it. A call with no input gets the bare
// tool. RuleFor refuses what a rule cannot spell exactly: a call whose
// input has no command or path (a URL, an MCP tool's arguments: the bare
// tool would allow every call of it), and a subject with *, a parenthesis
// or a line break.
func RuleFor(tool string, input json.RawMessage) (string, error) {
	s := Subject(tool, input)
	if s == "" {
		var fields map[string]json.RawMessage
		if json.Unmarshal(input, &fields) == nil && len(fields) == 0 || len(strings.TrimSpace(string(input))) == 0 {
			return tool, nil
		}
		return "", fmt.Errorf("a rule names only a command or a path, and this %s call has neither: the rule would allow every %s call", tool, tool)
	}
	switch {
	case tool == "Bash":
		s = strings.TrimSpace(s)
	case isPathTool(tool):
		s = cleanPath(s)
		if s == ".." || strings.HasPrefix(s, "../") {
			return "", fmt.Errorf("the path %q climbs out of the working directory", s)
		}
	}
	if strings.ContainsAny(s, "*()\n\r") {
		return "", fmt.Errorf("%q has a character (* ( ) or a line break) a rule cannot spell exactly", s)
	}
	rule := tool + "(" + s + ")"
	if !Valid(rule) {
		return "", fmt.Errorf("%q is not a valid rule", rule)
	}
	return rule, nil
}

// Valid reports whether rule is well formed.
func Valid(rule string) bool {
	name, _, ok := parse(rule)
	return ok && name != ""
}

// Match reports whether rule matches a call of tool with subject.
func Match(rule, tool, subject string) bool {
	name, pattern, ok := parse(rule)
	if !ok || name != tool {
		return false
	}
	if pattern == "" {
		return true
	}
	return glob(pattern, subject)
}

// shellMeta are the characters that chain, substitute or redirect in a
// shell command line.
const shellMeta = ";&|`$<>(){}\n"

// matchAllow is Match made safe for allowing: a Bash pattern never allows
// a command that chains, substitutes or redirects (the pattern would
// vouch for more than it names) unless the rule spells the whole command;
// a path pattern never allows a path that climbs out with "..".
func matchAllow(rule, tool, subject string) bool {
	name, pattern, ok := parse(rule)
	if !ok || name != tool {
		return false
	}
	if pattern == "" {
		return true
	}
	switch {
	case tool == "Bash":
		cmd := strings.TrimSpace(subject)
		if strings.ContainsAny(cmd, shellMeta) {
			return pattern == cmd
		}
		return glob(pattern, cmd)
	case isPathTool(tool):
		p := cleanPath(subject)
		if p == ".." || strings.HasPrefix(p, "../") {
			return false
		}
		return glob(pattern, p)
	}
	return glob(pattern, subject)
}

// matchDeny is Match made hard to slip past: a Bash command is denied when
// the rule matches it or any command it chains; a path is denied when the
// rule matches it as written or cleaned.
func matchDeny(rule, tool, subject string) bool {
	name, pattern, ok := parse(rule)
	if !ok || name != tool {
		return false
	}
	if pattern == "" {
		return true
	}
	switch {
	case tool == "Bash":
		cmd := strings.TrimSpace(subject)
		if glob(pattern, cmd) {
			return true
		}
		for _, part := range strings.FieldsFunc(cmd, func(r rune) bool { return strings.ContainsRune(shellMeta, r) }) {
			if glob(pattern, strings.TrimSpace(part)) {
				return true
			}
		}
		return false
	case isPathTool(tool):
		return glob(pattern, subject) || glob(pattern, cleanPath(subject))
	}
	return glob(pattern, subject)
}

func isPathTool(tool string) bool {
	switch tool {
	case "Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Glob", "Grep":
		return true
	}
	return false
}

// cleanPath cleans a slash-separated path.
func cleanPath(p string) string { return path.Clean(strings.ReplaceAll(p, "\\", "/")) }

func parse(rule string) (name, pattern string, ok bool) {
	rule = strings.TrimSpace(rule)
	i := strings.IndexByte(rule, '(')
	if i < 0 {
		return rule, "", !strings.ContainsAny(rule, ")*")
	}
	if !strings.HasSuffix(rule, ")") {
		return "", "", false
	}
	return strings.TrimSpace(rule[:i]), rule[i+1 : len(rule)-1], true
}

// glob matches s against a pattern in which * matches any run of characters.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}
