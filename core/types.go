package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// Identifiers. Every id except the session's is made by the core from
// counters kept in the state, so a replay makes the same ids.
type (
	// SessionID names a session; the caller chooses it.
	SessionID string
	// AgentID names an agent within its session ("a0" is the main agent).
	AgentID string
	// TaskID names background work within a session ("t3").
	TaskID string
	// ItemID names an inbox item within a session ("i7").
	ItemID string
	// MsgID names a message sent between agents or by the user ("m4").
	MsgID string
	// CallID names one model call within a session ("c12").
	CallID string
	// TimerID names a scheduled wakeup within a session ("w2").
	TimerID string
	// ApprovalID names a pending permission request within a session ("p1").
	ApprovalID string
)

// MainAgent is the id of every session's main agent.
const MainAgent AgentID = "a0"

// AgentState is the state of an agent.
type AgentState string

// Agent states.
const (
	AgentIdle    AgentState = "idle"
	AgentRunning AgentState = "running"
	AgentWaiting AgentState = "waiting" // a run waits for a permission answer
	AgentClosed  AgentState = "closed"
)

// RunStatus is how a run ended, or "running".
type RunStatus string

// Run statuses.
const (
	RunRunning     RunStatus = "running"
	RunCompleted   RunStatus = "completed"
	RunFailed      RunStatus = "failed"
	RunCancelled   RunStatus = "cancelled"
	RunInterrupted RunStatus = "interrupted"
	// RunRoundLimit ends a run that had the model rounds its prompt
	// allowed (UserPrompt.MaxRounds) and whose model asked for another.
	RunRoundLimit RunStatus = "round_limit"
)

// ItemKind says what an inbox item is.
type ItemKind string

// Inbox item kinds. Only KindPrompt (from the user) can be held.
const (
	KindPrompt       ItemKind = "prompt"       // from the user
	KindSpawn        ItemKind = "spawn"        // the task an owner gave a new subagent
	KindMessage      ItemKind = "message"      // SendMessage from another agent or the user
	KindNotification ItemKind = "notification" // a run of an owned task ended, or a shell task exited
	KindTimer        ItemKind = "timer"        // a ScheduleWakeup fired
	KindContinuation ItemKind = "continuation" // the provider needs a turn to continue its own work
)

// Priority says when an inbox item reaches a running agent.
type Priority string

// Priorities.
const (
	// PriorityNow interrupts the model round in flight.
	PriorityNow Priority = "now"
	// PriorityNext joins the running turn at its next model round.
	PriorityNext Priority = "next"
	// PriorityLater waits for the turn to end.
	PriorityLater Priority = "later"
)

// ParsePriority returns the priority named s; empty means next.
func ParsePriority(s string) (Priority, bool) {
	switch Priority(s) {
	case "", PriorityNext:
		return PriorityNext, true
	case PriorityNow, PriorityLater:
		return Priority(s), true
	}
	return "", false
}

// TaskKind says what a task runs.
type TaskKind string

// Task kinds.
const (
	TaskAgent TaskKind = "agent" // a subagent; spans its runs
	TaskShell TaskKind = "shell" // one background shell process
)

// TaskStatus is the state of a task.
type TaskStatus string

// Task statuses. An agent task is running while its agent has a run and idle
// between runs; a shell task runs once and ends.
const (
	TaskRunning     TaskStatus = "running"
	TaskIdle        TaskStatus = "idle"
	TaskStopping    TaskStatus = "stopping"
	TaskCompleted   TaskStatus = "completed"
	TaskFailed      TaskStatus = "failed"
	TaskStopped     TaskStatus = "stopped"
	TaskTimedOut    TaskStatus = "timed-out"
	TaskInterrupted TaskStatus = "interrupted"
	TaskLost        TaskStatus = "lost"
	TaskClosed      TaskStatus = "closed"
)

// Live reports whether a task with this status can still produce output.
func (s TaskStatus) Live() bool {
	return s == TaskRunning || s == TaskStopping
}

// MsgOutcome is what a sender is told about a message (DESIGN rule 3).
type MsgOutcome string

// Message outcomes. OutcomePending is internal: the target's model round is
// in flight and its answer decides between joined and queued-behind-stop;
// the sender waits for that answer.
const (
	OutcomeJoined           MsgOutcome = "joined"
	OutcomeQueuedBehindStop MsgOutcome = "queued-behind-stop"
	OutcomeResumed          MsgOutcome = "resumed"
	OutcomeRejected         MsgOutcome = "rejected"
	OutcomePending          MsgOutcome = "pending"
)

// PermissionMode is a session's tool permission mode.
type PermissionMode string

// Permission modes.
const (
	PermAsk         PermissionMode = "ask"
	PermAcceptEdits PermissionMode = "accept-edits"
	PermAuto        PermissionMode = "auto"
	PermBypass      PermissionMode = "bypass"
)

// Permissions are a session's tool rules.
type Permissions struct {
	Mode  PermissionMode `json:"mode"`
	Allow []string       `json:"allow,omitempty"`
	Deny  []string       `json:"deny,omitempty"`
}

// Clone returns a copy that shares no slice with p.
func (p Permissions) Clone() Permissions {
	return Permissions{Mode: p.Mode, Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
}

// Driver says who runs an agent's turns.
type Driver string

// Drivers.
const (
	// DriverLoop: vigil runs the agent loop and calls the model per round.
	DriverLoop Driver = "loop"
	// DriverExternal: a provider process (Claude Code) runs the turns; vigil
	// feeds it inbox items and records what it reports.
	DriverExternal Driver = "external"
)

// Session is the session's own record.
type Session struct {
	ID       SessionID `json:"id"`
	Title    string    `json:"title,omitempty"`
	Cwd      string    `json:"cwd,omitempty"`
	Dirs     []string  `json:"dirs,omitempty"`
	Provider string    `json:"provider,omitempty"`
	Model    string    `json:"model,omitempty"`
	// SubagentModel is the model of subagents that ask for none.
	SubagentModel string      `json:"subagent_model,omitempty"`
	Permissions   Permissions `json:"permissions"`
	Owner         string      `json:"owner,omitempty"` // an MCP caller's owner key, if any
	// Budget bounds the whole session (DESIGN rule 10).
	Budget      Budget    `json:"budget,omitzero"`
	Created     time.Time `json:"created"`
	Closed      bool      `json:"closed,omitempty"`
	CloseReason string    `json:"close_reason,omitempty"`
}

// Roots are the session's directories: the working directory first, then
// the added ones; none without a working directory.
func (s *Session) Roots() []string {
	if s.Cwd == "" {
		return nil
	}
	return append([]string{s.Cwd}, s.Dirs...)
}

// Hold is a user's hold on the session's queue of user prompts.
type Hold struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// Agent is a main agent or a subagent.
type Agent struct {
	ID          AgentID    `json:"id"`
	Name        string     `json:"name"`
	Description string     `json:"description,omitempty"`
	Owner       AgentID    `json:"owner,omitempty"` // empty for the main agent
	Task        TaskID     `json:"task,omitempty"`  // its agent task; empty for the main agent
	Depth       int        `json:"depth"`
	Model       string     `json:"model,omitempty"`
	Provider    string     `json:"provider,omitempty"`
	Driver      Driver     `json:"driver"`
	State       AgentState `json:"state"`
	Created     time.Time  `json:"created"`
	LastActive  time.Time  `json:"last_active"`

	Transcript []chat.Message `json:"transcript,omitempty"`
	Inbox      []*Item        `json:"inbox,omitempty"`
	Run        *Run           `json:"run,omitempty"`
	Runs       []RunSummary   `json:"runs,omitempty"`
	Gate       *Gate          `json:"gate,omitempty"`
	// Retry is the backoff before the agent runs again for the items a
	// failed run gave back; Blocked says why it takes no item until a
	// person releases it.
	Retry   *Retry `json:"retry,omitempty"`
	Blocked *Block `json:"blocked,omitempty"`
	// Carried are items a cancelled run took whose text is in the
	// transcript but that no model has seen yet: the next accepted model
	// round delivers them.
	Carried []Item `json:"carried,omitempty"`
	// seed is a seed bug's state of the agent, in a seedbugs build only
	// (seed.go); never in a snapshot.
	seed  seedAgent
	Usage chat.Usage `json:"usage"`
	// Context is what the agent's context took at its last model round;
	// Compacted is its latest compaction (what is sent starts there).
	Context   ContextSize `json:"context,omitzero"`
	Compacted *Compaction `json:"compacted,omitempty"`
	// Budget bounds the agent's tree (it and its subagents, transitively);
	// Spent is what the agent used itself, Tree what its tree used.
	Budget Budget `json:"budget,omitzero"`
	Spent  Spend  `json:"spent"`
	Tree   Spend  `json:"tree"`
	// ExternalSession, PID and StartTicks identify the provider process of
	// an agent with DriverExternal and the provider's session to resume.
	ExternalSession string `json:"external_session,omitempty"`
	PID             int    `json:"pid,omitempty"`
	StartTicks      uint64 `json:"start_ticks,omitempty"`
	// Cgroup holds every process of the provider, when vigil has cgroups.
	Cgroup string `json:"cgroup,omitempty"`
}

// RunKind says what started a run: the kind of its first item, or
// "provider-wake" for a turn a provider started on its own.
type RunKind string

// RunProviderWake is the kind of a run that the provider started on its own.
const RunProviderWake RunKind = "provider-wake"

// Run is an agent's activation in progress.
type Run struct {
	Seq     int       `json:"seq"`
	Kind    RunKind   `json:"kind"`
	Started time.Time `json:"started"`
	Items   []ItemID  `json:"items"`
	// Unseen are the items the run took that no accepted model round has
	// included yet (in flight); UnseenAt is where their text begins in the
	// transcript. Returned lists the items the run gave back unseen.
	Unseen   []Item        `json:"unseen,omitempty"`
	UnseenAt TranscriptPos `json:"unseen_at"`
	Returned []ItemID      `json:"returned,omitempty"`
	// Answered lists the messages this run took in.
	Answered []MsgID `json:"answered,omitempty"`
	// Delivered lists the notifications this run took in.
	Delivered []NoteKey `json:"delivered,omitempty"`
	Round     int       `json:"round"`
	// Turns counts the run's completed model rounds (compactions aside);
	// MaxRounds, when positive, is the most it may have.
	Turns     int `json:"turns,omitempty"`
	MaxRounds int `json:"max_rounds,omitempty"`
	// Call is the model call of the current round, in flight or waiting for
	// a slot; nil while tools run.
	Call *Call `json:"call,omitempty"`
	// Tools are the tool calls of the current round, in the model's order.
	Tools []*ToolCall `json:"tools,omitempty"`
	// PendingSends are messages sent to this agent while Call was in flight;
	// the call's answer decides their outcome.
	PendingSends []MsgID `json:"pending_sends,omitempty"`
	// Acked is set once a provider process began this run's turn;
	// Redelivered counts hand-overs to a new process before that.
	Acked       bool `json:"acked,omitempty"`
	Redelivered int  `json:"redelivered,omitempty"`
	// Cancelling is the deadline of a cancel asked of a provider process:
	// the run ends when the process ends its turn, or at this deadline.
	Cancelling time.Time `json:"cancelling,omitzero"`
	// Silent is set when vigil itself cancelled the turn: its provider
	// process had reported nothing of it for too long.
	Silent bool `json:"silent,omitempty"`
	// Expect is the deadline by which the provider process running this
	// run must report more of it (a frame of its turn, or its end); it
	// moves on with every report. Zero for runs vigil runs itself.
	Expect time.Time  `json:"expect,omitzero"`
	Usage  chat.Usage `json:"usage"`
	Calls  int        `json:"calls"`
	// Cost is in micro-USD over the rounds whose model has a price;
	// Unpriced counts the rounds whose model has none.
	Cost     int64  `json:"cost_micros,omitempty"`
	Unpriced int    `json:"unpriced_rounds,omitempty"`
	LastText string `json:"last_text,omitempty"`
}

// CallState is where a model call is.
type CallState string

// Model call states.
const (
	CallWaitingSlot CallState = "waiting-slot"
	CallInFlight    CallState = "in-flight"
	CallBackoff     CallState = "backoff"
)

// Call is one model call.
type Call struct {
	ID          CallID    `json:"id"`
	Round       int       `json:"round"`
	State       CallState `json:"state"`
	Started     time.Time `json:"started"`
	Attempt     int       `json:"attempt,omitempty"`
	RetryUntil  time.Time `json:"retry_until,omitzero"`
	RetryReason string    `json:"retry_reason,omitempty"`
	// Purpose is PurposeCompact for a call that summarises the agent's
	// older turns up to Cut, for Reason; empty for a round of the run.
	Purpose string `json:"purpose,omitempty"`
	Cut     int    `json:"cut,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// WaitKind says what a tool call waits for.
type WaitKind string

// Tool call waits.
const (
	WaitEffect   WaitKind = "effect"   // the runtime executes it
	WaitChild    WaitKind = "child"    // a foreground subagent's first run
	WaitTask     WaitKind = "task"     // TaskOutput with block
	WaitApproval WaitKind = "approval" // a permission answer
	WaitSend     WaitKind = "send"     // SendMessage whose outcome is pending
	WaitNone     WaitKind = ""         // already resolved
)

// ToolCall is one tool call of the current round.
type ToolCall struct {
	UseID    string          `json:"use_id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input,omitempty"`
	Wait     WaitKind        `json:"wait,omitempty"`
	Child    AgentID         `json:"child,omitempty"`
	WaitFor  TaskID          `json:"wait_for,omitempty"`
	Msg      MsgID           `json:"msg,omitempty"`
	Approval ApprovalID      `json:"approval,omitempty"`
	Deadline time.Time       `json:"deadline,omitzero"`
	Started  time.Time       `json:"started"`
	Done     bool            `json:"done,omitempty"`
	Result   string          `json:"result,omitempty"`
	IsError  bool            `json:"is_error,omitempty"`
}

// RunSummary is an ended run.
type RunSummary struct {
	Seq      int       `json:"seq"`
	Kind     RunKind   `json:"kind"`
	Status   RunStatus `json:"status"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	Reply    string    `json:"reply,omitempty"`
	Error    string    `json:"error,omitempty"`
	Items    []ItemID  `json:"items,omitempty"`
	Answered []MsgID   `json:"answered,omitempty"`
	// Returned lists the items the run gave back to the inbox unseen.
	Returned []ItemID   `json:"returned,omitempty"`
	Usage    chat.Usage `json:"usage"`
	Calls    int        `json:"calls"`
	Cost     int64      `json:"cost_micros,omitempty"`
	Unpriced int        `json:"unpriced_rounds,omitempty"`
}

// Item is an inbox item.
type Item struct {
	ID       ItemID    `json:"id"`
	Agent    AgentID   `json:"agent"`
	Kind     ItemKind  `json:"kind"`
	Priority Priority  `json:"priority"`
	From     string    `json:"from,omitempty"` // "user", "system" or an agent id
	Text     string    `json:"text,omitempty"`
	Msg      MsgID     `json:"msg,omitempty"`
	Note     *NoteKey  `json:"note,omitempty"`
	Timer    TimerID   `json:"timer,omitempty"`
	Gate     int       `json:"gate,omitempty"` // the gate generation of a continuation
	Enqueued time.Time `json:"enqueued"`
	// Attempts counts the runs that took the item and failed before their
	// model saw it.
	Attempts int `json:"attempts,omitempty"`
	// MaxRounds bounds the model rounds of the run that takes a prompt
	// (UserPrompt.MaxRounds).
	MaxRounds int `json:"max_rounds,omitempty"`
}

// Holdable reports whether a user hold applies to the item: only prompts
// that a user sent.
func (it *Item) Holdable() bool { return it.Kind == KindPrompt }

// Task is background work owned by an agent.
type Task struct {
	ID          TaskID   `json:"id"`
	Kind        TaskKind `json:"kind"`
	Owner       AgentID  `json:"owner"`
	Agent       AgentID  `json:"agent,omitempty"` // the subagent of an agent task
	Description string   `json:"description,omitempty"`
	// Prompt is what the owner asked an agent task; Command is a shell
	// task's command.
	Prompt     string        `json:"prompt,omitempty"`
	Command    string        `json:"command,omitempty"`
	Background bool          `json:"background"`
	Status     TaskStatus    `json:"status"`
	Started    time.Time     `json:"started"`
	Ended      time.Time     `json:"ended,omitzero"`
	OutputPath string        `json:"output_path,omitempty"`
	Timeout    time.Duration `json:"timeout,omitempty"`
	ExitCode   *int          `json:"exit_code,omitempty"`
	OutputTail string        `json:"output_tail,omitempty"`
	// External is the provider's own id for a task it mirrors (Claude Code).
	External string `json:"external,omitempty"`
	// PID and StartTicks identify a shell task's process (its process
	// group leader), so a later vigil can find and end it.
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"start_ticks,omitempty"`
	// Cgroup is the cgroup that holds every process of the task, when the
	// machine gives vigil one: a later vigil ends them all by it.
	Cgroup string `json:"cgroup,omitempty"`
	// Incarnation is the runtime incarnation that started the process;
	// after a restart, a live task of an older incarnation has lost it.
	Incarnation int64 `json:"incarnation,omitempty"`
}

// NoteKey is the unique key of a notification: a task and the run whose end
// it announces, or Run 0 for a shell task's exit.
type NoteKey struct {
	Task TaskID `json:"task"`
	Run  int    `json:"run"`
}

// String formats the key as "t3#2" or "t3#exit".
func (k NoteKey) String() string {
	if k.Run == 0 {
		return string(k.Task) + "#exit"
	}
	return string(k.Task) + "#" + strconv.Itoa(k.Run)
}

// MarshalText encodes the key as its String form.
func (k NoteKey) MarshalText() ([]byte, error) {
	// Built in place: every event that names a notification encodes one.
	b := make([]byte, 0, len(k.Task)+1+20)
	b = append(b, k.Task...)
	if k.Run == 0 {
		return append(b, "#exit"...), nil
	}
	return strconv.AppendInt(append(b, '#'), int64(k.Run), 10), nil
}

// UnmarshalText decodes a key written by MarshalText.
func (k *NoteKey) UnmarshalText(b []byte) error {
	s := string(b)
	i := strings.LastIndexByte(s, '#')
	if i <= 0 {
		return fmt.Errorf("bad notification key %q", s)
	}
	k.Task = TaskID(s[:i])
	if s[i+1:] == "exit" {
		k.Run = 0
		return nil
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 {
		return fmt.Errorf("bad notification key %q", s)
	}
	k.Run = n
	return nil
}

// Delivery says how a notification reaches its owner.
type Delivery string

// Notification deliveries.
const (
	DeliverInbox      Delivery = "inbox"       // as an inbox item
	DeliverToolResult Delivery = "tool-result" // as the result of a foreground Agent call
)

// Note is a notification.
type Note struct {
	Key        NoteKey    `json:"key"`
	Owner      AgentID    `json:"owner"`
	Agent      AgentID    `json:"agent,omitempty"`
	AgentName  string     `json:"agent_name,omitempty"`
	Kind       TaskKind   `json:"kind"`
	Status     string     `json:"status"`
	Reply      string     `json:"reply,omitempty"`
	Error      string     `json:"error,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Output     string     `json:"output,omitempty"`
	OutputPath string     `json:"output_path,omitempty"`
	Answered   []MsgID    `json:"answered,omitempty"`
	LiveTasks  []TaskID   `json:"live_tasks,omitempty"`
	Usage      chat.Usage `json:"usage"`
	// Cost is the run's cost in micro-USD; Priced is false when a round of
	// it had no known price (then Cost covers only the priced rounds).
	Cost     int64         `json:"cost_micros,omitempty"`
	Priced   bool          `json:"priced,omitempty"`
	Duration time.Duration `json:"duration"`
	Written  time.Time     `json:"written"`
	Delivery Delivery      `json:"delivery"`
	Item     ItemID        `json:"item,omitempty"`
	// DeliveredRun is the owner's run that took the notification in (0 until then).
	DeliveredRun int `json:"delivered_run,omitempty"`
	// DeliverBy is the deadline of a notification the provider process
	// delivers itself (DeliverProvider) to an idle owner: if no turn of the
	// owner takes it in by then, it goes to an inbox vigil drains.
	DeliverBy time.Time `json:"deliver_by,omitzero"`
	// Dropped says why the notification could not be delivered (owner closed).
	Dropped string `json:"dropped,omitempty"`
}

// Msg is a message sent to an agent.
type Msg struct {
	ID       MsgID      `json:"id"`
	From     string     `json:"from"` // "user" or an agent id
	To       AgentID    `json:"to"`
	Text     string     `json:"text"`
	Priority Priority   `json:"priority"`
	Sent     time.Time  `json:"sent"`
	Outcome  MsgOutcome `json:"outcome"`
	Reason   string     `json:"reason,omitempty"`
	// Run is the target's run the outcome names: the run joined, the run
	// resumed, or for queued-behind-stop the run that is stopping.
	Run  int    `json:"run,omitempty"`
	Item ItemID `json:"item,omitempty"`
	// AnsweredBy is the target's run that took the message in.
	AnsweredBy int `json:"answered_by,omitempty"`
	// SenderCall is the sender's SendMessage tool call, when it waits.
	SenderCall string `json:"sender_call,omitempty"`
}

// Timer is a scheduled wakeup.
type Timer struct {
	ID     TimerID   `json:"id"`
	Agent  AgentID   `json:"agent"`
	At     time.Time `json:"at"`
	Prompt string    `json:"prompt"`
}

// Gate is the pending-continuation gate of an agent (DESIGN rule 6): it
// coalesces provider wake requests into one continuation item. It has an
// owner (the agent), a generation and a deadline, and is released on every
// terminal outcome of the continuation it guards.
type Gate struct {
	Gen      int       `json:"gen"`
	Item     ItemID    `json:"item"`
	Opened   time.Time `json:"opened"`
	Deadline time.Time `json:"deadline"`
}

// GateOutcome says why a gate was released.
type GateOutcome string

// Gate release outcomes.
const (
	GateStarted     GateOutcome = "started"
	GateCancelled   GateOutcome = "cancelled"
	GateDropped     GateOutcome = "dropped"
	GateSuperseded  GateOutcome = "superseded"
	GateProcessExit GateOutcome = "process-exit"
	GateDeadline    GateOutcome = "deadline"
)

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
	// External is the provider process's own id of a request it asked
	// (Claude Code's permission prompt): the answer goes back to it.
	External string `json:"external,omitempty"`
}

// Counters make the core's ids.
type Counters struct {
	Agent    int `json:"agent"`
	Task     int `json:"task"`
	Item     int `json:"item"`
	Msg      int `json:"msg"`
	Call     int `json:"call"`
	Timer    int `json:"timer"`
	Approval int `json:"approval"`
	Gate     int `json:"gate"`
}

// State is one session's state. It is changed only by applying events.
type State struct {
	Session   Session                  `json:"session"`
	Seq       int64                    `json:"seq"`
	Hold      *Hold                    `json:"hold,omitempty"`
	Agents    map[AgentID]*Agent       `json:"agents"`
	Order     []AgentID                `json:"order"`
	Tasks     map[TaskID]*Task         `json:"tasks"`
	TaskOrder []TaskID                 `json:"task_order"`
	Notes     map[NoteKey]*Note        `json:"notes"`
	NoteOrder []NoteKey                `json:"note_order"`
	Msgs      map[MsgID]*Msg           `json:"msgs"`
	Timers    map[TimerID]*Timer       `json:"timers"`
	Approvals map[ApprovalID]*Approval `json:"approvals"`
	Counters  Counters                 `json:"counters"`
	// Incarnation counts recoveries; effects and processes carry it.
	Incarnation int64 `json:"incarnation"`
	// Drops counts what was dropped, by reason (DESIGN rule 9).
	Drops map[string]int `json:"drops,omitempty"`
}

// NewState returns the empty state of a session that does not exist yet.
func NewState() *State {
	return &State{
		Agents:    map[AgentID]*Agent{},
		Tasks:     map[TaskID]*Task{},
		Notes:     map[NoteKey]*Note{},
		Msgs:      map[MsgID]*Msg{},
		Timers:    map[TimerID]*Timer{},
		Approvals: map[ApprovalID]*Approval{},
		Drops:     map[string]int{},
	}
}

// Agent returns the agent with id or name ref, or nil.
func (s *State) Agent(ref string) *Agent {
	if a := s.Agents[AgentID(ref)]; a != nil {
		return a
	}
	if ref == "main" {
		return s.Agents[MainAgent]
	}
	for _, id := range s.Order {
		if a := s.Agents[id]; a.Name == ref {
			return a
		}
	}
	return nil
}

// Note returns the notification with key k, or nil.
func (s *State) Note(k NoteKey) *Note { return s.Notes[k] }

// LiveTasks returns the ids of the live tasks owned by agent a, in order.
func (s *State) LiveTasks(a AgentID) []TaskID {
	var out []TaskID
	for _, id := range s.TaskOrder {
		t := s.Tasks[id]
		if t.Owner != a {
			continue
		}
		if t.Kind == TaskShell && t.Status.Live() {
			out = append(out, id)
		}
		if t.Kind == TaskAgent {
			if ag := s.Agents[t.Agent]; ag != nil && ag.Run != nil {
				out = append(out, id)
			}
		}
	}
	return out
}

// Quiescent reports whether nothing is left to do on its own: no run in
// progress or backing off, no live task, no timer, no notification a
// provider process still owes, and every inbox empty but those of blocked
// agents, which wait for a person.
func (s *State) Quiescent() bool { return s.quiescent(true) }

// Quiescent is State.Quiescent as this core sees it: in a seedbugs build
// with the quiescent-owed bug put back, it ignores what a provider process
// owes (the simulator's "quiescent" check must catch that).
func (c *Core) Quiescent(s *State) bool { return s.quiescent(!c.seedQuiescentOwed()) }

// quiescent is Quiescent; owed says whether notifications a provider
// process still owes count as work to come.
func (s *State) quiescent(owed bool) bool {
	for _, id := range s.Order {
		a := s.Agents[id]
		// A blocked agent's items wait for a person (Blocked), not for
		// anything the session does on its own.
		if a.Run != nil || (len(a.Inbox) > 0 && a.State != AgentClosed && a.Blocked == nil) || a.Retry != nil {
			return false
		}
	}
	for _, id := range s.TaskOrder {
		if t := s.Tasks[id]; t.Kind == TaskShell && t.Status.Live() {
			return false
		}
	}
	// A notification the provider process owes an agent is work to come:
	// its turn takes it in, or at its deadline vigil's inbox does.
	if owed && hasProvider(s) {
		for _, k := range s.NoteOrder {
			if n := s.Note(k); undeliveredNote(n) {
				if o := s.Agents[n.Owner]; o != nil && o.State != AgentClosed {
					return false
				}
			}
		}
	}
	return len(s.Timers) == 0
}
