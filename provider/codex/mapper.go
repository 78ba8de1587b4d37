package codex

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"unicode"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// outputTail bounds the command output a notification carries.
const outputTail = 4000

// mapper turns the app-server's notifications into core inputs, and says
// when a thread must be woken. It is not safe for concurrent use: the
// process calls it under its lock.
type mapper struct {
	agent core.AgentID
	pid   int // the app-server's
	log   *slog.Logger
	stats *counters
	// ending: the driver began to end the process; what ends now is not
	// notified (the exit ends it lost, to the owner's inbox) and nothing
	// is woken.
	ending bool

	main     string // the agent's thread
	threads  map[string]*thread
	commands map[string]*command
	order    []string // command ids, in the order they started
}

// thread is a Codex thread: the agent's own or a sub-agent's.
type thread struct {
	id     string
	owner  string // the thread that spawned it; empty for the agent's
	prompt string

	turn      string // the turn in progress
	starting  bool   // a turn/start is unanswered by turn/started
	wakeNext  bool   // the turn being started is a wake
	wakeTurn  bool   // the turn in progress is a wake
	responses int    // model responses of the turn in progress
	usage     chat.Usage
	lastText  string
	wakeText  string
	stopped   bool // the driver interrupted its turn
	owed      []owed
	// held are the ends of work the thread owns that came during its
	// turn, or while a turn of it was being started: Codex shows that turn
	// nothing of them (a command's end never; a sub-agent's maybe), so they
	// are passed on when the turn ends, and the wake that follows is the
	// run that takes their notifications.
	held      []core.Input
	firstUser bool // the turn's first user message was seen
}

// owed is work of a thread's that ended: the thread is woken for it.
type owed struct {
	id, text string
}

// command is a command Codex ran (a commandExecution item).
type command struct {
	id, thread, cmd string
	pid             int
	ticks           uint64
	response        int // the thread's response count when it started
	turn            string
	background      bool
	stopped         bool
	done            bool
	// awaiting is set while Codex waits for vigil's answer to run it: it
	// has not run, and is not backgrounded.
	awaiting bool
}

// wake asks the process to start a turn on thread with text.
type wake struct {
	thread, text string
	tasks        []string
}

func newMapper(agent core.AgentID, log *slog.Logger, stats *counters) *mapper {
	return &mapper{agent: agent, log: log, stats: stats, threads: map[string]*thread{}, commands: map[string]*command{}}
}

func (m *mapper) setMain(id string) {
	m.main = id
	m.thread(id)
}

// thread returns the thread id, creating it (a sub-agent of the agent's
// thread, until its spawn says otherwise) when it is new.
func (m *mapper) thread(id string) *thread {
	t := m.threads[id]
	if t == nil {
		t = &thread{id: id}
		if id != m.main {
			t.owner = m.main
		}
		m.threads[id] = t
	}
	return t
}

func (m *mapper) isChild(id string) bool {
	t := m.threads[id]
	return t != nil && id != m.main
}

func (m *mapper) starting(id string) bool {
	t := m.threads[id]
	return t != nil && t.starting
}

func (m *mapper) activeTurn(id string) string {
	if t := m.threads[id]; t != nil {
		return t.turn
	}
	return ""
}

func (m *mapper) markStarting(id string, wake bool) {
	t := m.thread(id)
	t.starting, t.wakeNext = true, wake
}

func (m *mapper) startFailed(id string) {
	if t := m.threads[id]; t != nil {
		t.starting, t.wakeNext = false, false
	}
}

// stoppedIdle reports a sub-agent stopped between its turns.
func (m *mapper) stoppedIdle(id string) []core.Input {
	t := m.thread(id)
	t.stopped = true
	return []core.Input{core.ExternalTask{Agent: m.agent, ID: id, Kind: core.TaskAgent, Owner: m.ownerRef(t), Name: mirrorName(id), Status: "stopped"}}
}

// locate finds the process of command c, once.
func (m *mapper) locate(c *command) {
	if c.pid > 0 || m.pid <= 0 {
		return
	}
	if pid, ticks, ok := findCommand(m.pid, c.id); ok {
		c.pid, c.ticks = pid, ticks
	}
}

// stopCommand marks a live background command stopped and returns its
// process, to be killed.
func (m *mapper) stopCommand(id string) (pid int, ticks uint64, ok bool) {
	c := m.commands[id]
	if c == nil || c.done {
		return 0, 0, false
	}
	m.locate(c)
	if c.pid <= 0 {
		m.log.Warn("codex: the process of a command to stop was not found", "task", id)
		return 0, 0, false
	}
	c.stopped = true
	return c.pid, c.ticks, true
}

// commandProcesses returns the processes of the commands that have not
// ended.
func (m *mapper) commandProcesses() map[int]uint64 {
	out := map[int]uint64{}
	for _, c := range m.commands {
		if !c.done && c.pid > 0 {
			out[c.pid] = c.ticks
		}
	}
	return out
}

// ownerRef is the provider id of t's owner for ExternalTask.Owner: empty
// when the agent's own thread owns it.
func (m *mapper) ownerRef(t *thread) string {
	if t.owner == m.main {
		return ""
	}
	return t.owner
}

// mirror is ExternalMessage.Mirror for an item of thread id.
func (m *mapper) mirror(id string) string {
	if id == m.main {
		return ""
	}
	return id
}

// Notification params, as much of them as the mapping reads.
type (
	turnParams struct {
		ThreadID string `json:"threadId"`
		Turn     struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"turn"`
	}
	itemParams struct {
		ThreadID string          `json:"threadId"`
		TurnID   string          `json:"turnId"`
		Item     json.RawMessage `json:"item"`
	}
	item struct {
		Type             string            `json:"type"`
		ID               string            `json:"id"`
		Text             string            `json:"text"`
		Content          []json.RawMessage `json:"content"`
		Command          string            `json:"command"`
		ProcessID        *string           `json:"processId"`
		Status           string            `json:"status"`
		AggregatedOutput *string           `json:"aggregatedOutput"`
		ExitCode         *int              `json:"exitCode"`
		Tool             string            `json:"tool"`
		SenderThreadID   string            `json:"senderThreadId"`
		ReceiverThreads  []string          `json:"receiverThreadIds"`
		Prompt           *string           `json:"prompt"`
		AgentsStates     json.RawMessage   `json:"agentsStates"`
		Server           string            `json:"server"`
		Arguments        json.RawMessage   `json:"arguments"`
		Result           json.RawMessage   `json:"result"`
		Error            json.RawMessage   `json:"error"`
		Changes          json.RawMessage   `json:"changes"`
	}
	usageParams struct {
		ThreadID   string `json:"threadId"`
		TokenUsage struct {
			Last struct {
				InputTokens       int64 `json:"inputTokens"`
				CachedInputTokens int64 `json:"cachedInputTokens"`
				CacheWriteTokens  int64 `json:"cacheWriteInputTokens"`
				OutputTokens      int64 `json:"outputTokens"`
			} `json:"last"`
		} `json:"tokenUsage"`
	}
)

// feed maps one notification.
func (m *mapper) feed(method string, params json.RawMessage) ([]core.Input, []wake) {
	var ins []core.Input
	var wakes []wake
	var err error
	switch method {
	case "turn/started":
		var p turnParams
		if err = json.Unmarshal(params, &p); err == nil {
			ins = m.turnStarted(p)
		}
	case "turn/completed":
		var p turnParams
		if err = json.Unmarshal(params, &p); err == nil {
			ins, wakes = m.turnCompleted(p)
		}
	case "item/started", "item/completed":
		var p itemParams
		var it item
		if err = json.Unmarshal(params, &p); err == nil {
			err = json.Unmarshal(p.Item, &it)
		}
		if err == nil {
			if method == "item/started" {
				ins = m.itemStarted(p, it)
			} else {
				ins, wakes = m.itemCompleted(p, it)
			}
		}
	case "thread/tokenUsage/updated":
		var p usageParams
		if err = json.Unmarshal(params, &p); err == nil && p.ThreadID != "" {
			t := m.thread(p.ThreadID)
			u := p.TokenUsage.Last
			t.usage = t.usage.Add(chat.Usage{InputTokens: u.InputTokens - u.CachedInputTokens - u.CacheWriteTokens,
				CacheReadTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens, OutputTokens: u.OutputTokens})
			t.responses++
		}
	case "error":
		m.log.Warn("codex: Codex reported an error", "params", preview(params))
	default:
		m.stats.ignored.Add(1)
		m.log.Debug("codex: notification ignored", "method", method)
	}
	if err != nil {
		m.stats.undecodable.Add(1)
		m.log.Warn("codex: undecodable notification dropped", "method", method, "err", err, "params", preview(params))
		return nil, nil
	}
	return ins, wakes
}

func (m *mapper) turnStarted(p turnParams) []core.Input {
	t := m.thread(p.ThreadID)
	t.turn, t.starting = p.Turn.ID, false
	t.wakeTurn, t.wakeNext = t.wakeNext, false
	t.responses, t.usage, t.lastText, t.firstUser, t.stopped = 0, chat.Usage{}, "", false, false
	if t.id == m.main {
		return []core.Input{core.ExternalTurnStarted{Agent: m.agent, Session: m.main}}
	}
	return []core.Input{core.ExternalTask{Agent: m.agent, ID: t.id, Kind: core.TaskAgent, Owner: m.ownerRef(t),
		Name: mirrorName(t.id), Description: firstLine(t.prompt), Prompt: t.prompt, Status: "running"}}
}

// backgrounded mirrors, as background tasks, the commands of thread t
// still running once a later model response of it began (all of them at
// the end of its turn): Codex answered their call with a session to poll
// and went on.
func (m *mapper) backgrounded(t *thread, all bool) []core.Input {
	var ins []core.Input
	for _, id := range m.order {
		c := m.commands[id]
		if c.thread != t.id || c.done || c.background || c.awaiting || (!all && c.response >= t.responses) {
			continue
		}
		c.background = true
		m.locate(c)
		ins = append(ins,
			core.ExternalTask{Agent: m.agent, ID: c.id, Kind: core.TaskShell, Owner: m.mirror(t.id), Description: c.cmd, Status: "running"},
			core.ExternalMessage{Agent: m.agent, Mirror: m.mirror(t.id), Message: chat.Message{Role: chat.RoleUser,
				Content: []chat.Block{chat.ToolResult(c.id, "running in the background (task "+c.id+")", false)}}})
	}
	return ins
}

func (m *mapper) itemStarted(p itemParams, it item) []core.Input {
	t := m.thread(p.ThreadID)
	ins := m.backgrounded(t, false)
	if it.Type != "commandExecution" {
		return ins
	}
	c := &command{id: it.ID, thread: t.id, cmd: it.Command, response: t.responses, turn: p.TurnID}
	m.locate(c)
	if m.commands[c.id] == nil {
		m.order = append(m.order, c.id)
	}
	m.commands[c.id] = c
	input, _ := json.Marshal(map[string]string{"cmd": it.Command})
	return append(ins, core.ExternalMessage{Agent: m.agent, Mirror: m.mirror(t.id), Message: chat.Message{Role: chat.RoleAssistant,
		Content: []chat.Block{{Type: chat.BlockToolUse, ID: it.ID, Name: "exec_command", Input: input}}}})
}

func (m *mapper) itemCompleted(p itemParams, it item) ([]core.Input, []wake) {
	t := m.thread(p.ThreadID)
	mirror := m.mirror(t.id)
	msg := func(role chat.Role, blocks ...chat.Block) core.Input {
		return core.ExternalMessage{Agent: m.agent, Mirror: mirror, Message: chat.Message{Role: role, Content: blocks}}
	}
	switch it.Type {
	case "agentMessage":
		t.lastText = it.Text
		return []core.Input{msg(chat.RoleAssistant, chat.Text(it.Text))}, nil
	case "userMessage":
		first := !t.firstUser
		t.firstUser = true
		// The agent's own input is in its transcript already, but for a
		// wake the driver wrote; a sub-agent's first is its prompt.
		if t.id == m.main && !(first && t.wakeTurn) {
			return nil, nil
		}
		var texts []string
		for _, raw := range it.Content {
			var c struct {
				Type, Text string
			}
			if json.Unmarshal(raw, &c) == nil && c.Type == "text" {
				texts = append(texts, c.Text)
			}
		}
		if t.prompt == "" && t.id != m.main {
			t.prompt = strings.Join(texts, "\n")
		}
		return []core.Input{msg(chat.RoleUser, chat.Text(strings.Join(texts, "\n")))}, nil
	case "commandExecution":
		c := m.commands[it.ID]
		if c == nil {
			ins := m.itemStarted(p, it)
			c = m.commands[it.ID]
			return append(ins, m.commandDone(t, c, it)...), m.wakes()
		}
		return m.commandDone(t, c, it), m.wakes()
	case "collabAgentToolCall":
		name := snake(it.Tool)
		if name == "wait" {
			name = "wait_agent"
		} else if !strings.HasSuffix(name, "_agent") && !strings.HasSuffix(name, "_input") && !strings.HasSuffix(name, "_agents") {
			name += "_agent"
		}
		in := map[string]any{"targets": it.ReceiverThreads}
		if it.Prompt != nil {
			in["prompt"] = *it.Prompt
		}
		input, _ := json.Marshal(in)
		if it.Tool == "spawnAgent" {
			for _, id := range it.ReceiverThreads {
				c := m.thread(id)
				c.owner = it.SenderThreadID
				if c.owner == "" {
					c.owner = t.id
				}
				if it.Prompt != nil && c.prompt == "" {
					c.prompt = *it.Prompt
				}
			}
		}
		result := "status " + it.Status
		if len(it.AgentsStates) > 0 && string(it.AgentsStates) != "null" {
			result += ": " + string(it.AgentsStates)
		}
		return []core.Input{
			msg(chat.RoleAssistant, chat.Block{Type: chat.BlockToolUse, ID: it.ID, Name: name, Input: input}),
			msg(chat.RoleUser, chat.ToolResult(it.ID, result, it.Status == "failed")),
		}, nil
	case "mcpToolCall", "dynamicToolCall", "fileChange", "webSearch", "imageView", "imageGeneration":
		name := it.Type
		if it.Type == "mcpToolCall" {
			name = "mcp__" + it.Server + "__" + it.Tool
		} else if it.Tool != "" {
			name = it.Tool
		}
		input := it.Arguments
		if it.Type == "fileChange" {
			input = it.Changes
		}
		if len(input) == 0 || input[0] != '{' {
			b, _ := json.Marshal(map[string]json.RawMessage{"value": orNull(input)})
			input = b
		}
		result := "status " + it.Status
		if len(it.Result) > 0 && string(it.Result) != "null" {
			result = string(it.Result)
		}
		failed := it.Status == "failed" || (len(it.Error) > 0 && string(it.Error) != "null")
		return []core.Input{
			msg(chat.RoleAssistant, chat.Block{Type: chat.BlockToolUse, ID: it.ID, Name: name, Input: input}),
			msg(chat.RoleUser, chat.ToolResult(it.ID, result, failed)),
		}, nil
	}
	m.stats.ignored.Add(1)
	m.log.Debug("codex: item ignored", "type", it.Type)
	return nil, nil
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// commandDone ends a command: a foreground one's result is a tool result
// of its turn; a background one ends its mirrored task, notified, and its
// owner is owed a wake.
func (m *mapper) commandDone(t *thread, c *command, it item) []core.Input {
	if c.done {
		return nil
	}
	c.done = true
	out := ""
	if it.AggregatedOutput != nil {
		out = *it.AggregatedOutput
	}
	failed := it.Status != "completed" || (it.ExitCode != nil && *it.ExitCode != 0)
	if !c.background {
		return []core.Input{core.ExternalMessage{Agent: m.agent, Mirror: m.mirror(t.id), Message: chat.Message{Role: chat.RoleUser,
			Content: []chat.Block{chat.ToolResult(c.id, out, failed)}}}}
	}
	status := "completed"
	switch {
	case c.stopped:
		status = "stopped"
	case failed:
		status = "failed"
	}
	tail := out
	if len(tail) > outputTail {
		tail = "..." + tail[len(tail)-outputTail:]
	}
	summary := tail
	if it.ExitCode != nil {
		summary = fmt.Sprintf("exit code %d\n%s", *it.ExitCode, tail)
	}
	if m.ending {
		// No turn will deliver it: the exit ends the task lost, with a
		// notification to the owner's inbox.
		return []core.Input{core.ExternalTask{Agent: m.agent, ID: c.id, Kind: core.TaskShell, Owner: m.mirror(t.id), Status: status, ExitCode: it.ExitCode, Summary: summary}}
	}
	note, _ := json.Marshal(map[string]any{"task_id": c.id, "kind": "command", "command": c.cmd, "status": status, "exit_code": it.ExitCode, "output": tail})
	t.owed = append(t.owed, owed{id: c.id, text: "<task_notification>\n" + string(note) + "\n</task_notification>"})
	return m.notify(t, core.ExternalTask{Agent: m.agent, ID: c.id, Kind: core.TaskShell, Owner: m.mirror(t.id), Status: status,
		ExitCode: it.ExitCode, Summary: summary, Notify: true})
}

// notify passes on the end of work that owner owns, or holds it while
// the owner is in a turn (see thread.held).
func (m *mapper) notify(owner *thread, in core.ExternalTask) []core.Input {
	if owner != nil && (owner.turn != "" || owner.starting) {
		owner.held = append(owner.held, in)
		return nil
	}
	return []core.Input{in}
}

// release returns what t held, once its turn ended.
func (m *mapper) release(t *thread) []core.Input {
	ins := t.held
	t.held = nil
	return ins
}

// finish returns, when the process has exited, the ends it held for
// turns that will not end: as status updates, not notified, since no
// turn of the process will take them; vigil ends those tasks lost with a
// notification to the owner's inbox.
func (m *mapper) finish() []core.Input {
	var ids []string
	for id := range m.threads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []core.Input
	for _, id := range ids {
		for _, in := range m.release(m.threads[id]) {
			if x, ok := in.(core.ExternalTask); ok {
				x.Notify = false
				out = append(out, x)
			}
		}
	}
	return out
}

// busy says what live work the process has, or "": a turn in progress or
// being started, a command running, a wake owed.
func (m *mapper) busy() string {
	for _, t := range m.threads {
		switch {
		case t.turn != "" || t.starting:
			return "a turn is in progress on thread " + t.id
		case len(t.owed) > 0 || len(t.held) > 0:
			return "thread " + t.id + " is owed a wake"
		}
	}
	for _, id := range m.order {
		if c := m.commands[id]; !c.done {
			return "command " + c.id + " runs"
		}
	}
	return ""
}

// awaiting marks command id as waiting for vigil's answer to its
// approval request, or no longer.
func (m *mapper) awaiting(id string, on bool) {
	if c := m.commands[id]; c != nil {
		c.awaiting = on
	}
}

func (m *mapper) turnCompleted(p turnParams) ([]core.Input, []wake) {
	t := m.thread(p.ThreadID)
	ins := m.backgrounded(t, true)
	for _, id := range m.order {
		// A command whose approval the turn's end withdrew never ran:
		// its call is closed, not mirrored as a task.
		if c := m.commands[id]; c.thread == t.id && c.awaiting && !c.done {
			c.done, c.awaiting = true, false
			ins = append(ins, core.ExternalMessage{Agent: m.agent, Mirror: m.mirror(t.id), Message: chat.Message{Role: chat.RoleUser,
				Content: []chat.Block{chat.ToolResult(c.id, "not run: the turn ended while its permission request waited", true)}}})
		}
	}
	wake := t.wakeTurn
	t.turn, t.wakeTurn, t.starting = "", false, false
	status := p.Turn.Status
	if t.id == m.main {
		end := core.ExternalTurnEnded{Agent: m.agent, Result: t.lastText, Usage: t.usage, NumTurns: t.responses, Wake: wake}
		switch status {
		case "failed":
			end.IsError = true
			if p.Turn.Error != nil {
				end.Result = p.Turn.Error.Message
			}
		case "interrupted":
			end.Interrupted = true
		}
		return append(append(ins, end), m.release(t)...), m.wakes()
	}
	st := "completed"
	switch {
	case status == "interrupted" || t.stopped:
		st = "stopped"
	case status == "failed":
		st = "failed"
	}
	summary := t.lastText
	if status == "failed" && p.Turn.Error != nil {
		summary = p.Turn.Error.Message
	}
	task := core.ExternalTask{Agent: m.agent, ID: t.id, Kind: core.TaskAgent, Owner: m.ownerRef(t), Name: mirrorName(t.id), Status: st, Summary: summary, Usage: t.usage, Notify: true}
	if !m.ending {
		// Codex starts no turn of the owner: the driver does. For a turn
		// that spawn_agent began Codex puts a <subagent_notification> with
		// the result in the owner's next turn, for a later one (a wake)
		// none: the result goes in vigil's notification either way.
		result := summary
		if len(result) > outputTail {
			result = result[:outputTail] + "..."
		}
		note, _ := json.Marshal(map[string]any{"task_id": t.id, "kind": "sub-agent", "status": st, "result": result})
		if o := m.threads[t.owner]; o != nil {
			o.owed = append(o.owed, owed{id: t.id, text: "<task_notification>\n" + string(note) + "\n</task_notification>"})
		}
	}
	owner := m.threads[t.owner]
	if end := m.notify(owner, task); len(end) > 0 {
		ins = append(append(ins, end...), m.release(t)...)
	} else {
		// Its end is held for the owner's turn: what it held follows it
		// there, after its run's end.
		owner.held = append(owner.held, m.release(t)...)
	}
	return ins, m.wakes()
}

// wakes returns a wake for every idle thread that is owed one, and marks
// those threads starting.
func (m *mapper) wakes() []wake {
	if m.ending {
		return nil
	}
	var ids []string
	for id, t := range m.threads {
		if len(t.owed) > 0 && t.turn == "" && !t.starting {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var out []wake
	for _, id := range ids {
		t := m.threads[id]
		w := wake{thread: id}
		texts := []string{"Background work you started has ended; its notifications follow."}
		for _, o := range t.owed {
			w.tasks = append(w.tasks, o.id)
			texts = append(texts, o.text)
		}
		w.text = strings.Join(texts, "\n")
		t.owed = nil
		t.starting, t.wakeNext = true, true
		out = append(out, w)
	}
	return out
}

// snake turns a camelCase name into snake_case.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > 60 {
		return string(r[:60])
	}
	return s
}

// mirrorName names a sub-agent's mirror after its thread: "codex-" and
// the thread id's first eight characters (core makes it unique).
func mirrorName(thread string) string {
	if len(thread) > 8 {
		thread = thread[:8]
	}
	return "codex-" + thread
}
