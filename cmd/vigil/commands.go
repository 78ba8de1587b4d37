package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/text"
	"github.com/vigilrun/vigil/server"
)

// The client commands that read a task's output, close agents and
// sessions, export transcripts and cancel queued items, and the version.

// outputPoll is how often 'vigil output -f' reads a running task's output
// again when it has read all there was, as tail -f does.
const outputPoll = 500 * time.Millisecond

// outputChunk is how many bytes one read of a task's output asks for.
const outputChunk = 64 << 10

// taskRef splits "<session>/<task>", or takes the task alone with the
// session of --session.
func taskRef(arg, session string) (vigil.SessionID, vigil.TaskID, error) {
	task := arg
	if s, t, ok := strings.Cut(arg, "/"); ok {
		session, task = s, t
	}
	if session == "" || task == "" {
		return "", "", &exitError{code: 2, err: errors.New("name the task as <session>/<task> or <task> --session <session>")}
	}
	return vigil.SessionID(session), vigil.TaskID(task), nil
}

// cmdOutput prints a shell task's output. With -f it follows the output
// as it is written, until the task ends; then it says how the task ended
// on stderr. With --json it prints each chunk the server answered, one
// JSON object a line.
func cmdOutput(ctx context.Context, e *env, args []string) error {
	var sess string
	var follow bool
	cf, pos, err := clientCommand(e, "output", "output <session>/<task> [-f]  |  output <task> --session <session> [-f]", 1, args, func(fs *flag.FlagSet) {
		fs.StringVar(&sess, "session", "", "the task's session")
		fs.BoolVar(&follow, "f", false, "follow: print the output as it is written, until the task ends")
	})
	if err != nil {
		return err
	}
	id, task, err := taskRef(pos[0], sess)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	wait := e.sleep
	if wait == nil {
		wait = sleepRetry
	}
	var offset int64
	for {
		var chunk server.TaskOutput
		b, err := c.get(ctx, sessionPath(string(id), "tasks", string(task), "output")+"?offset="+strconv.FormatInt(offset, 10)+"&limit="+strconv.Itoa(outputChunk), &chunk)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil // interrupted, as tail -f is
			}
			return agentTaskHint(ctx, c, id, task, err)
		}
		data := []byte(chunk.Data)
		if chunk.Encoding == "base64" {
			if data, err = base64.StdEncoding.DecodeString(chunk.Data); err != nil {
				return fmt.Errorf("decode output of task %s at offset %d: %w", task, offset, err)
			}
		}
		if cf.json {
			if _, err := e.stdout.Write(append(bytes.TrimRight(b, "\n"), '\n')); err != nil {
				return err
			}
		} else if _, err := e.stdout.Write(data); err != nil {
			return err
		}
		more := len(data) > 0 && chunk.Next > offset
		offset = chunk.Next
		switch {
		case more:
			continue // read on at once: there may be more
		case !follow:
			return nil
		case !chunk.Status.Live():
			// The status was read before the output: everything the task
			// wrote is above.
			return reportTaskEnd(ctx, e, c, id, task)
		}
		if err := wait(ctx, outputPoll); err != nil {
			return nil
		}
	}
}

// agentTaskHint turns the refusal to read an agent task's output into a
// pointer to the agent's transcript; other errors pass unchanged.
func agentTaskHint(ctx context.Context, c *apiClient, id vigil.SessionID, task vigil.TaskID, err error) error {
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != 400 {
		return err
	}
	var d vigil.SessionDetail
	if _, gerr := c.get(ctx, sessionPath(string(id)), &d); gerr != nil {
		return err
	}
	for _, t := range d.Tasks {
		if t.ID == task && t.Kind == vigil.TaskAgent {
			name := nameOf(agentNames(d.Agents), t.Agent)
			return fmt.Errorf("task %s is agent %s: it has no output file; read what it did with: vigil transcript %s %s", task, name, id, name)
		}
	}
	return err
}

// reportTaskEnd tells stderr how a task ended.
func reportTaskEnd(ctx context.Context, e *env, c *apiClient, id vigil.SessionID, task vigil.TaskID) error {
	var t vigil.Task
	if _, err := c.get(ctx, sessionPath(string(id), "tasks", string(task)), &t); err != nil {
		return err
	}
	line := fmt.Sprintf("task %s %s", t.ID, t.Status)
	if t.ExitCode != nil {
		line += fmt.Sprintf(" (exit %d)", *t.ExitCode)
	}
	fmt.Fprintln(e.stderr, line)
	return nil
}

// cmdClose closes an agent (and what it owns), or with no agent the whole
// session.
func cmdClose(ctx context.Context, e *env, args []string) error {
	cf, pos, err := clientCommand(e, "close", "close <session> [agent]", -1, args, nil)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return &exitError{code: 2, err: fmt.Errorf("want a session and at most one agent, got %d argument(s)", len(pos))}
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "close"), nil)
		if err != nil {
			return err
		}
		if cf.json {
			return printRaw(e, b)
		}
		var d vigil.SessionDetail
		if err := json.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		fmt.Fprintf(e.stdout, "session %s closed%s\n", d.Session.ID, reasonSuffix(d.Session.CloseReason))
		return nil
	}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "agents", pos[1], "close"), nil)
	if err != nil {
		return err
	}
	a, done, err := answer[vigil.Agent](e, cf, b)
	if done {
		return err
	}
	fmt.Fprintf(e.stdout, "agent %s (%s): %s\n", a.Name, a.ID, a.State)
	return nil
}

// cmdCancel removes a queued item from an agent's inbox.
func cmdCancel(ctx context.Context, e *env, args []string) error {
	cf, pos, err := clientCommand(e, "cancel", "cancel <session> <item>", 2, args, nil)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	// What the item was, to say what was cancelled; the server's answer
	// to the removal itself is the authority.
	var list server.InboxList
	if _, err := c.get(ctx, sessionPath(pos[0], "inbox"), &list); err != nil {
		return err
	}
	var item *vigil.InboxItem
	for i := range list.Items {
		if string(list.Items[i].ID) == pos[1] {
			item = &list.Items[i]
		}
	}
	if _, _, err := c.do(ctx, "DELETE", sessionPath(pos[0], "inbox", pos[1]), nil); err != nil {
		return err
	}
	if cf.json {
		if item == nil {
			return nil
		}
		b, err := json.Marshal(item)
		if err != nil {
			return fmt.Errorf("encode item: %w", err)
		}
		return printRaw(e, append(b, '\n'))
	}
	if item == nil {
		fmt.Fprintf(e.stdout, "cancelled %s\n", pos[1])
		return nil
	}
	line := fmt.Sprintf("cancelled %s: %s for %s", item.ID, item.Kind, orDefault(item.AgentName, string(item.Agent)))
	if item.Text != "" {
		line += fmt.Sprintf(" (%q)", text.OneLine(item.Text, 60))
	}
	fmt.Fprintln(e.stdout, line)
	return nil
}

// transcriptLine is one line of an agent's transcript as the server
// writes it (GET .../agents/{agent}/transcript, JSONL).
type transcriptLine struct {
	Seq       int64           `json:"seq"`
	At        time.Time       `json:"timestamp"`
	Type      string          `json:"type"`
	Agent     string          `json:"agent"`
	Name      string          `json:"agent_name"`
	Run       int             `json:"run"`
	Operation string          `json:"operation"`
	Item      string          `json:"item"`
	Kind      string          `json:"kind"`
	Priority  string          `json:"priority"`
	From      string          `json:"from"`
	Content   string          `json:"content"`
	Tool      string          `json:"tool"`
	ToolUseID string          `json:"tool_use_id"`
	Input     json.RawMessage `json:"input"`
	IsError   bool            `json:"is_error"`
	Key       string          `json:"key"`
	Status    string          `json:"status"`
	Reason    string          `json:"reason"`
}

// foldLines is how many lines of a long tool result or notification a
// readable transcript shows; --full shows all.
const foldLines = 12

// foldChars is how much of a long one-line tool result a readable
// transcript shows; --full shows all.
const foldChars = 200

// cmdTranscript exports an agent's transcript: readable text, or with
// --json the server's JSONL lines as they are.
func cmdTranscript(ctx context.Context, e *env, args []string) error {
	var full bool
	cf, pos, err := clientCommand(e, "transcript", "transcript <session> [agent] [--full] [--json]   (agent: a name or id; default main)", -1, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&full, "full", false, "print long tool results and notifications whole, not folded to their first "+strconv.Itoa(foldLines)+" lines")
	})
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return &exitError{code: 2, err: fmt.Errorf("want a session and at most one agent, got %d argument(s)", len(pos))}
	}
	agent := "main"
	if len(pos) == 2 {
		agent = pos[1]
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "GET", sessionPath(pos[0], "agents", agent, "transcript"), nil)
	if err != nil {
		return err
	}
	if cf.json {
		return printRaw(e, b)
	}
	// The session's agents, to name the senders of items by name.
	var d vigil.SessionDetail
	if _, err := c.get(ctx, sessionPath(pos[0]), &d); err != nil {
		return err
	}
	w := bufio.NewWriter(e.stdout)
	tp := &transcriptPrinter{w: w, full: full, names: agentNames(d.Agents)}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxSSEFrame)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l transcriptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("transcript line %d: %w", n, err)
		}
		tp.print(l)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read transcript: %w", err)
	}
	if tp.lines == 0 {
		fmt.Fprintf(w, "agent %s has no transcript yet\n", agent)
	}
	return w.Flush()
}

// transcriptPrinter renders transcript lines for a person: a local time
// of day on each line, a date line when the day changes, tool calls on
// one line, long results folded.
type transcriptPrinter struct {
	w     io.Writer
	full  bool
	names map[vigil.AgentID]string
	day   string
	lines int
}

// from names the sender of an item or message: "user", "system" or an
// agent, by name.
func (p *transcriptPrinter) from(s, def string) string {
	if s == "" {
		return def
	}
	return nameOf(p.names, vigil.AgentID(s))
}

func (p *transcriptPrinter) print(l transcriptLine) {
	if l.Type == "queue-operation" && l.Operation == "dequeue" {
		return // the run's start and the user lines say what it took
	}
	at := l.At.Local()
	if day := at.Format(time.DateOnly); day != p.day {
		if p.day != "" {
			fmt.Fprintln(p.w)
		}
		fmt.Fprintf(p.w, "%s\n", day)
		p.day = day
	}
	p.lines++
	stamp := at.Format(time.TimeOnly) + "  "
	switch l.Type {
	case "run":
		if l.Operation == "start" {
			fmt.Fprintf(p.w, "%s── run %d started (%s)\n", stamp, l.Run, l.Kind)
			return
		}
		fmt.Fprintf(p.w, "%s── run %d %s%s\n", stamp, l.Run, l.Status, reasonSuffix(text.OneLine(l.Reason, 200)))
	case "user":
		p.block(stamp+"user", l.Content, true)
	case "assistant":
		p.block(stamp+orDefault(l.Name, "assistant"), l.Content, false)
	case "tool_use":
		fmt.Fprintf(p.w, "%s→ %s\n", stamp, toolLine(l.Tool, l.Input))
	case "tool_result":
		head := "← result"
		if l.IsError {
			head = "← error"
		}
		p.block(stamp+head, l.Content, true)
	case "notification":
		p.block(fmt.Sprintf("%snotification %s %s", stamp, l.Key, l.Status), l.Content, true)
	case "message":
		line := fmt.Sprintf("%smessage from %s (%s", stamp, p.from(l.From, "user"), l.Status)
		if l.Reason != "" {
			line += ": " + text.OneLine(l.Reason, 100)
		}
		p.block(line+")", l.Content, false)
	case "queue-operation":
		switch l.Operation {
		case "enqueue":
			fmt.Fprintf(p.w, "%s· queued %s: %s from %s, priority %s\n", stamp, l.Item, l.Kind, p.from(l.From, "system"), l.Priority)
		case "remove":
			fmt.Fprintf(p.w, "%s· removed %s%s\n", stamp, l.Item, reasonSuffix(l.Reason))
		}
	default:
		p.block(stamp+l.Type, l.Content, true)
	}
}

// block prints head and content: a line of content after the head, else
// the lines below it, indented. Unless full, a folded block shows its
// first foldLines lines, or of a single line its first foldChars.
func (p *transcriptPrinter) block(head, content string, fold bool) {
	fold = fold && !p.full
	content = strings.TrimRight(content, "\n")
	lines := strings.Split(content, "\n")
	if len(lines) == 1 {
		if fold && len(content) > foldChars {
			content = text.OneLine(content, foldChars) + " (--full prints it whole)"
		}
		fmt.Fprintf(p.w, "%s: %s\n", head, content)
		return
	}
	fmt.Fprintf(p.w, "%s (%d lines):\n", head, len(lines))
	show := lines
	if fold && len(lines) > foldLines {
		show = lines[:foldLines]
	}
	for _, l := range show {
		fmt.Fprintf(p.w, "          %s\n", l)
	}
	if len(show) < len(lines) {
		fmt.Fprintf(p.w, "          … %d more lines (--full prints them)\n", len(lines)-len(show))
	}
}

// toolLine is a tool call on one line: "Bash(go test ./...)",
// "Read(/a/b.go)", else the tool and its input's JSON, shortened.
func toolLine(tool string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	for _, k := range []string{"command", "file_path", "path", "pattern", "url", "description", "prompt"} {
		if s, ok := in[k].(string); ok && s != "" {
			return fmt.Sprintf("%s(%s)", tool, text.OneLine(s, 120))
		}
	}
	if len(input) == 0 || string(input) == "{}" || string(input) == "null" {
		return tool + "()"
	}
	return tool + " " + text.OneLine(string(input), 120)
}

// cmdVersion prints the version of this vigil binary: the module version
// and, when the binary was built from a checkout, the commit and its time.
func cmdVersion(_ context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	asJSON := fs.Bool("json", false, "print the version as JSON")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: vigil version [--json]   (also: vigil --version)\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return &exitError{code: 2, err: fmt.Errorf("version takes no arguments, got %q", fs.Arg(0))}
	}
	bi, _ := debug.ReadBuildInfo()
	v := buildVersion(bi)
	if *asJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode version: %w", err)
		}
		return printRaw(e, append(b, '\n'))
	}
	fmt.Fprintln(e.stdout, v.String())
	return nil
}

// versionInfo is what a vigil binary knows of its build.
type versionInfo struct {
	// Version is the module's version: a release tag, a pseudo-version,
	// or "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Revision, Time and Modified are the commit the binary was built
	// from, its time and whether the checkout had changes, when the Go
	// toolchain recorded them.
	Revision string    `json:"revision,omitempty"`
	Time     time.Time `json:"time,omitzero"`
	Modified bool      `json:"modified,omitempty"`
	// Go is the toolchain that built the binary; Platform its GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// buildVersion reads a binary's build information; nil (no build
// information) gives "(unknown)".
func buildVersion(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				v.Time = t
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "GOOS":
			v.Platform = s.Value + v.Platform[strings.Index(v.Platform, "/"):]
		case "GOARCH":
			v.Platform = v.Platform[:strings.Index(v.Platform, "/")+1] + s.Value
		}
	}
	return v
}

// String is the version on one line: "vigil v1.2.0 (commit 0123456789ab,
// 2026-12-01T10:00:00Z, modified) go1.26.0 linux/amd64".
func (v versionInfo) String() string {
	var parts []string
	if v.Revision != "" {
		parts = append(parts, "commit "+v.Revision[:min(12, len(v.Revision))])
	}
	if !v.Time.IsZero() {
		parts = append(parts, v.Time.UTC().Format(time.RFC3339))
	}
	if v.Modified {
		parts = append(parts, "modified")
	}
	s := "vigil " + v.Version
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s + " " + v.Go + " " + v.Platform
}

// agentNames maps a session's agent ids to their names.
func agentNames(agents []vigil.Agent) map[vigil.AgentID]string {
	m := make(map[vigil.AgentID]string, len(agents))
	for _, a := range agents {
		m[a.ID] = a.Name
	}
	return m
}

// nameOf is an agent's name, else its id.
func nameOf(names map[vigil.AgentID]string, id vigil.AgentID) string {
	if n := names[id]; n != "" {
		return n
	}
	return string(id)
}

// printTaskTable prints tasks in aligned columns, with agents by name and
// times relative to now.
func printTaskTable(w io.Writer, tasks []vigil.Task, names map[vigil.AgentID]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKIND\tSTATUS\tOWNER\tSTARTED\tTOOK\tEXIT\tWHAT")
	for _, t := range tasks {
		exit, took := "", ""
		if t.ExitCode != nil {
			exit = strconv.Itoa(*t.ExitCode)
		}
		if !t.Ended.IsZero() && !t.Started.IsZero() {
			took = roundDuration(t.Ended.Sub(t.Started)).String()
		}
		what := t.Description
		switch {
		case t.Kind == vigil.TaskShell && t.Command != "":
			what = t.Command
		case t.Kind == vigil.TaskAgent && t.Agent != "":
			what = "agent " + nameOf(names, t.Agent) + reasonSuffix(t.Description)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Status, nameOf(names, t.Owner), ago(t.Started), took, exit, text.OneLine(what, 60))
	}
	return tw.Flush()
}

// roundDuration rounds a duration for a person: milliseconds under a
// second, else seconds.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// needsYouCell is a session's needs-you reasons for one table cell.
func needsYouCell(reasons []string) string {
	switch len(reasons) {
	case 0:
		return "-"
	case 1:
		return text.OneLine(reasons[0], 40)
	}
	return fmt.Sprintf("%s (+%d more)", text.OneLine(reasons[0], 40), len(reasons)-1)
}

// queryPath adds a query to a path.
func queryPath(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
