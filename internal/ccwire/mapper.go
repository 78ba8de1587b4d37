package ccwire

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// Frame is one line of the protocol, as a JSON object.
type Frame = map[string]any

// Mapper turns a session's events, in order, into the frames Claude Code
// prints for the same happenings. It keeps what it needs of the session
// (agents, tasks, the main agent's current turn) as the events go by; it
// is not safe for concurrent use.
type Mapper struct {
	// Session is the session id the frames carry.
	Session string
	// Model is the model reported in system/init and assistant messages.
	Model string
	// Cwd is reported in system/init.
	Cwd string
	// PermissionMode is reported in system/init, in Claude Code's words.
	PermissionMode string
	// Tools are the tool names reported in system/init.
	Tools []string
	// MCPServers are reported in system/init: {"name", "status"} each.
	MCPServers []Frame
	// NewID makes the uuid of each frame.
	NewID func() string
	// MaxTurns is --max-turns, for the words of a result it ended.
	MaxTurns int
	// Partial adds the CLI's stream_event frames (--include-partial-
	// messages) for the main agent's messages: the live text as it comes
	// (Live), the rest of each message when it is committed.
	Partial bool

	agents   map[core.AgentID]*agentInfo
	tasks    map[core.TaskID]*taskInfo
	order    []core.TaskID // background tasks, in start order
	openBash map[core.AgentID]string
	turn     *turn
	results  int
	lastSeq  int64
	stream   *liveStream // the main agent's message being streamed
}

// liveStream is a main-agent message whose text is being streamed.
type liveStream struct {
	call, msgID string
	text        string // streamed so far
}

type agentInfo struct {
	name, desc string
	owner      core.AgentID
	task       core.TaskID
	useID      string // the Agent tool call that spawned it
}

type taskInfo struct {
	t       core.Task
	useID   string
	run     int  // the agent's run in progress, for run_id
	started bool // task_started was printed
	live    bool
	// An agent task's run in progress: when it began, its tokens and tool
	// calls, for task_progress and task_notification.
	runAt    time.Time
	tokens   int64
	toolUses int
}

// turn is the main agent's run in progress.
type turn struct {
	seq      int
	kind     core.RunKind
	started  time.Time
	rounds   int
	usage    chat.Usage
	cost     int64
	apiTime  time.Duration
	callAt   time.Time
	stop     chat.StopReason
	noteTask core.TaskID
}

// NewMapper returns a mapper for session, reporting model and cwd.
func NewMapper(session, model, cwd string, newID func() string) *Mapper {
	return &Mapper{
		Session: session, Model: model, Cwd: cwd, NewID: newID, PermissionMode: "default",
		agents: map[core.AgentID]*agentInfo{core.MainAgent: {name: "main"}},
		tasks:  map[core.TaskID]*taskInfo{}, openBash: map[core.AgentID]string{},
	}
}

// Map returns the frames for one event, none for most bookkeeping.
func (m *Mapper) Map(e core.Event) []Frame {
	switch b := e.Body.(type) {
	case *core.AgentCreated:
		m.agents[b.Agent.ID] = &agentInfo{name: b.Agent.Name, desc: b.Agent.Description, owner: b.Agent.Owner, task: b.Agent.Task}
	case *core.RunStarted:
		if b.Agent == core.MainAgent {
			m.turn = &turn{seq: b.Seq, kind: b.Kind, started: e.At}
			return []Frame{m.initFrame()}
		}
		if t := m.agentTask(b.Agent); t != nil {
			t.runAt, t.tokens, t.toolUses = e.At, 0, 0
		}
		// A background subagent's later run (a message resumed it) is a
		// new run of its task, as a follow-on is in the CLI.
		if a := m.agents[b.Agent]; a != nil && b.Seq > 1 {
			if t := m.tasks[a.task]; t != nil && t.started && !t.live {
				t.live, t.run = true, b.Seq
				return m.startFrames(t)
			}
		}
	case *core.ModelCallStarted:
		if b.Agent == core.MainAgent && m.turn != nil {
			m.turn.callAt = e.At
		}
	case *core.ModelCallEnded:
		if t := m.agentTask(b.Agent); t != nil {
			t.tokens += b.Usage.InputTokens + b.Usage.CacheReadTokens + b.Usage.CacheWriteTokens + b.Usage.OutputTokens
		}
		if b.Agent == core.MainAgent && m.turn != nil {
			t := m.turn
			t.usage = t.usage.Add(b.Usage)
			t.cost += b.Cost
			if !t.callAt.IsZero() {
				t.apiTime += e.At.Sub(t.callAt)
			}
			if b.Outcome == "completed" {
				t.rounds++
				t.stop = b.StopReason
			}
		}
	case *core.TranscriptAppended:
		fs := m.message(b)
		for _, f := range fs {
			f["timestamp"] = e.At.UTC().Format("2006-01-02T15:04:05.000Z")
		}
		return fs
	case *core.ToolCallStarted:
		return append(m.progress(b, e.At), m.toolStarted(b)...)
	case *core.ToolCallFinished:
		if m.openBash[b.Agent] == b.UseID {
			delete(m.openBash, b.Agent)
		}
	case *core.TaskStarted:
		return m.taskStarted(b.Task)
	case *core.NotificationWritten:
		return m.notification(b.Note, e.At)
	case *core.RunEnded:
		if b.Agent != core.MainAgent {
			return nil
		}
		m.stream = nil
		if b.Status == core.RunCancelled {
			// What the CLI prints when a turn is interrupted.
			return []Frame{{
				"type": "user", "parent_tool_use_id": nil, "session_id": m.Session, "uuid": m.NewID(),
				"message":   Frame{"role": "user", "content": []any{Frame{"type": "text", "text": "[Request interrupted by user]"}}},
				"timestamp": e.At.UTC().Format("2006-01-02T15:04:05.000Z"),
			}, m.result(b, e.At)}
		}
		return []Frame{m.result(b, e.At)}
	}
	return nil
}

func (m *Mapper) initFrame() Frame {
	tools := m.Tools
	if tools == nil {
		tools = []string{}
	}
	mcpServers := m.MCPServers
	if mcpServers == nil {
		mcpServers = []Frame{}
	}
	return Frame{
		"type": "system", "subtype": "init", "cwd": m.Cwd, "session_id": m.Session, "tools": tools,
		"mcp_servers": mcpServers, "model": m.Model, "permissionMode": m.PermissionMode,
		"slash_commands": []string{}, "apiKeySource": "none", "claude_code_version": Version,
		"output_style": "default", "agents": []string{"general-purpose"}, "skills": []string{}, "plugins": []any{},
		"uuid": m.NewID(),
	}
}

// parent returns the tool use that a frame of agent a is nested under:
// the Agent call that spawned a, or none for the main agent.
func (m *Mapper) parent(a core.AgentID) any {
	if info := m.agents[a]; info != nil && info.useID != "" {
		return info.useID
	}
	return nil
}

func (m *Mapper) message(b *core.TranscriptAppended) []Frame {
	msg := b.Message
	switch msg.Role {
	case chat.RoleAssistant:
		// As the CLI: one assistant message per content block, all with
		// the API message's id.
		var blocks []chat.Block
		for _, c := range msg.Content {
			if c.Type == chat.BlockText || c.Type == chat.BlockToolUse {
				blocks = append(blocks, c)
			}
		}
		if len(blocks) == 0 {
			return nil
		}
		if m.Partial && b.Agent == core.MainAgent {
			return m.streamed(blocks)
		}
		msgID := "msg_" + m.NewID()
		out := make([]Frame, 0, len(blocks))
		for _, c := range blocks {
			out = append(out, m.assistant(b.Agent, msgID, c))
		}
		return out
	case chat.RoleUser:
		var content []any
		for _, c := range msg.Content {
			if c.Type == chat.BlockToolResult {
				content = append(content, Frame{"type": "tool_result", "tool_use_id": c.ToolUseID, "content": c.Content, "is_error": c.IsError})
			}
		}
		if len(content) == 0 {
			// Prompts, notifications and messages are the program's own
			// input or vigil's; the CLI does not echo them either.
			return nil
		}
		f := Frame{
			"type": "user", "parent_tool_use_id": m.parent(b.Agent), "session_id": m.Session, "uuid": m.NewID(),
			"message": Frame{"role": "user", "content": content},
		}
		m.subagentFields(f, b.Agent)
		return []Frame{f}
	}
	return nil
}

// Live returns the stream_event frames for a piece of the main agent's
// live text: the message's start with its first piece, then a
// content_block_delta per piece. None unless Partial.
func (m *Mapper) Live(l LiveText) []Frame {
	if !m.Partial || l.Agent != core.MainAgent {
		return nil
	}
	if l.Reset {
		// The call is retried: the next piece starts a new message, as a
		// retried request streams one in the CLI.
		m.stream = nil
		return nil
	}
	var out []Frame
	st := m.stream
	if st == nil || st.call != l.Call {
		st = &liveStream{call: l.Call, msgID: "msg_" + m.NewID()}
		m.stream = st
		out = append(out, m.messageStart(st.msgID), m.streamEvent(st.msgID, Frame{"type": "content_block_start", "index": 0, "content_block": Frame{"type": "text", "text": ""}}))
	}
	if l.Text != "" {
		st.text += l.Text
		out = append(out, m.streamEvent(st.msgID, Frame{"type": "content_block_delta", "index": 0, "delta": Frame{"type": "text_delta", "text": l.Text}}))
	}
	return out
}

// assistant is the assistant message of one content block of agent a's
// message msgID.
func (m *Mapper) assistant(a core.AgentID, msgID string, c chat.Block) Frame {
	var block Frame
	if c.Type == chat.BlockText {
		block = Frame{"type": "text", "text": c.Text}
	} else {
		in := c.Input
		if len(in) == 0 {
			in = json.RawMessage("{}")
		}
		block = Frame{"type": "tool_use", "id": c.ID, "name": c.Name, "input": in}
	}
	f := Frame{
		"type": "assistant", "parent_tool_use_id": m.parent(a), "session_id": m.Session, "uuid": m.NewID(),
		"message": Frame{"id": msgID, "type": "message", "role": "assistant", "model": m.Model, "content": []any{block},
			"stop_reason": nil, "stop_sequence": nil, "usage": Frame{"input_tokens": 0, "output_tokens": 0}},
	}
	m.subagentFields(f, a)
	return f
}

// streamed returns the frames of a committed main-agent message with
// Partial, in the CLI's order: the stream_event frames not sent live
// (tool uses, text pieces dropped for a slow reader, or the whole message
// when nothing was streamed), each block's assistant message before its
// content_block_stop, then message_delta and message_stop.
func (m *Mapper) streamed(blocks []chat.Block) []Frame {
	st := m.stream
	m.stream = nil
	opened := st != nil
	var out []Frame
	if !opened {
		st = &liveStream{msgID: "msg_" + m.NewID()}
		out = append(out, m.messageStart(st.msgID))
	}
	ev := func(f Frame) Frame { return m.streamEvent(st.msgID, f) }
	index := 0
	stop := "end_turn"
	for i, c := range blocks {
		if c.Type == chat.BlockToolUse {
			stop = "tool_use"
		}
		if i == 0 && opened {
			if c.Type == chat.BlockText {
				// Streamed live: what a slow reader missed, then its end.
				if rest, ok := strings.CutPrefix(c.Text, st.text); ok && rest != "" {
					out = append(out, ev(Frame{"type": "content_block_delta", "index": 0, "delta": Frame{"type": "text_delta", "text": rest}}))
				}
				out = append(out, m.assistant(core.MainAgent, st.msgID, c), ev(Frame{"type": "content_block_stop", "index": 0}))
				index = 1
				continue
			}
			out = append(out, ev(Frame{"type": "content_block_stop", "index": 0}))
			index = 1
		}
		var start, delta Frame
		if c.Type == chat.BlockText {
			start = Frame{"type": "text", "text": ""}
			delta = Frame{"type": "text_delta", "text": c.Text}
		} else {
			in := string(c.Input)
			if in == "" {
				in = "{}"
			}
			start = Frame{"type": "tool_use", "id": c.ID, "name": c.Name, "input": Frame{}}
			delta = Frame{"type": "input_json_delta", "partial_json": in}
		}
		out = append(out,
			ev(Frame{"type": "content_block_start", "index": index, "content_block": start}),
			ev(Frame{"type": "content_block_delta", "index": index, "delta": delta}),
			m.assistant(core.MainAgent, st.msgID, c),
			ev(Frame{"type": "content_block_stop", "index": index}))
		index++
	}
	return append(out,
		ev(Frame{"type": "message_delta", "delta": Frame{"stop_reason": stop, "stop_sequence": nil}, "usage": Frame{"output_tokens": 0}}),
		ev(Frame{"type": "message_stop"}))
}

func (m *Mapper) messageStart(msgID string) Frame {
	return m.streamEvent(msgID, Frame{"type": "message_start", "message": Frame{
		"id": msgID, "type": "message", "role": "assistant", "model": m.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": Frame{"input_tokens": 0, "output_tokens": 0},
	}})
}

// streamEvent is a stream_event frame of the main agent's message msgID.
func (m *Mapper) streamEvent(msgID string, ev Frame) Frame {
	return Frame{"type": "stream_event", "event": ev, "session_id": m.Session, "parent_tool_use_id": nil, "uuid": m.NewID(), "api_message_id": msgID}
}

// agentTask returns the background task of a subagent, while it is live.
func (m *Mapper) agentTask(a core.AgentID) *taskInfo {
	info := m.agents[a]
	if a == core.MainAgent || info == nil || info.task == "" {
		return nil
	}
	if t := m.tasks[info.task]; t != nil && t.t.Kind == core.TaskAgent {
		return t
	}
	return nil
}

// progress is the CLI's task_progress frame for a tool call of a
// background subagent: what it runs, and its usage so far.
func (m *Mapper) progress(b *core.ToolCallStarted, at time.Time) []Frame {
	t := m.agentTask(b.Agent)
	if t == nil || !t.started || !t.live {
		return nil
	}
	t.toolUses++
	var in struct {
		Description string `json:"description"`
	}
	_ = json.Unmarshal(b.Call.Input, &in) // a tool without one is named instead
	desc := in.Description
	if desc == "" {
		desc = b.Call.Name
	}
	var ms int64
	if !t.runAt.IsZero() {
		ms = at.Sub(t.runAt).Milliseconds()
	}
	return []Frame{{
		"type": "system", "subtype": "task_progress", "task_id": string(t.t.ID), "run_id": core.NoteKey{Task: t.t.ID, Run: t.run}.String(),
		"tool_use_id": t.useID, "description": "Running " + desc, "subagent_type": "general-purpose",
		"usage":          Frame{"total_tokens": t.tokens, "tool_uses": t.toolUses, "duration_ms": ms},
		"last_tool_name": b.Call.Name, "session_id": m.Session, "uuid": m.NewID(),
	}}
}

// subagentFields adds what the CLI adds to a subagent's messages.
func (m *Mapper) subagentFields(f Frame, a core.AgentID) {
	if a == core.MainAgent {
		return
	}
	info := m.agents[a]
	if info == nil {
		return
	}
	f["agent_id"] = string(a)
	f["subagent_type"] = "general-purpose"
	f["task_description"] = info.desc
}

func (m *Mapper) toolStarted(b *core.ToolCallStarted) []Frame {
	c := b.Call
	switch {
	case c.Child != "":
		info := m.agents[c.Child]
		if info == nil {
			return nil
		}
		info.useID = c.UseID
		if t := m.tasks[info.task]; t != nil && !t.started {
			t.useID = c.UseID
			return m.startFrames(t)
		}
	case c.Name == "Bash":
		m.openBash[b.Agent] = c.UseID
		// A background shell task started before its call was recorded.
		for _, id := range m.order {
			if t := m.tasks[id]; t.t.Kind == core.TaskShell && t.t.Owner == b.Agent && !t.started {
				t.useID = c.UseID
				return m.startFrames(t)
			}
		}
	}
	return nil
}

func (m *Mapper) taskStarted(t core.Task) []Frame {
	if !t.Background {
		return nil
	}
	info := &taskInfo{t: t, live: true, run: 1}
	if t.Kind == core.TaskShell {
		info.run = 0 // a shell task's one notification is t#exit
	}
	m.tasks[t.ID] = info
	m.order = append(m.order, t.ID)
	switch t.Kind {
	case core.TaskShell:
		if use, ok := m.openBash[t.Owner]; ok {
			info.useID = use
			return m.startFrames(info)
		}
	case core.TaskAgent:
		if a := m.agents[t.Agent]; a != nil && a.useID != "" {
			info.useID = a.useID
			return m.startFrames(info)
		}
	}
	return nil // printed once the tool call that started it is known
}

func taskType(k core.TaskKind) string {
	if k == core.TaskShell {
		return "local_bash"
	}
	return "local_agent"
}

// startFrames are background_tasks_changed then task_started.
func (m *Mapper) startFrames(t *taskInfo) []Frame {
	t.started = true
	f := Frame{
		"type": "system", "subtype": "task_started", "task_id": string(t.t.ID), "tool_use_id": t.useID,
		"description": t.t.Description, "is_backgrounded": true, "task_type": taskType(t.t.Kind),
		"run_id": core.NoteKey{Task: t.t.ID, Run: t.run}.String(), "session_id": m.Session, "uuid": m.NewID(),
	}
	if t.t.Kind == core.TaskAgent {
		f["subagent_type"] = "general-purpose"
		f["prompt"] = t.t.Prompt
		f["spawn_depth"] = 1
	}
	return []Frame{m.tasksChanged(), f}
}

func (m *Mapper) tasksChanged() Frame {
	list := []any{}
	for _, id := range m.order {
		t := m.tasks[id]
		if !t.live {
			continue
		}
		e := Frame{"task_id": string(id), "task_type": taskType(t.t.Kind), "description": t.t.Description}
		if t.t.Kind == core.TaskAgent {
			e["subagent_type"] = "general-purpose"
		}
		list = append(list, e)
	}
	return Frame{"type": "system", "subtype": "background_tasks_changed", "tasks": list, "session_id": m.Session, "uuid": m.NewID()}
}

// Summary is the summary line the CLI puts in a task_notification.
func Summary(t core.Task, n core.Note) string {
	if t.Kind == core.TaskShell {
		if n.Status == "completed" {
			return fmt.Sprintf("Background command %q completed (exit code 0)", t.Description)
		}
		if n.ExitCode != nil {
			return fmt.Sprintf("Background command %q failed with exit code %d", t.Description, *n.ExitCode)
		}
		return fmt.Sprintf("Background command %q %s", t.Description, n.Status)
	}
	if n.Reply != "" {
		return n.Reply
	}
	if n.Error != "" {
		return n.Error
	}
	return fmt.Sprintf("Agent %q %s", t.Description, n.Status)
}

func (m *Mapper) notification(n core.Note, at time.Time) []Frame {
	t := m.tasks[n.Key.Task]
	if t == nil {
		return nil // a foreground task: the CLI prints nothing for it
	}
	t.live = false
	status := n.Status
	patch := Frame{"status": status, "end_time": at.UnixMilli()}
	note := Frame{
		"type": "system", "subtype": "task_notification", "task_id": string(t.t.ID), "run_id": n.Key.String(), "tool_use_id": t.useID,
		"status": status, "output_file": n.OutputPath, "summary": Summary(t.t, n),
		"session_id": m.Session, "uuid": m.NewID(),
	}
	if t.t.Kind == core.TaskAgent {
		note["summary_is_report"] = n.Reply != ""
		note["usage"] = Frame{"total_tokens": n.Usage.InputTokens + n.Usage.OutputTokens, "tool_uses": t.toolUses, "duration_ms": n.Duration.Milliseconds()}
	}
	return []Frame{
		{"type": "system", "subtype": "task_updated", "task_id": string(t.t.ID), "run_id": n.Key.String(), "patch": patch, "session_id": m.Session, "uuid": m.NewID()},
		note,
		m.tasksChanged(),
	}
}

func (m *Mapper) result(b *core.RunEnded, at time.Time) Frame {
	t := m.turn
	if t == nil || t.seq != b.Seq {
		t = &turn{seq: b.Seq, started: at}
	}
	m.turn = nil
	subtype, isErr, reason := "success", false, "completed"
	switch b.Status {
	case core.RunCompleted:
	case core.RunCancelled:
		subtype, isErr, reason = "error_during_execution", true, "aborted_streaming"
	case core.RunRoundLimit:
		subtype, isErr, reason = "error_max_turns", true, "max_turns"
	default:
		subtype, isErr, reason = "error_during_execution", true, string(b.Status)
	}
	var origin any
	if t.kind == core.RunKind(core.KindNotification) {
		origin = Frame{"kind": "task-notification", "producer": "session-task"}
	}
	f := Frame{
		"type": "result", "subtype": subtype, "is_error": isErr, "num_turns": t.rounds,
		"result": b.Reply, "session_id": m.Session, "duration_ms": at.Sub(t.started).Milliseconds(),
		"duration_api_ms": t.apiTime.Milliseconds(), "total_cost_usd": float64(t.cost) / 1e6,
		"usage": Frame{
			"input_tokens": t.usage.InputTokens, "output_tokens": t.usage.OutputTokens,
			"cache_read_input_tokens": t.usage.CacheReadTokens, "cache_creation_input_tokens": t.usage.CacheWriteTokens,
		},
		"modelUsage": Frame{}, "permission_denials": []any{}, "stop_reason": stopReason(t.stop),
		"terminal_reason": reason, "result_index": m.results, "uuid": m.NewID(),
	}
	if origin != nil {
		f["origin"] = origin
	}
	if isErr {
		delete(f, "result") // as the CLI: an error result has errors instead
		msg := b.Error
		if msg == "" {
			msg = "run " + string(b.Status)
		}
		if b.Status == core.RunRoundLimit {
			// The CLI's words, and its count: the turn it did not take is
			// one of num_turns.
			n := m.MaxTurns
			if n == 0 {
				n = t.rounds
			}
			msg = fmt.Sprintf("Reached maximum number of turns (%d)", n)
			f["num_turns"] = t.rounds + 1
			f["stop_reason"] = "tool_use"
		}
		f["errors"] = []string{msg}
	}
	m.results++
	return f
}

func stopReason(s chat.StopReason) any {
	if s == "" {
		return nil
	}
	return string(s)
}
