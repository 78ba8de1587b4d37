// Package permission decides whether a tool call may run, from a session's
// permission mode and its allow and deny rules. It is pure: no I/O.
//
// A rule names a tool and optionally a pattern over the call's subject:
// "Bash(git *)" matches Bash calls whose command starts with "git ",
// "Write(src/*)" matches writes under src/, "Read" matches every Read. In a
// pattern, * matches any run of characters (slashes and spaces included).
//
// # Paths
//
// A relative path pattern is anchored at the session's first root (its
// working directory): "Write(src/*)" covers <cwd>/src/... and nothing in
// another root. A pattern that starts with / matches absolute paths. Decide
// sees the path as the model wrote it; DecideIn also knows the roots and
// matches an absolute path inside the first root by its relative form, and
// a path that climbs out with ".." and back in by where it lands. Neither
// can see symlinks: the file tools (package tool) check the rules again,
// with DecidePath and Denied, against the path once it is resolved, and
// that check is the one that holds.
//
// # How rules are read
//
// Allow rules are read narrowly: a Bash pattern does not allow a command
// that chains, substitutes or redirects (;, &, |, $, backquotes, <, >,
// parentheses, braces, newlines) unless the rule spells the whole command,
// and a relative path pattern allows only a path under the working
// directory, matched by its name relative to it (so "Write(*)" is not
// "write anywhere"), an absolute pattern only an absolute path, and
// neither a name that climbs out with "..".
//
// Deny rules are read widely, as a first filter: a Bash deny rule matches
// any command a line chains, also once quotes, backslashes, a directory
// (/bin/rm), variable assignments and launchers (command, env, exec, sudo,
// xargs, nice, nohup, timeout, sh -c, bash -c, eval) are taken off it; a
// path deny rule matches the path by every name it has (as written,
// cleaned, absolute, relative to each root) and every directory above it,
// and a deny rule on Read also covers Glob and Grep, one on Write or Edit
// every tool that edits files.
//
// # Patterns are not a boundary
//
// No pattern can say what a command will do. An allow rule such as
// Bash(git *) grants every git subcommand, and git runs other programs on
// request: "git -c alias.x='!cmd' x", hooks, and configuration such as
// core.pager, core.sshCommand or core.fsmonitor. Bash(git *) is therefore
// as good as allowing any command; so are rules for env, xargs, find
// (-exec), shells, interpreters (python, node, ...) and build tools (make,
// npm, go, cargo, ...), which run code the agent can write. A deny rule can
// be dodged the same way (a copy of rm under another name, X=rm; $X,
// python -c ...). The kernel sandbox that runs commands is the boundary;
// rules only decide what is asked and what is refused early. Grants says
// what one rule really grants.
package permission

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/vigilrun/vigil/internal/tool/toolinfo"
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

// alwaysAllowed reports whether a tool runs without asking in every mode
// (a deny rule aside): it only reads, or acts only on vigil's own state.
func alwaysAllowed(tool string) bool {
	t := toolinfo.Of(tool)
	return t.ReadOnly || t.Orchestration
}

// acceptsEdit reports whether mode accept-edits allows the tool: it is one
// of vigil's own file editors (Write, Edit), which vigil's workspace
// confines. A provider process's own editors ask.
func acceptsEdit(tool string) bool {
	t := toolinfo.Of(tool)
	return t.Edits() && t.Offered
}

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
//
// Decide matches a path as written; DecideIn, given the session's roots,
// matches it by its names under them too.
func Decide(mode string, allow, deny []string, tool string, input json.RawMessage) (Decision, string) {
	return DecideIn(nil, mode, allow, deny, tool, input)
}

// DecideIn is Decide for a session whose roots are roots (absolute; the
// first is the working directory, to which relative rules are anchored).
// A file tool's path is matched lexically, with no I/O, by every name it
// has under the roots: an absolute path inside the first root also by its
// relative form, and a relative one also by its absolute form (see Path
// and PathIn). With no roots it is Decide.
func DecideIn(roots []string, mode string, allow, deny []string, tool string, input json.RawMessage) (Decision, string) {
	var v Verdict
	if p, ok := pathOf(tool, input); ok {
		v = DecidePath(mode, allow, deny, tool, PathIn(roots, p))
	} else {
		s := Subject(tool, input)
		v = decide(mode, allow, deny, tool,
			func(r string) bool { return matchDeny(r, tool, s) },
			func(r string) bool { return matchAllow(r, tool, s) })
	}
	if v.Decision == Deny && v.Rule == "" {
		v.Reason = fmt.Sprintf("no allow rule matches %s (mode auto)", Describe(tool, input))
	}
	return v.Decision, v.Reason
}

// Verdict is a decision with what made it.
type Verdict struct {
	Decision Decision
	// Reason says why, for a person.
	Reason string
	// Rule is the allow or deny rule that decided; empty when the tool's
	// kind or the mode did.
	Rule string
}

// DecidePath is Decide for a call of the file tool named tool whose path
// has the names p (see Path): a deny rule that covers any name denies, an
// allow rule for tool that matches Rel or an absolute name allows.
func DecidePath(mode string, allow, deny []string, tool string, p Path) Verdict {
	return decide(mode, allow, deny, tool,
		func(r string) bool { return denyCoversPath(r, tool, p) },
		func(r string) bool { return allowCoversPath(r, tool, p) })
}

// Denied returns the first deny rule that covers a call of the file tool
// named tool on the path p.
func Denied(deny []string, tool string, p Path) (rule string, ok bool) {
	for _, r := range deny {
		if denyCoversPath(r, tool, p) {
			return r, true
		}
	}
	return "", false
}

// decide applies the order Decide documents, with the given matchers.
func decide(mode string, allow, deny []string, tool string, denies, allows func(rule string) bool) Verdict {
	for _, r := range deny {
		if denies(r) {
			return Verdict{Deny, fmt.Sprintf("denied by rule %q", r), r}
		}
	}
	if alwaysAllowed(tool) {
		return Verdict{Allow, "read-only or orchestration tool", ""}
	}
	if mode == ModeBypass {
		return Verdict{Allow, "mode bypass", ""}
	}
	for _, r := range allow {
		if allows(r) {
			return Verdict{Allow, fmt.Sprintf("allowed by rule %q", r), r}
		}
	}
	switch mode {
	case ModeAcceptEdits:
		if acceptsEdit(tool) {
			return Verdict{Allow, "mode accept-edits", ""}
		}
		return Verdict{Ask, "mode accept-edits asks before " + tool, ""}
	case ModeAuto:
		return Verdict{Deny, "no allow rule matches (mode auto)", ""}
	default:
		return Verdict{Ask, "mode ask", ""}
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

// names reports whether a rule's tool name covers tool: the same name, or,
// for an MCP server's tools (mcp__<server>__<tool>), the server's name
// alone (mcp__github) or with __* (mcp__github__*), as Claude Code reads
// them.
func names(name, tool string) bool {
	if name == tool {
		return true
	}
	if !strings.HasPrefix(name, "mcp__") {
		return false
	}
	server := strings.TrimSuffix(name, "__*")
	if strings.Contains(strings.TrimPrefix(server, "mcp__"), "__") {
		return false // a tool's name, not a server's
	}
	return strings.HasPrefix(tool, server+"__")
}

// Match reports whether rule matches a call of tool with subject.
func Match(rule, tool, subject string) bool {
	name, pattern, ok := parse(rule)
	if !ok || !names(name, tool) {
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
	if !ok || !names(name, tool) {
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
// the rule matches it or any command it chains, as written or unwrapped
// (see bashDenies); a subject of a file tool that is not a path (Glob's or
// Grep's pattern) is denied when the rule matches it as written or
// cleaned. Paths are matched by denyCoversPath.
func matchDeny(rule, tool, subject string) bool {
	name, pattern, ok := parse(rule)
	if !ok || !names(name, tool) {
		return false
	}
	if pattern == "" {
		return true
	}
	switch {
	case tool == "Bash":
		return bashDenies(pattern, subject)
	case isPathTool(tool):
		return glob(pattern, subject) || glob(pattern, cleanPath(subject))
	}
	return glob(pattern, subject)
}

// isPathTool reports whether the tool names a file, whose path rules match
// as a path.
func isPathTool(tool string) bool { return toolinfo.Of(tool).FileTool() }

// cleanPath cleans a slash-separated path.
func cleanPath(p string) string { return path.Clean(strings.ReplaceAll(p, "\\", "/")) }

func parse(rule string) (name, pattern string, ok bool) {
	rule = strings.TrimSpace(rule)
	i := strings.IndexByte(rule, '(')
	if i < 0 {
		if server, ok := strings.CutSuffix(rule, "__*"); ok && strings.HasPrefix(server, "mcp__") && !strings.ContainsAny(server, ")*") {
			return rule, "", true // every tool of an MCP server
		}
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
