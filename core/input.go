package core

import (
	"encoding/json"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// Input is something that happened outside the core: a request from a user
// or an edge, or the outcome of an effect.
type Input interface{ inputName() string }

// CreateSession creates the session and its main agent, and optionally
// queues the first prompt.
type CreateSession struct {
	Session  Session
	MainName string // default "main"
	Driver   Driver // default DriverLoop
	Prompt   string
	// MaxRounds bounds the model rounds of the run that takes Prompt (see
	// UserPrompt).
	MaxRounds int
}

// UserPrompt queues a user prompt for the main agent. Prompts are the only
// items a user hold applies to.
type UserPrompt struct {
	Text     string
	Priority Priority
	// MaxRounds, when positive, bounds the model rounds of the run that
	// takes the prompt: once it has had that many and its model asks for
	// another (its tool calls done), the run ends round_limit.
	MaxRounds int
}

// UserMessage sends a message from the user to any agent. It is answered
// like a SendMessage from an agent.
type UserMessage struct {
	To       string
	Text     string
	Priority Priority
}

// ModelResponded delivers a model call's complete answer.
type ModelResponded struct {
	Agent    AgentID
	Call     CallID
	Response chat.Response
}

// ModelFailed says a model call failed after the provider's retries.
type ModelFailed struct {
	Agent AgentID
	Call  CallID
	Error string
	// Kind says whether retrying can help; empty means FailTransient.
	Kind FailureKind
}

// ModelRetrying says the provider backs off before another attempt.
type ModelRetrying struct {
	Agent   AgentID
	Call    CallID
	Attempt int
	Until   time.Time
	Reason  string
}

// ToolDone delivers the result of an ExecTool effect.
type ToolDone struct {
	Agent   AgentID
	UseID   string
	Result  string
	IsError bool
}

// ShellStartFailed says a background shell task could not start.
type ShellStartFailed struct {
	Task  TaskID
	Error string
}

// ProcessStarted records the process of a background shell task.
type ProcessStarted struct {
	Task       TaskID
	PID        int
	StartTicks uint64
	// Cgroup is the cgroup that holds every process of the task, when the
	// machine gives vigil one; a successor ends them by it.
	Cgroup string
}

// ProcessExited says a background shell task's process ended.
type ProcessExited struct {
	Task     TaskID
	ExitCode int
	Signal   string
	TimedOut bool
	Stopped  bool
	Tail     string
}

// Tick says time has passed; due timers, gate and approval deadlines and
// waits are handled.
type Tick struct{}

// HoldQueue holds the session's queue of user prompts.
type HoldQueue struct{ By, Reason string }

// ResumeQueue releases the hold.
type ResumeQueue struct{ By string }

// CancelRun cancels an agent's current run.
type CancelRun struct {
	Agent  string
	By     string
	Reason string
}

// StopTask stops a task: a shell task's process is killed, an agent task's
// current run is cancelled.
type StopTask struct {
	Task TaskID
	By   string
}

// CancelItem removes a queued user prompt or continuation from an inbox.
type CancelItem struct {
	Item ItemID
	By   string
}

// MoveItem moves a queued item to position Index in its inbox.
type MoveItem struct {
	Item  ItemID
	Index int
}

// AnswerApproval answers a permission request. Always (with Allow) also
// adds a session rule that allows the same call from now on, and answers
// every pending request it allows.
type AnswerApproval struct {
	Approval ApprovalID
	Allow    bool
	Always   bool
	By       string
	Reason   string
	// Input, with Allow, is the input the call runs with instead of the
	// model's (a program's permission callback may rewrite it); nil keeps
	// the model's. The session's deny rules are checked against it.
	Input json.RawMessage
}

// SetPermissionMode changes the session's permission mode. Pending
// permission requests that the new mode decides are answered at once.
type SetPermissionMode struct {
	Mode PermissionMode
	By   string
}

// CloseAgent closes an agent and everything it owns.
type CloseAgent struct {
	Agent string
	By    string
}

// CloseSession closes every agent and the session.
type CloseSession struct {
	By     string
	Reason string
}

// ProviderWake says a provider needs a turn of the agent to continue work of
// its own (buffered completions of a provider process). It becomes a
// continuation item behind the agent's gate.
type ProviderWake struct {
	Agent    AgentID
	Evidence string
}

// Recover is the first input after a restart: the previous runtime
// incarnation is gone with its processes and in-flight effects.
type Recover struct {
	Incarnation int64
	// Previous is the owner the session was taken from and Cause how it
	// let the session go (TakeoverHandover, ...); both "" when the
	// runtime does not know (its own lapsed lease, a session's first
	// lease). Recovered records them.
	Previous string
	Cause    string
}

func (CreateSession) inputName() string     { return "create-session" }
func (UserPrompt) inputName() string        { return "user-prompt" }
func (UserMessage) inputName() string       { return "user-message" }
func (ModelResponded) inputName() string    { return "model-responded" }
func (ModelFailed) inputName() string       { return "model-failed" }
func (ModelRetrying) inputName() string     { return "model-retrying" }
func (ToolDone) inputName() string          { return "tool-done" }
func (ShellStartFailed) inputName() string  { return "shell-start-failed" }
func (ProcessExited) inputName() string     { return "process-exited" }
func (ProcessStarted) inputName() string    { return "process-started" }
func (Tick) inputName() string              { return "tick" }
func (HoldQueue) inputName() string         { return "hold" }
func (ResumeQueue) inputName() string       { return "resume" }
func (CancelRun) inputName() string         { return "cancel-run" }
func (StopTask) inputName() string          { return "stop-task" }
func (CancelItem) inputName() string        { return "cancel-item" }
func (MoveItem) inputName() string          { return "move-item" }
func (AnswerApproval) inputName() string    { return "answer-approval" }
func (SetPermissionMode) inputName() string { return "set-permission-mode" }
func (CloseAgent) inputName() string        { return "close-agent" }
func (CloseSession) inputName() string      { return "close-session" }
func (ProviderWake) inputName() string      { return "provider-wake" }
func (Recover) inputName() string           { return "recover" }

// InputName returns a short name for an input kind, for logs and traces.
func InputName(in Input) string { return in.inputName() }

// Effect is work for the runtime to do after the step's events commit.
type Effect interface{ effectName() string }

// CallModel asks the runtime to perform a model call and feed back
// ModelResponded, ModelFailed or ModelRetrying.
type CallModel struct {
	Call      CallID
	Agent     AgentID
	AgentName string
	IsMain    bool
	// Background is set for an agent whose task runs in the background:
	// nobody waits on this call but its own agent (the runtime starts such
	// calls last when the node is saturated).
	Background bool
	Depth      int
	Run        int
	Round      int
	Provider   string
	Model      string
	// Purpose is PurposeCompact for a call that asks for a summary of the
	// agent's older turns (its answer's tool calls are ignored); empty for
	// a round.
	Purpose string
	// Messages is what to send: the transcript, or after a compaction its
	// header and the turns kept. It may share memory with the state and
	// must not be modified.
	Messages []chat.Message
}

// CancelCall asks the runtime to abandon a model call.
type CancelCall struct {
	Agent AgentID
	Call  CallID
}

// ExecTool asks the runtime to execute a tool and feed back ToolDone.
type ExecTool struct {
	Agent AgentID
	Run   int
	UseID string
	Name  string
	Input json.RawMessage
}

// TaskOutputRequest is the Input of an ExecTool effect named TaskOutput:
// read a shell task's output file, OutputPath relative to the session's
// directory, from Offset, at most Limit bytes (0: the runtime's cap).
type TaskOutputRequest struct {
	TaskID     TaskID     `json:"task_id"`
	OutputPath string     `json:"output_path"`
	Status     TaskStatus `json:"status"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Offset     int64      `json:"offset,omitempty"`
	Limit      int64      `json:"limit,omitempty"`
}

// TaskOutputResult is what the runtime answers a TaskOutput request with:
// the model reads it as the tool's result.
type TaskOutputResult struct {
	TaskID     TaskID     `json:"task_id"`
	Status     TaskStatus `json:"status"`
	Output     string     `json:"output"`
	NextOffset int64      `json:"next_offset"`
	ExitCode   *int       `json:"exit_code,omitempty"`
}

// CancelTool asks the runtime to abandon a tool execution.
type CancelTool struct {
	Agent AgentID
	UseID string
}

// StartShell asks the runtime to start a background shell task and feed
// back ProcessExited (or ShellStartFailed).
type StartShell struct {
	Task       TaskID
	Command    string
	Cwd        string
	Timeout    time.Duration
	OutputPath string
}

// StopShell asks the runtime to kill a shell task's process group.
type StopShell struct {
	Task TaskID
}

func (CallModel) effectName() string  { return "call-model" }
func (CancelCall) effectName() string { return "cancel-call" }
func (ExecTool) effectName() string   { return "exec-tool" }
func (CancelTool) effectName() string { return "cancel-tool" }
func (StartShell) effectName() string { return "start-shell" }
func (StopShell) effectName() string  { return "stop-shell" }

// AnswerPermission asks the runtime to answer a provider process's
// permission request (Claude Code's can_use_tool).
type AnswerPermission struct {
	Agent   AgentID
	Request string
	Allow   bool
	Reason  string
	// Input, when allowed, is the input to run the call with instead of
	// the one the process asked about; nil keeps it.
	Input json.RawMessage
}

func (AnswerPermission) effectName() string { return "answer-permission" }

// EffectName returns a short name for an effect kind.
func EffectName(e Effect) string { return e.effectName() }
