package tui

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/vigilrun/vigil/server"
)

// slashCommand is one of the / commands.
type slashCommand struct {
	name string
	args string
	help string
}

// slashCommands are the / commands, in the order /help lists them.
var slashCommands = []slashCommand{
	{"/help", "", "list the commands and keys"},
	{"/hold", "[reason]", "hold the session's queue of user prompts"},
	{"/resume", "", "release the hold"},
	{"/stop", "TASK", "stop a task (a subagent or a shell command)"},
	{"/cancel", "[AGENT]", "cancel an agent's round in flight (Esc: main's)"},
	{"/retry", "AGENT", "run a blocked or backing-off agent now"},
	{"/approve", "ID", "allow a permission request once"},
	{"/always", "ID", "allow a request, and the same call from now on"},
	{"/deny", "ID", "deny a permission request"},
	{"/sessions", "", "list the server's sessions"},
	{"/session", "ID", "open an earlier session"},
	{"/new", "", "start a new session with the next prompt"},
	{"/expand", "", "unfold tool calls: diffs, outputs (Ctrl+O)"},
	{"/side", "", "show or hide the side pane (Ctrl+T)"},
	{"/quit", "", "leave (the session goes on)"},
}

// completions are the commands whose names start with what the input
// holds, while it holds a / command's name.
func completions(input string) []slashCommand {
	if !strings.HasPrefix(input, "/") || strings.Contains(input, " ") {
		return nil
	}
	var out []slashCommand
	for _, c := range slashCommands {
		if strings.HasPrefix(c.name, input) {
			out = append(out, c)
		}
	}
	return out
}

// completeInput is input completed as far as the commands it may name
// agree, with a space after a whole name.
func completeInput(input string) string {
	var names []string
	for _, c := range completions(input) {
		names = append(names, c.name)
	}
	return completeWord(input, names)
}

// completeWord is word completed as far as the options that start with it
// agree, with a space after a whole option.
func completeWord(word string, options []string) string {
	var match []string
	for _, o := range options {
		if strings.HasPrefix(o, word) {
			match = append(match, o)
		}
	}
	if len(match) == 0 {
		return word
	}
	common := match[0]
	for _, o := range match[1:] {
		for !strings.HasPrefix(o, common) {
			common = common[:len(common)-1]
		}
	}
	if len(match) == 1 {
		return common + " "
	}
	return common
}

// argOptions are what the argument being typed may complete to: an
// agent's name after @ or after /cancel and /retry, a running task's id
// after /stop, a waiting request's id after /approve, /always and /deny.
// head is the input before the argument.
func (m *model) argOptions(input string) (head, arg string, options []string) {
	if m.d == nil {
		return "", "", nil
	}
	agents := func(prefix string) []string {
		var out []string
		for _, a := range m.d.Agents {
			out = append(out, prefix+a.Name)
		}
		return out
	}
	if strings.HasPrefix(input, "@") && !strings.Contains(input, " ") {
		return "", input, agents("@")
	}
	name, arg, ok := strings.Cut(input, " ")
	if !ok || strings.Contains(arg, " ") {
		return "", "", nil
	}
	head = name + " "
	switch name {
	case "/cancel", "/retry":
		return head, arg, agents("")
	case "/stop":
		for _, t := range m.d.Tasks {
			if t.Ended.IsZero() {
				options = append(options, string(t.ID))
			}
		}
	case "/approve", "/always", "/deny":
		for _, p := range m.d.Approvals {
			options = append(options, string(p.ID))
		}
	}
	return head, arg, options
}

func (m *model) complete() {
	v := m.input.Value()
	c := completeInput(v)
	if head, arg, options := m.argOptions(v); len(options) > 0 {
		c = head + completeWord(arg, options)
	}
	if c != v {
		m.input.SetValue(c)
		m.input.CursorEnd()
	}
}

// hintLines list the commands the input may complete to.
func (m *model) hintLines() []string {
	v := m.input.Value()
	if _, arg, options := m.argOptions(v); len(options) > 0 {
		var match []string
		for _, o := range options {
			if strings.HasPrefix(o, arg) {
				match = append(match, o)
			}
		}
		if len(match) == 0 || len(match) == 1 && match[0] == arg {
			return nil
		}
		return []string{styleDim.Render(truncate("  "+strings.Join(match, "  ")+"   (Tab completes)", m.width))}
	}
	cs := completions(v)
	if len(cs) == 0 {
		return nil
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.name)
	}
	line := strings.Join(names, "  ")
	if len(cs) == 1 {
		line = strings.TrimSpace(cs[0].name+" "+cs[0].args) + " — " + cs[0].help
	}
	return []string{styleDim.Render(truncate("  "+line+"   (Tab completes)", m.width))}
}

// command runs a / command.
func (m *model) command(v string) tea.Cmd {
	name, arg, _ := strings.Cut(v, " ")
	arg = strings.TrimSpace(arg)
	need := func(what string) bool {
		if arg == "" {
			m.add(&entry{kind: entryError, text: name + " needs " + what})
			return false
		}
		return true
	}
	switch name {
	case "/help":
		m.note("keys: Enter sends at next · Ctrl+S or Alt+Enter sends at now (interrupts the round) · Esc cancels main's round · y/n/a answer a permission request · @name text messages an agent · Tab completes commands, names and ids · Ctrl+T side pane · Ctrl+O unfold tool calls · PgUp/PgDn scroll · Ctrl+C quits")
		for _, c := range slashCommands {
			m.note("%-10s %-9s %s", c.name, c.args, c.help)
		}
	case "/hold":
		return m.post("hold", server.HoldRequest{Reason: arg}, "hold the user queue", false)
	case "/resume":
		return m.post("resume", nil, "resume the user queue", false)
	case "/stop":
		if need("a task id") {
			return m.post("tasks/"+url.PathEscape(arg)+"/stop", nil, "task "+arg+" stopping", true)
		}
	case "/cancel":
		agent := arg
		if agent == "" {
			agent = "main"
		}
		return m.cancelRound(agent)
	case "/retry":
		if need("an agent") {
			return m.post("agents/"+url.PathEscape(arg)+"/retry", nil, "retry "+arg, false)
		}
	case "/approve", "/always", "/deny":
		if need("a request id (the ⚠ line names it)") {
			return m.answer(arg, name != "/deny", name == "/always")
		}
	case "/sessions":
		ctx, api := m.ctx, m.api
		return func() tea.Msg {
			b, err := api.Do(ctx, "GET", "/api/sessions", nil)
			if err != nil {
				return sessionsMsg{err: err}
			}
			var l server.SessionList
			if err := json.Unmarshal(b, &l); err != nil {
				return sessionsMsg{err: fmt.Errorf("decode answer: %w", err)}
			}
			return sessionsMsg{list: l.Sessions}
		}
	case "/session":
		if need("a session id (/sessions lists them)") {
			m.reset()
			m.session = arg
			m.note("opening session %s", arg)
			m.startStream()
		}
	case "/new":
		m.reset()
		m.session = ""
		m.note("the next prompt starts a new session")
	case "/expand":
		m.expanded = !m.expanded
		m.convDirty = true
	case "/side":
		m.toggleSide()
	case "/quit", "/exit", "/q":
		m.quitting = true
		return tea.Quit
	default:
		m.add(&entry{kind: entryError, text: fmt.Sprintf("unknown command %s (/help lists them)", name)})
	}
	return nil
}
