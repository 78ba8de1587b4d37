package claudecode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// entry is what the checks need of one line of a session file.
type entry struct {
	line int
	text string // the line, shortened for evidence

	Type      string
	Operation string    // queue-operation: enqueue, dequeue, remove
	Content   string    // queue-operation content (the queued text)
	At        time.Time // zero when the line has no timestamp
	Sidechain bool
	AgentID   string
	Origin    string // origin.kind: task-notification, coordinator, ...

	Role       string
	StopReason string
	Text       string // the message's text (a string content, or its text blocks)
	ToolUses   []toolUse
	Results    []toolResult

	Attachment string // attachment.type
	Prompt     string // attachment.prompt (queued_command)

	Launched   string // toolUseResult.agentId of an async_launched Agent
	Background string // toolUseResult.backgroundTaskId of a background Bash
}

type toolUse struct {
	ID    string
	Name  string
	Input map[string]any
}

type toolResult struct {
	ToolUseID string
	Text      string
}

// rawLine is the JSON shape of a line, as much of it as is read.
type rawLine struct {
	Type        string          `json:"type"`
	Operation   string          `json:"operation"`
	Content     json.RawMessage `json:"content"`
	Timestamp   string          `json:"timestamp"`
	IsSidechain bool            `json:"isSidechain"`
	AgentID     string          `json:"agentId"`
	Origin      *struct {
		Kind string `json:"kind"`
	} `json:"origin"`
	Message *struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		StopReason string          `json:"stop_reason"`
	} `json:"message"`
	Attachment *struct {
		Type   string `json:"type"`
		Prompt string `json:"prompt"`
	} `json:"attachment"`
	ToolUseResult json.RawMessage `json:"toolUseResult"`
}

type rawBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     map[string]any  `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// contentText returns a message content's text: the string itself, or the
// text of its text blocks joined by newlines. Tool uses and results are
// returned apart.
func contentText(raw json.RawMessage) (text string, uses []toolUse, results []toolResult) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var blocks []rawBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return "", nil, nil
	}
	var parts []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "tool_use":
			uses = append(uses, toolUse{ID: b.ID, Name: b.Name, Input: b.Input})
		case "tool_result":
			t, _, _ := contentText(b.Content)
			results = append(results, toolResult{ToolUseID: b.ToolUseID, Text: t})
		}
	}
	return strings.Join(parts, "\n"), uses, results
}

// parseLine decodes one line of a session file. It never panics; a line
// that is not a JSON object is an error.
func parseLine(n int, b []byte) (entry, error) {
	e := entry{line: n, text: shorten(string(b), 240)}
	if bytes.IndexByte(b, 0) >= 0 {
		return e, errors.New("contains a NUL byte")
	}
	var r rawLine
	if err := json.Unmarshal(b, &r); err != nil {
		return e, fmt.Errorf("not a JSON object: %w", err)
	}
	e.Type, e.Operation, e.Sidechain, e.AgentID = r.Type, r.Operation, r.IsSidechain, r.AgentID
	if r.Timestamp != "" {
		t, err := time.Parse(time.RFC3339Nano, r.Timestamp)
		if err != nil {
			return e, fmt.Errorf("timestamp %q: %w", shorten(r.Timestamp, 40), err)
		}
		e.At = t
	}
	if r.Origin != nil {
		e.Origin = r.Origin.Kind
	}
	if r.Type == "queue-operation" {
		e.Content, _, _ = contentText(r.Content)
	}
	if m := r.Message; m != nil {
		e.Role, e.StopReason = m.Role, m.StopReason
		e.Text, e.ToolUses, e.Results = contentText(m.Content)
	}
	if a := r.Attachment; a != nil {
		e.Attachment, e.Prompt = a.Type, a.Prompt
	}
	if len(r.ToolUseResult) > 0 && r.ToolUseResult[0] == '{' {
		var tr struct {
			Status           string `json:"status"`
			AgentID          string `json:"agentId"`
			BackgroundTaskID string `json:"backgroundTaskId"`
		}
		if json.Unmarshal(r.ToolUseResult, &tr) == nil {
			if tr.Status == "async_launched" {
				e.Launched = tr.AgentID
			}
			e.Background = tr.BackgroundTaskID
		}
	}
	e.text = describe(e)
	return e, nil
}

// noticeOr returns a short form of a <task-notification> in s, or s.
func noticeOr(s string) string {
	n, ok := parseNotice(s)
	if !ok {
		return s
	}
	out := "<task-notification> task " + n.Task
	if n.ToolUse != "" {
		out += ", tool use " + n.ToolUse
	}
	if n.Summary != "" {
		out += ", summary " + strconv.Quote(shorten(n.Summary, 80))
	}
	if n.Result != "" {
		out += ", result " + strconv.Quote(shorten(n.Result, 80))
	}
	return out
}

// describe says in one short line what an entry is, for evidence.
func describe(e entry) string {
	var b strings.Builder
	b.WriteString(e.Type)
	switch {
	case e.Type == "queue-operation":
		b.WriteString(" " + e.Operation)
		if e.Content != "" {
			b.WriteString(": " + noticeOr(e.Content))
		}
	case e.Type == "attachment":
		b.WriteString(" " + e.Attachment)
		if e.Prompt != "" {
			b.WriteString(": " + noticeOr(e.Prompt))
		}
	default:
		if e.Origin != "" {
			b.WriteString(" (origin " + e.Origin + ")")
		}
		if e.StopReason != "" {
			b.WriteString(" [" + e.StopReason + "]")
		}
		if e.Launched != "" {
			b.WriteString(" [async_launched agent " + e.Launched + "]")
		}
		if e.Background != "" {
			b.WriteString(" [background task " + e.Background + "]")
		}
		if e.Text != "" {
			b.WriteString(": " + noticeOr(e.Text))
		}
		for _, u := range e.ToolUses {
			in, _ := json.Marshal(u.Input)
			b.WriteString(" tool_use " + u.Name + " " + string(in))
		}
		for _, r := range e.Results {
			b.WriteString(" tool_result: " + r.Text)
		}
	}
	return shorten(b.String(), 240)
}

// readEntries reads a session file's lines. A line that cannot be read
// (not JSON, a NUL byte, longer than maxLine, cut at the end of the file)
// becomes a warning, and reading goes on.
func readEntries(r io.Reader, name string, maxLine int) ([]entry, []string, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		out   []entry
		warns []string
		buf   []byte
		n     int
		over  bool
	)
	flush := func(last bool) {
		n++
		switch {
		case over:
			warns = append(warns, fmt.Sprintf("%s:%d: line longer than %d bytes, skipped", name, n, maxLine))
		case len(bytes.TrimSpace(buf)) == 0:
		default:
			e, err := parseLine(n, buf)
			if err != nil {
				why := err.Error()
				if last {
					why = "the file ends inside this line (truncated?): " + why
				}
				warns = append(warns, fmt.Sprintf("%s:%d: %s", name, n, why))
			} else {
				out = append(out, e)
			}
		}
		buf, over = buf[:0], false
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			if len(buf)+len(chunk) > maxLine {
				over, buf = true, buf[:0]
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil:
			flush(false)
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			if len(buf) > 0 || over {
				flush(true)
			}
			return out, warns, nil
		default:
			return out, warns, fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// shorten cuts s to about n bytes on a rune boundary, on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

var (
	taskIDRe    = regexp.MustCompile(`<task-id>([^<]*)</task-id>`)
	toolUseIDRe = regexp.MustCompile(`<tool-use-id>([^<]*)</tool-use-id>`)
	resultRe    = regexp.MustCompile(`(?s)<result>(.*?)</result>`)
	summaryRe   = regexp.MustCompile(`(?s)<summary>(.*?)</summary>`)
)

// notice is what a <task-notification> text says.
type notice struct {
	Task, ToolUse, Result, Summary string
}

// parseNotice reads a <task-notification> in s; ok is false when s holds
// none.
func parseNotice(s string) (n notice, ok bool) {
	if !strings.Contains(s, "<task-notification>") {
		return n, false
	}
	get := func(re *regexp.Regexp) string {
		if m := re.FindStringSubmatch(s); m != nil {
			return strings.TrimSpace(m[1])
		}
		return ""
	}
	return notice{Task: get(taskIDRe), ToolUse: get(toolUseIDRe), Result: get(resultRe), Summary: get(summaryRe)}, true
}
