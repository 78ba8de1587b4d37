package ccwire

import (
	"fmt"
	"strconv"
	"strings"
)

// Args are the command-line arguments of a Claude Code process in
// stream-json mode, as the Agent SDK passes them.
type Args struct {
	// Verbose is --verbose; the SDK always passes it, and the CLI refuses
	// stream-json output without it.
	Verbose bool
	// Model is --model: the model of the main agent.
	Model string
	// FallbackModel is --fallback-model; accepted and not used.
	FallbackModel string
	// MaxTurns is --max-turns: the most model rounds per turn; 0 is no
	// bound.
	MaxTurns int
	// Resume is --resume: the session to continue.
	Resume string
	// PermissionMode is --permission-mode, in Claude Code's words:
	// default, acceptEdits, bypassPermissions, dontAsk (plan and auto are
	// refused).
	PermissionMode string
	// PermissionPromptTool is --permission-prompt-tool; only "stdio" (ask
	// the SDK with can_use_tool) is supported.
	PermissionPromptTool string
	// MCPConfig are the --mcp-config values (JSON or files).
	MCPConfig []string
	// AllowedTools and DisallowedTools are --allowedTools and
	// --disallowedTools: permission rules such as "Bash(go test *)".
	AllowedTools, DisallowedTools []string
	// SystemPrompt and AppendSystemPrompt are --system-prompt and
	// --append-system-prompt.
	SystemPrompt, AppendSystemPrompt string
	// Cwd is --cwd; the SDK sets the process's working directory instead,
	// so it is usually empty.
	Cwd string
	// SkipPermissions is --dangerously-skip-permissions (or
	// --allow-dangerously-skip-permissions with mode bypassPermissions).
	SkipPermissions bool
	// Print is -p/--print, which the CLI's own tests pass; stream-json
	// input implies it.
	Print bool
	// IncludePartial is --include-partial-messages: stream_event frames
	// for the main agent's messages as well.
	IncludePartial bool
	// Setting sources and settings (--setting-sources, --settings) are
	// accepted and ignored: vigil reads its own configuration.
	SettingSources, Settings string
	// AwaitInitialize is --await-initialize: the SDK's initialize request
	// carries settings read before the first prompt (its mcpServers).
	AwaitInitialize bool
	// StrictMCPConfig is --strict-mcp-config: only the MCP servers given
	// are used, which is all vigil ever uses.
	StrictMCPConfig bool
}

// IsStreamJSON reports whether args ask for Claude Code's stream-json
// protocol: --output-format stream-json together with --input-format
// stream-json, in either the "--flag value" or the "--flag=value" form.
func IsStreamJSON(args []string) bool {
	out, in := false, false
	for i := 0; i < len(args); i++ {
		name, val, ok := strings.Cut(args[i], "=")
		if !ok && i+1 < len(args) {
			val = args[i+1]
		}
		switch name {
		case "--output-format":
			out = val == "stream-json"
		case "--input-format":
			in = val == "stream-json"
		}
	}
	return out && in
}

// flagKind says whether a flag takes a value.
type flagKind int

const (
	boolFlag flagKind = iota
	valueFlag
)

// known are the flags accepted, by name; each sets a field of Args.
var known = map[string]flagKind{
	"--output-format": valueFlag, "--input-format": valueFlag, "--verbose": boolFlag,
	"--model": valueFlag, "--fallback-model": valueFlag, "--max-turns": valueFlag, "--resume": valueFlag,
	"--permission-mode": valueFlag, "--permission-prompt-tool": valueFlag, "--mcp-config": valueFlag,
	"--allowedTools": valueFlag, "--allowed-tools": valueFlag, "--disallowedTools": valueFlag, "--disallowed-tools": valueFlag,
	"--system-prompt": valueFlag, "--append-system-prompt": valueFlag, "--cwd": valueFlag,
	"--dangerously-skip-permissions": boolFlag, "--allow-dangerously-skip-permissions": boolFlag,
	"-p": boolFlag, "--print": boolFlag, "--include-partial-messages": boolFlag,
	"--setting-sources": valueFlag, "--settings": valueFlag,
	"--await-initialize": boolFlag, "--strict-mcp-config": boolFlag,
}

// ParseArgs reads the arguments of a stream-json process. A flag this
// package does not implement is refused with an error that names it, so
// that a program relying on it learns so at once instead of getting a
// different behaviour.
func ParseArgs(args []string) (*Args, error) {
	a := &Args{}
	var outFmt, inFmt string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		kind, ok := known[name]
		if !ok {
			if strings.HasPrefix(arg, "-") {
				return nil, fmt.Errorf("flag %s is not supported by vigil's Claude Code protocol", name)
			}
			return nil, fmt.Errorf("unexpected argument %q: in stream-json mode prompts come on stdin", arg)
		}
		if kind == valueFlag && !hasVal {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag %s needs a value", name)
			}
			i++
			val = args[i]
		}
		if kind == boolFlag && hasVal {
			return nil, fmt.Errorf("flag %s takes no value", name)
		}
		switch name {
		case "--output-format":
			outFmt = val
		case "--input-format":
			inFmt = val
		case "--verbose":
			a.Verbose = true
		case "--model":
			a.Model = val
		case "--fallback-model":
			a.FallbackModel = val
		case "--max-turns":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--max-turns %q: want a number of turns", val)
			}
			a.MaxTurns = n
		case "--resume":
			a.Resume = val
		case "--permission-mode":
			if _, err := VigilMode(val); err != nil {
				return nil, err
			}
			a.PermissionMode = val
		case "--permission-prompt-tool":
			if val != "stdio" {
				return nil, fmt.Errorf("--permission-prompt-tool %q: only stdio (can_use_tool control requests) is supported", val)
			}
			a.PermissionPromptTool = val
		case "--mcp-config":
			a.MCPConfig = append(a.MCPConfig, val)
		case "--allowedTools", "--allowed-tools":
			a.AllowedTools = append(a.AllowedTools, splitRules(val)...)
		case "--disallowedTools", "--disallowed-tools":
			a.DisallowedTools = append(a.DisallowedTools, splitRules(val)...)
		case "--system-prompt":
			a.SystemPrompt = val
		case "--append-system-prompt":
			a.AppendSystemPrompt = val
		case "--cwd":
			a.Cwd = val
		case "--dangerously-skip-permissions", "--allow-dangerously-skip-permissions":
			a.SkipPermissions = true
		case "-p", "--print":
			a.Print = true
		case "--include-partial-messages":
			a.IncludePartial = true
		case "--setting-sources":
			a.SettingSources = val
		case "--settings":
			a.Settings = val
		case "--await-initialize":
			a.AwaitInitialize = true
		case "--strict-mcp-config":
			a.StrictMCPConfig = true
		}
	}
	if outFmt != "stream-json" || inFmt != "stream-json" {
		return nil, fmt.Errorf("want --output-format stream-json --input-format stream-json, got output %q, input %q", outFmt, inFmt)
	}
	if !a.Verbose {
		return nil, fmt.Errorf("--output-format stream-json needs --verbose, as with Claude Code")
	}
	return a, nil
}

// splitRules splits a tool-rule list the way the CLI does: by commas or
// spaces outside parentheses ("Bash(git log *),Read" is two rules).
func splitRules(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case (r == ',' || r == ' ') && depth == 0:
			if t := strings.TrimSpace(s[start:i]); t != "" {
				out = append(out, t)
			}
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, t)
	}
	return out
}

// VigilMode translates a Claude Code permission mode into vigil's:
// default asks (through can_use_tool), acceptEdits accepts edits,
// bypassPermissions bypasses, dontAsk denies what the rules do not allow
// (vigil's auto). plan and auto have no vigil counterpart and are refused.
func VigilMode(mode string) (string, error) {
	switch mode {
	case "", "default":
		return "ask", nil
	case "acceptEdits":
		return "accept-edits", nil
	case "bypassPermissions":
		return "bypass", nil
	case "dontAsk":
		return "auto", nil
	}
	return "", fmt.Errorf("permission mode %q is not supported by vigil (want default, acceptEdits, bypassPermissions or dontAsk)", mode)
}
