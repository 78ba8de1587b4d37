// Package sim is vigil's deterministic simulator. Each seed generates a
// random workload — agents, background subagents and shell tasks, messages
// sent at random moments including inside a final model round, holds and
// resumes, cancels, stops, timers, provider wakes, permission requests —
// and runs it on the real core under a seeded scheduler with virtual time,
// simulated model calls, tools and processes with random latencies, and
// crash-and-recover at random steps. The rules of DESIGN.md section 2 are
// checked after every step and at the end.
//
// The same seed always produces the same run, so a failing seed replays.
//
// In a build with the seedbugs tag (SeedBugsTag), Options.Inject puts one
// of the seed bugs back into the core, and the simulator must catch it:
// that is how we know its checks can fail. The default build has none.
package sim

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/snapshot"
)

// Options configures one simulated run.
type Options struct {
	Seed int64
	// Inject names a seed bug to put back in the core under test. Only a
	// build with the seedbugs tag has any (Bugs lists them); Run panics on
	// a name the build does not know.
	Inject string
	// NoCrash disables crash-and-recover.
	NoCrash bool
	// MaxSteps bounds the run; a run that has not quiesced by then is a
	// liveness violation. Zero means 50,000.
	MaxSteps int
	// TraceLen is how many trace lines are kept for a report (default 40).
	TraceLen int
	// Trace picks the trace kept in Result.Trace. "" keeps the last
	// TraceLen lines before the first violation; TraceFull keeps every
	// step; any other value is an agent, by id ("a3") or by name ("cc-x5",
	// "main"), and keeps every step that touched it. Each line starts with
	// its step number ("#151 t=30.103s ..."). Tracing never changes the run.
	Trace string
	// codec, when set, replaces the snapshot codec (tests of the snapshot
	// check).
	codec *codec
	// afterStep, when set, sees the state after each committed step
	// (tests of a check, which break a rule from outside the core).
	afterStep func(*core.State)
}

// TraceFull is the Options.Trace value that keeps every step.
const TraceFull = "full"

// SeedBugsTag is the build tag of a build that can put seed bugs back into
// the core (Options.Inject):
//
//	go build -tags seedbugs -o /tmp/vigil-bugs ./cmd/vigil
const SeedBugsTag = "seedbugs"

// Violation is a broken rule.
type Violation struct {
	Rule   string // a rule of DESIGN section 2 ("1".."11"), or "replay", "snapshot", "ledger", "liveness", "end"
	Step   int
	At     time.Duration // virtual time since the start
	Detail string
	// Agent and Run name the run the violation is about, when it is about
	// one (Agent is empty otherwise); Name is the agent's name.
	Agent core.AgentID
	Name  string
	Run   int
	// RunStep is the step at which that run started (0 if no step of this
	// seed started it).
	RunStep int
	// Steps are the steps that touched Agent, up to the violation.
	Steps []int
}

// String implements fmt.Stringer.
func (v *Violation) String() string {
	return fmt.Sprintf("rule %s at step %d (t=%s): %s", v.Rule, v.Step, v.At, v.Detail)
}

// Result is the outcome of one seed.
type Result struct {
	Seed       int64
	Steps      int
	Crashes    int
	Runs       int
	Notes      int
	Messages   int
	Violations int
	First      *Violation
	// Trace is the short trace that led to the first violation, or the
	// trace Options.Trace asked for.
	Trace []string
	// Agents are, when Options.Trace is set, the seed's agents at the end,
	// each as "id name" ("a3 cc-x5").
	Agents []string
	// Duration is the virtual time the run took.
	Duration time.Duration
	// Mode says how the session was driven: loop, external (a provider
	// process) or caller (an outside caller).
	Mode string
}

// runRef names one run of one agent.
type runRef struct {
	agent core.AgentID
	seq   int
}

// world is one simulated run.
type world struct {
	opts Options
	rng  *rand.Rand
	// faults draws the provider faults (hung runs and turns) and their
	// deadline: a stream of its own, so that adding a kind of fault leaves
	// what every other draw of a seed does, and so its regression value,
	// unchanged.
	faults *rand.Rand
	// limits draws the budgets of a seed and when a person raises them,
	// in a stream of its own for the same reason.
	limits *rand.Rand
	// sessionBudget is the budget the session is created with.
	sessionBudget core.Budget
	// outage is a window in which every model call fails with one kind.
	outage outage
	core   *core.Core
	state  *core.State
	// enc encodes the state's snapshots as a runtime's session does, one
	// Encoder kept across the incarnation's steps (checkEncoder).
	enc   *snapshot.Encoder
	log   []core.Event
	start time.Time
	now   time.Time
	queue evQueue
	qseq  int64
	inc   int64
	steps int
	res   Result
	chk   *checker
	trace []traceStep // the steps the trace keeps, rendered on demand
	// touched holds, for each agent, the steps that touched it, and
	// runStep the step at which each run started: cheap enough to keep
	// always, so that a violation about a run can say where it began.
	touched map[core.AgentID][]int
	runStep map[runRef]int
	ids     []core.AgentID // the agents the current step touched

	procs  map[core.TaskID]*proc
	calls  map[core.CallID]*wev // pending model answers, by call
	tools  map[string]*wev      // pending tool results, by agent/use id
	tickAt time.Time
	budget budget
	names  int
	// mode is how the session is driven; proc is the simulated provider
	// process of an external main agent.
	mode       mode
	scale      int
	proc       *extProcess
	extIDs     int
	pids       int
	ackPending bool
	wakeSeq    int
	approved   map[core.ApprovalID]bool
}

type proc struct {
	exit  *wev
	alive bool
}

type budget struct {
	spawns, sends, shells, timers, rounds int
}

// wev is a pending world event: something the outside world will do.
type wev struct {
	at    time.Time
	seq   int64
	inc   int64 // the incarnation whose effect this is; 0 for the outside world
	name  string
	input func() core.Input // built when it fires, from the state then
	dead  bool
	index int
}

// evQueue is a heap of world events by time, ties broken by a seeded
// random number. Its methods implement container/heap.Interface.
type evQueue []*wev

// Len implements heap.Interface.
func (q evQueue) Len() int { return len(q) }

// Less implements heap.Interface.
func (q evQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}

// Swap implements heap.Interface.
func (q evQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].index = i; q[j].index = j }

// Push implements heap.Interface.
func (q *evQueue) Push(x any) { e := x.(*wev); e.index = len(*q); *q = append(*q, e) }

// Pop implements heap.Interface.
func (q *evQueue) Pop() any                   { old := *q; e := old[len(old)-1]; *q = old[:len(old)-1]; return e }
func (w *world) at(d time.Duration) time.Time { return w.now.Add(d) }

// schedule adds a world event; ties are broken at random (seeded).
func (w *world) schedule(at time.Time, inc int64, name string, input func() core.Input) *wev {
	w.qseq++
	e := &wev{at: at, seq: w.rng.Int64N(1 << 40), inc: inc, name: name, input: input}
	heap.Push(&w.queue, e)
	return e
}

// Run simulates one seed.
func Run(opts Options) Result {
	if opts.MaxSteps == 0 {
		opts.MaxSteps = 50_000
	}
	if opts.TraceLen == 0 {
		opts.TraceLen = 40
	}
	w := &world{
		opts:     opts,
		rng:      rand.New(rand.NewPCG(uint64(opts.Seed), 0x9e3779b97f4a7c15)),
		faults:   rand.New(rand.NewPCG(uint64(opts.Seed), 0x2545f4914f6cdd1d)),
		limits:   rand.New(rand.NewPCG(uint64(opts.Seed), 0x94d049bb133111eb)),
		state:    core.NewState(),
		start:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		inc:      1,
		procs:    map[core.TaskID]*proc{},
		calls:    map[core.CallID]*wev{},
		tools:    map[string]*wev{},
		approved: map[core.ApprovalID]bool{},
		touched:  map[core.AgentID][]int{},
		runStep:  map[runRef]int{},
	}
	w.now = w.start
	w.res.Seed = opts.Seed
	cfg := core.Config{MaxDepth: 3, MaxAgents: 24, MaxInbox: 64, GateTTL: time.Duration(5+w.rng.IntN(60)) * time.Second,
		ProviderSilence: time.Duration(10+w.faults.IntN(50)) * time.Second,
		RetryBase:       time.Duration(100+w.faults.IntN(1900)) * time.Millisecond, RetryMaxDelay: 5 * time.Second,
		RetryAttempts: 2 + w.faults.IntN(4)}
	if w.faults.IntN(4) == 0 {
		// The provider is down for a while: transient (a 529 storm), or a
		// failure retrying cannot help (context window, revoked key).
		from := w.start.Add(time.Duration(w.faults.Int64N(int64(20 * time.Second))))
		w.outage = outage{
			from: from, to: from.Add(time.Duration(1+w.faults.IntN(20)) * time.Second),
			kind: []core.FailureKind{core.FailTransient, core.FailTransient, core.FailContext, core.FailAuth, core.FailInvalid}[w.faults.IntN(5)],
		}
	}
	if w.rng.IntN(3) == 0 {
		cfg.MaxConcurrentCalls = 1 + w.rng.IntN(3)
	}
	// A budget, in one seed of three: small enough to be hit.
	switch w.limits.IntN(6) {
	case 0:
		w.sessionBudget.Rounds = 2 + w.limits.IntN(40)
	case 1:
		w.sessionBudget.Tokens = int64(500 + w.limits.IntN(20000))
	}
	if w.limits.IntN(3) == 0 {
		// A small context window: agents compact, some several times.
		window := 400 + w.limits.IntN(3000)
		cfg.ContextWindow = func(string, string) int { return window }
	}
	if w.limits.IntN(2) == 0 {
		cfg.Price = func(model string, u chat.Usage) (int64, bool) { return u.Total(), true }
		if w.limits.IntN(3) == 0 {
			cfg.Budget.Cost = int64(2000 + w.limits.IntN(20000))
		}
	}
	w.core = newCore(cfg, opts.Inject)
	switch k := w.rng.IntN(10); {
	case k < 2:
		w.mode = modeExternal
	case k < 4:
		w.mode = modeCaller
	}
	w.res.Mode = [...]string{"loop", "external", "caller"}[w.mode]
	w.chk = newChecker(w)
	// Most seeds are small; one in ten is large, to reach deeper
	// interleavings.
	w.scale = 1
	if w.rng.IntN(10) == 0 {
		w.scale = 8
	}
	w.budget = budget{
		spawns: 1 + w.rng.IntN(6*w.scale), sends: w.rng.IntN(12 * w.scale), shells: w.rng.IntN(6 * w.scale),
		timers: w.rng.IntN(3 * w.scale), rounds: 30*w.scale + w.rng.IntN(60*w.scale),
	}
	w.generateWorkload()
	w.loop()
	w.res.Steps = w.steps
	w.res.Duration = w.now.Sub(w.start)
	if opts.Trace != "" {
		w.res.Trace = w.traceLines()
		for _, id := range w.state.Order {
			w.res.Agents = append(w.res.Agents, string(id)+" "+w.state.Agents[id].Name)
		}
	}
	return w.res
}

func (w *world) loop() {
	for w.queue.Len() > 0 {
		if w.res.First != nil && w.res.Violations > 0 && w.steps > w.res.First.Step+50 {
			return // a violation was found; a few more steps is enough context
		}
		if w.steps >= w.opts.MaxSteps {
			w.chk.violate("liveness", fmt.Sprintf("not quiescent after %d steps", w.steps))
			return
		}
		e := heap.Pop(&w.queue).(*wev)
		if e.dead || (e.inc != 0 && e.inc != w.inc) {
			continue
		}
		if e.at.After(w.now) {
			w.now = e.at
		}
		in := e.input()
		if in == nil {
			continue
		}
		w.step(in, e.name)
	}
	w.chk.end()
}

// step runs one input through the core, commits, checks, and starts the
// effects — with a chance of crashing before or after the commit.
func (w *world) step(in core.Input, name string) {
	crash := 0
	if !w.opts.NoCrash && w.state.Session.ID != "" {
		if _, isRecover := in.(core.Recover); !isRecover && w.rng.IntN(250) == 0 {
			crash = 1 + w.rng.IntN(2) // 1: before the commit, 2: after it
		}
	}
	w.steps++
	out := w.core.Step(w.state, w.now, in)
	if out.Err != nil {
		w.record(in, nil, traceStep{name: name, out: out})
		return
	}
	if crash == 1 {
		// The process dies before the step commits: none of it happened.
		w.record(in, nil, traceStep{name: name, crash: 1})
		w.crash()
		return
	}
	w.log = append(w.log, out.Events...)
	w.record(in, out.Events, traceStep{name: name, out: out, crash: crash})
	w.chk.afterStep(in, out)
	if crash == 2 {
		w.crash()
		return
	}
	if w.opts.afterStep != nil {
		w.opts.afterStep(w.state)
	}
	w.checkEncoder()
	w.runEffects(out.Effects)
	w.scheduleAck()
	w.chk.stateRules()
	w.armTick()
}

// checkEncoder runs on one seed in encoderSeeds, every encoderEvery
// steps: encoding the state twice at every fourth step of every seed made
// the simulator four times slower.
const (
	encoderSeeds = 8
	encoderEvery = 4
)

// checkEncoder: a busy session's snapshots come from one
// snapshot.Encoder kept across its steps, which writes the transcript
// sections it encoded before again, unencoded, when their messages are
// the same ones; it relies on the core never changing a message of a
// transcript in place. Every encoderEvery steps (of one seed in
// encoderSeeds) the live state is encoded through the incarnation's
// Encoder and whole, and the two must be the same bytes.
func (w *world) checkEncoder() {
	if w.opts.Seed%encoderSeeds != 0 || w.steps%encoderEvery != 0 {
		return
	}
	if w.enc == nil {
		w.enc = snapshot.NewEncoderSized(3, 2)
	}
	got, err := w.enc.Encode(w.state)
	if err != nil {
		w.chk.violate("snapshot", "the Encoder failed: "+err.Error())
		return
	}
	want, err := snapshot.EncodeSized(w.state, 3, 2)
	if err != nil {
		w.chk.violate("snapshot", "encoding the state failed: "+err.Error())
		return
	}
	if !bytes.Equal(got, want) {
		w.chk.violate("snapshot", fmt.Sprintf("at seq %d the Encoder kept since the incarnation began made a snapshot that differs from the state's (%d bytes against %d): a transcript's message changed in place", w.state.Seq, len(got), len(want)))
	}
}

// crash throws away everything that was not committed: in-flight effects,
// live processes (they die with their parent), the in-memory state. The
// next incarnation replays the log and recovers.
func (w *world) crash() {
	w.res.Crashes++
	committed := stateJSON(core.Replay(w.log))
	w.enc = nil // the next incarnation's state is a new one
	w.inc++
	for _, p := range w.procs {
		p.alive = false
		if p.exit != nil {
			p.exit.dead = true
		}
	}
	w.procs = map[core.TaskID]*proc{}
	if w.proc != nil {
		w.proc.alive = false // it dies with vigil
		for _, e := range w.proc.pending {
			e.dead = true
		}
	}
	w.ackPending = false
	w.calls = map[core.CallID]*wev{}
	w.tools = map[string]*wev{}
	w.state = core.Replay(w.log)
	if got := stateJSON(w.state); got != committed {
		w.chk.violate("replay", "state rebuilt from the log differs from the committed state")
	}
	// Recovery starts from a snapshot: one taken part way through the log
	// (where is decided without the seed's random stream, which stays the
	// same), plus the events after it, must rebuild the same state.
	k := len(w.log) * (1 + w.res.Crashes%7) / 8
	c := w.opts.codec
	if c == nil {
		// Sections of a few messages and entries: the check covers how
		// the snapshot's sections join (a session's is much larger).
		c = &codec{encode: func(s *core.State) ([]byte, error) { return snapshot.EncodeSized(s, 3, 2) }, decode: snapshot.Decode}
	}
	if got, err := c.fromSnapshot(w.log, k); err != nil {
		w.chk.violate("snapshot", "snapshot at seq "+strconv.Itoa(k)+": "+err.Error())
	} else if got != committed {
		w.chk.violate("snapshot", "state rebuilt from a snapshot at seq "+strconv.Itoa(k)+" and the log after it differs from the committed state")
	}
	w.chk.onCrash()
	// The new incarnation recovers before it accepts anything else.
	w.step(core.Recover{Incarnation: w.inc}, "recover")
	// A user whose retry was lost in the crash sees the agent still
	// blocked, and retries again.
	for _, id := range w.state.Order {
		if w.state.Agents[id].Blocked != nil {
			w.retryLater(id)
		}
	}
}

// codec is a snapshot encoding.
type codec struct {
	encode func(*core.State) ([]byte, error)
	decode func([]byte, *core.State) error
}

// fromSnapshot rebuilds the state of log from a snapshot of its first k
// events and the rest of it.
func (c *codec) fromSnapshot(log []core.Event, k int) (_ string, err error) {
	defer func() {
		// A state that lost a part makes the events after it panic: that
		// is the codec's failure, reported as a violation.
		if p := recover(); p != nil {
			err = fmt.Errorf("applying the events after the snapshot panicked: %v", p)
		}
	}()
	b, err := c.encode(core.Replay(log[:k]))
	if err != nil {
		return "", err
	}
	s := core.NewState()
	if err := c.decode(b, s); err != nil {
		return "", err
	}
	for _, e := range log[k:] {
		core.Apply(s, e)
	}
	return stateJSON(s), nil
}

func stateJSON(s *core.State) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (w *world) armTick() {
	d := core.NextDeadline(w.state)
	if d.IsZero() {
		return
	}
	if !w.tickAt.IsZero() && !w.tickAt.After(d) && w.tickAt.After(w.now) {
		return
	}
	if d.Before(w.now) {
		d = w.now
	}
	w.tickAt = d
	w.schedule(d, 0, "tick", func() core.Input {
		w.tickAt = time.Time{}
		return core.Tick{}
	})
}

// traceStep is a step the trace keeps, rendered into a line only when a
// trace is asked for (most seeds pass and print none).
type traceStep struct {
	step  int
	at    time.Time
	name  string      // the world event that made the step
	out   core.Output // its output; Err set if the core refused it
	crash int         // 1: crashed before the commit, 2: after it
}

// traceLines renders the trace kept so far.
func (w *world) traceLines() []string {
	lines := make([]string, len(w.trace))
	for i, t := range w.trace {
		lines[i] = w.describe(t)
	}
	return lines
}

// record notes the agents the current step touched and the runs it
// started (events is nil for a step that did not commit), and keeps its
// trace line if Options.Trace asks for it.
func (w *world) record(in core.Input, events []core.Event, ts traceStep) {
	ids := w.touches(in, events)
	for _, id := range ids {
		w.touched[id] = append(w.touched[id], w.steps)
	}
	ts.step, ts.at = w.steps, w.now
	switch t := w.opts.Trace; t {
	case "":
		w.trace = append(w.trace, ts)
		if len(w.trace) > w.opts.TraceLen {
			w.trace = w.trace[len(w.trace)-w.opts.TraceLen:]
		}
	case TraceFull:
		w.trace = append(w.trace, ts)
	default:
		for _, id := range ids {
			if a := w.state.Agents[id]; string(id) == t || (a != nil && a.Name == t) {
				w.trace = append(w.trace, ts)
				break
			}
		}
	}
}

// touches returns the agents a step touched: those its events name
// (directly, or through a task's agent and owner, a notification's owner
// and agent, a message's sender and target), and those its input names,
// read against the state after the step. It records the runs the events
// start. The slice is reused by the next step.
func (w *world) touches(in core.Input, events []core.Event) []core.AgentID {
	s := w.state
	w.ids = w.ids[:0]
	add := func(id core.AgentID) {
		if id != "" && !slices.Contains(w.ids, id) {
			w.ids = append(w.ids, id)
		}
	}
	task := func(id core.TaskID) {
		if t := s.Tasks[id]; t != nil {
			add(t.Agent)
			add(t.Owner)
		}
	}
	named := func(name string) { // an agent given by id or by name
		if s.Agents[core.AgentID(name)] != nil {
			add(core.AgentID(name))
			return
		}
		for _, id := range s.Order {
			if s.Agents[id].Name == name {
				add(id)
			}
		}
	}
	for _, e := range events {
		switch b := e.Body.(type) {
		case *core.RunStarted:
			add(b.Agent)
			w.runStep[runRef{b.Agent, b.Seq}] = w.steps
		case *core.SessionCreated:
			add(core.MainAgent)
		case *core.AgentCreated:
			add(b.Agent.ID)
			add(b.Agent.Owner)
		case *core.TaskStarted:
			add(b.Task.Agent)
			add(b.Task.Owner)
		case *core.TaskUpdated:
			task(b.Task)
		case *core.TaskProcess:
			task(b.Task)
		case *core.ItemEnqueued:
			add(b.Item.Agent)
		case *core.NotificationWritten:
			add(b.Note.Owner)
			add(b.Note.Agent)
		case *core.NotificationDropped:
			if n := s.Note(b.Key); n != nil {
				add(n.Owner)
				add(n.Agent)
			}
		case *core.MessageSent:
			add(b.Msg.To)
			named(b.Msg.From)
		case *core.MessageResolved:
			if m := s.Msgs[b.Msg]; m != nil {
				add(m.To)
				named(m.From)
			}
		case *core.TimerSet:
			add(b.Timer.Agent)
		case *core.ApprovalRequested:
			add(b.Approval.Agent)
		default:
			add(agentField(b))
		}
	}
	switch in := in.(type) {
	case core.UserMessage:
		named(in.To)
	case core.CancelRun:
		named(in.Agent)
	case core.CloseAgent:
		named(in.Agent)
	case core.StopTask:
		task(in.Task)
	case core.ProcessStarted:
		task(in.Task)
	case core.ProcessExited:
		task(in.Task)
	case core.ShellStartFailed:
		task(in.Task)
	case core.ExternalTask:
		// The provider's report of one of its tasks: the mirrored task's
		// agent and owner, and those of the subagent that owns it.
		add(in.Agent)
		for _, id := range s.TaskOrder {
			if x := s.Tasks[id].External; x != "" && (x == in.ID || x == in.Owner) {
				task(id)
			}
		}
	default:
		add(agentField(in))
	}
	return w.ids
}

// agentFields caches, by type, the index of a struct's Agent field of type
// core.AgentID (-1 if it has none).
var agentFields sync.Map

// agentField returns the Agent field of an event body or an input, if it
// has one: most do.
func agentField(x any) core.AgentID {
	v := reflect.ValueOf(x)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	i, ok := agentFields.Load(v.Type())
	if !ok {
		i = -1
		if f, found := v.Type().FieldByName("Agent"); found && len(f.Index) == 1 && f.Type == reflect.TypeFor[core.AgentID]() {
			i = f.Index[0]
		}
		agentFields.Store(v.Type(), i)
	}
	if i.(int) < 0 {
		return ""
	}
	return core.AgentID(v.Field(i.(int)).String())
}

// describe renders a step of the trace: "#151 t=30.103s  tick ...".
func (w *world) describe(t traceStep) string {
	head := fmt.Sprintf("#%d t=%-9s", t.step, t.at.Sub(w.start).Round(time.Millisecond))
	name, out := t.name, t.out
	switch {
	case out.Err != nil:
		return fmt.Sprintf("%s %s refused: %v", head, name, out.Err)
	case t.crash == 1:
		return fmt.Sprintf("%s %s -> CRASH before commit", head, name)
	}
	var parts []string
	for _, e := range out.Events {
		parts = append(parts, DescribeEvent(e))
	}
	body := strings.Join(parts, "; ")
	// The effects that stop or cancel something: a later step's report
	// ("stopped", "cancelled") answers one of them.
	var asks []string
	for _, ef := range out.Effects {
		switch ef := ef.(type) {
		case core.StopExternal:
			asks = append(asks, "stop provider task "+ef.Task)
		case core.StopShell:
			asks = append(asks, "stop shell "+string(ef.Task))
		case core.Interrupt:
			asks = append(asks, "interrupt "+string(ef.Agent))
		case core.StopProvider:
			asks = append(asks, "stop provider of "+string(ef.Agent))
		case core.CancelCall:
			asks = append(asks, "cancel call "+string(ef.Call))
		case core.CancelTool:
			asks = append(asks, "cancel tool "+ef.UseID)
		}
	}
	if len(asks) > 0 {
		body = strings.TrimSpace(body + " => " + strings.Join(asks, ", "))
	}
	if t.crash == 2 {
		body = strings.TrimSpace(body + " -> CRASH after commit, before effects")
	}
	return strings.TrimRight(fmt.Sprintf("%s %-22s %s", head, name, body), " ")
}

// DescribeEvent renders an event in a few words for traces.
func DescribeEvent(e core.Event) string {
	switch b := e.Body.(type) {
	case *core.RunStarted:
		return fmt.Sprintf("run %s#%d started(%s %v)", b.Agent, b.Seq, b.Kind, b.Items)
	case *core.RunEnded:
		return fmt.Sprintf("run %s#%d %s", b.Agent, b.Seq, b.Status)
	case *core.ItemEnqueued:
		return fmt.Sprintf("enqueue %s %s->%s %s", b.Item.ID, b.Item.Kind, b.Item.Agent, b.Item.Priority)
	case *core.ItemsJoined:
		return fmt.Sprintf("join %s#%d %v", b.Agent, b.Seq, b.Items)
	case *core.ItemRemoved:
		return fmt.Sprintf("remove %s (%s)", b.Item, b.Reason)
	case *core.NotificationWritten:
		return fmt.Sprintf("note %s->%s %s", b.Note.Key, b.Note.Owner, b.Note.Status)
	case *core.MessageSent:
		return fmt.Sprintf("msg %s %s->%s %s", b.Msg.ID, b.Msg.From, b.Msg.To, b.Msg.Outcome)
	case *core.MessageResolved:
		return fmt.Sprintf("msg %s %s(%d)", b.Msg, b.Outcome, b.Run)
	case *core.ModelCallStarted:
		return fmt.Sprintf("call %s %s r%d", b.Call, b.Agent, b.Round)
	case *core.ModelCallEnded:
		return fmt.Sprintf("call %s %s", b.Call, b.Outcome)
	case *core.TaskStarted:
		return fmt.Sprintf("task %s %s", b.Task.ID, b.Task.Kind)
	case *core.TaskUpdated:
		return fmt.Sprintf("task %s %s", b.Task, b.Status)
	case *core.GateOpened:
		return fmt.Sprintf("gate %s g%d open", b.Agent, b.Gate.Gen)
	case *core.GateReleased:
		return fmt.Sprintf("gate %s g%d %s", b.Agent, b.Gen, b.Outcome)
	case *core.ToolCallStarted:
		return fmt.Sprintf("tool %s %s", b.Call.Name, b.Call.UseID)
	case *core.ToolCallFinished:
		return "tool-done " + b.UseID
	case *core.Dropped:
		return fmt.Sprintf("DROP %s (%s)", b.What, b.Reason)
	case *core.HoldSet:
		return "HOLD"
	case *core.HoldReleased:
		return "RESUME"
	default:
		return e.Body.Type()
	}
}

// runEffects turns the committed step's effects into future world events.
func (w *world) runEffects(effects []core.Effect) {
	for _, ef := range effects {
		switch ef := ef.(type) {
		case core.CallModel:
			w.effectCall(ef)
		case core.CancelCall:
			if e := w.calls[ef.Call]; e != nil && w.rng.IntN(2) == 0 {
				e.dead = true // sometimes the late answer still arrives
			}
			delete(w.calls, ef.Call)
		case core.ExecTool:
			w.effectTool(ef)
		case core.CancelTool:
			if e := w.tools[string(ef.Agent)+"/"+ef.UseID]; e != nil {
				e.dead = true
			}
		case core.StartShell:
			w.effectShell(ef)
		case core.StopShell:
			if p := w.procs[ef.Task]; p != nil && p.alive {
				if p.exit != nil {
					p.exit.dead = true
				}
				task, inc := ef.Task, w.inc
				p.exit = w.schedule(w.at(w.latency(1, 200)), inc, "exit "+string(task), func() core.Input {
					p.alive = false
					return core.ProcessExited{Task: task, ExitCode: -1, Signal: "SIGTERM", Stopped: true}
				})
			}
		case core.Deliver, core.Interrupt, core.StopExternal, core.StopProvider:
			w.externalEffect(ef)
		default:
			w.seedEffect(ef)
		}
	}
}

// latency returns a random duration between lo and hi milliseconds, skewed
// towards short ones.
func (w *world) latency(lo, hi int) time.Duration {
	f := w.rng.Float64()
	f = f * f
	return time.Duration(float64(lo)+f*float64(hi-lo)) * time.Millisecond
}

func (w *world) effectShell(ef core.StartShell) {
	p := &proc{alive: true}
	w.procs[ef.Task] = p
	task, inc := ef.Task, w.inc
	p.exit = w.schedule(w.at(w.latency(5, 15000)), inc, "exit "+string(task), func() core.Input {
		p.alive = false
		code := 0
		if w.rng.IntN(4) == 0 {
			code = 1 + w.rng.IntN(3)
		}
		return core.ProcessExited{Task: task, ExitCode: code, Tail: fmt.Sprintf("out of %s", task)}
	})
}

func (w *world) effectTool(ef core.ExecTool) {
	key := string(ef.Agent) + "/" + ef.UseID
	inc := w.inc
	w.tools[key] = w.schedule(w.at(w.latency(1, 800)), inc, "tool "+ef.Name, func() core.Input {
		delete(w.tools, key)
		return core.ToolDone{Agent: ef.Agent, UseID: ef.UseID, Result: "ok " + ef.Name}
	})
}

func (w *world) effectCall(ef core.CallModel) {
	inc := w.inc
	d := w.latency(2, 2500)
	if w.rng.IntN(12) == 0 {
		// A rate limit first: the provider reports its backoff.
		until := w.at(d / 2).Add(time.Duration(w.rng.IntN(800)) * time.Millisecond)
		w.schedule(w.at(d/3), inc, "retrying "+string(ef.Call), func() core.Input {
			return core.ModelRetrying{Agent: ef.Agent, Call: ef.Call, Attempt: 1, Until: until, Reason: "529 overloaded_error"}
		})
	}
	final := w.rng.IntN(100) < 55
	e := w.schedule(w.at(d), inc, "answer "+string(ef.Call), func() core.Input {
		delete(w.calls, ef.Call)
		return w.answer(ef, final)
	})
	w.calls[ef.Call] = e
	// Aim a message at the window of a final round (the 000 race).
	if final && ef.Agent != core.MainAgent && w.rng.IntN(3) == 0 {
		to := ef.AgentName
		w.schedule(w.at(time.Duration(w.rng.Int64N(int64(d)+1))), 0, "user msg in final round", func() core.Input {
			return core.UserMessage{To: to, Text: w.token("late-msg"), Priority: w.priority()}
		})
	}
}

func (w *world) token(kind string) string {
	w.wakeSeq++
	return fmt.Sprintf("%s-%d", kind, w.wakeSeq)
}

func (w *world) priority() core.Priority {
	switch w.rng.IntN(10) {
	case 0:
		return core.PriorityNow
	case 1, 2:
		return core.PriorityLater
	}
	return core.PriorityNext
}

// pick returns a random element of xs.
func pick[T any](w *world, xs []T) T { return xs[w.rng.IntN(len(xs))] }

func (w *world) agentNames(includeBogus bool) []string {
	var names []string
	for _, id := range w.state.Order {
		names = append(names, w.state.Agents[id].Name)
	}
	if includeBogus {
		names = append(names, "nobody")
	}
	return names
}

func (w *world) taskIDs() []core.TaskID { return slices.Clone(w.state.TaskOrder) }
