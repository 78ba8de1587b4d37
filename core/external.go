package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/text"
)

// An agent with DriverExternal is run by a provider process (the Claude
// Code CLI) that runs its own turns, its own subagents and its own
// background shell tasks. vigil delivers inbox items to it at run
// boundaries and records what it reports, as it happens:
//
//   - a turn the process starts on its own is recorded at once as a run of
//     kind provider-wake: never queued, never behind a gate;
//   - its subagents and background commands are mirrored as tasks (and
//     subagents as agents) owned by the agent; each mirrored run that ends
//     gets its notification under its own key, delivered by the process;
//   - when the process exits, every mirrored task that had not ended ends
//     lost, with a notification in the agent's inbox (DESIGN rule 7).

// ExternalTurnStarted says the provider process began a turn of Agent.
type ExternalTurnStarted struct {
	Agent AgentID
	// Session is the provider's own session id, for resuming it later.
	Session string
}

// ExternalMessage is a message the provider process produced or consumed
// in a turn: assistant output, tool calls and their results. Mirror, when
// set, is the provider's id of the subagent it belongs to.
type ExternalMessage struct {
	Agent   AgentID
	Mirror  string
	Message chat.Message
}

// ExternalTurnEnded says the provider process finished a turn.
type ExternalTurnEnded struct {
	Agent    AgentID
	Result   string
	IsError  bool
	Usage    chat.Usage
	NumTurns int
	// Wake is set when the provider says the turn answered its own
	// background work (a task notification).
	Wake bool
	// Interrupted is set when the turn was cut short by an interrupt.
	Interrupted bool
}

// ExternalTask mirrors a subagent or background command of the provider
// process. Notify marks the provider's notification of a finished run:
// only it ends a mirrored run and writes the notification.
type ExternalTask struct {
	Agent AgentID
	ID    string // the provider's task id
	Kind  TaskKind
	Owner string // the provider's id of the owning subagent, if not the agent itself
	// Name is the name of a mirrored subagent, when the provider gives it
	// one; empty names it "cc-" + ID. A name already taken gets the new
	// agent's id appended.
	Name        string
	Description string
	Prompt      string
	Status      string // running, completed, failed, killed, stopped
	OutputPath  string
	Summary     string
	Usage       chat.Usage
	// ExitCode is a background command's exit status, when known.
	ExitCode *int
	Notify   bool
}

// ProviderStarted records the provider process of an agent.
type ProviderStarted struct {
	Agent      AgentID
	PID        int
	StartTicks uint64
	// Cgroup holds every process of the provider, when vigil has cgroups.
	Cgroup string
}

// ProviderExited says the provider process of an agent ended, after every
// frame it sent was applied. PID, when set, names the process: the exit of
// a process that is no longer the agent's (a newer one runs) is stale.
type ProviderExited struct {
	Agent  AgentID
	PID    int
	Reason string
}

func (ExternalTurnStarted) inputName() string { return "external-turn-started" }
func (ExternalMessage) inputName() string     { return "external-message" }
func (ExternalTurnEnded) inputName() string   { return "external-turn-ended" }
func (ExternalTask) inputName() string        { return "external-task" }
func (ProviderStarted) inputName() string     { return "provider-started" }
func (ProviderExited) inputName() string      { return "provider-exited" }

// Deliver asks the runtime to hand a run's items to the agent's provider
// process (starting it, or resuming Resume, when it is not running).
type Deliver struct {
	Agent    AgentID
	Run      int
	Text     string
	Priority Priority
	Resume   string
	Model    string
	Provider string
}

// Interrupt asks the provider process to end its current turn now.
type Interrupt struct {
	Agent AgentID
}

// StopExternal asks the provider process to stop one of its tasks.
type StopExternal struct {
	Agent AgentID
	Task  string // the provider's task id
}

func (Deliver) effectName() string      { return "deliver" }
func (Interrupt) effectName() string    { return "interrupt" }
func (StopExternal) effectName() string { return "stop-external" }

// RunCancelling records that a provider process was asked to end the
// current turn because the run was cancelled.
type RunCancelling struct {
	Agent    AgentID   `json:"agent"`
	Deadline time.Time `json:"deadline"`
	Reason   string    `json:"reason,omitempty"`
	// Silent: vigil cancels a turn its process went silent in.
	Silent bool `json:"silent,omitempty"`
}

// Type implements Body: the name of the event.
func (*RunCancelling) Type() string { return "run.cancelling" }
func (e *RunCancelling) apply(s *State, _ time.Time) {
	if r := s.Agents[e.Agent].Run; r != nil {
		r.Cancelling, r.Silent = e.Deadline, e.Silent
	}
}

// maxRedeliveries bounds how often a run is handed to a new provider
// process when the previous one ended before beginning it.
const maxRedeliveries = 3

// RunRedelivered records that a run's items go to a new provider process
// because the last one ended before it began the run.
type RunRedelivered struct {
	Agent  AgentID `json:"agent"`
	Seq    int     `json:"seq"`
	Reason string  `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*RunRedelivered) Type() string { return "run.redelivered" }
func (e *RunRedelivered) apply(s *State, _ time.Time) {
	if r := s.Agents[e.Agent].Run; r != nil && r.Seq == e.Seq {
		r.Redelivered++
	}
}

// TurnAcked records that the provider process began the turn of a run.
type TurnAcked struct {
	Agent AgentID `json:"agent"`
	Seq   int     `json:"seq"`
}

// Type implements Body: the name of the event.
func (*TurnAcked) Type() string { return "run.acked" }
func (e *TurnAcked) apply(s *State, _ time.Time) {
	if r := s.Agents[e.Agent].Run; r != nil && r.Seq == e.Seq {
		r.Acked = true
	}
}

// StopProvider asks the runtime to end an agent's provider process (the
// agent was closed).
type StopProvider struct {
	Agent AgentID
}

func (StopProvider) effectName() string { return "stop-provider" }

// NotesDelivered records that a provider process took in notifications it
// delivers itself: they reached a run of their owner.
type NotesDelivered struct {
	Agent AgentID   `json:"agent"`
	Run   int       `json:"run"`
	Keys  []NoteKey `json:"keys"`
}

// Type implements Body: the name of the event.
func (*NotesDelivered) Type() string { return "notifications.delivered" }
func (e *NotesDelivered) apply(s *State, _ time.Time) {
	for _, k := range e.Keys {
		if n := s.Note(k); n != nil {
			n.DeliveredRun = e.Run
		}
	}
	if r := s.Agents[e.Agent].Run; r != nil {
		r.Delivered = append(r.Delivered, e.Keys...)
	}
}

// NotificationRequeued moves a notification the provider process was to
// deliver, but did not (it died, it stopped the owner, or its deadline
// passed), into an inbox vigil drains.
type NotificationRequeued struct {
	Key    NoteKey `json:"key"`
	Owner  AgentID `json:"owner"`
	Item   ItemID  `json:"item"`
	Reason string  `json:"reason,omitempty"`
}

// Type implements Body: the name of the event.
func (*NotificationRequeued) Type() string { return "notification.requeued" }
func (e *NotificationRequeued) apply(s *State, _ time.Time) {
	if n := s.Note(e.Key); n != nil {
		n.Delivery, n.Owner, n.Item = DeliverInbox, e.Owner, e.Item
	}
}

// providerDelivered marks the notifications a provider process delivers
// itself as delivered to a's run that just started.
func (st *stepper) providerDelivered(a *Agent) {
	if a.Run == nil {
		return
	}
	var keys []NoteKey
	for _, k := range st.s.NoteOrder {
		if n := st.s.Note(k); n.Delivery == DeliverProvider && n.Owner == a.ID && n.DeliveredRun == 0 && n.Dropped == "" {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		st.emit(&NotesDelivered{Agent: a.ID, Run: a.Run.Seq, Keys: keys})
	}
}

// cancelTimeout bounds how long a provider process may take to end a
// cancelled turn.
const cancelTimeout = 30 * time.Second

// cancelExternal asks the provider process to end the run's turn; the run
// ends when it does, or at the deadline.
func (st *stepper) cancelExternal(a *Agent, why string) {
	if a.Run == nil || !a.Run.Cancelling.IsZero() {
		return
	}
	st.emit(&RunCancelling{Agent: a.ID, Deadline: st.now.Add(cancelTimeout), Reason: why})
	st.effect(Interrupt{Agent: a.ID})
}

// ProcessRecorded records an agent's provider process and session.
type ProcessRecorded struct {
	Agent      AgentID `json:"agent"`
	PID        int     `json:"pid"`
	StartTicks uint64  `json:"start_ticks,omitempty"`
	Cgroup     string  `json:"cgroup,omitempty"`
	Session    string  `json:"session,omitempty"`
}

// Type implements Body: the name of the event.
func (*ProcessRecorded) Type() string { return "provider.process" }
func (e *ProcessRecorded) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	if e.PID >= 0 {
		a.PID, a.StartTicks, a.Cgroup = e.PID, e.StartTicks, e.Cgroup
	}
	if e.Session != "" {
		a.ExternalSession = e.Session
	}
}

// RunHeard moves the deadline by which the provider process must report
// more of a run (DESIGN rules 6 and 7: nothing is expected of a provider
// without a deadline).
type RunHeard struct {
	Agent    AgentID   `json:"agent"`
	Seq      int       `json:"seq"`
	Deadline time.Time `json:"deadline"`
}

// Type implements Body: the name of the event.
func (*RunHeard) Type() string { return "run.heard" }
func (e *RunHeard) apply(s *State, _ time.Time) {
	if r := s.Agents[e.Agent].Run; r != nil && r.Seq == e.Seq {
		r.Expect = e.Deadline
	}
}

// heard records that the provider process said something of a's run: its
// deadline moves on. To keep the log small the deadline moves only once
// half of the allowance is used.
func (st *stepper) heard(a *Agent) {
	if a == nil || a.Run == nil || a.Driver != DriverExternal || st.seed(bugProviderForever) {
		return
	}
	silence := st.cfg.ProviderSilence
	if e := a.Run.Expect; !e.IsZero() && e.Sub(st.now) > silence/2 {
		return
	}
	st.emit(&RunHeard{Agent: a.ID, Seq: a.Run.Seq, Deadline: st.now.Add(silence)})
}

// heardChain is heard for m and every agent above it with a run in
// progress: a turn that waits on a foreground subagent is not silent while
// that subagent reports.
func (st *stepper) heardChain(m *Agent) {
	for a := m; a != nil; a = st.s.Agents[a.Owner] {
		st.heard(a)
		if a.Owner == "" {
			return
		}
	}
}

// providerSilent ends a run of which the provider process reported nothing
// before its deadline. A mirrored subagent's run ends interrupted with its
// notification in the inbox of the agent at the top of its owner chain, and
// the process is asked to stop the subagent; a turn of the agent itself is
// cancelled (interrupt, then the cancel deadline).
func (st *stepper) providerSilent(a *Agent) {
	why := "the provider process reported nothing of this run for " + st.cfg.ProviderSilence.String()
	st.drop("run "+a.Name+"#"+strconv.Itoa(a.Run.Seq), "provider-silent", why+"; vigil ends it")
	if a.Owner == "" {
		st.emit(&RunCancelling{Agent: a.ID, Deadline: st.now.Add(cancelTimeout), Reason: why, Silent: true})
		st.effect(Interrupt{Agent: a.ID})
		return
	}
	t := st.s.Tasks[a.Task]
	if root := st.s.Agents[st.root(t.Owner)]; root != nil && t.External != "" {
		st.effect(StopExternal{Agent: root.ID, Task: t.External})
	}
	st.endMirrorRun(a, TaskInterrupted, why, chat.Usage{}, DeliverInbox)
}

// requeueNote hands a notification the provider process was to deliver to
// agent to's inbox, which vigil drains.
func (st *stepper) requeueNote(n *Note, to *Agent, reason string) {
	item := st.nextItemID()
	st.emit(&NotificationRequeued{Key: n.Key, Owner: to.ID, Item: item, Reason: reason})
	key := n.Key
	st.enqueue(to, Item{ID: item, Kind: KindNotification, Priority: PriorityNext, From: string(n.Agent), Note: &key})
}

// hasProvider reports whether a provider process runs an agent of the
// session: only then can a notification be owed by one, and the walk over
// every notification is needed.
func hasProvider(s *State) bool {
	for _, id := range s.Order {
		if a := s.Agents[id]; a.Driver == DriverExternal && a.Owner == "" {
			return true
		}
	}
	return false
}

// undeliveredNote reports whether n is a notification the provider process
// still owes its owner.
func undeliveredNote(n *Note) bool {
	return n.Delivery == DeliverProvider && n.DeliveredRun == 0 && n.Dropped == ""
}

// notesOverdue hands every notification the provider process owes an
// owner past its deadline to the inbox of the agent at the top of the
// owner's chain.
func (st *stepper) notesOverdue() {
	if !hasProvider(st.s) {
		return
	}
	for _, k := range st.s.NoteOrder {
		n := st.s.Note(k)
		if !undeliveredNote(n) || n.DeliverBy.IsZero() || n.DeliverBy.After(st.now) {
			continue
		}
		to := st.s.Agents[st.root(n.Owner)]
		if to == nil || to.State == AgentClosed || st.s.Session.Closed {
			continue // closing drops it, loudly
		}
		why := "the provider process did not deliver it within " + st.cfg.ProviderSilence.String()
		st.drop("provider delivery of notification "+k.String(), "provider-silent", why+"; it goes to "+to.Name+"'s inbox")
		st.requeueNote(n, to, why)
	}
}

// stopIdleMirror records that the provider process stopped a mirrored
// subagent between its runs: it will not run it again unless asked, so
// what the process still owed it goes to the agent at the top of its owner
// chain.
func (st *stepper) stopIdleMirror(m *Agent, t *Task) {
	st.emit(&TaskUpdated{Task: t.ID, Status: TaskStopped, Ended: true})
	to := st.s.Agents[st.root(m.ID)]
	for _, k := range st.s.NoteOrder {
		if n := st.s.Note(k); undeliveredNote(n) && n.Owner == m.ID {
			st.requeueNote(n, to, "its owner "+m.Name+" was stopped before the provider process delivered it")
		}
	}
}

func init() {
	register(func() Body { return &RunHeard{} })
	register(func() Body { return &ProcessRecorded{} })
	register(func() Body { return &RunCancelling{} })
	register(func() Body { return &NotesDelivered{} })
	register(func() Body { return &NotificationRequeued{} })
	register(func() Body { return &TurnAcked{} })
	register(func() Body { return &RunRedelivered{} })
}

// externalDriver is a provider process that runs its own turns
// (DriverExternal): the agent it runs (no owner) and the subagents of its
// own that vigil mirrors (an owner). vigil hands the process a run's items
// and records what it reports; the process ends the turn.
type externalDriver struct{}

// schedules: the process runs its mirrored subagents itself.
func (externalDriver) schedules(a *Agent) bool { return a.Owner == "" }

// begin hands the run's items to the process, unless a budget is spent.
func (externalDriver) begin(st *stepper, a *Agent, items []*Item) {
	if why := st.overBudget(a); why != "" {
		st.budgetStop(a, why)
		return
	}
	st.deliver(a, items)
}

// interrupt asks the process to end its turn now: the item goes to the
// next one.
func (externalDriver) interrupt(st *stepper, a *Agent) { st.effect(Interrupt{Agent: a.ID}) }

// tell: the process takes items only between its turns; its mirrored
// subagents are reached through it.
func (externalDriver) tell(st *stepper, a *Agent, m *Msg, p Priority) {
	switch r := a.Run; {
	case a.Owner != "":
		m.Outcome, m.Reason = OutcomeRejected, fmt.Sprintf("%s is a subagent inside a provider process; message %s instead", a.Name, st.s.Agents[MainAgent].Name)
	case r != nil && p != PriorityLater:
		m.Outcome, m.Run = OutcomeQueuedBehindStop, r.Seq
		m.Reason = fmt.Sprintf("%s's provider process takes messages only between turns, and run %d is its turn in progress", a.Name, r.Seq)
	default:
		loopDriver{}.tell(st, a, m, p)
	}
}

// cancel asks the process to end the turn (the run ends when it does, or
// at the cancel deadline); a mirrored subagent is stopped by its process,
// which reports its end.
func (externalDriver) cancel(st *stepper, a *Agent, by, why string) error {
	if a.Owner == "" {
		st.cancelExternal(a, why)
		return nil
	}
	return st.stopExternal(st.s.Tasks[a.Task], by)
}

// endTurn answers no to the requests the process asked in the turn.
func (externalDriver) endTurn(st *stepper, a *Agent, why string) {
	st.denyExternalOfRun(a, a.Run.Seq, "the turn ended ("+why+")")
}

// carriesUnseen: a run whose items the process never began reached no
// provider session; they go back to the inbox.
func (externalDriver) carriesUnseen() bool { return false }

// close stops a mirrored subagent through its process; the agent's own
// process ends, and its exit ends the mirrored tasks.
func (externalDriver) close(st *stepper, a *Agent, reason string) {
	if a.Owner != "" && a.Run != nil {
		if t := st.s.Tasks[a.Task]; t != nil {
			_ = st.stopExternal(t, "close of "+a.Name)
		}
	}
	st.closeRun(a, reason)
	if a.Owner == "" {
		st.effect(StopProvider{Agent: a.ID})
	}
}

// due ends a turn the process did not end when asked, and a run it went
// silent in (DESIGN rules 6 and 7).
func (externalDriver) due(st *stepper, a *Agent) {
	if d := a.Run.Cancelling; !d.IsZero() && !d.After(st.now) {
		if a.Owner == "" {
			// A process that does not end its turn when asked is hung:
			// it is ended, and the next delivery starts a new one.
			st.effect(StopProvider{Agent: a.ID})
		}
		if a.Run.Silent {
			// Not a person's cancel: a failure, retried and bounded.
			st.endRunFailed(a, RunInterrupted, "", "the provider process went silent and did not end its turn when asked", FailTransient)
			return
		}
		st.endRun(a, RunCancelled, "", "cancelled; the provider process did not end its turn when asked")
		return
	}
	if d := a.Run.Expect; !d.IsZero() && !d.After(st.now) && a.Run.Cancelling.IsZero() {
		if st.awaitsPerson(a) {
			// The process waits for a person's answer, which has a
			// deadline of its own: not silence.
			st.heard(a)
			return
		}
		st.providerSilent(a)
	}
}

// orphaned: the process ended with the previous vigil process.
func (externalDriver) orphaned(st *stepper, a *Agent) {
	if a.Owner == "" {
		st.providerExited(a, "vigil restarted; the process ended with the previous vigil process")
	}
}

// reissue: the next delivery starts a new process; inFlight: vigil waits
// for no effect of its own in a provider's turn.
func (externalDriver) reissue(*stepper, *Agent)           {}
func (externalDriver) inFlight(*stepper, *Agent) []Effect { return nil }

// isMirror reports whether a is a subagent inside a provider process.
func isMirror(a *Agent) bool { return a.Driver == DriverExternal && a.Owner != "" }

// providerExit steps the exit of a provider process.
func (st *stepper) providerExit(in ProviderExited) {
	// A closed agent's process exits too: its mirrored tasks still end.
	a := st.s.Agents[in.Agent]
	switch {
	case a == nil || a.Driver != DriverExternal || a.Owner != "":
		st.drop("provider exit of "+string(in.Agent), "not-external", in.Reason)
	case in.PID != 0 && a.PID != 0 && in.PID != a.PID:
		st.drop("exit of provider process "+strconv.Itoa(in.PID), "stale-provider-exit", "a newer process runs the agent")
	default:
		st.providerExited(a, in.Reason)
	}
}

// deliver starts an external agent's run: its items go to the process.
func (st *stepper) deliver(a *Agent, items []*Item) {
	var parts []string
	prio := PriorityNext
	for _, it := range items {
		parts = append(parts, RenderItem(st.s, it))
		if it.Priority == PriorityNow {
			prio = PriorityNow
		}
	}
	d := st.deliverEffect(a, strings.Join(parts, "\n\n"))
	d.Priority = prio
	st.effect(d)
	st.heard(a)
}

func (st *stepper) deliverEffect(a *Agent, text string) Deliver {
	model := a.Model
	if model == "" {
		model = st.s.Session.Model
	}
	return Deliver{Agent: a.ID, Run: a.Run.Seq, Text: text, Priority: PriorityNext, Resume: a.ExternalSession, Model: model, Provider: st.s.Session.Provider}
}

// externalAgent returns the agent a provider process runs, when it may
// still take what the process reports.
func (st *stepper) externalAgent(id AgentID) (*Agent, bool) {
	a := st.s.Agents[id]
	if a == nil || a.Driver != DriverExternal || a.Owner != "" || a.State == AgentClosed || st.s.Session.Closed {
		return nil, false
	}
	return a, true
}

// refuseExternal drops a report for an agent that cannot take it, saying
// why.
func (st *stepper) refuseExternal(what string, id AgentID) {
	a := st.s.Agents[id]
	switch {
	case a == nil || a.Driver != DriverExternal || a.Owner != "":
		st.drop(what, "not-external", "the agent is not driven by a provider process")
	default:
		st.drop(what, "agent-closed", "the agent or its session is closed")
	}
}

func (st *stepper) externalTurnStarted(in ExternalTurnStarted) {
	a, ok := st.externalAgent(in.Agent)
	if !ok {
		st.refuseExternal("provider turn of "+string(in.Agent), in.Agent)
		return
	}
	if in.Session != "" && in.Session != a.ExternalSession {
		st.emit(&ProcessRecorded{Agent: a.ID, PID: -1, Session: in.Session})
	}
	if a.Run == nil {
		// The process began a turn on its own: record it at once. Its
		// model is reachable again: a block or backoff ends, but not a
		// spent budget's.
		if a.Blocked == nil || a.Blocked.Kind != FailBudget {
			st.release(a, "a turn the provider process began")
		}
		st.emit(&RunStarted{Agent: a.ID, Seq: len(a.Runs) + 1, Kind: RunProviderWake})
		if why := st.overBudget(a); why != "" {
			// Over a budget: the turn is asked to end at once.
			st.drop("turn "+a.Name+"#"+strconv.Itoa(a.Run.Seq), "budget-exceeded", why)
			st.emit(&RunCancelling{Agent: a.ID, Deadline: st.now.Add(cancelTimeout), Reason: "budget exceeded: " + why})
			st.effect(Interrupt{Agent: a.ID})
		}
	}
	st.ackTurn(a)
	st.heard(a)
	// A turn takes in every notification the process holds for the agent.
	st.providerDelivered(a)
}

// ackTurn records that the process is in the run's turn: what was handed
// to it has reached it.
func (st *stepper) ackTurn(a *Agent) {
	if r := a.Run; r != nil && !r.Acked {
		st.emit(&TurnAcked{Agent: a.ID, Seq: r.Seq})
		// The process began the turn with what it was handed: seen.
		st.seen(a)
	}
}

// mirror returns the agent an external message or task belongs to.
func (st *stepper) mirror(a *Agent, external string) *Agent {
	if external == "" {
		return a
	}
	for i := len(st.s.TaskOrder) - 1; i >= 0; i-- {
		if t := st.s.Tasks[st.s.TaskOrder[i]]; t.External == external && t.Kind == TaskAgent {
			if t.Status == TaskLost || t.Status == TaskClosed {
				return nil
			}
			return st.s.Agents[t.Agent]
		}
	}
	return nil
}

func (st *stepper) externalMessage(in ExternalMessage) {
	a, ok := st.externalAgent(in.Agent)
	if !ok {
		st.refuseExternal("provider message for "+string(in.Agent), in.Agent)
		return
	}
	target := st.mirror(a, in.Mirror)
	known := target != nil
	if !known {
		// A subagent we have not seen start: mirror it now.
		target = st.mirrorAgent(a, ExternalTask{Agent: a.ID, ID: in.Mirror, Kind: TaskAgent, Status: "running", Description: "subagent " + in.Mirror})
	}
	if known && target != a && target.Run == nil && in.Message.Role != chat.RoleAssistant {
		// What the process prints for an idle subagent that is not its
		// model's output (the "[Request interrupted by user]" echo after a
		// stop) starts no run: the CLI reports every run's start.
		st.emit(&TranscriptAppended{Agent: target.ID, Message: in.Message})
		return
	}
	if target.Run == nil && target.State != AgentClosed {
		kind := RunProviderWake
		if target != a {
			kind = RunKind(KindSpawn)
		}
		st.emit(&RunStarted{Agent: target.ID, Seq: len(target.Runs) + 1, Kind: kind})
		st.providerDelivered(target)
	}
	if target == a {
		st.ackTurn(a)
	}
	st.heardChain(target)
	st.emit(&TranscriptAppended{Agent: target.ID, Message: in.Message})
}

func (st *stepper) externalTurnEnded(in ExternalTurnEnded) {
	a, ok := st.externalAgent(in.Agent)
	if !ok {
		st.refuseExternal("provider result for "+string(in.Agent), in.Agent)
		return
	}
	if a.Run == nil {
		if in.NumTurns == 0 && in.Result == "" {
			return // an empty result the process sends before a wake turn
		}
		// A turn we saw no start of: record it whole.
		st.emit(&RunStarted{Agent: a.ID, Seq: len(a.Runs) + 1, Kind: RunProviderWake})
	}
	if in.Usage != (chat.Usage{}) {
		cost, priced := st.roundCost(a, in.Usage)
		st.emit(&ModelCallEnded{Agent: a.ID, Call: "", Outcome: "completed", Usage: in.Usage, Cost: cost, Unpriced: !priced})
	}
	if why := st.overBudget(a); why != "" {
		// The turn spent a budget (or was asked to end over one): it ends
		// so, its reply kept, and the agent takes no more until the
		// budget is raised.
		st.budgetStopWith(a, in.Result, why)
		return
	}
	switch {
	case !a.Run.Cancelling.IsZero():
		st.endRun(a, RunCancelled, in.Result, "cancelled")
	case in.Interrupted:
		st.endRun(a, RunCancelled, in.Result, "interrupted by a now-priority item")
	case in.IsError:
		st.endRun(a, RunFailed, "", in.Result)
	default:
		st.endRun(a, RunCompleted, in.Result, "")
	}
}

// mirrorAgent creates the vigil agent and task that mirror a provider
// subagent, owned by a (or by the mirrored subagent that started it).
func (st *stepper) mirrorAgent(a *Agent, in ExternalTask) *Agent {
	owner := a
	if in.Owner != "" {
		if o := st.mirror(a, in.Owner); o != nil {
			owner = o
		}
	}
	id := AgentID("a" + strconv.Itoa(st.s.Counters.Agent+1))
	taskID := TaskID("t" + strconv.Itoa(st.s.Counters.Task+1))
	desc := in.Description
	if desc == "" {
		desc = text.FirstLine(in.Prompt, 60)
	}
	name := "cc-" + in.ID
	if in.Name != "" {
		name = in.Name
		if st.s.Agent(name) != nil {
			name += "-" + string(id)
		}
	}
	st.emit(&AgentCreated{Agent: Agent{
		ID: id, Name: name, Description: desc, Owner: owner.ID, Task: taskID, Depth: owner.Depth + 1,
		Model: a.Model, Provider: a.Provider, Driver: DriverExternal,
	}})
	st.emit(&TaskStarted{Task: Task{
		ID: taskID, Kind: TaskAgent, Owner: owner.ID, Agent: id, Description: desc, Background: true,
		Status: TaskIdle, External: in.ID, OutputPath: in.OutputPath, Incarnation: st.s.Incarnation,
	}})
	return st.s.Agents[id]
}

func (st *stepper) externalTask(in ExternalTask) {
	a, ok := st.externalAgent(in.Agent)
	if !ok {
		st.refuseExternal("provider task "+in.ID, in.Agent)
		return
	}
	running := in.Status == "running" || in.Status == "pending" || in.Status == ""
	// The newest task of that provider id and kind; one that ended lost
	// belongs to a process that is gone, and a new task may reuse its id.
	var t *Task
	for i := len(st.s.TaskOrder) - 1; i >= 0; i-- {
		if x := st.s.Tasks[st.s.TaskOrder[i]]; x.External == in.ID && x.Kind == in.Kind {
			if x.Status != TaskLost && x.Status != TaskClosed {
				t = x
			}
			break
		}
	}
	if t == nil && !running {
		// A report about a task this process never showed running (the
		// CLI reports a previous process's tasks after a resume): they
		// ended lost already.
		st.drop("provider task "+in.ID, "stale-provider-report", "no live task has this id; status "+in.Status)
		return
	}
	if in.Kind == TaskShell {
		if t == nil {
			owner := a
			if in.Owner != "" {
				if o := st.mirror(a, in.Owner); o != nil {
					owner = o
				}
			}
			id := TaskID("t" + strconv.Itoa(st.s.Counters.Task+1))
			desc := in.Description
			st.emit(&TaskStarted{Task: Task{
				ID: id, Kind: TaskShell, Owner: owner.ID, Description: desc, Command: desc, Background: true,
				Status: TaskRunning, External: in.ID, OutputPath: in.OutputPath, Incarnation: st.s.Incarnation,
			}})
			t = st.s.Tasks[id]
		}
		if running || !in.Notify {
			return
		}
		if !t.Status.Live() {
			st.drop("provider task "+in.ID, "stale-provider-report", "the task already ended ("+string(t.Status)+")")
			return
		}
		status := externalStatus(in.Status)
		st.emit(&TaskUpdated{Task: t.ID, Status: status, OutputTail: in.Summary, ExitCode: in.ExitCode, OutputPath: in.OutputPath, Ended: true})
		st.writeExternalNote(t, NoteKey{Task: t.ID}, string(status), in.Summary, in.Usage, DeliverProvider)
		return
	}
	var m *Agent
	if t == nil {
		m = st.mirrorAgent(a, in)
	} else {
		m = st.s.Agents[t.Agent]
	}
	if running {
		if m.Run == nil && m.State != AgentClosed {
			st.emit(&RunStarted{Agent: m.ID, Seq: len(m.Runs) + 1, Kind: RunKind(KindSpawn)})
			st.providerDelivered(m)
		}
		st.heardChain(m)
		return
	}
	if m.Run == nil && externalStatus(in.Status) == TaskStopped && t != nil && t.Status != TaskStopped && m.State != AgentClosed {
		// Stopped between its runs (the CLI says so with task_updated
		// killed and no notification): no run to end, but the process will
		// not wake it for what it still owes it.
		st.stopIdleMirror(m, t)
		return
	}
	if !in.Notify {
		st.heardChain(m)
		return // a status update; the provider's notification ends the run
	}
	if m.Run == nil {
		st.drop("provider task "+in.ID, "stale-provider-report", "a notification for a subagent with no run in progress")
		return
	}
	st.endMirrorRun(m, externalStatus(in.Status), in.Summary, in.Usage, DeliverProvider)
}

// endMirrorRun ends a mirrored subagent's run and writes its notification.
func (st *stepper) endMirrorRun(m *Agent, status TaskStatus, summary string, usage chat.Usage, d Delivery) {
	rs := RunCompleted
	switch status {
	case TaskFailed:
		rs = RunFailed
	case TaskStopped:
		rs = RunCancelled
	case TaskLost, TaskInterrupted:
		rs = RunInterrupted
	}
	if usage != (chat.Usage{}) {
		cost, priced := st.roundCost(m, usage)
		st.emit(&ModelCallEnded{Agent: m.ID, Outcome: "completed", Usage: usage, Cost: cost, Unpriced: !priced})
	}
	st.emit(&RunEnded{Agent: m.ID, Seq: m.Run.Seq, Status: rs, Reply: summary})
	sum := m.Runs[len(m.Runs)-1]
	t := st.s.Tasks[m.Task]
	st.writeExternalNote(t, NoteKey{Task: t.ID, Run: sum.Seq}, string(status), summary, usage, d)
	switch status {
	case TaskLost:
		st.emit(&TaskUpdated{Task: t.ID, Status: TaskLost, Ended: true})
	case TaskStopped:
		// The process will not run a stopped subagent again unless asked
		// to: what it owes it from now on goes to the top of its chain.
		st.emit(&TaskUpdated{Task: t.ID, Status: TaskStopped, Ended: true})
	}
}

// writeExternalNote records a mirrored task's notification. The provider
// delivers it to its own agent (DeliverProvider) unless the process is
// gone: then it goes to the owner's inbox.
func (st *stepper) writeExternalNote(t *Task, key NoteKey, status, summary string, usage chat.Usage, d Delivery) {
	if st.s.Note(key) != nil {
		st.drop("notification "+key.String(), "duplicate-notification", "a notification with this key exists; the write is a no-op")
		return
	}
	n := Note{Key: key, Owner: t.Owner, Agent: t.Agent, Kind: t.Kind, Status: status, Reply: summary, Output: summary,
		OutputPath: t.OutputPath, ExitCode: t.ExitCode, Usage: usage, Duration: st.now.Sub(t.Started), Delivery: d}
	if ag := st.s.Agents[t.Agent]; ag != nil {
		n.AgentName = ag.Name
	}
	if o := st.s.Agents[n.Owner]; d == DeliverProvider && (o == nil || o.State == AgentClosed) {
		st.emit(&NotificationWritten{Note: n})
		st.emit(&NotificationDropped{Key: n.Key, Reason: "owner closed"})
		st.drop("notification "+n.Key.String(), "owner-closed", "its owner "+string(n.Owner)+" is closed")
		return
	}
	if o := st.s.Agents[n.Owner]; d == DeliverProvider && o.Run == nil && st.s.Tasks[o.Task] != nil && st.s.Tasks[o.Task].Status == TaskStopped {
		// The process stopped the owner: it will not run it for this.
		d, n.Delivery = DeliverInbox, DeliverInbox
	}
	if o := st.s.Agents[n.Owner]; d == DeliverProvider && o.Run == nil && status == string(TaskStopped) {
		// A task stopped while its owner is idle: the process does not wake
		// the owner for it (the CLI's stop_task notifies "stopped" and runs
		// no turn), so vigil's inbox delivers it now rather than at the
		// next turn someone else starts.
		d, n.Delivery = DeliverInbox, DeliverInbox
	}
	if d == DeliverProvider {
		o := st.s.Agents[n.Owner]
		inTurn := o.Run != nil && (o.Owner != "" || o.Run.Acked)
		if !inTurn && !st.seed(bugProviderForever) {
			n.DeliverBy = st.now.Add(st.cfg.ProviderSilence)
		}
		st.emit(&NotificationWritten{Note: n})
		// An owner in a turn takes it in that turn; an idle one at its
		// next turn.
		if inTurn {
			st.emit(&NotesDelivered{Agent: o.ID, Run: o.Run.Seq, Keys: []NoteKey{n.Key}})
		}
		return
	}
	// The process is gone, or stopped the owner: the agent that owns the
	// process hears of it.
	n.Owner = st.root(t.Owner)
	st.deliverNote(n)
}

// root returns the agent at the top of id's owner chain.
func (st *stepper) root(id AgentID) AgentID {
	for a := st.s.Agents[id]; a != nil; a = st.s.Agents[a.Owner] {
		if a.Owner == "" {
			return a.ID
		}
	}
	return id
}

func externalStatus(s string) TaskStatus {
	switch s {
	case "completed", "success":
		return TaskCompleted
	case "failed", "error":
		return TaskFailed
	case "killed", "stopped", "cancelled":
		return TaskStopped
	case "lost":
		return TaskLost
	}
	return TaskStatus(s)
}

func (st *stepper) providerStarted(in ProviderStarted) {
	a, ok := st.externalAgent(in.Agent)
	if !ok {
		st.refuseExternal("provider process of "+string(in.Agent), in.Agent)
		return
	}
	st.emit(&ProcessRecorded{Agent: a.ID, PID: in.PID, StartTicks: in.StartTicks, Cgroup: in.Cgroup})
}

// providerExited ends everything that depended on the process (rule 7):
// mirrored runs and tasks end lost with a notification in their owner's
// inbox, the agent's own run ends interrupted.
func (st *stepper) providerExited(a *Agent, reason string) {
	why := "the provider process exited"
	if reason != "" {
		why += ": " + reason
	}
	st.withdrawExternal(a, "", why)
	for _, id := range st.s.TaskOrder {
		t := st.s.Tasks[id]
		if t.External == "" || !st.ownedBy(t, a) {
			continue
		}
		switch t.Kind {
		case TaskShell:
			if t.Status.Live() {
				st.emit(&TaskUpdated{Task: t.ID, Status: TaskLost, Ended: true})
				st.writeExternalNote(t, NoteKey{Task: t.ID}, string(TaskLost), why, chat.Usage{}, DeliverInbox)
			}
		case TaskAgent:
			if m := st.s.Agents[t.Agent]; m != nil && m.Run != nil {
				st.endMirrorRun(m, TaskLost, why, chat.Usage{}, DeliverInbox)
			}
		}
	}
	// Notifications the process was to deliver itself but had not: they go
	// to the agent's inbox, so the next process hears of them.
	for _, k := range st.s.NoteOrder {
		n := st.s.Note(k)
		if !undeliveredNote(n) {
			continue
		}
		if t := st.s.Tasks[k.Task]; t == nil || !st.ownedBy(t, a) {
			continue
		}
		if a.State == AgentClosed || st.s.Session.Closed {
			st.emit(&NotificationDropped{Key: k, Reason: "owner closed"})
			st.drop("notification "+k.String(), "owner-closed", "the provider process ended before delivering it and "+a.Name+" is closed")
			continue
		}
		st.requeueNote(n, a, why)
	}
	if a.PID != 0 {
		st.emit(&ProcessRecorded{Agent: a.ID, PID: 0})
	}
	if r := a.Run; r != nil {
		if !r.Cancelling.IsZero() {
			// Cancelled: the turn is not handed to a new process.
			st.endRun(a, RunCancelled, "", "cancelled; "+why)
			return
		}
		if !r.Acked && r.Redelivered < maxRedeliveries && a.State != AgentClosed && !st.s.Session.Closed {
			// The process never began the run's turn: its items did not
			// reach it. A new process gets them (rule 2: an item is taken
			// only by a run that sees it).
			st.emit(&RunRedelivered{Agent: a.ID, Seq: r.Seq, Reason: why})
			st.effect(st.deliverEffect(a, lastUserText(a)))
			st.heard(a)
			return
		}
		if !r.Acked {
			st.endRun(a, RunFailed, "", fmt.Sprintf("the provider process ended %d times before it began the run: %s", r.Redelivered+1, why))
			return
		}
		st.endRun(a, RunInterrupted, "", why)
	}
}

// lastUserText is the text of a's last user message: what its run handed
// to the provider process.
func lastUserText(a *Agent) string {
	for i := len(a.Transcript) - 1; i >= 0; i-- {
		if m := a.Transcript[i]; m.Role == chat.RoleUser {
			var parts []string
			for _, b := range m.Content {
				parts = append(parts, b.Text)
			}
			return strings.Join(parts, "\n\n")
		}
	}
	return ""
}

// ownedBy reports whether t belongs to a or to one of a's mirrored
// subagents.
func (st *stepper) ownedBy(t *Task, a *Agent) bool {
	for o := st.s.Agents[t.Owner]; o != nil; o = st.s.Agents[o.Owner] {
		if o.ID == a.ID {
			return true
		}
	}
	return false
}

func (st *stepper) stopExternal(t *Task, by string) error {
	root := st.s.Agents[st.root(t.Owner)]
	if root == nil {
		return errorf(CodeNotFound, "task %s has no provider process", t.ID)
	}
	if t.Kind == TaskShell && !t.Status.Live() {
		return errorf(CodeConflict, "task %s already ended (%s)", t.ID, t.Status)
	}
	st.effect(StopExternal{Agent: root.ID, Task: t.External})
	return nil
}

// DeliverProvider: the provider process delivers the notification to its
// own agent.
const DeliverProvider Delivery = "provider"
