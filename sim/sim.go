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
package sim

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/vigilrun/vigil/core"
)

// Options configures one simulated run.
type Options struct {
	Seed int64
	// Inject puts back a seed bug in the core under test.
	Inject core.Bug
	// NoCrash disables crash-and-recover.
	NoCrash bool
	// MaxSteps bounds the run; a run that has not quiesced by then is a
	// liveness violation. Zero means 50,000.
	MaxSteps int
	// TraceLen is how many trace lines are kept for a report (default 40).
	TraceLen int
}

// Violation is a broken rule.
type Violation struct {
	Rule   string // "1".."9", "replay" or "end"
	Step   int
	At     time.Duration // virtual time since the start
	Detail string
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
	// Trace is the short trace that led to the first violation.
	Trace []string
	// Duration is the virtual time the run took.
	Duration time.Duration
	// Mode says how the session was driven: loop, external (a provider
	// process) or caller (an outside caller).
	Mode string
}

// world is one simulated run.
type world struct {
	opts  Options
	rng   *rand.Rand
	core  *core.Core
	state *core.State
	log   []core.Event
	start time.Time
	now   time.Time
	queue evQueue
	qseq  int64
	inc   int64
	steps int
	res   Result
	chk   *checker
	trace []string

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
		state:    core.NewState(),
		start:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		inc:      1,
		procs:    map[core.TaskID]*proc{},
		calls:    map[core.CallID]*wev{},
		tools:    map[string]*wev{},
		approved: map[core.ApprovalID]bool{},
	}
	w.now = w.start
	w.res.Seed = opts.Seed
	cfg := core.Config{Inject: opts.Inject, MaxDepth: 3, MaxAgents: 24, MaxInbox: 64, GateTTL: time.Duration(5+w.rng.IntN(60)) * time.Second}
	if w.rng.IntN(3) == 0 {
		cfg.MaxConcurrentCalls = 1 + w.rng.IntN(3)
	}
	w.core = core.New(cfg)
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
		w.addTrace(fmt.Sprintf("%s %s refused: %v", w.clock(), name, out.Err))
		return
	}
	if crash == 1 {
		// The process dies before the step commits: none of it happened.
		w.addTrace(fmt.Sprintf("%s %s -> CRASH before commit", w.clock(), name))
		w.crash()
		return
	}
	w.log = append(w.log, out.Events...)
	w.addTrace(w.describe(name, out))
	w.chk.afterStep(in, out)
	if crash == 2 {
		w.addTrace(fmt.Sprintf("%s CRASH after commit, before effects", w.clock()))
		w.crash()
		return
	}
	w.runEffects(out.Effects)
	w.scheduleAck()
	w.chk.stateRules()
	w.armTick()
}

// crash throws away everything that was not committed: in-flight effects,
// live processes (they die with their parent), the in-memory state. The
// next incarnation replays the log and recovers.
func (w *world) crash() {
	w.res.Crashes++
	committed := stateJSON(core.Replay(w.log))
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
	w.chk.onCrash()
	// The new incarnation recovers before it accepts anything else.
	w.step(core.Recover{Incarnation: w.inc}, "recover")
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

func (w *world) clock() string {
	return fmt.Sprintf("t=%-9s", w.now.Sub(w.start).Round(time.Millisecond))
}

func (w *world) addTrace(line string) {
	w.trace = append(w.trace, line)
	if len(w.trace) > w.opts.TraceLen {
		w.trace = w.trace[len(w.trace)-w.opts.TraceLen:]
	}
}

func (w *world) describe(name string, out core.Output) string {
	var parts []string
	for _, e := range out.Events {
		parts = append(parts, DescribeEvent(e))
	}
	return fmt.Sprintf("%s %-22s %s", w.clock(), name, strings.Join(parts, "; "))
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
		case core.Finalize:
			in := core.FinalizeRun(ef)
			w.schedule(w.at(w.latency(1, 3000)), w.inc, "finalize", func() core.Input { return in })
		case core.Deliver, core.Interrupt, core.StopExternal, core.StopProvider:
			w.externalEffect(ef)
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
