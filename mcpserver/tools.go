package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/text"
)

// by is who the runtime records as the author of the callers' actions.
const by = "mcp caller"

// Caller is the owner key argument every tool takes.
type Caller struct {
	OwnerKey string `json:"owner_key,omitempty" jsonschema:"your owner key: the identity that owns your tasks. Leave it out to use this connection's; give the key vigil_spawn returned to find your tasks again after a reconnect or a restart"`
}

func (c Caller) ownerKey() string { return c.OwnerKey }

type keyed interface{ ownerKey() string }

// SpawnInput is vigil_spawn's input.
type SpawnInput struct {
	Caller
	Prompt      string `json:"prompt" jsonschema:"the task for the agent"`
	Name        string `json:"name,omitempty" jsonschema:"a name to address it by in vigil_send (unique among your live tasks: a task that ended and was acknowledged, or was closed, frees its name); default: its session id"`
	Description string `json:"description,omitempty" jsonschema:"a short description (default: the prompt's first line)"`
	Provider    string `json:"provider,omitempty" jsonschema:"the model provider (default: the server's)"`
	Model       string `json:"model,omitempty" jsonschema:"the model (default: the provider's)"`
	Cwd         string `json:"cwd,omitempty" jsonschema:"its working directory (default: the server's)"`
	// The agent's budget (DESIGN rule 10); absent bounds take the server's
	// defaults.
	BudgetTokens  int64   `json:"budget_tokens,omitempty" jsonschema:"bound the agent to this many tokens, input and output (default: the server's budget)"`
	BudgetRounds  int     `json:"budget_rounds,omitempty" jsonschema:"bound the agent to this many model rounds"`
	BudgetSeconds int64   `json:"budget_seconds,omitempty" jsonschema:"bound the agent's run time, in seconds"`
	BudgetUSD     float64 `json:"budget_usd,omitempty" jsonschema:"bound the agent's cost in US dollars (models with a known price)"`
}

// SpawnOutput is vigil_spawn's result.
type SpawnOutput struct {
	Task     string `json:"task" jsonschema:"the task id, <session>/<task>"`
	Session  string `json:"session"`
	Agent    string `json:"agent" jsonschema:"the agent's name"`
	OwnerKey string `json:"owner_key" jsonschema:"the identity that owns the task; pass it as owner_key after a reconnect"`
	Detail   string `json:"detail"`
}

// SendInput is vigil_send's input.
type SendInput struct {
	Caller
	Task     string `json:"task,omitempty" jsonschema:"the task whose agent gets the message, <session>/<task>"`
	Agent    string `json:"agent,omitempty" jsonschema:"or the agent: its name, or <session>/<agent>"`
	Message  string `json:"message" jsonschema:"the message"`
	Priority string `json:"priority,omitempty" jsonschema:"now: interrupts the model round in flight; next (default): joins the running turn at its next model round; later: waits for the turn to end"`
}

// SendOutput is what happened to a message (DESIGN rule 3).
type SendOutput struct {
	Message       string   `json:"message" jsonschema:"the message id, <session>/<msg>"`
	Task          string   `json:"task"`
	Agent         string   `json:"agent"`
	Outcome       string   `json:"outcome" jsonschema:"joined (the running turn sees it at its next round), queued-behind-stop (the agent was finishing run N; run N+1 answers), resumed (the agent was idle; a run started), rejected (not delivered; see reason), pending (its model round is in flight: joins run N or run N+1 answers)"`
	Reason        string   `json:"reason,omitempty"`
	Run           int      `json:"run,omitempty" jsonschema:"the run the outcome names: joined, resumed, or for queued-behind-stop the run that was stopping"`
	Notifications []string `json:"notifications,omitempty" jsonschema:"the notifications that will carry the answer, in order"`
	Detail        string   `json:"detail"`
}

// AckInput is vigil_ack's input.
type AckInput struct {
	Caller
	IDs []string `json:"ids" jsonschema:"ids of notifications that wait returned"`
}

// AckOutput is vigil_ack's result.
type AckOutput struct {
	Acknowledged []string `json:"acknowledged"`
	Detail       string   `json:"detail"`
}

// TaskInput names one task.
type TaskInput struct {
	Caller
	Task string `json:"task" jsonschema:"the task id, <session>/<task>"`
}

// TaskStatusOutput is vigil_status's result.
type TaskStatusOutput struct {
	TaskInfo
	Session       string        `json:"session"`
	Runs          []RunInfo     `json:"runs" jsonschema:"the agent's runs, the one in progress last"`
	Notifications []NoteInfo    `json:"notifications" jsonschema:"the task's notifications, one per run, acknowledged or not"`
	Queue         []QueueItem   `json:"queue,omitempty" jsonschema:"items queued in the session's inboxes"`
	Why           []QueueStatus `json:"why,omitempty" jsonschema:"why each non-empty inbox is not draining"`
	Agents        []AgentWhy    `json:"agents" jsonschema:"what each agent of the session is doing or waiting on, blockers first"`
	// Spent is what the agent's tree used (tokens by kind, rounds, run
	// time, cost in micro-USD); Budget what the session allows.
	Spent  vigil.Spend  `json:"spent" jsonschema:"what the agent and its subagents used: usage by token kind, rounds, run time (ns), cost_micros (micro-USD, priced models only)"`
	Budget vigil.Budget `json:"budget" jsonschema:"the session's budget; when it is spent runs end budget_exceeded"`
}

// OutputInput is vigil_output's input.
type OutputInput struct {
	Caller
	Task   string `json:"task" jsonschema:"the task id, <session>/<task>"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to read from (0)"`
	Limit  int64  `json:"limit,omitempty" jsonschema:"bytes to read at most (65536)"`
}

// OutputOutput is vigil_output's result.
type OutputOutput struct {
	Task   string `json:"task"`
	Kind   string `json:"kind" jsonschema:"agent: the agent's conversation as text; shell: the process's output"`
	State  string `json:"state"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next" jsonschema:"the offset to read from next"`
	EOF    bool   `json:"eof" jsonschema:"no more output for now"`
	Data   string `json:"data"`
}

// StopOutput is vigil_stop's result.
type StopOutput struct {
	TaskInfo
	Outcome string `json:"outcome" jsonschema:"stopped, or not-running"`
	Detail  string `json:"detail"`
}

// CloseOutput is vigil_close's result.
type CloseOutput struct {
	Task    string `json:"task"`
	Agent   string `json:"agent,omitempty"`
	Outcome string `json:"outcome" jsonschema:"closed, or already-closed"`
	// Notifications are the task's notifications the caller had not
	// acknowledged: closing delivers them here, and no wait returns them.
	Notifications []Notification `json:"notifications" jsonschema:"the task's notifications you had not acknowledged: they are delivered here, and no wait returns them again"`
	Stopped       bool           `json:"stopped,omitempty" jsonschema:"it was running: its run ended cancelled"`
	Detail        string         `json:"detail"`
}

// ListInput is vigil_list's input.
type ListInput struct {
	Caller
	IncludeClosed bool `json:"include_closed,omitempty" jsonschema:"list closed tasks too"`
}

// ListOutput is vigil_list's result.
type ListOutput struct {
	Tasks    []TaskInfo `json:"tasks" jsonschema:"your tasks, oldest first"`
	OwnerKey string     `json:"owner_key"`
	Detail   string     `json:"detail"`
}

// QueueInput is vigil_queue's input.
type QueueInput struct {
	Caller
	Task string `json:"task,omitempty" jsonschema:"only this task's session (default: all your open tasks)"`
}

// QueueOutput is vigil_queue's result.
type QueueOutput struct {
	Items  []QueueItem   `json:"items"`
	Status []QueueStatus `json:"status" jsonschema:"why each non-empty inbox is not draining"`
	Held   []string      `json:"held,omitempty" jsonschema:"tasks whose session holds its user prompts"`
}

// CancelInput is vigil_queue_cancel's input.
type CancelInput struct {
	Caller
	Item string `json:"item" jsonschema:"the item id from vigil_queue, <session>/<item>"`
}

// HoldInput is vigil_hold's and vigil_resume's input.
type HoldInput struct {
	Caller
	Task   string `json:"task" jsonschema:"the task whose session's user prompts to hold or release"`
	Reason string `json:"reason,omitempty"`
}

// DoneOutput is the result of an action with nothing more to say.
type DoneOutput struct {
	Detail string `json:"detail"`
}

// schemaFor infers T's input schema and lets patch refine it.
func schemaFor[T any](patch func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %T: %v", *new(T), err)) // a programming error, caught by every test
	}
	if patch != nil {
		patch(s.Properties)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// addTool registers a tool whose handler gets the caller's identity.
func addTool[In keyed, Out any](s *Server, ms *mcp.Server, conn func(*mcp.CallToolRequest) string, t *mcp.Tool,
	h func(ctx context.Context, owner string, in In) (Out, error)) {
	mcp.AddTool(ms, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		owner, err := ownerOf(in.ownerKey(), conn(req))
		if err != nil {
			return nil, zero, err
		}
		ctx, cancel := context.WithCancel(context.WithValue(ctx, limitKey{}, limitFor(req.Extra, req.Session, s.limitOf)))
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		out, err := h(ctx, owner, in)
		if err != nil {
			if s.ctx.Err() != nil {
				err = errShuttingDown
			}
			s.log.Debug("mcp tool error", "tool", t.Name, "err", err)
			return nil, zero, err
		}
		return nil, out, nil
	})
}

// limitKey is the context key of the calling client's wait limit.
type limitKey struct{}

// limitFrom returns the calling client's wait limit.
func limitFrom(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(limitKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return DefaultClientWait
}

// addTools registers every tool on ms.
func (s *Server) addTools(ms *mcp.Server, conn func(*mcp.CallToolRequest) string) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	addTool(s, ms, conn, &mcp.Tool{
		Name: ToolSpawn,
		Description: "Start a durable background agent (a vigil agent, not your built-in sub-agent) on a task and return its task id at once. " +
			"Use it instead of your built-in sub-agent tool when the work may outlast this turn or this session, take longer than one tool call may, or must survive a restart. " +
			"When a run of it ends you get a notification with its reply: call " + ToolWait + " to block until then. " +
			"The agent and its notifications survive disconnects and restarts of vigil. A name is yours while its task is live; " + ToolClose + " frees it.",
		InputSchema: schemaFor[SpawnInput](func(p map[string]*jsonschema.Schema) { p["prompt"].MinLength = ptr(1) }),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(true), DestructiveHint: ptr(false)},
	}, s.spawn)
	addTool(s, ms, conn, &mcp.Tool{
		Name: ToolSend,
		Description: "Send a message to one of your vigil agents (by task id or name), running or finished, and learn what happened to it: " +
			"joined (its running turn sees it at its next round), queued-behind-stop (it was finishing run N; run N+1 answers: two notifications), " +
			"resumed (it was idle; a run started), rejected (with the reason), or pending (its model round is in flight: the message joins run N, or run N+1 answers). " +
			"It returns at once, never waiting on the agent's model. The answer comes as a notification: call " + ToolWait + ".",
		InputSchema: schemaFor[SendInput](func(p map[string]*jsonschema.Schema) {
			p["message"].MinLength = ptr(1)
			p["priority"].Enum = []any{"now", "next", "later"}
		}),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(true), DestructiveHint: ptr(false)},
	}, s.sendMessage)
	addTool(s, ms, conn, &mcp.Tool{
		Name: ToolWait,
		Description: "Block until a notification from your vigil agents arrives, or the timeout passes, and return every notification you have not acknowledged " +
			"(each: key task#run, status, reply or exit code, the messages the run answered) and the tasks still running. " +
			"Wait for one task, any of a list (tasks), or any of yours (no tasks). Pass the ids of the notifications the previous wait returned in ack: " +
			"a notification is returned until acknowledged, and never after. Returns at once when nothing in scope is running. " +
			"A wait that returns with tasks still running and no notification (timed_out) is normal: call it again.",
		InputSchema: schemaFor[WaitInput](func(p map[string]*jsonschema.Schema) {
			p["timeout_seconds"].Minimum = ptr(0.0)
			p["timeout_seconds"].Maximum = ptr(maxWaitCap.Seconds())
		}),
		// Calling it again returns the same notifications: a bridge may.
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
	}, s.wait)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolAck,
		Description: "Acknowledge notifications that " + ToolWait + " returned: they are delivered and no wait returns them again. Acknowledging twice is harmless. (" + ToolWait + "'s ack argument does the same.)",
		InputSchema: schemaFor[AckInput](nil),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
	}, s.ackTool)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolStatus,
		Description: "Show one of your vigil tasks: its state, its runs with their replies, its notifications (acknowledged or not), its queue, why a queue is not draining, and what each agent of its session is doing or waiting on (a permission request that needs you first).",
		InputSchema: schemaFor[TaskInput](nil),
		Annotations: readOnly,
	}, s.taskStatus)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolApprovals,
		Description: "List the permission requests your vigil agents (and their subagents) wait on: the tool, the call, why it needs a person, and when it is denied if nobody answers.",
		InputSchema: schemaFor[PendingApprovalsInput](nil),
		Annotations: readOnly,
	}, s.pendingApprovals)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolApprove,
		Description: "Answer a permission request from " + ToolApprovals + ": allow (once), always (allow, and add a session rule that allows the same call again) or deny (with a reason the agent reads).",
		InputSchema: schemaFor[ApproveInput](func(p map[string]*jsonschema.Schema) { p["answer"].Enum = []any{"allow", "always", "deny"} }),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
	}, s.approve)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolOutput,
		Description: "Read a vigil task's output from a byte offset: an agent task's conversation as text, or a shell task's output. Returns next, the offset to read from next.",
		InputSchema: schemaFor[OutputInput](func(p map[string]*jsonschema.Schema) {
			p["offset"].Minimum = ptr(0.0)
			p["limit"].Minimum = ptr(0.0)
			p["limit"].Maximum = ptr(float64(1 << 20))
		}),
		Annotations: readOnly,
	}, s.taskOutput)
	addTool(s, ms, conn, &mcp.Tool{
		Name: ToolStop,
		Description: "Stop the run in progress of one of your vigil tasks (it ends cancelled, with a notification); the task stays, and " + ToolSend + " can resume it later. " +
			"To end a task for good and free its name, use " + ToolClose + ".",
		InputSchema: schemaFor[TaskInput](nil),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.stopTask)
	addTool(s, ms, conn, &mcp.Tool{
		Name: ToolClose,
		Description: "End one of your vigil tasks for good: stop it if it runs (with its own agents and commands), free its name, and drop it from " + ToolList + ". " +
			"It returns the notifications of the task you had not acknowledged, so nothing is lost unseen; no wait returns them again.",
		InputSchema: schemaFor[TaskInput](nil),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.closeTask)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolList,
		Description: "List your open vigil tasks, oldest first, with their state and how many of their notifications you have not acknowledged. Close the ended ones you no longer need with " + ToolClose + ".",
		InputSchema: schemaFor[ListInput](nil),
		Annotations: readOnly,
	}, s.listTasks)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolQueue,
		Description: "List what is queued in the inboxes of your vigil tasks' sessions (messages, prompts, your unacknowledged notifications) and why a non-empty inbox is not draining.",
		InputSchema: schemaFor[QueueInput](nil),
		Annotations: readOnly,
	}, s.queueList)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolQueueCancel,
		Description: "Remove a queued prompt or continuation (from " + ToolQueue + "). Messages and notifications are always delivered and cannot be cancelled.",
		InputSchema: schemaFor[CancelInput](nil),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, s.queueCancel)
	addTool(s, ms, conn, &mcp.Tool{
		Name: ToolHold,
		Description: "Hold the user prompts queued in a vigil task's session (a person's prompts to you, e.g. from the web UI) until " + ToolResume + ". " +
			"Holds are for people's prompts only: notifications and messages between agents are never held.",
		InputSchema: schemaFor[HoldInput](nil),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
	}, s.hold)
	addTool(s, ms, conn, &mcp.Tool{
		Name:        ToolResume,
		Description: "Release the hold on a vigil task's session's user prompts.",
		InputSchema: schemaFor[HoldInput](nil),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
	}, s.resume)
}

// validName reports whether a spawn name is usable.
func validName(n string) error {
	switch {
	case n == "":
		return nil
	case len(n) > 64:
		return errors.New("name is longer than 64 bytes")
	case strings.ContainsAny(n, "/# \t\n"):
		return fmt.Errorf("name %q: no '/', '#' or spaces, please", n)
	case n == "main" || n == "user" || n == "you":
		return fmt.Errorf("name %q is reserved", n)
	}
	return nil
}

func (s *Server) spawn(ctx context.Context, owner string, in SpawnInput) (SpawnOutput, error) {
	name := strings.TrimSpace(in.Name)
	if strings.TrimSpace(in.Prompt) == "" {
		return SpawnOutput{}, errors.New("prompt is empty")
	}
	if err := validName(name); err != nil {
		return SpawnOutput{}, err
	}
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	if name != "" {
		found, err := s.tasksNamed(ctx, owner, name)
		if err != nil {
			return SpawnOutput{}, err
		}
		for _, f := range found {
			if f.live {
				return SpawnOutput{}, fmt.Errorf("your task %s named %q is still live (working, or with notifications you have not acknowledged); choose another name, message it with %s, or end it with %s", f.task, name, ToolSend, ToolClose)
			}
		}
	}
	p := &vigil.SessionParams{
		Title: text.FirstLine(in.Description, 60), Provider: in.Provider, Cwd: in.Cwd, Permissions: s.opts.Permissions,
		Owner: owner, Caller: true,
		Budget: vigil.Budget{Tokens: in.BudgetTokens, Rounds: in.BudgetRounds, Wall: time.Duration(in.BudgetSeconds) * time.Second, CostMicros: int64(in.BudgetUSD * 1e6)},
	}
	if in.BudgetTokens < 0 || in.BudgetRounds < 0 || in.BudgetSeconds < 0 || in.BudgetUSD < 0 {
		return SpawnOutput{}, errors.New("a budget's bounds are positive")
	}
	if p.Title == "" {
		p.Title = text.FirstLine(in.Prompt, 60)
	}
	if p.Provider == "" {
		p.Provider = s.opts.Provider
	}
	if p.Provider == s.opts.Provider {
		p.Model, p.SubagentModel = s.opts.Model, s.opts.SubagentModel
		if p.SubagentModel == "" {
			p.SubagentModel = s.opts.Model
		}
	}
	if p.Cwd == "" {
		p.Cwd = s.opts.Cwd
	}
	if s.opts.ProjectRules != nil && p.Cwd != "" {
		p.Permissions.Allow = append(slices.Clone(p.Permissions.Allow), s.opts.ProjectRules(filepath.Clean(p.Cwd))...)
	}
	sess, err := s.rt.CreateSession(ctx, p)
	if err != nil {
		return SpawnOutput{}, fmt.Errorf("spawn: %w", toolErr(err))
	}
	sid := sess.ID
	if name == "" {
		name = string(sid)
	}
	_, task, err := s.rt.Spawn(ctx, sid, &vigil.SpawnParams{Name: name, Description: in.Description, Prompt: in.Prompt, Model: in.Model})
	if err != nil {
		// Leave no empty session behind.
		if cerr := s.rt.CloseSession(context.WithoutCancel(ctx), sid, by); cerr != nil {
			s.log.Warn("could not close the session of a failed spawn", "session", sid, "err", cerr)
		}
		return SpawnOutput{}, fmt.Errorf("spawn: %w", toolErr(err))
	}
	s.spawnedNow(owner)
	id := globalID(sid, string(task))
	s.log.Info("mcp: agent spawned", "task", id, "name", name)
	return SpawnOutput{
		Task: id, Session: string(sid), Agent: name, OwnerKey: owner,
		Detail: fmt.Sprintf("%s is running in the background as task %s. Call %s to block until it reports; pass the ids it returns in the ack of your next %s. %s ends it when you no longer need it.", name, id, ToolWait, ToolWait, ToolClose),
	}, nil
}

// named is one of the caller's open tasks with a given name.
type named struct {
	session vigil.SessionID
	agent   vigil.AgentID
	task    string
	live    bool
	created time.Time
}

// tasksNamed returns the caller's open tasks whose agent has this name,
// oldest first.
func (s *Server) tasksNamed(ctx context.Context, owner, name string) ([]named, error) {
	rows, err := s.sessions(ctx, owner, false)
	if err != nil {
		return nil, err
	}
	var found []named
	for _, row := range rows {
		v, err := s.owned(ctx, owner, row.ID, string(row.ID), needRuns)
		if errors.Is(err, errNoTask) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, t := range v.callerTasks() {
			if a := v.agents[t.Agent]; a != nil && a.Name == name && a.State != vigil.AgentClosed {
				found = append(found, named{session: row.ID, agent: a.ID, task: globalID(v.id, string(t.ID)), live: v.live(t), created: a.Created})
			}
		}
	}
	slices.SortStableFunc(found, func(a, b named) int { return a.created.Compare(b.created) })
	return found, nil
}

// live reports whether a caller's task is live: working, or with
// notifications the caller has not acknowledged. Only live tasks hold
// their names. It needs a view with needRuns.
func (v *view) live(t *vigil.Task) bool {
	switch {
	case v.Session.Closed:
		return false
	case v.pendingOf(t.ID) > 0:
		return true
	}
	if t.Kind == vigil.TaskShell {
		return live(t)
	}
	return v.busy(v.agents[t.Agent])
}

// findByName finds the caller's task whose agent has this name: the live
// one, else the newest that ended.
func (s *Server) findByName(ctx context.Context, owner, name string) (session vigil.SessionID, agent vigil.AgentID, task string, err error) {
	found, err := s.tasksNamed(ctx, owner, name)
	if err != nil {
		return "", "", "", err
	}
	var live []named
	for _, f := range found {
		if f.live {
			live = append(live, f)
		}
	}
	switch {
	case len(live) == 1:
		return live[0].session, live[0].agent, live[0].task, nil
	case len(live) > 1:
		ids := make([]string, len(live))
		for i, f := range live {
			ids[i] = f.task
		}
		return "", "", "", fmt.Errorf("more than one of your live tasks has an agent named %q (%s); address it by task id", name, strings.Join(ids, ", "))
	case len(found) > 0:
		f := found[len(found)-1]
		return f.session, f.agent, f.task, nil
	}
	return "", "", "", fmt.Errorf("%w named %q (see %s)", errNoTask, name, ToolList)
}

func (s *Server) sendMessage(ctx context.Context, owner string, in SendInput) (SendOutput, error) {
	if strings.TrimSpace(in.Message) == "" {
		return SendOutput{}, errors.New("message is empty")
	}
	prio, ok := vigil.ParsePriority(in.Priority)
	if !ok {
		return SendOutput{}, fmt.Errorf("priority %q: want now, next or later", in.Priority)
	}
	var session vigil.SessionID
	var agent vigil.AgentID
	switch {
	case in.Task != "" && in.Agent != "":
		return SendOutput{}, errors.New("give task or agent, not both")
	case in.Task != "":
		ref, err := parseTask(in.Task)
		if err != nil {
			return SendOutput{}, err
		}
		v, err := s.owned(ctx, owner, ref.session, in.Task, 0)
		if err != nil {
			return SendOutput{}, err
		}
		t := v.tasks[ref.task]
		if t == nil || t.Kind != vigil.TaskAgent || v.agents[t.Agent] == nil {
			return SendOutput{}, notFoundTask(in.Task)
		}
		session, agent = ref.session, t.Agent
	case strings.Contains(in.Agent, "/"):
		sess, ref, _ := strings.Cut(in.Agent, "/")
		v, err := s.owned(ctx, owner, vigil.SessionID(sess), in.Agent, 0)
		if err != nil {
			return SendOutput{}, err
		}
		a := v.agent(ref)
		if a == nil {
			return SendOutput{}, fmt.Errorf("no agent %q", in.Agent)
		}
		session, agent = v.id, a.ID
	case in.Agent != "":
		var err error
		if session, agent, _, err = s.findByName(ctx, owner, in.Agent); err != nil {
			return SendOutput{}, err
		}
	default:
		return SendOutput{}, errors.New("give the task (or the agent) to send the message to")
	}
	m, err := s.rt.Message(ctx, session, &vigil.MessageParams{To: string(agent), Text: in.Message, Priority: prio})
	if err != nil {
		return SendOutput{}, toolErr(err)
	}
	v, err := s.owned(ctx, owner, session, string(session), needLists)
	if err != nil {
		return SendOutput{}, err
	}
	return v.sendView(m), nil
}

// sendView explains a message's outcome; it needs a view with needLists.
func (v *view) sendView(m *vigil.Message) SendOutput {
	out := SendOutput{Message: globalID(v.id, string(m.ID)), Outcome: string(m.Outcome), Reason: m.Reason, Run: m.Run}
	if cur := v.msgs[m.ID]; cur != nil && cur.Outcome != vigil.OutcomePending {
		out.Outcome, out.Reason, out.Run = string(cur.Outcome), cur.Reason, cur.Run
	}
	a := v.agents[m.To]
	name := "the agent"
	var note func(run int) string
	if a != nil {
		name, out.Agent = a.Name, a.Name
		out.Task = globalID(v.id, string(a.Task))
		note = func(run int) string { return globalID(v.id, vigil.NotificationKey{Task: a.Task, Run: run}.String()) }
	}
	switch vigil.Outcome(out.Outcome) {
	case vigil.OutcomeJoined:
		out.Detail = fmt.Sprintf("%s is in run %d, which sees the message at its next model round.", name, out.Run)
		if note != nil {
			out.Notifications = []string{note(out.Run)}
		}
	case vigil.OutcomeQueuedBehindStop:
		why := out.Reason
		if why == "" {
			why = fmt.Sprintf("run %d was ending", out.Run)
		}
		out.Detail = fmt.Sprintf("Queued behind the end of %s's run %d (%s); run %d answers it. You get two notifications: run %d's, then run %d's with the answer.",
			name, out.Run, why, out.Run+1, out.Run, out.Run+1)
		if note != nil {
			out.Notifications = []string{note(out.Run), note(out.Run + 1)}
		}
	case vigil.OutcomeResumed:
		out.Detail = fmt.Sprintf("%s was idle; run %d started with the message.", name, out.Run)
		if note != nil {
			out.Notifications = []string{note(out.Run)}
		}
	case vigil.OutcomeRejected:
		out.Detail = "Not delivered: " + out.Reason
	case vigil.OutcomePending:
		if note != nil {
			out.Notifications = []string{note(out.Run), note(out.Run + 1)}
		}
		detail := m.Detail
		if cur := v.msgs[m.ID]; cur != nil && cur.Detail != "" {
			detail = cur.Detail
		}
		out.Detail = detail + " " + ToolStatus + " shows the settled outcome; call " + ToolWait + " for the answer."
	}
	if o := vigil.Outcome(out.Outcome); o != vigil.OutcomeRejected && o != vigil.OutcomePending {
		out.Detail += " Call " + ToolWait + " for the answer."
	}
	return out
}

func (s *Server) taskStatus(ctx context.Context, owner string, in TaskInput) (TaskStatusOutput, error) {
	ref, err := parseTask(in.Task)
	if err != nil {
		return TaskStatusOutput{}, err
	}
	v, err := s.owned(ctx, owner, ref.session, in.Task, needLists|needRuns)
	if err != nil {
		return TaskStatusOutput{}, err
	}
	t := v.tasks[ref.task]
	if t == nil {
		return TaskStatusOutput{}, notFoundTask(in.Task)
	}
	out := TaskStatusOutput{TaskInfo: v.taskView(t), Session: string(ref.session), Runs: []RunInfo{}, Notifications: v.notesOf(t.ID),
		Queue: v.queueOf(), Why: v.queueStatus(), Agents: v.whys(), Budget: v.Session.Budget}
	if a := v.agents[t.Agent]; a != nil && t.Kind == vigil.TaskAgent {
		out.Runs = v.runsOf(a)
		out.Spent = a.Tree
	}
	return out, nil
}

func (s *Server) taskOutput(ctx context.Context, owner string, in OutputInput) (OutputOutput, error) {
	ref, err := parseTask(in.Task)
	if err != nil {
		return OutputOutput{}, err
	}
	if in.Offset < 0 {
		return OutputOutput{}, errors.New("offset must be >= 0")
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 64 << 10
	}
	limit = min(limit, 1<<20)
	v, err := s.owned(ctx, owner, ref.session, in.Task, needRuns)
	if err != nil {
		return OutputOutput{}, err
	}
	t := v.tasks[ref.task]
	if t == nil {
		return OutputOutput{}, notFoundTask(in.Task)
	}
	tv := v.taskView(t)
	out := OutputOutput{Task: in.Task, Offset: in.Offset, Kind: tv.Kind, State: tv.State}
	if t.Kind == vigil.TaskAgent {
		var transcript string
		if v.agents[t.Agent] != nil {
			a, err := s.rt.AgentGet(ctx, ref.session, string(t.Agent))
			if err != nil {
				return OutputOutput{}, toolErr(err)
			}
			transcript = renderTranscript(a.Transcript)
		}
		start := min(in.Offset, int64(len(transcript)))
		end := min(start+limit, int64(len(transcript)))
		out.Data, out.Next, out.EOF = transcript[start:end], end, end == int64(len(transcript))
		return out, nil
	}
	o, err := s.rt.TaskOutput(ctx, ref.session, &vigil.TaskOutputParams{Task: ref.task, Offset: in.Offset, Limit: limit})
	if err != nil {
		return OutputOutput{}, toolErr(err)
	}
	out.Data, out.Next, out.EOF = string(o.Data), o.Next, int64(len(o.Data)) < limit
	return out, nil
}

func (s *Server) stopTask(ctx context.Context, owner string, in TaskInput) (StopOutput, error) {
	ref, err := parseTask(in.Task)
	if err != nil {
		return StopOutput{}, err
	}
	v, err := s.owned(ctx, owner, ref.session, in.Task, 0)
	if err != nil {
		return StopOutput{}, err
	}
	t := v.tasks[ref.task]
	if t == nil {
		return StopOutput{}, notFoundTask(in.Task)
	}
	out := StopOutput{Outcome: "not-running", Detail: "it was not running"}
	if !v.Session.Closed && v.running(t) {
		if err := s.rt.StopTask(ctx, ref.session, &vigil.StopTaskParams{Task: ref.task, By: by}); vigil.CodeOf(err) != "" && vigil.CodeOf(err) != vigil.CodeConflict {
			return StopOutput{}, toolErr(err)
		}
		out.Outcome, out.Detail = "stopped", "its run was cancelled; its notification (status cancelled) comes through "+ToolWait+"; "+ToolSend+" resumes it, "+ToolClose+" ends it for good"
	}
	if v, err = s.owned(ctx, owner, ref.session, in.Task, needRuns); err != nil {
		return StopOutput{}, err
	}
	if t := v.tasks[ref.task]; t != nil {
		out.TaskInfo = v.taskView(t)
	}
	return out, nil
}

// running reports whether a task has a run (or a process) in progress.
func (v *view) running(t *vigil.Task) bool {
	if t.Kind == vigil.TaskShell {
		return live(t)
	}
	a := v.agents[t.Agent]
	return a != nil && a.Run != nil
}

// closeTask ends a caller's task for good: its session closes (which ends
// the run in progress, the agent's own agents and commands), and the
// notifications the caller had not acknowledged are returned, then
// acknowledged, so that closing drops nothing unseen.
func (s *Server) closeTask(ctx context.Context, owner string, in TaskInput) (CloseOutput, error) {
	ref, err := parseTask(in.Task)
	if err != nil {
		return CloseOutput{}, err
	}
	v, err := s.owned(ctx, owner, ref.session, in.Task, needLists|needRuns)
	if err != nil {
		return CloseOutput{}, err
	}
	t := v.tasks[ref.task]
	if t == nil {
		return CloseOutput{}, notFoundTask(in.Task)
	}
	out := CloseOutput{Task: in.Task, Outcome: "already-closed", Notifications: []Notification{}, Detail: "it was closed already"}
	if a := v.agents[t.Agent]; a != nil {
		out.Agent = a.Name
	}
	if v.Session.Closed {
		return out, nil
	}
	// What the caller had not acknowledged is delivered in this result:
	// acknowledge it first, so that the close drops nothing unseen.
	var ids []string
	for _, it := range v.callerItems(nil) {
		n := v.itemView(it)
		out.Notifications = append(out.Notifications, n)
		ids = append(ids, n.ID)
	}
	if _, err := s.ack(ctx, owner, ids); err != nil {
		return CloseOutput{}, err
	}
	out.Stopped = v.running(t)
	if err := s.rt.CloseSession(ctx, ref.session, by); vigil.CodeOf(err) != "" && vigil.CodeOf(err) != vigil.CodeClosed {
		return CloseOutput{}, toolErr(err)
	}
	out.Outcome = "closed"
	// A notification written between the read and the close (the stopped
	// run's own, or one that was just finishing) was dropped by the close:
	// it is delivered here too.
	if after, err := s.owned(ctx, owner, ref.session, in.Task, needLists); err == nil {
		for i := range after.Notifications {
			n := &after.Notifications[i]
			if n.Owner != vigil.MainAgent || n.Dropped == "" || v.notes[n.Key] != nil && v.notes[n.Key].Dropped != "" {
				continue
			}
			if slices.Contains(ids, globalID(v.id, n.Key.String())) {
				continue
			}
			out.Notifications = append(out.Notifications, after.itemView(&vigil.InboxItem{ID: n.Item, Kind: vigil.KindNotification, Note: &n.Key}))
		}
	}
	var b strings.Builder
	b.WriteString("closed for good")
	if out.Stopped {
		b.WriteString(": its run was stopped, with its own agents and commands")
	}
	if out.Agent != "" {
		fmt.Fprintf(&b, "; the name %q is free again", out.Agent)
	}
	if n := len(out.Notifications); n > 0 {
		fmt.Fprintf(&b, ". %d notification(s) you had not acknowledged are in this result, acknowledged now", n)
	}
	out.Detail = b.String() + "."
	s.log.Info("mcp: task closed", "task", in.Task, "stopped", out.Stopped, "delivered", len(out.Notifications))
	return out, nil
}

func (s *Server) listTasks(ctx context.Context, owner string, in ListInput) (ListOutput, error) {
	rows, err := s.sessions(ctx, owner, in.IncludeClosed)
	if err != nil {
		return ListOutput{}, err
	}
	out := ListOutput{Tasks: []TaskInfo{}, OwnerKey: owner}
	var started []time.Time
	ended := 0
	for _, row := range rows {
		v, err := s.owned(ctx, owner, row.ID, string(row.ID), needRuns)
		if errors.Is(err, errNoTask) {
			continue
		}
		if err != nil {
			return ListOutput{}, err
		}
		for _, t := range v.callerTasks() {
			out.Tasks = append(out.Tasks, v.taskView(t))
			started = append(started, t.Started)
			if !v.Session.Closed && !v.live(t) {
				ended++
			}
		}
	}
	idx := make([]int, len(out.Tasks))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return started[a].Compare(started[b]) })
	sorted := make([]TaskInfo, len(idx))
	for i, j := range idx {
		sorted[i] = out.Tasks[j]
	}
	out.Tasks = sorted
	switch {
	case len(out.Tasks) == 0:
		out.Detail = "You have no open tasks."
	case ended > 0:
		out.Detail = fmt.Sprintf("%d task(s), oldest first; %d of them ended with nothing left to acknowledge: close those you no longer need with %s (they close by themselves after a while).", len(out.Tasks), ended, ToolClose)
	default:
		out.Detail = fmt.Sprintf("%d task(s), oldest first.", len(out.Tasks))
	}
	return out, nil
}

func (s *Server) queueList(ctx context.Context, owner string, in QueueInput) (QueueOutput, error) {
	var sessions []vigil.SessionID
	if in.Task != "" {
		ref, err := parseTask(in.Task)
		if err != nil {
			return QueueOutput{}, err
		}
		sessions = []vigil.SessionID{ref.session}
	} else {
		rows, err := s.sessions(ctx, owner, false)
		if err != nil {
			return QueueOutput{}, err
		}
		for _, r := range rows {
			sessions = append(sessions, r.ID)
		}
	}
	out := QueueOutput{Items: []QueueItem{}, Status: []QueueStatus{}}
	for _, sid := range sessions {
		what := in.Task
		if what == "" {
			what = string(sid)
		}
		v, err := s.owned(ctx, owner, sid, what, 0)
		if err != nil {
			if in.Task != "" || !errors.Is(err, errNoTask) {
				return QueueOutput{}, err
			}
			continue
		}
		out.Items = append(out.Items, v.queueOf()...)
		out.Status = append(out.Status, v.queueStatus()...)
		if v.Hold != nil {
			for _, t := range v.callerTasks() {
				out.Held = append(out.Held, globalID(v.id, string(t.ID)))
			}
		}
	}
	return out, nil
}

func (s *Server) queueCancel(ctx context.Context, owner string, in CancelInput) (DoneOutput, error) {
	sess, item, ok := strings.Cut(strings.TrimSpace(in.Item), "/")
	if !ok || sess == "" || item == "" {
		return DoneOutput{}, fmt.Errorf("bad item id %q: want <session>/<item> as vigil_queue returned it", in.Item)
	}
	sid := vigil.SessionID(sess)
	v, err := s.owned(ctx, owner, sid, in.Item, 0)
	if err != nil {
		return DoneOutput{}, err
	}
	if !slices.ContainsFunc(v.Agents, func(a vigil.Agent) bool {
		return slices.ContainsFunc(a.Inbox, func(it vigil.InboxItem) bool { return it.ID == vigil.ItemID(item) })
	}) {
		return DoneOutput{}, fmt.Errorf("no queued item %q (it was taken, cancelled, or never existed; see vigil_queue)", in.Item)
	}
	if err := s.rt.CancelItem(ctx, sid, &vigil.CancelItemParams{Item: vigil.ItemID(item), By: by}); err != nil {
		return DoneOutput{}, toolErr(err)
	}
	return DoneOutput{Detail: "removed " + in.Item + " from its queue"}, nil
}

func (s *Server) hold(ctx context.Context, owner string, in HoldInput) (DoneOutput, error) {
	return s.holdOrResume(ctx, owner, in, true)
}

func (s *Server) resume(ctx context.Context, owner string, in HoldInput) (DoneOutput, error) {
	return s.holdOrResume(ctx, owner, in, false)
}

func (s *Server) holdOrResume(ctx context.Context, owner string, in HoldInput, hold bool) (DoneOutput, error) {
	ref, err := parseTask(in.Task)
	if err != nil {
		return DoneOutput{}, err
	}
	v, err := s.owned(ctx, owner, ref.session, in.Task, 0)
	if err != nil {
		return DoneOutput{}, err
	}
	if v.tasks[ref.task] == nil {
		return DoneOutput{}, notFoundTask(in.Task)
	}
	if hold {
		if err := s.rt.Hold(ctx, ref.session, &vigil.HoldParams{By: by, Reason: in.Reason}); err != nil {
			return DoneOutput{}, toolErr(err)
		}
		return DoneOutput{Detail: "user prompts of " + in.Task + "'s session are held until resume; notifications and messages still flow"}, nil
	}
	if err := s.rt.Resume(ctx, ref.session, by); err != nil {
		return DoneOutput{}, toolErr(err)
	}
	return DoneOutput{Detail: "the hold on " + in.Task + "'s session is released"}, nil
}
