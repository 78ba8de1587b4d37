package vigil

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// The library's read types. Each is a copy made on the session's goroutine
// and owned by the caller; nothing in it changes afterwards. Their JSON is
// the HTTP API's (openapi.yaml); durable snapshots keep the core's own
// encoding inside the store, so the two change independently. None of
// them carries a process id, start ticks, a cgroup or a lease incarnation.

// SessionID names a session.
type SessionID string

// AgentID names an agent within its session (a0, a1, …); most methods
// also take an agent's name ("main" for the main agent).
type AgentID string

// TaskID names a task (a background agent or shell command) within its
// session.
type TaskID string

// ItemID names an inbox item within its session.
type ItemID string

// MessageID names a message within its session.
type MessageID string

// ApprovalID names a permission request within its session.
type ApprovalID string

// MainAgent is the id of every session's main agent, whose name is
// "main".
const MainAgent AgentID = "a0"

// Priority orders an inbox: now interrupts the model round in flight, next
// (the default) runs before later.
type Priority string

// The priorities.
const (
	PriorityNow   Priority = "now"
	PriorityNext  Priority = "next"
	PriorityLater Priority = "later"
)

// ParsePriority reads a priority; empty means next.
func ParsePriority(s string) (Priority, bool) {
	p, ok := core.ParsePriority(s)
	return Priority(p), ok
}

// PermissionMode says which tool calls run without asking.
type PermissionMode string

// The permission modes.
const (
	// PermAsk asks for every call that is not read-only or allowed by a
	// rule.
	PermAsk PermissionMode = "ask"
	// PermAcceptEdits also runs file edits inside the session's
	// directories.
	PermAcceptEdits PermissionMode = "accept-edits"
	// PermAuto runs everything a deny rule does not refuse, within the
	// sandbox.
	PermAuto PermissionMode = "auto"
	// PermBypass runs everything.
	PermBypass PermissionMode = "bypass"
)

// Permissions are a session's mode and its allow and deny rules, each
// "Tool" or "Tool(pattern)".
type Permissions struct {
	Mode  PermissionMode `json:"mode"`
	Allow []string       `json:"allow,omitempty"`
	Deny  []string       `json:"deny,omitempty"`
}

// Budget bounds a session or an agent's tree (DESIGN rule 10); a zero
// field sets no bound.
type Budget struct {
	Tokens     int64         `json:"tokens,omitempty"`
	Rounds     int           `json:"rounds,omitempty"`
	Wall       time.Duration `json:"wall,omitempty"`
	CostMicros int64         `json:"cost_micros,omitempty"`
}

// USD formats millionths of a dollar as dollars: "$0.0123".
func USD(micros int64) string { return core.FormatUSD(micros) }

// Spend is what a scope used: tokens, model rounds, run time and cost in
// millionths of a dollar; Unpriced counts rounds of no known price.
type Spend struct {
	Usage      chat.Usage    `json:"usage"`
	Rounds     int           `json:"rounds"`
	Wall       time.Duration `json:"wall"`
	CostMicros int64         `json:"cost_micros"`
	Unpriced   int           `json:"unpriced_rounds,omitempty"`
}

// Session is a session's settings.
type Session struct {
	ID            SessionID   `json:"id"`
	Title         string      `json:"title,omitempty"`
	Cwd           string      `json:"cwd,omitempty"`
	Dirs          []string    `json:"dirs,omitempty"`
	Provider      string      `json:"provider,omitempty"`
	Model         string      `json:"model,omitempty"`
	SubagentModel string      `json:"subagent_model,omitempty"`
	Permissions   Permissions `json:"permissions"`
	// Owner is the opaque key of who created it (an MCP caller), if any.
	Owner       string    `json:"owner,omitempty"`
	Budget      Budget    `json:"budget,omitzero"`
	Created     time.Time `json:"created"`
	Closed      bool      `json:"closed,omitempty"`
	CloseReason string    `json:"close_reason,omitempty"`
}

// SessionSummary is a session as listed: its settings in brief and its
// totals.
type SessionSummary struct {
	ID           SessionID `json:"id"`
	Title        string    `json:"title,omitempty"`
	Owner        string    `json:"owner,omitempty"`
	Provider     string    `json:"provider,omitempty"`
	Model        string    `json:"model,omitempty"`
	Cwd          string    `json:"cwd,omitempty"`
	Closed       bool      `json:"closed"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
	LastSeq      int64     `json:"last_seq"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	// NeedsYou are short reasons a person must act on the session, most
	// pressing first ("approval p1: Bash (main)", "run failed: worker",
	// "budget spent: main"); none when nobody needs to. They are stored
	// with the session's row, so a list read on any node shows them, at
	// most a projection's lag behind the session.
	NeedsYou []string `json:"needs_you,omitempty"`
}

// Hold is a hold of the session's user queue.
type Hold struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// SessionDetail is a session with its agents, tasks, pending approvals,
// hold and the status of every non-empty inbox.
type SessionDetail struct {
	Session   Session       `json:"session"`
	Seq       int64         `json:"seq"`
	Hold      *Hold         `json:"hold,omitempty"`
	Quiescent bool          `json:"quiescent"`
	Agents    []Agent       `json:"agents"`
	Tasks     []Task        `json:"tasks"`
	Approvals []Approval    `json:"approvals"`
	Status    []InboxStatus `json:"status"`
	// NotificationCount and MessageCount count the session's notifications
	// and messages; SessionGetParams asks for the lists.
	NotificationCount int            `json:"notifications"`
	MessageCount      int            `json:"messages"`
	Drops             map[string]int `json:"drops,omitempty"`
	// Progress says what each run in progress waits on, since when, and
	// "no progress for …" past a minute (DESIGN rule 10).
	Progress []Progress `json:"progress"`
	// Spent is what the session used; its budget is Session.Budget.
	Spent Spend `json:"spent"`

	// Timers are the wakeups the agents scheduled, soonest first: an agent
	// with one still has work coming, though it has no run, no inbox and
	// no live task.
	Timers []PendingTimer `json:"timers,omitempty"`

	// Messages and Notifications are filled when SessionGetParams asks.
	Messages      []Message      `json:"message_list,omitempty"`
	Notifications []Notification `json:"notification_list,omitempty"`
}

// PendingTimer is a wakeup an agent scheduled: at At, Prompt is queued in
// its inbox as a timer item (InboxItem.Timer names it).
type PendingTimer struct {
	ID     string    `json:"id"`
	Agent  AgentID   `json:"agent"`
	At     time.Time `json:"at"`
	Prompt string    `json:"prompt,omitempty"`
}

// Agent is an agent without its transcript: state, counts, inbox, the run
// in progress and last activity.
type Agent struct {
	ID          AgentID `json:"id"`
	Name        string  `json:"name"`
	Description string  `json:"description,omitempty"`
	// Owner is the agent that started it; empty for the main agent.
	Owner AgentID `json:"owner,omitempty"`
	// Task is its agent task; empty for the main agent.
	Task       TaskID      `json:"task,omitempty"`
	Depth      int         `json:"depth"`
	Model      string      `json:"model,omitempty"`
	Provider   string      `json:"provider,omitempty"`
	Driver     Driver      `json:"driver"`
	State      AgentState  `json:"state"`
	Created    time.Time   `json:"created"`
	LastActive time.Time   `json:"last_active"`
	Runs       int         `json:"runs"`
	Inbox      []InboxItem `json:"inbox"`
	// Run is the run in progress.
	Run  *Run  `json:"run,omitempty"`
	Gate *Gate `json:"gate,omitempty"`
	// Retry and Blocked say why an idle agent with items does not run:
	// backing off after a failed run, or blocked until a person retries.
	Retry     *Retry     `json:"retry,omitempty"`
	Blocked   *Block     `json:"blocked,omitempty"`
	LiveTasks []TaskID   `json:"live_tasks,omitempty"`
	Usage     chat.Usage `json:"usage"`
	// Spent is what the agent used, Tree what its tree used, Budget its
	// tree's own bound (the session's is on the session).
	Spent  Spend  `json:"spent"`
	Tree   Spend  `json:"tree"`
	Budget Budget `json:"budget,omitzero"`
	// ContextTokens estimates what its next model round sends;
	// Compactions counts its context compactions.
	ContextTokens int64 `json:"context_tokens"`
	Compactions   int   `json:"compactions,omitempty"`
	// Why says what it is doing or waiting on, blockers first.
	Why Why `json:"why"`
	// RunHistory is its ended runs, oldest first: always in AgentGet, in
	// SessionGet when SessionGetParams.Runs asks.
	RunHistory []Run `json:"run_history,omitempty"`
}

// Why says what an agent is doing or waiting on, blockers first: a
// pending approval, a spent budget, a block after failed runs, a backoff,
// a held user queue, then its run's model call or tools, its live tasks,
// or idle. Status, the UI, the CLI and MCP all show this one answer.
type Why struct {
	// Kind is one of the Why kinds (WhyApproval, WhyModel, …).
	Kind string `json:"kind"`
	// Text is the one line a person reads: "model call in flight",
	// "waiting for approval p2 (Bash: rm -rf build), denied at 15:04:05
	// if unanswered", "idle". Its times are UTC.
	Text string `json:"text"`
	// Since is when the state began; Until is its deadline, when it has
	// one (a retry, an approval's deadline).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// ClearsOn says what ends the state.
	ClearsOn string `json:"clears_on,omitempty"`
	// NeedsYou is set when only a person can end it: an approval, a
	// spent budget, a block after failed runs.
	NeedsYou bool `json:"needs_you,omitempty"`
	// HoldsUp lists the queued items that wait on it, in inbox order.
	HoldsUp []ItemID `json:"holds_up,omitempty"`
}

// The kinds of a Why, blockers first.
const (
	WhyClosed   = core.WhyClosed   // the agent or its session is closed
	WhyApproval = core.WhyApproval // a permission request waits for a person
	WhyBudget   = core.WhyBudget   // a budget is spent: a person must raise it
	WhyBlocked  = core.WhyBlocked  // failed runs: a person must retry or write
	WhyBackoff  = core.WhyBackoff  // backing off before a retry (agent or model call)
	WhyHeld     = core.WhyHeld     // only user prompts queued, and they are held
	WhyCaller   = core.WhyCaller   // an outside caller reads its inbox
	WhyProvider = core.WhyProvider // a provider process runs its turn
	WhySlot     = core.WhySlot     // its model call waits for a free slot
	WhyModel    = core.WhyModel    // a model call is in flight
	WhySubagent = core.WhySubagent // a foreground subagent's run
	WhyTask     = core.WhyTask     // a blocking read of a task's output
	WhyTool     = core.WhyTool     // tool calls run
	WhyTasks    = core.WhyTasks    // no run: its background tasks are live
	WhyTimer    = core.WhyTimer    // no run: a wakeup it scheduled is pending
	WhyReady    = core.WhyReady    // no run, no blocker, items it may take
	WhyIdle     = core.WhyIdle     // nothing to do
)

// AgentDetail is an agent with its run history and transcript.
type AgentDetail struct {
	Agent
	Transcript []chat.Message `json:"transcript"`
}

// Run is one run of an agent, ended or in progress (status running).
type Run struct {
	Agent     AgentID `json:"agent,omitempty"`
	AgentName string  `json:"agent_name,omitempty"`
	Seq       int     `json:"seq"`
	// Kind is what started it: the kind of its first item.
	Kind    ItemKind  `json:"kind"`
	Status  RunStatus `json:"status"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	Reply   string    `json:"reply,omitempty"`
	Error   string    `json:"error,omitempty"`
	// Items are the inbox items it took in; Answered the messages it
	// answers; Returned the items a failed run gave back.
	Items      []ItemID    `json:"items,omitempty"`
	Answered   []MessageID `json:"answered,omitempty"`
	Returned   []ItemID    `json:"returned,omitempty"`
	Usage      chat.Usage  `json:"usage"`
	Calls      int         `json:"calls"`
	CostMicros int64       `json:"cost_micros,omitempty"`
	Unpriced   int         `json:"unpriced_rounds,omitempty"`

	// In progress only: the model round, its call, and the tool calls of
	// the round.
	Round int        `json:"round"`
	Call  *ModelCall `json:"call,omitempty"`
	Tools []ToolCall `json:"tools,omitempty"`
}

// ModelCall is a run's model call in progress.
type ModelCall struct {
	ID    string `json:"id"`
	Round int    `json:"round"`
	// State is waiting-slot, in-flight or backoff.
	State       string    `json:"state"`
	Started     time.Time `json:"started"`
	Attempt     int       `json:"attempt,omitempty"`
	RetryUntil  time.Time `json:"retry_until,omitzero"`
	RetryReason string    `json:"retry_reason,omitempty"`
	// Purpose is "compact" for a compaction's call.
	Purpose string `json:"purpose,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// ToolCall is a tool call of the round in progress.
type ToolCall struct {
	UseID string          `json:"use_id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// Wait says what a waiting call waits on: a child agent, a task, a
	// message's outcome or an approval.
	Wait     string     `json:"wait,omitempty"`
	Child    AgentID    `json:"child,omitempty"`
	WaitFor  TaskID     `json:"wait_for,omitempty"`
	Msg      MessageID  `json:"msg,omitempty"`
	Approval ApprovalID `json:"approval,omitempty"`
	Deadline time.Time  `json:"deadline,omitzero"`
	Started  time.Time  `json:"started"`
	Done     bool       `json:"done,omitempty"`
	Result   string     `json:"result,omitempty"`
	IsError  bool       `json:"is_error,omitempty"`
}

// Gate is a held continuation's gate (DESIGN rule 5): it opens by
// Deadline whatever happens.
type Gate struct {
	Gen      int       `json:"gen"`
	Item     ItemID    `json:"item"`
	Opened   time.Time `json:"opened"`
	Deadline time.Time `json:"deadline"`
}

// Retry is an agent's backoff after a failed run.
type Retry struct {
	Attempt int       `json:"attempt"`
	Max     int       `json:"max"`
	At      time.Time `json:"at"`
	Run     int       `json:"run"`
	Reason  string    `json:"reason"`
	Kind    string    `json:"kind"`
}

// Block is why an agent waits for a person (retries spent, a budget).
type Block struct {
	Run    int       `json:"run"`
	Reason string    `json:"reason"`
	Kind   string    `json:"kind"`
	Since  time.Time `json:"since"`
}

// NotificationKey names a notification: the run of a task whose end it
// announces, or Run 0 for a shell task's exit. Its JSON is its String
// form.
type NotificationKey struct {
	Task TaskID
	Run  int
}

func (k NotificationKey) core() core.NoteKey {
	return core.NoteKey{Task: core.TaskID(k.Task), Run: k.Run}
}

// String is "t3#2", or "t3#exit" for a shell task's exit.
func (k NotificationKey) String() string { return k.core().String() }

// MarshalText encodes the key as its String form.
func (k NotificationKey) MarshalText() ([]byte, error) { return k.core().MarshalText() }

// UnmarshalText decodes a key in its String form.
func (k *NotificationKey) UnmarshalText(b []byte) error {
	var c core.NoteKey
	if err := c.UnmarshalText(b); err != nil {
		return err
	}
	*k = NotificationKey{Task: TaskID(c.Task), Run: c.Run}
	return nil
}

// InboxItem is a queued item with its agent, position and whether a user
// hold keeps it.
type InboxItem struct {
	ID       ItemID   `json:"id"`
	Agent    AgentID  `json:"agent"`
	Kind     ItemKind `json:"kind"`
	Priority Priority `json:"priority"`
	From     string   `json:"from,omitempty"` // "user", "system" or an agent id
	// Text is what the item says: a prompt's or a message's text, a
	// timer's prompt; for a notification, its summary in one line
	// ("worker run 2 completed: the tests pass").
	Text string    `json:"text,omitempty"`
	Msg  MessageID `json:"msg,omitempty"`
	// Note is the notification of a notification item.
	Note     *NotificationKey `json:"note,omitempty"`
	Timer    string           `json:"timer,omitempty"`
	Gate     int              `json:"gate,omitempty"`
	Enqueued time.Time        `json:"enqueued"`
	Attempts int              `json:"attempts,omitempty"`

	AgentName string `json:"agent_name"`
	Position  int    `json:"position"`
	Held      bool   `json:"held"`
}

// Task is a background agent or a shell command.
type Task struct {
	ID    TaskID   `json:"id"`
	Kind  TaskKind `json:"kind"`
	Owner AgentID  `json:"owner"`
	// Agent is the subagent of an agent task.
	Agent       AgentID       `json:"agent,omitempty"`
	Description string        `json:"description,omitempty"`
	Prompt      string        `json:"prompt,omitempty"`
	Command     string        `json:"command,omitempty"`
	Background  bool          `json:"background"`
	Status      TaskStatus    `json:"status"`
	Started     time.Time     `json:"started"`
	Ended       time.Time     `json:"ended,omitzero"`
	OutputPath  string        `json:"output_path,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	ExitCode    *int          `json:"exit_code,omitempty"`
	OutputTail  string        `json:"output_tail,omitempty"`
	// External is the provider process's own id of a task it runs.
	External string `json:"external,omitempty"`
}

// Live reports whether the task can still produce output: running, or
// stopping.
func (t *Task) Live() bool { return t.Status.Live() }

// Approval is a pending permission request.
type Approval struct {
	ID       ApprovalID      `json:"id"`
	Agent    AgentID         `json:"agent"`
	Run      int             `json:"run"`
	UseID    string          `json:"use_id"`
	Tool     string          `json:"tool"`
	Input    json.RawMessage `json:"input,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Asked    time.Time       `json:"asked"`
	Deadline time.Time       `json:"deadline"`
	// AlwaysRule is the rule that answering "allow always" adds, Grants
	// says in plain words what it grants, and Arbitrary is set when it
	// amounts to running any program.
	AlwaysRule string `json:"always_rule,omitempty"`
	Grants     string `json:"grants,omitempty"`
	Arbitrary  bool   `json:"arbitrary,omitempty"`
}

// Message is a message to an agent and its outcome (DESIGN rule 3).
type Message struct {
	ID       MessageID `json:"id"`
	From     string    `json:"from"` // "user" or an agent id
	To       AgentID   `json:"to"`
	Text     string    `json:"text"`
	Priority Priority  `json:"priority"`
	Sent     time.Time `json:"sent"`
	Outcome  Outcome   `json:"outcome"`
	Reason   string    `json:"reason,omitempty"`
	// Run is the recipient's run that sees or answers it; Item its inbox
	// item; AnsweredBy the run that answered it.
	Run        int    `json:"run,omitempty"`
	Item       ItemID `json:"item,omitempty"`
	AnsweredBy int    `json:"answered_by,omitempty"`
	// Detail is the sentence its sender reads about the outcome: which run
	// sees it, which notification will carry the answer.
	Detail string `json:"detail,omitempty"`
}

// Notification is what a task's run told its owner (DESIGN rule 1).
type Notification struct {
	Key       NotificationKey `json:"key"`
	Owner     AgentID         `json:"owner"`
	Agent     AgentID         `json:"agent,omitempty"`
	AgentName string          `json:"agent_name,omitempty"`
	Kind      TaskKind        `json:"kind"`
	// Status is how the run or command ended.
	Status     string        `json:"status"`
	Reply      string        `json:"reply,omitempty"`
	Error      string        `json:"error,omitempty"`
	ExitCode   *int          `json:"exit_code,omitempty"`
	Output     string        `json:"output,omitempty"`
	OutputPath string        `json:"output_path,omitempty"`
	Answered   []MessageID   `json:"answered,omitempty"`
	LiveTasks  []TaskID      `json:"live_tasks,omitempty"`
	Usage      chat.Usage    `json:"usage"`
	CostMicros int64         `json:"cost_micros,omitempty"`
	Priced     bool          `json:"priced,omitempty"`
	Duration   time.Duration `json:"duration"`
	Written    time.Time     `json:"written"`
	Delivery   Delivery      `json:"delivery"`
	Item       ItemID        `json:"item,omitempty"`
	// DeliveredRun is the owner's run that saw it; 0 while unseen.
	DeliveredRun int       `json:"delivered_run,omitempty"`
	DeliverBy    time.Time `json:"deliver_by,omitzero"`
	Dropped      string    `json:"dropped,omitempty"`
}

// InboxStatus is a non-empty inbox and why it is or is not draining:
// Reason, Until and ClearsOn are its agent's Why, whose kind is Kind.
type InboxStatus struct {
	Agent    AgentID   `json:"agent"`
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Items    int       `json:"items"`
	Held     int       `json:"held"`
	Draining bool      `json:"draining"`
	Kind     string    `json:"kind"`
	Reason   string    `json:"reason"`
	Until    time.Time `json:"until,omitzero"`
	ClearsOn string    `json:"clears_on,omitempty"`
}

// AgentWhy is an agent's Why as Status lists it.
type AgentWhy struct {
	Agent AgentID    `json:"agent"`
	Name  string     `json:"name"`
	State AgentState `json:"state"`
	Why   Why        `json:"why"`
}

// Progress is what a run in progress waits on (its agent's Why, in a few
// words: "model call c12", "approval p2") and since its last progress.
type Progress struct {
	Agent   AgentID   `json:"agent"`
	Name    string    `json:"name"`
	Run     int       `json:"run"`
	Waiting string    `json:"waiting"`
	Since   time.Time `json:"since"`
	Stalled string    `json:"stalled,omitempty"`
}

// Status is a session's non-empty inboxes, why each is not draining, what
// each agent is doing or waiting on, what each run waits on, and its
// budget.
type Status struct {
	Session   SessionID     `json:"session"`
	Closed    bool          `json:"closed"`
	Hold      *Hold         `json:"hold,omitempty"`
	Quiescent bool          `json:"quiescent"`
	Inboxes   []InboxStatus `json:"inboxes"`
	// Agents is every agent's Why, in the session's order.
	Agents   []AgentWhy `json:"agents"`
	Progress []Progress `json:"progress"`
	Budget   Budget     `json:"budget"`
	Spent    Spend      `json:"spent"`
}

// TaskOutput is a chunk of a shell task's output file.
type TaskOutput struct {
	Task   TaskID     `json:"task"`
	Status TaskStatus `json:"status"`
	Offset int64      `json:"offset"`
	// Next is the offset to read from next.
	Next int64  `json:"next"`
	Data []byte `json:"data"`
}

// Event is one event of a session: its place in the session's stream
// (Seq) and in the store's (Global), when it was committed, its type
// ("run.started", "notification.written", …) and its body as JSON, in the
// documented event format.
//
// A live event (Live) is not committed: it is what a model says while its
// round is in flight, type "text.delta" with data TextDelta. It has Seq 0
// and Global 0, is never stored or replayed, and reaches only the
// subscriptions open when it happens (a subscriber that falls behind
// loses some, and is told: TextDelta.Dropped). The committed
// "model.ended" event of the call, or any committed event that ends the
// agent's run, replaces the call's live text.
type Event struct {
	Session SessionID `json:"session"`
	Seq     int64     `json:"seq"`
	Global  int64     `json:"global"`
	At      time.Time `json:"at"`
	Type    string    `json:"type"`
	// Data is shared with the event's other readers (every subscriber
	// gets the same bytes): read it, and copy it before changing a byte.
	// Appending to it is safe.
	Data json.RawMessage `json:"data"`
	// Live marks a live event: not committed, with no place in the
	// stream.
	Live bool `json:"live,omitempty"`
}

// String lists the budget's bounds: "1000 tokens, 5 rounds, 10m0s run
// time, $1.0000", or "none".
func (b Budget) String() string {
	var parts []string
	if b.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", b.Tokens))
	}
	if b.Rounds > 0 {
		parts = append(parts, fmt.Sprintf("%d rounds", b.Rounds))
	}
	if b.Wall > 0 {
		parts = append(parts, b.Wall.String()+" run time")
	}
	if b.CostMicros > 0 {
		parts = append(parts, USD(b.CostMicros))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
