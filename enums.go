package vigil

// The values of the read types' kinds and states: the core's own values
// (TestEnumsAreTheCores checks each).

// AgentState is what an agent is doing.
type AgentState string

// The agent states.
const (
	AgentIdle    AgentState = "idle"
	AgentRunning AgentState = "running"
	// AgentWaiting: its run waits on a tool call (a child, a task, an
	// approval).
	AgentWaiting AgentState = "waiting"
	AgentClosed  AgentState = "closed"
)

// Driver says who runs an agent's model rounds.
type Driver string

// The drivers.
const (
	// DriverLoop: vigil runs them.
	DriverLoop Driver = "loop"
	// DriverExternal: a provider process (the Claude Code CLI) runs them.
	DriverExternal Driver = "external"
	// DriverCaller: an outside caller (an MCP client) that runs no model.
	DriverCaller Driver = "caller"
)

// ItemKind is the kind of an inbox item, and of the run it started.
type ItemKind string

// The item kinds.
const (
	KindPrompt       ItemKind = "prompt"
	KindSpawn        ItemKind = "spawn"
	KindMessage      ItemKind = "message"
	KindNotification ItemKind = "notification"
	KindTimer        ItemKind = "timer"
	KindContinuation ItemKind = "continuation"
	// KindProviderWake is the kind of a run a provider process started
	// on its own.
	KindProviderWake ItemKind = "provider-wake"
)

// RunStatus is a run's status: running, or how it ended.
type RunStatus string

// The run statuses.
const (
	RunRunning        RunStatus = "running"
	RunCompleted      RunStatus = "completed"
	RunFailed         RunStatus = "failed"
	RunCancelled      RunStatus = "cancelled"
	RunInterrupted    RunStatus = "interrupted"
	RunBudgetExceeded RunStatus = "budget_exceeded"
	// RunRoundLimit: the run had the model rounds its prompt allowed
	// (PromptParams.MaxRounds) and its model asked for another.
	RunRoundLimit RunStatus = "round_limit"
)

// TaskKind is the kind of a task.
type TaskKind string

// The task kinds.
const (
	TaskAgent TaskKind = "agent"
	TaskShell TaskKind = "shell"
)

// TaskStatus is a task's status. An agent task is running while its agent
// has a run and idle between runs; a shell task runs once and ends.
type TaskStatus string

// The task statuses.
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

// Live reports whether a task with this status can still produce output:
// running, or stopping.
func (s TaskStatus) Live() bool { return s == TaskRunning || s == TaskStopping }

// Outcome is what happened to a message (DESIGN rule 3).
type Outcome string

// The message outcomes.
const (
	// OutcomeJoined: the recipient's run in progress sees it at its next
	// model round.
	OutcomeJoined Outcome = "joined"
	// OutcomeQueuedBehindStop: the recipient was finishing run N; run N+1
	// answers it.
	OutcomeQueuedBehindStop Outcome = "queued-behind-stop"
	// OutcomeResumed: the recipient was idle; a run started with it.
	OutcomeResumed Outcome = "resumed"
	// OutcomeRejected: not delivered; Message.Reason says why.
	OutcomeRejected Outcome = "rejected"
	// OutcomePending: the recipient's model round is in flight; its answer
	// decides between joined and queued-behind-stop.
	OutcomePending Outcome = "pending"
)

// Delivery is how a notification reaches its owner.
type Delivery string

// The deliveries.
const (
	// DeliverInbox: a run of the owner takes it in from its inbox.
	DeliverInbox Delivery = "inbox"
	// DeliverToolResult: the owner's waiting tool call gets it as its
	// result.
	DeliverToolResult Delivery = "tool-result"
)
