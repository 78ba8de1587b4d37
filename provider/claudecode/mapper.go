package claudecode

import (
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// mapper turns the CLI's output frames into core inputs. It holds what the
// mapping needs to remember between frames: the turn in progress, the
// tasks seen so far and the live background set. It does no I/O and is
// used by one goroutine at a time.
type mapper struct {
	agent core.AgentID
	log   *slog.Logger
	stats *counters

	// session is the CLI's session id, from the last init.
	session string
	// initHeld is set while an init waits for the turn's first content: a
	// turn that ends with an empty num_turns:0 result is a no-op the CLI
	// runs before a wake turn, and neither frame is passed on.
	initHeld bool
	// inTurn is set from an init to its result.
	inTurn bool
	// kinds holds every task seen start (or appear in the live set).
	kinds map[string]core.TaskKind
	// agentByToolUse maps an Agent tool_use id to the task it started.
	agentByToolUse map[string]string
	// filtered holds the foreground tasks of subagents, left out.
	filtered map[string]bool
	// unseen holds tasks the live set listed before their task_started;
	// they are mirrored from the live set unless task_started follows at
	// once.
	unseen []liveTask
	// starts holds started tasks until the tool result that launched them
	// (the next frame, in practice), which names their output file.
	starts []heldStart
	// live is the CLI's set of live background tasks.
	live map[string]bool
	// ending is set once the driver has begun to end the process: no turn
	// of the CLI will deliver a task notification any more.
	ending bool
}

type heldStart struct {
	toolUseID string
	task      core.ExternalTask
}

type liveTask struct {
	id, taskType, description string
}

func newMapper(agent core.AgentID, log *slog.Logger, stats *counters) *mapper {
	return &mapper{
		agent: agent, log: log, stats: stats,
		kinds: map[string]core.TaskKind{}, agentByToolUse: map[string]string{},
		filtered: map[string]bool{}, live: map[string]bool{},
	}
}

// Task ids of this CLI: "b" and 8 base-36 characters for a shell command
// (the CLI checks this very pattern), "a" and 16 hex digits for an agent.
var (
	shellTaskID = regexp.MustCompile(`^b[0-9a-z]{8}$`)
	agentTaskID = regexp.MustCompile(`^a[0-9a-f]{16}$`)
)

// taskKind maps a CLI task type to a vigil task kind; without a type it
// goes by the shape of the id.
func taskKind(taskType, id string) (core.TaskKind, bool) {
	switch taskType {
	case "local_agent", "remote_agent", "in_process_teammate":
		return core.TaskAgent, true
	case "":
	default:
		// local_bash, and background work that is not an agent
		// (local_workflow, monitors): one job with a status and an output.
		return core.TaskShell, true
	}
	switch {
	case shellTaskID.MatchString(id):
		return core.TaskShell, true
	case agentTaskID.MatchString(id):
		return core.TaskAgent, true
	}
	return "", false
}

// feed maps one decoded output line to core inputs.
func (m *mapper) feed(h header, line []byte) []core.Input {
	var out []core.Input
	if !(h.Type == "system" && (h.Subtype == "task_started" || h.Subtype == "background_tasks_changed")) {
		out = m.flushUnseen(out)
		if h.Type != "user" {
			out = m.flushStarts(out)
		}
	}
	switch h.Type {
	case "system":
		return m.system(h, line, out)
	case "assistant", "user":
		return m.message(h, line, out)
	case "result":
		return m.result(line, out)
	case "stream_event", "keep_alive", "rate_limit_event", "tool_progress", "auth_status", "streamlined_text", "streamlined_tool_use_summary":
		m.ignore(h, "not mapped")
		return out
	}
	m.stats.unknownFrames.Add(1)
	m.log.Debug("claude code: unknown frame type; ignored", "type", h.Type, "subtype", h.Subtype)
	return out
}

// finish returns what is still held when the output ends.
func (m *mapper) finish() []core.Input {
	out := m.flushUnseen(nil)
	out = m.flushStarts(out)
	return m.flushInit(out)
}

func (m *mapper) ignore(h header, why string) {
	m.stats.ignoredFrames.Add(1)
	m.log.Debug("claude code: frame ignored", "type", h.Type, "subtype", h.Subtype, "reason", why)
}

// undecodable counts and logs a frame whose fields had unexpected types.
func (m *mapper) undecodable(h header, err error) {
	m.stats.undecodable.Add(1)
	m.log.Warn("claude code: undecodable frame dropped", "type", h.Type, "subtype", h.Subtype, "err", err)
}

func (m *mapper) system(h header, line []byte, out []core.Input) []core.Input {
	switch h.Subtype {
	case "init":
		var f initFrame
		if err := json.Unmarshal(line, &f); err != nil {
			m.undecodable(h, err)
			return out
		}
		out = m.flushInit(out) // an init with no content before it: a turn of its own
		if m.session == "" {
			m.log.Info("claude code: session", "cli_session", f.SessionID, "version", f.Version, "model", f.Model)
		}
		if f.SessionID != "" {
			m.session = f.SessionID
		}
		m.initHeld, m.inTurn = true, true
		return out
	case "task_started", "task_updated", "task_notification", "task_progress":
		var f taskFrame
		if err := json.Unmarshal(line, &f); err != nil {
			m.undecodable(h, err)
			return out
		}
		if f.TaskID == "" {
			m.undecodable(h, errNoTaskID)
			return out
		}
		switch h.Subtype {
		case "task_started":
			return m.taskStarted(f, out)
		case "task_updated":
			return m.taskUpdated(f, out)
		case "task_notification":
			return m.taskNotification(f, out)
		}
		m.ignore(h, "progress of a task")
		return out
	case "background_tasks_changed":
		var f tasksChangedFrame
		if err := json.Unmarshal(line, &f); err != nil {
			m.undecodable(h, err)
			return out
		}
		m.live = map[string]bool{}
		for _, t := range f.Tasks {
			if t.TaskID == "" || m.filtered[t.TaskID] {
				continue
			}
			m.live[t.TaskID] = true
			if _, seen := m.kinds[t.TaskID]; !seen && !slices.ContainsFunc(m.unseen, func(u liveTask) bool { return u.id == t.TaskID }) {
				m.unseen = append(m.unseen, liveTask{id: t.TaskID, taskType: t.TaskType, description: t.Description})
			}
		}
		return out
	}
	m.ignore(h, "system frame not mapped")
	return out
}

var errNoTaskID = errors.New("no task_id")

func (m *mapper) taskStarted(f taskFrame, out []core.Input) []core.Input {
	m.unseen = slices.DeleteFunc(m.unseen, func(u liveTask) bool { return u.id == f.TaskID })
	if f.OwnedBySubagent && f.IsBackgrounded != nil && !*f.IsBackgrounded {
		// A foreground command inside a subagent that ran long enough to be
		// reported: part of the subagent's turn, not a task of the session.
		m.filtered[f.TaskID] = true
		delete(m.live, f.TaskID)
		m.stats.filteredTasks.Add(1)
		m.log.Debug("claude code: foreground task of a subagent left out", "task", f.TaskID, "subagent", f.ParentTaskID)
		return out
	}
	kind, ok := taskKind(f.TaskType, f.TaskID)
	if !ok {
		m.dropTask(f, "unknown task type")
		return out
	}
	m.kinds[f.TaskID] = kind
	if kind == core.TaskAgent && f.ToolUseID != "" {
		m.agentByToolUse[f.ToolUseID] = f.TaskID
	}
	owner := ""
	if f.OwnedBySubagent || f.ParentTaskID != "" {
		owner = f.ParentTaskID
	}
	task := core.ExternalTask{
		Agent: m.agent, ID: f.TaskID, Kind: kind, Owner: owner, Description: f.Description,
		Prompt: f.Prompt, Status: "running", OutputPath: f.OutputFile,
	}
	if f.ToolUseID == "" || task.OutputPath != "" {
		return append(out, task)
	}
	m.starts = append(m.starts, heldStart{toolUseID: f.ToolUseID, task: task})
	return out
}

// flushStarts passes on the started tasks held back.
func (m *mapper) flushStarts(out []core.Input) []core.Input {
	for _, s := range m.starts {
		out = append(out, s.task)
	}
	m.starts = nil
	return out
}

// takeOutputPaths fills the held starts' output files from the tool
// results that launched them ("output_file: <path>" for an agent, "Output
// is being written to: <path>." for a command).
func (m *mapper) takeOutputPaths(content []chat.Block) {
	for i := range m.starts {
		s := &m.starts[i]
		for _, b := range content {
			if b.Type != chat.BlockToolResult || b.ToolUseID != s.toolUseID {
				continue
			}
			re := regexp.MustCompile(`(/\S*` + regexp.QuoteMeta(s.task.ID) + `\.output)\b`)
			if mt := re.FindStringSubmatch(b.Content); mt != nil {
				s.task.OutputPath = mt[1]
			}
		}
	}
}

func (m *mapper) taskUpdated(f taskFrame, out []core.Input) []core.Input {
	if m.filtered[f.TaskID] {
		m.stats.filteredTasks.Add(1)
		return out
	}
	if m.stale(f) {
		return out
	}
	if f.Patch.Status == "" {
		m.log.Debug("claude code: task update without a status; ignored", "task", f.TaskID)
		return out
	}
	kind, ok := m.kindOf(f)
	if !ok {
		m.dropTask(f, "update of a task of unknown kind")
		return out
	}
	return append(out, core.ExternalTask{Agent: m.agent, ID: f.TaskID, Kind: kind, Status: f.Patch.Status})
}

func (m *mapper) taskNotification(f taskFrame, out []core.Input) []core.Input {
	if m.filtered[f.TaskID] {
		delete(m.filtered, f.TaskID)
		m.stats.filteredTasks.Add(1)
		m.log.Debug("claude code: notification of a subagent's foreground task left out", "task", f.TaskID)
		return out
	}
	if m.stale(f) {
		return out
	}
	kind, ok := m.kindOf(f)
	if !ok {
		m.dropTask(f, "notification of a task of unknown kind")
		return out
	}
	status := f.Status
	if status == "" {
		m.log.Warn("claude code: task notification without a status; recorded as failed", "task", f.TaskID)
		status = "failed"
	}
	if m.ending {
		// The CLI reports the tasks it stops on its way out, but will run
		// no turn to deliver them: pass the status on, and let the exit
		// end the task lost with a notification to its owner (rule 7).
		m.log.Info("claude code: task notification while the process is ending; the task ends lost on exit", "task", f.TaskID, "status", status)
		return append(out, core.ExternalTask{Agent: m.agent, ID: f.TaskID, Kind: kind, Status: status, OutputPath: f.OutputFile})
	}
	var usage chat.Usage
	if f.Usage != nil {
		// The CLI reports a subagent's tokens as one total.
		usage.InputTokens = f.Usage.TotalTokens
	}
	return append(out, core.ExternalTask{
		Agent: m.agent, ID: f.TaskID, Kind: kind, Description: f.Description, Status: status,
		OutputPath: f.OutputFile, Summary: f.Summary, Usage: usage, ExitCode: exitCode(kind, f.Summary), Notify: true,
	})
}

// stale reports, and logs, a frame about a task this process never saw
// start: after --resume the CLI reports, as stopped, the tasks its previous
// process left unfinished ("didn't finish before the previous session
// ended"). vigil ended those lost, with a notification, when that process
// exited (rule 7); mirroring them again would record the same work twice.
func (m *mapper) stale(f taskFrame) bool {
	if _, seen := m.kinds[f.TaskID]; seen {
		return false
	}
	m.stats.staleTasks.Add(1)
	m.log.Info("claude code: report of a task of a previous process passed over; it ended lost when that process exited",
		"task", f.TaskID, "status", f.Status+f.Patch.Status, "summary", f.Summary)
	return true
}

// kindOf returns the kind of a task seen before, else the one its type or
// id implies.
func (m *mapper) kindOf(f taskFrame) (core.TaskKind, bool) {
	if k, ok := m.kinds[f.TaskID]; ok {
		return k, true
	}
	return taskKind(f.TaskType, f.TaskID)
}

func (m *mapper) dropTask(f taskFrame, why string) {
	m.stats.undecodable.Add(1)
	m.log.Warn("claude code: task frame dropped", "task", f.TaskID, "task_type", f.TaskType, "reason", why)
}

// flushUnseen mirrors the tasks the live set listed that never started.
func (m *mapper) flushUnseen(out []core.Input) []core.Input {
	for _, u := range m.unseen {
		kind, ok := taskKind(u.taskType, u.id)
		if !ok {
			m.dropTask(taskFrame{TaskID: u.id, TaskType: u.taskType}, "live task of unknown kind")
			continue
		}
		m.kinds[u.id] = kind
		m.log.Info("claude code: a live background task appeared without task_started; mirrored as running", "task", u.id, "task_type", u.taskType)
		out = append(out, core.ExternalTask{Agent: m.agent, ID: u.id, Kind: kind, Description: u.description, Status: "running"})
	}
	m.unseen = nil
	return out
}

// flushInit passes on an init held back.
func (m *mapper) flushInit(out []core.Input) []core.Input {
	if m.initHeld {
		m.initHeld = false
		out = append(out, core.ExternalTurnStarted{Agent: m.agent, Session: m.session})
	}
	return out
}

func (m *mapper) message(h header, line []byte, out []core.Input) []core.Input {
	var f messageFrame
	if err := json.Unmarshal(line, &f); err != nil {
		m.undecodable(h, err)
		return out
	}
	content, skipped, err := blocks(f.Message.Content)
	if err != nil {
		m.undecodable(h, err)
		return out
	}
	if len(skipped) > 0 {
		m.log.Debug("claude code: content blocks without a vigil type left out", "types", skipped)
	}
	mirror := f.AgentID
	if mirror == "" && f.ParentToolUseID != "" {
		mirror = f.ParentToolUseID
		if id, ok := m.agentByToolUse[f.ParentToolUseID]; ok {
			mirror = id
		}
	}
	if mirror == "" {
		// Output of the main agent: its turn has begun.
		out = m.flushInit(out)
	}
	m.takeOutputPaths(content)
	out = m.flushStarts(out)
	if len(content) == 0 {
		return out
	}
	role := chat.RoleAssistant
	if h.Type == "user" {
		role = chat.RoleUser
	}
	return append(out, core.ExternalMessage{Agent: m.agent, Mirror: mirror, Message: chat.Message{Role: role, Content: content}})
}

func (m *mapper) result(line []byte, out []core.Input) []core.Input {
	var f resultFrame
	if err := json.Unmarshal(line, &f); err != nil {
		m.undecodable(header{Type: "result"}, err)
		return out
	}
	wasHeld := m.initHeld
	m.inTurn, m.initHeld = false, false
	if wasHeld && f.NumTurns == 0 && f.Result == "" && !f.IsError {
		// The no-op turn before a wake (or after --resume): the CLI took
		// notifications from its queue without a model call; the turn that
		// follows answers them.
		m.stats.emptyTurns.Add(1)
		m.log.Debug("claude code: empty num_turns:0 turn passed over", "cli_session", f.SessionID)
		return out
	}
	if wasHeld {
		out = append(out, core.ExternalTurnStarted{Agent: m.agent, Session: m.session})
	}
	res := f.Result
	if f.IsError && res == "" {
		res = "claude code: " + f.Subtype
		if f.TerminalReason != "" {
			res += " (" + f.TerminalReason + ")"
		}
		if e := errorsText(f.Errors); e != "" {
			res += ": " + e
		}
	}
	var usage chat.Usage
	if u := f.Usage; u != nil {
		usage = chat.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
	}
	return append(out, core.ExternalTurnEnded{
		Agent: m.agent, Result: res, IsError: f.IsError, Usage: usage, NumTurns: f.NumTurns,
		Wake:        f.Origin != nil && f.Origin.Kind == "task-notification",
		Interrupted: strings.HasPrefix(f.TerminalReason, "aborted"),
	})
}

// liveTasks returns the ids of the CLI's live background tasks.
func (m *mapper) liveTasks() []string {
	ids := make([]string, 0, len(m.live))
	for id := range m.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// exitCodeRe finds the exit status in a background command's notification
// summary: `Background command "x" completed (exit code 0)` or `... failed
// with exit code 3`.
var exitCodeRe = regexp.MustCompile(`exit code (-?\d+)`)

// exitCode returns a shell task's exit status from its summary, or nil.
func exitCode(kind core.TaskKind, summary string) *int {
	if kind != core.TaskShell {
		return nil
	}
	m := exitCodeRe.FindStringSubmatch(summary)
	if m == nil {
		return nil
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return nil
	}
	return &n
}
