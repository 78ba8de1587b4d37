package tui

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/lipgloss"
)

// entryKind is what a line of the conversation shows.
type entryKind int

const (
	entryLine  entryKind = iota // a timeline line: something happened
	entryText                   // an agent's committed text (Markdown)
	entryTool                   // a tool call, folded to one line
	entryUser                   // a prompt or message from the user
	entryInfo                   // the client's own note (a command's answer)
	entryError                  // a request that failed
)

// entry is one item of the conversation.
type entry struct {
	kind entryKind
	at   time.Time
	who  string
	text string
	tool *toolCall
	// Markdown rendered at width, kept until the width changes.
	rendered string
	width    int
}

// toolCall is a tool call and, once it finished, its result.
type toolCall struct {
	useID   string
	name    string
	input   json.RawMessage
	result  string
	isError bool
	done    bool
}

var (
	styleDim    = lipgloss.NewStyle().Foreground(lipgloss.Color("244"))
	styleWho    = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("39"))
	styleUser   = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("70"))
	styleTool   = lipgloss.NewStyle().Foreground(lipgloss.Color("179"))
	styleAdd    = lipgloss.NewStyle().Foreground(lipgloss.Color("70"))
	styleDel    = lipgloss.NewStyle().Foreground(lipgloss.Color("167"))
	styleErr    = lipgloss.NewStyle().Foreground(lipgloss.Color("167")).Bold(true)
	styleWarn   = lipgloss.NewStyle().Foreground(lipgloss.Color("214")).Bold(true)
	styleLive   = lipgloss.NewStyle().Foreground(lipgloss.Color("252")).Italic(true)
	styleHead   = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("245"))
	styleStatus = lipgloss.NewStyle().Reverse(true)
)

// A long output shows, unfolded, its first foldHead and last foldTail
// lines.
const (
	foldHead = 8
	foldTail = 8
	// expandedMax bounds an expanded output.
	expandedMax = 60
)

// fold shows the first head and the last tail lines of s, with a line
// saying how many lines are between them.
func fold(s string, head, tail int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= head+tail+1 {
		return lines
	}
	out := append([]string{}, lines[:head]...)
	out = append(out, fmt.Sprintf("… %d lines folded …", len(lines)-head-tail))
	return append(out, lines[len(lines)-tail:]...)
}

// diffLines is a line diff of old and new: the lines they share at the
// start and at the end as context ("  "), the rest removed ("- ") and
// added ("+ ").
func diffLines(old, new string) []string {
	a := strings.Split(strings.TrimSuffix(old, "\n"), "\n")
	b := strings.Split(strings.TrimSuffix(new, "\n"), "\n")
	if old == "" {
		a = nil
	}
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []string
	for _, l := range a[max(pre-2, 0):pre] {
		out = append(out, "  "+l)
	}
	for _, l := range a[pre : len(a)-suf] {
		out = append(out, "- "+l)
	}
	for _, l := range b[pre : len(b)-suf] {
		out = append(out, "+ "+l)
	}
	for _, l := range a[len(a)-suf : min(len(a)-suf+2, len(a))] {
		out = append(out, "  "+l)
	}
	return out
}

// toolInput is the part of a tool's input the client reads.
type toolInput struct {
	Command     string `json:"command"`
	FilePath    string `json:"file_path"`
	OldString   string `json:"old_string"`
	NewString   string `json:"new_string"`
	Content     string `json:"content"`
	Name        string `json:"name"`
	Description string `json:"description"`
	To          string `json:"to"`
	Message     string `json:"message"`
	TaskID      string `json:"task_id"`
	Background  bool   `json:"run_in_background"`
}

// summary is the one line a folded tool call shows.
func (t *toolCall) summary() string {
	var in toolInput
	_ = json.Unmarshal(t.input, &in)
	var s string
	switch {
	case in.Command != "":
		s = in.Command
		if in.Background {
			s += "  (background)"
		}
	case in.FilePath != "":
		s = in.FilePath
	case t.name == "Agent" || in.Name != "" && in.Description != "":
		s = strings.TrimSpace(in.Name + ": " + in.Description)
	case in.To != "":
		s = "to " + in.To + ": " + in.Message
	default:
		s = string(t.input)
	}
	return oneLine(s)
}

// stats is what a folded tool call adds to its line: the size of an
// edit's diff, how long a command's output is.
func (t *toolCall) stats() string {
	var in toolInput
	_ = json.Unmarshal(t.input, &in)
	switch t.name {
	case "Edit", "MultiEdit", "Write":
		add, del := 0, 0
		old := in.OldString
		if t.name == "Write" {
			old = ""
		}
		for _, l := range diffLines(old, pick(t.name == "Write", in.Content, in.NewString)) {
			switch {
			case strings.HasPrefix(l, "+ "):
				add++
			case strings.HasPrefix(l, "- "):
				del++
			}
		}
		return fmt.Sprintf("+%d -%d", add, del)
	}
	if t.done && t.result != "" {
		if n := strings.Count(strings.TrimRight(t.result, "\n"), "\n") + 1; n > 1 {
			return fmt.Sprintf("%d lines", n)
		}
	}
	return ""
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// body is what an unfolded tool call shows below its line: a diff for an
// edit, the content of a write as added lines, and the result, a long
// one (a command's output) folded to its first and last lines.
func (t *toolCall) body() []string {
	var in toolInput
	_ = json.Unmarshal(t.input, &in)
	var out []string
	switch t.name {
	case "Edit", "MultiEdit":
		out = diffLines(in.OldString, in.NewString)
	case "Write":
		out = diffLines("", in.Content)
	}
	if len(out) > expandedMax {
		out = fold(strings.Join(out, "\n"), expandedMax/2, expandedMax/2)
	}
	if t.done && t.result != "" {
		out = append(out, fold(readable(t.result), foldHead, foldTail)...)
	}
	return out
}

// readable is a tool's result for people: a JSON object (a background
// command's receipt) as one "key: value" line per field, anything else
// as it is.
func readable(result string) string {
	if !strings.HasPrefix(result, "{") {
		return result
	}
	var fields map[string]any
	if json.Unmarshal([]byte(result), &fields) != nil {
		return result
	}
	keys := slices.Sorted(maps.Keys(fields))
	var b strings.Builder
	for _, k := range keys {
		v, ok := fields[k].(string)
		if !ok {
			j, _ := json.Marshal(fields[k])
			v = string(j)
		}
		fmt.Fprintf(&b, "%s: %s\n", k, v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// oneLine joins s's lines with spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// renderEntry draws e at width w.
func renderEntry(e *entry, w int, expanded bool, md *glamour.TermRenderer) string {
	w = max(w, 20)
	wrap := lipgloss.NewStyle().Width(w)
	switch e.kind {
	case entryText:
		if e.width != w || e.rendered == "" {
			e.width = w
			out := e.text
			if md != nil {
				if r, err := md.Render(e.text); err == nil {
					out = strings.Trim(r, "\n")
				}
			}
			e.rendered = out
		}
		return styleWho.Render(e.who) + "\n" + e.rendered
	case entryUser:
		return styleUser.Render(e.who+" ›") + " " + strings.TrimPrefix(hanging("      ", e.text, w, lipgloss.NewStyle()), "      ")
	case entryTool:
		t := e.tool
		mark := styleDim.Render("…")
		switch {
		case t.done && t.isError:
			mark = styleErr.Render("✗")
		case t.done:
			mark = styleAdd.Render("✓")
		}
		arrow := "▸"
		if expanded {
			arrow = "▾"
		}
		stats := t.stats()
		sum := truncate(t.summary(), w-len(e.who)-len(t.name)-len(stats)-9)
		line := fmt.Sprintf("%s %s %s %s %s", arrow, styleDim.Render(e.who), styleTool.Render(t.name), sum, mark)
		if stats != "" {
			line += " " + styleDim.Render(stats)
		}
		var b strings.Builder
		b.WriteString(line)
		if !expanded {
			return b.String()
		}
		for _, l := range t.body() {
			b.WriteString("\n    ")
			st := styleDim
			switch {
			case strings.HasPrefix(l, "+ "):
				st = styleAdd
			case strings.HasPrefix(l, "- "):
				st = styleDel
			}
			b.WriteString(st.Render(truncate(l, w-4)))
		}
		return b.String()
	case entryInfo:
		return wrap.Render(styleHead.Render("· ") + e.text)
	case entryError:
		return wrap.Render(styleErr.Render("! ") + e.text)
	}
	return hanging(fmt.Sprintf("%-6s ", e.who), e.text, w, styleDim)
}

// hanging writes head then text wrapped at width w, its later lines
// indented under the text's first.
func hanging(head, text string, w int, st lipgloss.Style) string {
	ind := lipgloss.Width(head)
	if w-ind < 20 {
		return lipgloss.NewStyle().Width(w).Render(st.Render(head + text))
	}
	body := lipgloss.NewStyle().Width(w - ind).Render(text)
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		if i == 0 {
			lines[i] = st.Render(head + l)
		} else {
			lines[i] = st.Render(strings.Repeat(" ", ind) + l)
		}
	}
	return strings.Join(lines, "\n")
}

// truncate cuts s to n cells, marking the cut.
func truncate(s string, n int) string {
	if n <= 1 {
		return ""
	}
	if lipgloss.Width(s) <= n {
		return s
	}
	r := []rune(s)
	r = r[:min(len(r), n)]
	for len(r) > 0 && lipgloss.Width(string(r)) > n-1 {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}
