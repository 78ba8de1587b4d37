package ccwire

import (
	"encoding/json"
	"fmt"
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
	// NewID makes the uuid of each frame.
	NewID func() string

	agents   map[core.AgentID]*agentInfo
	tasks    map[core.TaskID]*taskInfo
	order    []core.TaskID // background tasks, in start order
	openBash map[core.AgentID]string
	turn     *turn
	results  int
	lastSeq  int64
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
		return m.toolStarted(b)
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
	return Frame{
		"type": "system", "subtype": "init", "cwd": m.Cwd, "session_id": m.Session, "tools": tools,
		"mcp_servers": []any{}, "model": m.Model, "permissionMode": m.PermissionMode,
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
		content := make([]any, 0, len(msg.Content))
		for _, c := range msg.Content {
			switch c.Type {
			case chat.BlockText:
				content = append(content, Frame{"type": "text", "text": c.Text})
			case chat.BlockToolUse:
				in := c.Input
				if len(in) == 0 {
					in = json.RawMessage("{}")
				}
				content = append(content, Frame{"type": "tool_use", "id": c.ID, "name": c.Name, "input": in})
			}
		}
		if len(content) == 0 {
			return nil
		}
		f := Frame{
			"type": "assistant", "parent_tool_use_id": m.parent(b.Agent), "session_id": m.Session, "uuid": m.NewID(),
			"message": Frame{"id": "msg_" + m.NewID(), "type": "message", "role": "assistant", "model": m.Model, "content": content,
				"stop_reason": nil, "stop_sequence": nil, "usage": Frame{"input_tokens": 0, "output_tokens": 0}},
		}
		m.subagentFields(f, b.Agent)
		return []Frame{f}
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
		note["usage"] = Frame{"total_tokens": n.Usage.InputTokens + n.Usage.OutputTokens, "tool_uses": 0, "duration_ms": n.Duration.Milliseconds()}
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
