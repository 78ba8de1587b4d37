package core

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Config sets the core's limits. Zero values mean defaults.
type Config struct {
	// MaxAgents caps the agents of a session (default 64).
	MaxAgents int
	// MaxDepth caps subagent nesting (default 4).
	MaxDepth int
	// MaxInbox caps one agent's inbox (default 1000).
	MaxInbox int
	// MaxConcurrentCalls caps a session's model calls in flight; 0 means no
	// cap. Calls over the cap wait for a slot, visibly.
	MaxConcurrentCalls int
	// GateTTL is a continuation gate's deadline (default 10 minutes).
	GateTTL time.Duration
	// ApprovalTTL is how long a permission request waits (default 1 hour).
	ApprovalTTL time.Duration
	// ProviderSilence bounds what vigil expects of a provider process (the
	// Claude Code CLI): a turn or a mirrored subagent's run that it reports
	// nothing of for this long is ended, and a notification it was to
	// deliver but has not is handed to an agent vigil runs (default 30
	// minutes, three times the CLI's longest Bash timeout).
	ProviderSilence time.Duration
	// RetryBase, RetryMaxDelay and RetryAttempts shape the retry of items
	// that a failed run gave back: the n-th retry waits RetryBase×2^(n-1),
	// at most RetryMaxDelay, and after RetryAttempts runs failed with an
	// item the agent is blocked (defaults 2 s, 5 minutes, 5).
	RetryBase     time.Duration
	RetryMaxDelay time.Duration
	RetryAttempts int
	// Budget is the budget of a new session that sets none of its own: a
	// zero field means DefaultBudget's, a negative one no bound.
	Budget Budget
	// Price prices a model round; nil prices nothing (tokens only).
	Price Pricer
	// ContextWindow returns the context window of a provider's model in
	// tokens, 0 when unknown (then only a provider's refusal compacts).
	ContextWindow func(provider, model string) int
	// CompactAt is the fraction of the window at which an agent's context
	// is compacted before its next round (default 0.8).
	CompactAt float64
	// BackgroundTimeout bounds a background shell task that sets no
	// timeout of its own (default 4 hours): it is killed and notifies
	// timed-out.
	BackgroundTimeout time.Duration
}

// DefaultBudget is a session's budget when the configuration sets none:
// enough for hours of real work, small enough that a loop ends by itself
// (DESIGN rule 10): 50M tokens, 5,000 model rounds, 24 hours of run time,
// $100.
func DefaultBudget() Budget {
	return Budget{Tokens: 50_000_000, Rounds: 5_000, Wall: 24 * time.Hour, Cost: 100_000_000}
}

func (c Config) withDefaults() Config {
	if c.MaxAgents == 0 {
		c.MaxAgents = 64
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = 4
	}
	if c.MaxInbox == 0 {
		c.MaxInbox = 1000
	}
	if c.GateTTL == 0 {
		c.GateTTL = 10 * time.Minute
	}
	if c.ApprovalTTL == 0 {
		c.ApprovalTTL = time.Hour
	}
	if c.ProviderSilence == 0 {
		c.ProviderSilence = 30 * time.Minute
	}
	if c.RetryBase == 0 {
		c.RetryBase = 2 * time.Second
	}
	if c.RetryMaxDelay == 0 {
		c.RetryMaxDelay = 5 * time.Minute
	}
	if c.RetryAttempts == 0 {
		c.RetryAttempts = 5
	}
	c.Budget = c.Budget.withDefaults(DefaultBudget())
	if c.CompactAt <= 0 || c.CompactAt >= 1 {
		c.CompactAt = 0.8
	}
	if c.BackgroundTimeout == 0 {
		c.BackgroundTimeout = 4 * time.Hour
	}
	return c
}

// Core steps sessions. It holds only configuration and is safe for
// concurrent use; each State must be stepped by one goroutine at a time.
type Core struct {
	seed seedCore // the seed bug it puts back, in a seedbugs build (seed.go)
	cfg  Config
}

// New returns a core with the given configuration.
func New(cfg Config) *Core { return &Core{cfg: cfg.withDefaults()} }

// Config returns the core's configuration with defaults filled in.
func (c *Core) Config() Config { return c.cfg }

// Output is the result of one step.
type Output struct {
	// Events are the changes to commit, already applied to the state.
	Events []Event
	// Effects are to be started after Events are committed.
	Effects []Effect
	// Err is set when the input was refused; then there are no events.
	Err error
	// Msg is the recorded message of a UserMessage; its outcome may be
	// pending until the target's model round answers.
	Msg *Msg
	// Item is the id of the item a UserPrompt queued.
	Item ItemID
	// Agent and Task are the subagent and task a SpawnAgent started.
	Agent AgentID
	Task  TaskID
}

// ErrorCode classifies a refused input.
type ErrorCode string

// Error codes of refused inputs.
const (
	CodeNotFound ErrorCode = "not_found"
	CodeInvalid  ErrorCode = "invalid"
	CodeConflict ErrorCode = "conflict"
	CodeClosed   ErrorCode = "closed"
)

// Error is a refused input.
type Error struct {
	Code    ErrorCode
	Message string
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

func errorf(code ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCodeOf returns the code of a core error, or "" for other errors.
func ErrorCodeOf(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// stepper carries one step.
type stepper struct {
	c *Core
	// cfg is the core's configuration, read only.
	cfg *Config
	s   *State
	now time.Time
	out Output
	// seedStep is a seed bug's state of the step (seed.go).
	seedStep seedStep
	// ending are agents whose run is being ended in this step; no new
	// round starts for them. Runs end inside one another (an owner's run
	// cancels its children's): a few at a time, so a slice, in endingBuf
	// until they are more.
	ending    []AgentID
	endingBuf [4]AgentID
	// stopped is set when a budget ended a run (see schedule).
	stopped bool
}

// Step applies one input to the state. See the package documentation.
func (c *Core) Step(s *State, now time.Time, in Input) Output {
	st := &stepper{c: c, cfg: &c.cfg, s: s, now: now}
	st.ending = st.endingBuf[:0]
	if _, ok := in.(CreateSession); !ok && s.Session.ID == "" {
		st.out.Err = errorf(CodeNotFound, "session does not exist")
		return st.out
	}
	st.handle(in)
	if st.out.Err != nil {
		if len(st.out.Events) > 0 {
			panic(fmt.Sprintf("core: %s refused after emitting events", in.inputName()))
		}
		return st.out
	}
	st.schedule()
	return st.out
}

// stepEvents is the room a step's first event makes: most steps emit a
// few events, an answer that starts a round of tool calls a few dozen.
const stepEvents = 8

func (st *stepper) emit(b Body) {
	Stamp(b, st.now) // the body's own times are the event's (stamp.go)
	e := Event{Seq: st.s.Seq + 1, At: st.now, Body: b}
	Apply(st.s, e)
	if st.out.Events == nil {
		st.out.Events = make([]Event, 0, stepEvents)
	}
	st.out.Events = append(st.out.Events, e)
}

// stepEffects is the room a step's first effect makes.
const stepEffects = 4

func (st *stepper) effect(e Effect) {
	if st.out.Effects == nil {
		st.out.Effects = make([]Effect, 0, stepEffects)
	}
	st.out.Effects = append(st.out.Effects, e)
}

// isEnding reports whether a's run is being ended in this step.
func (st *stepper) isEnding(a AgentID) bool { return slices.Contains(st.ending, a) }

// ended takes a off the runs being ended, where endRunFailed put it on:
// runs end inside one another, the last one put on first.
func (st *stepper) ended(a AgentID) {
	for i := len(st.ending) - 1; i >= 0; i-- {
		if st.ending[i] == a {
			st.ending = slices.Delete(st.ending, i, i+1)
			return
		}
	}
}

func (st *stepper) fail(code ErrorCode, format string, args ...any) {
	st.out.Err = errorf(code, format, args...)
}

func (st *stepper) drop(what, reason, detail string) {
	st.emit(&Dropped{What: what, Reason: reason, Detail: detail})
}

func (st *stepper) nextItemID() ItemID { return ItemID("i" + strconv.Itoa(st.s.Counters.Item+1)) }

func (st *stepper) nextMsgID() MsgID { return MsgID("m" + strconv.Itoa(st.s.Counters.Msg+1)) }

func (st *stepper) handle(in Input) {
	switch in := in.(type) {
	case CreateSession:
		st.createSession(in)
	case UserPrompt:
		st.userPrompt(in)
	case UserMessage:
		st.userMessage(in)
	case ModelResponded:
		st.modelResponded(in)
	case ModelFailed:
		st.modelFailed(in)
	case ModelRetrying:
		st.modelRetrying(in)
	case ToolDone:
		st.toolDone(in)
	case ShellStartFailed:
		st.shellStartFailed(in)
	case ProcessExited:
		st.processExited(in)
	case ProcessStarted:
		if t := st.s.Tasks[in.Task]; t != nil && t.Kind == TaskShell && t.Status.Live() {
			st.emit(&TaskProcess{Task: in.Task, PID: in.PID, StartTicks: in.StartTicks, Cgroup: in.Cgroup})
		} else {
			st.drop("process start "+string(in.Task), "stale-process-event", "the task already ended")
		}
	case Tick:
		st.tick()
	case HoldQueue:
		if st.s.Hold == nil {
			st.emit(&HoldSet{By: in.By, Reason: in.Reason})
		}
	case ResumeQueue:
		if st.s.Hold != nil {
			st.emit(&HoldReleased{By: in.By})
		}
	case CancelRun:
		st.cancelRun(in)
	case StopTask:
		st.stopTask(in)
	case CancelItem:
		st.cancelItem(in)
	case MoveItem:
		st.moveItem(in)
	case AnswerApproval:
		st.answerApproval(in)
	case SetPermissionMode:
		st.setPermissionMode(in)
	case CloseAgent:
		a := st.s.Agent(in.Agent)
		if a == nil {
			st.fail(CodeNotFound, "no agent %q", in.Agent)
			return
		}
		if a.State == AgentClosed {
			return
		}
		if a.ID == MainAgent {
			st.closeSession("main agent closed by " + in.By)
			return
		}
		st.closeAgent(a, "closed by "+in.By)
	case CloseSession:
		if !st.s.Session.Closed {
			st.closeSession(in.Reason)
		}
	case ProviderWake:
		st.providerWake(in)
	case RetryAgent:
		st.retryAgent(in)
	case SetBudget:
		st.setBudget(in)
	case Recover:
		st.recover(in)
	case SpawnAgent:
		st.spawnAgent(in)
	case CallerAck:
		st.callerAck(in)
	case ExternalTurnStarted:
		st.externalTurnStarted(in)
	case ExternalMessage:
		st.externalMessage(in)
	case ExternalTurnEnded:
		st.externalTurnEnded(in)
	case ExternalTask:
		st.externalTask(in)
	case ExternalPermission:
		st.externalPermission(in)
	case ExternalPermissionWithdrawn:
		if a := st.s.Agents[in.Agent]; a != nil {
			st.withdrawExternal(a, in.Request, "withdrawn by the provider process")
		}
	case ProviderStarted:
		st.providerStarted(in)
	case ProviderExited:
		st.providerExit(in)
	default:
		if !st.seedInput(in) {
			st.fail(CodeInvalid, "unknown input %T", in)
		}
	}
}
