package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// Bug names a seed bug that a test-only variant of the core puts back, so
// the simulator can show that its checks fail when a rule is broken.
type Bug string

// The seed bugs, named after the reports in shared/seeds.
const (
	BugNone Bug = ""
	// BugNotifiedFlag (000): a run's stop notification is written in a later
	// step than its end, guarded by one boolean flag per task that a
	// follow-on run's registration clears.
	BugNotifiedFlag Bug = "notified-flag"
	// BugOneshotDrain (003): the inbox is drained only on the edge of an
	// enqueue; a pass that finds the agent busy is never repeated.
	BugOneshotDrain Bug = "oneshot-drain"
	// BugHeldContinuation (002): a continuation is queued like a user prompt
	// (so a hold holds it) and its gate is released only when it drains;
	// later wakes are swallowed while the gate is set.
	BugHeldContinuation Bug = "held-continuation"
	// BugProviderForever (002, seed 610484): what vigil expects of a
	// provider process — a mirrored subagent's run to end, a turn to end, a
	// notification to be delivered — has no deadline, so a process that
	// never does it leaves the run "running" and the notification owed
	// forever.
	BugProviderForever Bug = "provider-forever"
	// BugConsumedByFailedRun (issue 18): an item counts as delivered when a
	// run takes it, so a run that fails before its model sees it loses it.
	BugConsumedByFailedRun Bug = "consumed-by-failed-run"
	// BugBudgetIgnored (issue 10): budgets are recorded but never checked,
	// so a loop runs on past them.
	BugBudgetIgnored Bug = "budget-ignored"
	// BugLedgerForgets (issue 10): the task ledger given to the model
	// after a compaction leaves out the newest live task, so the model
	// may forget it or start it again.
	BugLedgerForgets Bug = "ledger-forgets"
	// BugSenderWaits (issue 10): a SendMessage to an agent whose model
	// round is in flight keeps the sender's tool call open until that
	// round answers, so one agent waits on another's model.
	BugSenderWaits Bug = "sender-waits"
)

// Bugs lists the injectable bugs.
var Bugs = []Bug{BugNotifiedFlag, BugOneshotDrain, BugHeldContinuation, BugProviderForever, BugConsumedByFailedRun, BugSenderWaits, BugBudgetIgnored, BugLedgerForgets}

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
	// Inject puts back a seed bug. Only the simulator sets it.
	Inject Bug
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
	cfg Config
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
	c   *Core
	cfg Config
	s   *State
	now time.Time
	out Output
	// enqueued are the agents that got an item this step (for the
	// oneshot-drain bug, which only looks at those).
	enqueued []AgentID
	// ending are agents whose run is being ended in this step; no new
	// round starts for them.
	ending map[AgentID]bool
	// stopped is set when a budget ended a run (see schedule).
	stopped bool
}

// Step applies one input to the state. See the package documentation.
func (c *Core) Step(s *State, now time.Time, in Input) Output {
	st := &stepper{c: c, cfg: c.cfg, s: s, now: now, ending: map[AgentID]bool{}}
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

func (st *stepper) emit(b Body) {
	e := Event{Seq: st.s.Seq + 1, At: st.now, Body: b}
	Apply(st.s, e)
	st.out.Events = append(st.out.Events, e)
}

func (st *stepper) effect(e Effect) { st.out.Effects = append(st.out.Effects, e) }

func (st *stepper) fail(code ErrorCode, format string, args ...any) {
	st.out.Err = errorf(code, format, args...)
}

func (st *stepper) drop(what, reason, detail string) {
	st.emit(&Dropped{What: what, Reason: reason, Detail: detail})
}

func (st *stepper) nextItemID() ItemID { return ItemID("i" + itoa(st.s.Counters.Item+1)) }
func (st *stepper) nextMsgID() MsgID   { return MsgID("m" + itoa(st.s.Counters.Msg+1)) }

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
	case FinalizeRun:
		st.finalizeRun(in)
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
		// A closed agent's process exits too: its mirrored tasks still end.
		a := st.s.Agents[in.Agent]
		switch {
		case a == nil || a.Driver != DriverExternal || a.Owner != "":
			st.drop("provider exit of "+string(in.Agent), "not-external", in.Reason)
		case in.PID != 0 && a.PID != 0 && in.PID != a.PID:
			st.drop("exit of provider process "+itoa(in.PID), "stale-provider-exit", "a newer process runs the agent")
		default:
			st.providerExited(a, in.Reason)
		}
	default:
		st.fail(CodeInvalid, "unknown input %T", in)
	}
}

func (st *stepper) createSession(in CreateSession) {
	if st.s.Session.ID != "" {
		st.fail(CodeConflict, "session %s exists", st.s.Session.ID)
		return
	}
	if in.Session.ID == "" {
		st.fail(CodeInvalid, "session id is empty")
		return
	}
	sess := in.Session
	if sess.Permissions.Mode == "" {
		sess.Permissions.Mode = PermAsk
	}
	if b := sess.Budget; b.Tokens < 0 || b.Rounds < 0 || b.Wall < 0 || b.Cost < 0 {
		st.fail(CodeInvalid, "a budget's bounds are positive, or zero for the default")
		return
	}
	sess.Budget = sess.Budget.withDefaults(st.cfg.Budget)
	sess.Created = st.now
	name := in.MainName
	if name == "" {
		name = "main"
	}
	driver := in.Driver
	if driver == "" {
		driver = DriverLoop
	}
	st.emit(&SessionCreated{Session: sess, Main: Agent{
		Name: name, Model: sess.Model, Provider: sess.Provider, Driver: driver,
	}})
	if in.Prompt != "" {
		st.userPrompt(UserPrompt{Text: in.Prompt, Priority: PriorityNext})
	}
}

func (st *stepper) userPrompt(in UserPrompt) {
	if st.s.Session.Closed {
		st.fail(CodeClosed, "session is closed")
		return
	}
	if in.Text == "" {
		st.fail(CodeInvalid, "prompt is empty")
		return
	}
	p, ok := ParsePriority(string(in.Priority))
	if !ok {
		st.fail(CodeInvalid, "unknown priority %q (want now, next or later)", in.Priority)
		return
	}
	main := st.s.Agents[MainAgent]
	if len(main.Inbox) >= st.cfg.MaxInbox {
		st.fail(CodeConflict, "main agent's inbox is full (%d items)", st.cfg.MaxInbox)
		return
	}
	id := st.nextItemID()
	st.enqueue(main, Item{ID: id, Kind: KindPrompt, Priority: p, From: "user", Text: in.Text})
	st.out.Item = id
	// A person wrote: a blocked or backing-off main agent runs now.
	st.release(main, "a new prompt")
}

func (st *stepper) userMessage(in UserMessage) {
	p, ok := ParsePriority(string(in.Priority))
	if !ok {
		st.fail(CodeInvalid, "unknown priority %q (want now, next or later)", in.Priority)
		return
	}
	if in.Text == "" {
		st.fail(CodeInvalid, "message is empty")
		return
	}
	m := st.send("user", in.To, in.Text, p, "")
	cp := *m
	st.out.Msg = &cp
}

// enqueue puts an item in an agent's inbox. A now-priority item interrupts
// the model round in flight.
func (st *stepper) enqueue(a *Agent, it Item) {
	it.Agent = a.ID
	if it.ID == "" {
		it.ID = st.nextItemID()
	}
	if it.Priority == "" {
		it.Priority = PriorityNext
	}
	st.emit(&ItemEnqueued{Item: it})
	st.enqueued = append(st.enqueued, a.ID)
	if it.Priority == PriorityNow && a.Run != nil && !st.held(&it) && !st.ending[a.ID] {
		switch {
		case st.external(a):
			st.effect(Interrupt{Agent: a.ID})
		case a.Run.Call != nil:
			st.interrupt(a)
		}
	}
}

// held reports whether a user hold keeps the item from being taken.
func (st *stepper) held(it *Item) bool {
	return st.s.Hold != nil && it.Holdable()
}

// takeable returns the items a new run may take: all but held ones.
func (st *stepper) takeable(a *Agent) []*Item {
	var out []*Item
	for _, it := range a.Inbox {
		if !st.held(it) {
			out = append(out, it)
		}
	}
	return out
}

// joinable returns the items that join a running turn at its next round.
func (st *stepper) joinable(a *Agent) []*Item {
	var out []*Item
	for _, it := range st.takeable(a) {
		if it.Priority != PriorityLater {
			out = append(out, it)
		}
	}
	return out
}

// schedule is the level-triggered wake (DESIGN rule 4): after every step it
// looks at every agent and starts a run for each idle one whose inbox holds
// an item it may take; then it grants free model-call slots.
func (st *stepper) schedule() {
	if st.cfg.Inject == BugOneshotDrain {
		// The 003 bug: only the agents that got an item this step are looked
		// at, once, and only if they are idle at that moment.
		for _, id := range st.enqueued {
			if a := st.s.Agents[id]; a.State == AgentIdle {
				st.tryStart(a)
			}
		}
	} else {
		// A run that a budget ends as it starts notifies its owner, which
		// may come earlier in the order: pass again until no run ended so.
		for again := true; again; {
			st.stopped = false
			for _, id := range st.s.Order {
				if a := st.s.Agents[id]; a.State == AgentIdle {
					st.tryStart(a)
				}
			}
			again = st.stopped
		}
	}
	st.grantSlots()
}

func (st *stepper) tryStart(a *Agent) {
	if st.s.Session.Closed || a.Run != nil || a.State != AgentIdle {
		return
	}
	if a.Driver == DriverExternal && a.Owner != "" {
		return // a mirrored subagent: its provider process runs it
	}
	if a.Driver == DriverCaller {
		return // an outside caller takes its items with CallerAck
	}
	if a.Blocked != nil || (a.Retry != nil && a.Retry.At.After(st.now)) {
		return // blocked until released; backing off until the retry
	}
	if items := st.takeable(a); len(items) > 0 {
		st.startRun(a, items)
	}
}

func (st *stepper) startRun(a *Agent, items []*Item) {
	ids, notes := itemIDs(items)
	kind := RunKind(items[0].Kind)
	if items[0].Kind == KindContinuation {
		kind = RunProviderWake
	}
	if st.cfg.Inject == BugNotifiedFlag && a.Task != "" && a.Notified {
		// The 000 bug: registering the follow-on clears the task's flag.
		st.emit(&NotifiedFlag{Agent: a.ID, Value: false})
	}
	content := st.renderItems(items)
	st.emit(&RunStarted{Agent: a.ID, Seq: len(a.Runs) + 1, Kind: kind, Items: ids, Notes: notes})
	st.releaseGatesOf(a, items)
	st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
	if st.cfg.Inject == BugConsumedByFailedRun {
		st.seen(a) // today's bug: taken counts as delivered
	}
	if st.external(a) {
		if why := st.overBudget(a); why != "" {
			st.budgetStop(a, why)
			return
		}
		st.deliver(a, items)
		return
	}
	st.beginRound(a)
}

// itemIDs returns the ids of items and the keys of the notifications
// among them.
func itemIDs(items []*Item) ([]ItemID, []NoteKey) {
	ids := make([]ItemID, len(items))
	var notes []NoteKey
	for i, it := range items {
		ids[i] = it.ID
		if it.Note != nil {
			notes = append(notes, *it.Note)
		}
	}
	return ids, notes
}

// releaseGatesOf releases the gate of any continuation among items that
// were just taken by a run.
func (st *stepper) releaseGatesOf(a *Agent, items []*Item) {
	for _, it := range items {
		if it.Gate != 0 && a.Gate != nil && a.Gate.Gen == it.Gate {
			st.emit(&GateReleased{Agent: a.ID, Gen: it.Gate, Outcome: GateStarted})
		}
	}
}

func (st *stepper) inFlight() int {
	n := 0
	for _, id := range st.s.Order {
		if r := st.s.Agents[id].Run; r != nil && r.Call != nil && r.Call.State != CallWaitingSlot {
			n++
		}
	}
	return n
}

// beginRound starts the next model call of a's run, unless a budget it
// is under is spent (DESIGN rule 10).
func (st *stepper) beginRound(a *Agent) {
	if why := st.overBudget(a); why != "" {
		st.budgetStop(a, why)
		return
	}
	if st.needsCompaction(a) {
		w := st.window(a)
		if st.beginCompaction(a, fmt.Sprintf("context at %d of %d tokens", st.s.contextTokens(a), w)) {
			return
		}
	}
	r := a.Run
	state := CallInFlight
	if st.cfg.MaxConcurrentCalls > 0 && st.inFlight() >= st.cfg.MaxConcurrentCalls {
		state = CallWaitingSlot
	}
	id := CallID("c" + itoa(st.s.Counters.Call+1))
	st.emit(&ModelCallStarted{Agent: a.ID, Call: id, Round: r.Round + 1, State: state})
	if state == CallInFlight {
		st.effect(st.callModel(a))
	}
}

// modelOf returns the provider and model a's rounds use: its own, else
// the session's.
func (st *stepper) modelOf(a *Agent) (prov, model string) {
	prov, model = a.Provider, a.Model
	if prov == "" {
		prov = st.s.Session.Provider
	}
	if model == "" {
		model = st.s.Session.Model
	}
	return prov, model
}

func (st *stepper) callModel(a *Agent) CallModel {
	r := a.Run
	prov, model := st.modelOf(a)
	msgs := sentMessages(a)
	if r.Call.Purpose == PurposeCompact {
		msgs = compactMessages(a, r.Call.Cut)
	}
	return CallModel{
		Call: r.Call.ID, Agent: a.ID, AgentName: a.Name, IsMain: a.ID == MainAgent, Depth: a.Depth,
		Run: r.Seq, Round: r.Call.Round, Provider: prov, Model: model, Purpose: r.Call.Purpose,
		Messages: msgs,
	}
}

// grantSlots dispatches calls that wait for a slot while slots are free.
func (st *stepper) grantSlots() {
	if st.cfg.MaxConcurrentCalls <= 0 {
		return
	}
	for _, id := range st.s.Order {
		a := st.s.Agents[id]
		if a.Run == nil || a.Run.Call == nil || a.Run.Call.State != CallWaitingSlot {
			continue
		}
		if st.inFlight() >= st.cfg.MaxConcurrentCalls {
			return
		}
		st.emit(&ModelCallDispatched{Agent: a.ID, Call: a.Run.Call.ID})
		st.effect(st.callModel(a))
	}
}

// interrupt abandons the model round in flight and starts a new one that
// includes the items waiting to join (a now-priority item arrived).
func (st *stepper) interrupt(a *Agent) {
	c := a.Run.Call
	st.emit(&ModelCallEnded{Agent: a.ID, Call: c.ID, Outcome: "cancelled", Error: "interrupted by a now-priority item"})
	if c.State != CallWaitingSlot {
		st.effect(CancelCall{Agent: a.ID, Call: c.ID})
	}
	st.nextRound(a)
}

// maybeNextRound starts the next round once every tool call of the current
// round has its result.
func (st *stepper) maybeNextRound(a *Agent) {
	r := a.Run
	if r == nil || r.Call != nil || st.ending[a.ID] {
		return
	}
	for _, tc := range r.Tools {
		if !tc.Done {
			return
		}
	}
	st.nextRound(a)
}

// nextRound appends the tool results and the items that join, then calls
// the model again.
func (st *stepper) nextRound(a *Agent) {
	r := a.Run
	var content []chat.Block
	for _, tc := range r.Tools {
		content = append(content, chat.ToolResult(tc.UseID, tc.Result, tc.IsError))
	}
	if why := st.overBudget(a); why != "" {
		// No round follows: nothing joins, and the results close the
		// round's tool calls.
		if len(content) > 0 {
			st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
		}
		st.budgetStop(a, why)
		return
	}
	if items := st.joinable(a); len(items) > 0 {
		ids, notes := itemIDs(items)
		content = append(content, st.renderItems(items)...)
		st.emit(&ItemsJoined{Agent: a.ID, Seq: r.Seq, Items: ids, Notes: notes})
		st.releaseGatesOf(a, items)
		if st.cfg.Inject == BugConsumedByFailedRun {
			st.seen(a)
		}
	}
	for _, id := range slices.Clone(r.PendingSends) {
		st.resolveMsg(st.s.Msgs[id], OutcomeJoined, r.Seq)
	}
	if len(content) > 0 {
		st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: content}})
	}
	st.beginRound(a)
}

func (st *stepper) agentRun(id AgentID, call CallID) (*Agent, bool) {
	a := st.s.Agents[id]
	if a == nil || a.Run == nil || a.Run.Call == nil || a.Run.Call.ID != call {
		return a, false
	}
	return a, true
}

func (st *stepper) modelResponded(in ModelResponded) {
	a, ok := st.agentRun(in.Agent, in.Call)
	if !ok {
		st.drop("model response "+string(in.Call), "stale-model-response", "the call was cancelled or superseded")
		return
	}
	resp := in.Response
	if c := a.Run.Call; c.Purpose == PurposeCompact {
		// A summary: the round it made room for starts now.
		cost, priced := st.roundCost(a, resp.Usage)
		st.emit(&ModelCallEnded{Agent: a.ID, Call: in.Call, Outcome: "completed", StopReason: resp.StopReason, Usage: resp.Usage, Cost: cost, Unpriced: !priced})
		st.compacted(a, c, resp)
		st.beginRound(a)
		return
	}
	// The provider answered: the model saw what this round carried.
	st.seen(a)
	cost, priced := st.roundCost(a, resp.Usage)
	st.emit(&ModelCallEnded{Agent: a.ID, Call: in.Call, Outcome: "completed", StopReason: resp.StopReason, Usage: resp.Usage, Cost: cost, Unpriced: !priced})
	var content []chat.Block
	for _, b := range resp.Content {
		if b.Type == chat.BlockText && b.Text == "" {
			continue
		}
		content = append(content, b)
	}
	msg := chat.Message{Role: chat.RoleAssistant, Content: content}
	if len(content) > 0 {
		st.emit(&TranscriptAppended{Agent: a.ID, Message: msg})
	}
	uses := msg.ToolUses()
	if len(uses) == 0 {
		// The model ended its turn: this was the run's last round. Messages
		// that arrived during it cannot join (DESIGN rule 2).
		st.endRun(a, RunCompleted, msg.PlainText(), "")
		return
	}
	for _, id := range slices.Clone(a.Run.PendingSends) {
		st.resolveMsg(st.s.Msgs[id], OutcomeJoined, a.Run.Seq)
	}
	seq := a.Run.Seq
	for _, u := range uses {
		if a.Run == nil || a.Run.Seq != seq {
			// An earlier tool call of this answer ended the run (it stopped
			// a task whose run waited on this agent). The rest are answered
			// as cancelled by endRun.
			break
		}
		st.dispatchTool(a, u)
	}
	st.maybeNextRound(a)
}

func (st *stepper) modelFailed(in ModelFailed) {
	a, ok := st.agentRun(in.Agent, in.Call)
	if !ok {
		st.drop("model failure "+string(in.Call), "stale-model-response", in.Error)
		return
	}
	call := a.Run.Call
	st.emit(&ModelCallEnded{Agent: a.ID, Call: in.Call, Outcome: "failed", Error: in.Error})
	if in.Kind == FailContext && call.Purpose == "" && !st.ending[a.ID] {
		// The prompt is over the model's window: compact, then retry the
		// round, rather than fail the run; a spent budget stops it first.
		if why := st.overBudget(a); why != "" {
			st.budgetStop(a, why)
			return
		}
		if st.beginCompaction(a, "the provider refused the prompt: "+in.Error) {
			return
		}
	}
	st.endRunFailed(a, RunFailed, "", in.Error, in.Kind)
}

func (st *stepper) modelRetrying(in ModelRetrying) {
	a, ok := st.agentRun(in.Agent, in.Call)
	if !ok {
		st.drop("model retry "+string(in.Call), "stale-model-response", in.Reason)
		return
	}
	st.emit(&ModelCallRetrying{Agent: a.ID, Call: in.Call, Attempt: in.Attempt, Until: in.Until, Reason: in.Reason})
}

// endRun ends a's current run with the given status. Everything the run
// was waiting for is released; its notification is written in this same
// step (DESIGN rule 1); messages whose outcome waited on its last round
// learn that run N+1 will answer them (rule 2).
func (st *stepper) endRun(a *Agent, status RunStatus, reply, errText string) {
	st.endRunFailed(a, status, reply, errText, FailTransient)
}

// endRunFailed is endRun with the kind of failure that ended the run: the
// unseen items it took go back to the inbox, and a failed or interrupted
// run's agent retries them or is blocked by kind.
func (st *stepper) endRunFailed(a *Agent, status RunStatus, reply, errText string, kind FailureKind) {
	r := a.Run
	if r == nil || st.ending[a.ID] {
		return
	}
	st.ending[a.ID] = true
	defer delete(st.ending, a.ID)
	why := errText
	if why == "" {
		why = string(status)
	}
	if c := r.Call; c != nil {
		st.emit(&ModelCallEnded{Agent: a.ID, Call: c.ID, Outcome: "cancelled", Error: why})
		if c.State != CallWaitingSlot {
			st.effect(CancelCall{Agent: a.ID, Call: c.ID})
		}
	}
	if uses := st.unansweredUses(a); len(uses) > 0 && !st.external(a) {
		for _, tc := range slices.Clone(r.Tools) {
			if tc.Done {
				continue
			}
			switch tc.Wait {
			case WaitEffect:
				st.effect(CancelTool{Agent: a.ID, UseID: tc.UseID})
			case WaitChild:
				if child := st.s.Agents[tc.Child]; child != nil && child.Run != nil {
					st.endRun(child, RunCancelled, "", "its owner's run ended: "+why)
				}
			case WaitApproval:
				st.emit(&ApprovalResolved{Approval: tc.Approval, Allow: false, Reason: "run ended: " + why})
			}
			if c := r.tool(tc.UseID); c != nil && !c.Done {
				result := "cancelled: the run ended (" + why + ") before this tool finished"
				if tc.Wait == WaitSend {
					if m := st.s.Msgs[tc.Msg]; m != nil {
						result = fmt.Sprintf("message %s was delivered to %s; the run ended (%s) before its outcome was known. It is answered as sent: in %s's running turn or its next run.", m.ID, m.To, why, m.To)
					}
				}
				st.emit(&ToolCallFinished{Agent: a.ID, UseID: tc.UseID, Result: result, IsError: true})
			}
		}
		var results []chat.Block
		for _, u := range uses {
			if tc := r.tool(u.ID); tc != nil {
				results = append(results, chat.ToolResult(tc.UseID, tc.Result, tc.IsError))
			} else {
				results = append(results, chat.ToolResult(u.ID, "cancelled: the run ended ("+why+") before this tool call started", true))
			}
		}
		st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: results}})
	}
	if st.external(a) {
		st.denyExternalOfRun(a, r.Seq, "the turn ended ("+why+")")
	}
	pending := slices.Clone(r.PendingSends)
	task := a.Task
	if n := st.giveBack(a, status); n > 0 {
		words := fmt.Sprintf("its model had not seen %d item(s); they went back to %s's inbox", n, a.Name)
		if status != RunCancelled && a.State != AgentClosed && !st.s.Session.Closed {
			words += ": " + st.afterFailure(a, r.Seq, kind, why)
		}
		if errText == "" {
			errText = string(status)
		}
		errText += "; " + words
	}
	// A message told it joins this run that is still in the inbox did not
	// join it (the run ended before its next round): the next run answers.
	for _, it := range a.Inbox {
		if m := st.s.Msgs[it.Msg]; m != nil && m.Outcome == OutcomeJoined && m.Run == r.Seq && m.AnsweredBy == 0 {
			st.emit(&MessageResolved{Msg: m.ID, Outcome: OutcomeQueuedBehindStop, Run: r.Seq,
				Reason: fmt.Sprintf("run %d ended %s before its next model round; run %d answers it", r.Seq, status, r.Seq+1)})
		}
	}
	st.emit(&RunEnded{Agent: a.ID, Seq: r.Seq, Status: status, Reply: reply, Error: errText})
	sum := a.Runs[len(a.Runs)-1]
	if task != "" {
		if st.cfg.Inject == BugNotifiedFlag {
			// The 000 bug: the stop notification is enqueued later, after
			// the post-round awaits, not in the step that ends the run.
			st.effect(Finalize{Agent: a.ID, Seq: sum.Seq})
		} else {
			st.writeRunNote(a, sum)
		}
	}
	for _, id := range pending {
		if b := a.Blocked; b != nil {
			st.resolveMsgAs(st.s.Msgs[id], OutcomeQueuedBehindStop, sum.Seq, fmt.Sprintf("run %d answers once a person releases %s, blocked since run %d failed: %s", sum.Seq+1, a.Name, b.Run, b.Reason))
			continue
		}
		why := fmt.Sprintf("run %d's model round in flight when it arrived was its last", sum.Seq)
		if status != RunCompleted {
			why = fmt.Sprintf("run %d ended %s while its model round was in flight", sum.Seq, status)
		}
		st.resolveMsgAs(st.s.Msgs[id], OutcomeQueuedBehindStop, sum.Seq, why)
	}
	st.resolveTaskWaiters(task)
}

// unansweredUses returns the tool calls of a's last answer when the
// transcript ends with that answer, i.e. their results are not in yet.
func (st *stepper) unansweredUses(a *Agent) []chat.Block {
	if n := len(a.Transcript); n > 0 && a.Transcript[n-1].Role == chat.RoleAssistant && a.Run.Call == nil {
		return a.Transcript[n-1].ToolUses()
	}
	return nil
}

// finalizeRun is the deferred half of a run's end in the notified-flag bug.
func (st *stepper) finalizeRun(in FinalizeRun) {
	a := st.s.Agents[in.Agent]
	if a == nil || in.Seq < 1 || in.Seq > len(a.Runs) {
		return
	}
	if a.Notified {
		// Skipped silently: in the report only a debug line records it.
		return
	}
	st.emit(&NotifiedFlag{Agent: a.ID, Value: true})
	st.writeRunNote(a, a.Runs[in.Seq-1])
}

// writeRunNote writes the notification of one ended run of an agent task,
// and delivers it: as the result of the owner's foreground Agent call that
// waits for it, or as an item in the owner's inbox.
func (st *stepper) writeRunNote(a *Agent, sum RunSummary) {
	key := NoteKey{Task: a.Task, Run: sum.Seq}
	if st.s.Note(key) != nil {
		st.drop("notification "+key.String(), "duplicate-notification", "a notification with this key exists; the write is a no-op")
		return
	}
	n := Note{
		Key: key, Owner: a.Owner, Agent: a.ID, AgentName: a.Name, Kind: TaskAgent,
		Status: string(sum.Status), Reply: sum.Reply, Error: sum.Error, Answered: sum.Answered,
		LiveTasks: st.s.LiveTasks(a.ID), Usage: sum.Usage, Cost: sum.Cost, Priced: sum.Unpriced == 0 && st.cfg.Price != nil,
		Duration: sum.Ended.Sub(sum.Started),
		Delivery: DeliverInbox,
	}
	st.deliverNote(n)
}

func (st *stepper) deliverNote(n Note) {
	owner := st.s.Agents[n.Owner]
	var wait *ToolCall
	if owner != nil && owner.Run != nil && n.Kind == TaskAgent {
		for _, tc := range owner.Run.Tools {
			if !tc.Done && tc.Wait == WaitChild && tc.Child == n.Agent {
				wait = tc
				break
			}
		}
	}
	if wait != nil {
		n.Delivery = DeliverToolResult
		n.DeliveredRun = owner.Run.Seq
		st.emit(&NotificationWritten{Note: n})
		st.emit(&ToolCallFinished{Agent: owner.ID, UseID: wait.UseID, Result: renderNote(&n), IsError: n.Status != string(RunCompleted)})
		st.maybeNextRound(owner)
		return
	}
	if owner == nil || owner.State == AgentClosed {
		st.emit(&NotificationWritten{Note: n})
		st.emit(&NotificationDropped{Key: n.Key, Reason: "owner closed"})
		st.drop("notification "+n.Key.String(), "owner-closed", "its owner "+string(n.Owner)+" is closed")
		return
	}
	n.Item = st.nextItemID()
	st.emit(&NotificationWritten{Note: n})
	key := n.Key
	st.enqueue(owner, Item{ID: n.Item, Kind: KindNotification, Priority: PriorityNext, From: string(n.Agent), Note: &key})
}

// resolveMsg settles a pending message and tells a waiting sender.
func (st *stepper) resolveMsg(m *Msg, outcome MsgOutcome, run int) {
	st.resolveMsgAs(m, outcome, run, "")
}

// resolveMsgAs settles a pending message with a reason.
func (st *stepper) resolveMsgAs(m *Msg, outcome MsgOutcome, run int, reason string) {
	if m == nil || m.Outcome != OutcomePending {
		return
	}
	st.emit(&MessageResolved{Msg: m.ID, Outcome: outcome, Run: run, Reason: reason})
	if m.SenderCall == "" {
		return
	}
	sender := st.s.Agents[AgentID(m.From)]
	if sender == nil || sender.Run == nil {
		return
	}
	if tc := sender.Run.tool(m.SenderCall); tc != nil && !tc.Done && tc.Wait == WaitSend {
		st.emit(&ToolCallFinished{Agent: sender.ID, UseID: tc.UseID, Result: st.renderOutcome(m)})
		st.maybeNextRound(sender)
	}
}

func (st *stepper) toolDone(in ToolDone) {
	a := st.s.Agents[in.Agent]
	var tc *ToolCall
	if a != nil && a.Run != nil {
		tc = a.Run.tool(in.UseID)
	}
	if tc == nil || tc.Done || tc.Wait != WaitEffect {
		st.drop("tool result "+in.UseID, "stale-tool-result", "no tool call of the current round waits for it")
		return
	}
	st.emit(&ToolCallFinished{Agent: a.ID, UseID: in.UseID, Result: in.Result, IsError: in.IsError})
	st.maybeNextRound(a)
}

func (st *stepper) shellStartFailed(in ShellStartFailed) {
	t := st.s.Tasks[in.Task]
	if t == nil || t.Kind != TaskShell || !t.Status.Live() {
		st.drop("shell start failure "+string(in.Task), "stale-process-event", in.Error)
		return
	}
	st.endShell(t, TaskFailed, nil, "", in.Error)
}

func (st *stepper) processExited(in ProcessExited) {
	t := st.s.Tasks[in.Task]
	if t == nil || t.Kind != TaskShell || !t.Status.Live() {
		st.drop("process exit "+string(in.Task), "stale-process-event", "the task already ended")
		return
	}
	status := TaskCompleted
	switch {
	case in.Stopped || t.Status == TaskStopping:
		status = TaskStopped
	case in.TimedOut:
		status = TaskTimedOut
	case in.ExitCode != 0:
		status = TaskFailed
	}
	code := in.ExitCode
	st.endShell(t, status, &code, in.Tail, in.Signal)
}

// endShell ends a shell task and notifies its owner under (task, exit).
func (st *stepper) endShell(t *Task, status TaskStatus, code *int, tail, detail string) {
	st.emit(&TaskUpdated{Task: t.ID, Status: status, ExitCode: code, OutputTail: tail, Ended: true})
	key := NoteKey{Task: t.ID}
	if st.s.Note(key) != nil {
		st.drop("notification "+key.String(), "duplicate-notification", "a notification with this key exists; the write is a no-op")
		return
	}
	n := Note{
		Key: key, Owner: t.Owner, Kind: TaskShell, Status: string(status), ExitCode: code,
		Output: tail, OutputPath: t.OutputPath, Error: detail, Duration: st.now.Sub(t.Started),
		Delivery: DeliverInbox,
	}
	st.deliverNote(n)
	st.resolveTaskWaiters(t.ID)
}
