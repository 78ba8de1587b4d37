package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// Everything is bounded, visibly (DESIGN rule 10). A session and any agent
// tree may have a budget: tokens, model rounds, run time and money. Before
// every model round of an agent vigil runs, and before a provider process
// is handed a turn, the core checks the session's budget and the budget of
// the agent's tree and of every tree above it. Over one, the run ends
// budget_exceeded with the budget and the usage named, its notification
// reaches the owner, and the agent is blocked until a person raises the
// budget (SetBudget) or releases it.

// RunBudgetExceeded is the status of a run that a budget ended.
const RunBudgetExceeded RunStatus = "budget_exceeded"

// FailBudget is the kind of a block that a budget set: retrying cannot
// help until the budget is raised.
const FailBudget FailureKind = "budget"

// Budget bounds what a session or an agent tree may use. A zero field sets
// no bound at this level; a negative one, in Config.Budget, means no bound
// at all.
type Budget struct {
	// Tokens bounds input (cached or not) plus output tokens.
	Tokens int64 `json:"tokens,omitempty"`
	// Rounds bounds model rounds (a provider process's turns count one
	// each).
	Rounds int `json:"rounds,omitempty"`
	// Wall bounds run time: the durations of the runs, summed (two runs
	// at once count twice).
	Wall time.Duration `json:"wall,omitempty"`
	// Cost bounds money in micro-USD, over the rounds whose model has a
	// price.
	Cost int64 `json:"cost_micros,omitempty"`
}

// IsZero reports whether the budget sets no bound.
func (b Budget) IsZero() bool { return b == Budget{} }

// Spend is what a session, an agent or an agent tree used.
type Spend struct {
	Usage  chat.Usage    `json:"usage"`
	Rounds int           `json:"rounds"`
	Wall   time.Duration `json:"wall"`
	// Cost is in micro-USD, over the rounds whose model has a price;
	// Unpriced counts the rounds whose model has none (tokens only).
	Cost     int64 `json:"cost_micros"`
	Unpriced int   `json:"unpriced_rounds,omitempty"`
}

// Tokens is the token count a budget bounds: input, cached or not, and
// output.
func (s Spend) Tokens() int64 { return s.Usage.Total() }

func (s *Spend) addRound(u chat.Usage, cost int64, unpriced bool) {
	s.Usage = s.Usage.Add(u)
	s.Rounds++
	s.Cost += cost
	if unpriced {
		s.Unpriced++
	}
}

// Pricer says what a model round cost in micro-USD; ok is false when the
// model has no known price.
type Pricer func(model string, u chat.Usage) (micros int64, ok bool)

// FormatUSD formats micro-USD as dollars: "$0.0123".
func FormatUSD(micros int64) string {
	return fmt.Sprintf("$%.4f", float64(micros)/1e6)
}

// withDefaults returns b with def's bounds for its zero fields; a negative
// bound in def means none.
func (b Budget) withDefaults(def Budget) Budget {
	pick := func(v, d int64) int64 {
		if v != 0 {
			return v
		}
		return max(d, 0)
	}
	return Budget{
		Tokens: pick(b.Tokens, def.Tokens),
		Rounds: int(pick(int64(b.Rounds), int64(def.Rounds))),
		Wall:   time.Duration(pick(int64(b.Wall), int64(def.Wall))),
		Cost:   pick(b.Cost, def.Cost),
	}
}

// within returns b lowered to at most the room left under limit after
// used: a child's budget never exceeds what its owner's tree has left.
func (b Budget) within(limit Budget, used Spend) Budget {
	low := func(v, lim, u int64) int64 {
		if lim <= 0 {
			return v
		}
		room := max(lim-u, 0)
		if v <= 0 || v > room {
			return room
		}
		return v
	}
	return Budget{
		Tokens: low(b.Tokens, limit.Tokens, used.Tokens()),
		Rounds: int(low(int64(b.Rounds), int64(limit.Rounds), int64(used.Rounds))),
		Wall:   time.Duration(low(int64(b.Wall), int64(limit.Wall), int64(used.Wall))),
		Cost:   low(b.Cost, limit.Cost, used.Cost),
	}
}

// over returns the first bound of b that used reaches, in words, or "".
func (b Budget) over(used Spend, wall time.Duration) string {
	switch {
	case b.Tokens > 0 && used.Tokens() >= b.Tokens:
		return fmt.Sprintf("tokens %d of %d", used.Tokens(), b.Tokens)
	case b.Rounds > 0 && used.Rounds >= b.Rounds:
		return fmt.Sprintf("model rounds %d of %d", used.Rounds, b.Rounds)
	case b.Wall > 0 && wall >= b.Wall:
		return fmt.Sprintf("run time %s of %s", wall.Round(time.Second), b.Wall)
	case b.Cost > 0 && used.Cost >= b.Cost:
		return fmt.Sprintf("cost %s of %s", FormatUSD(used.Cost), FormatUSD(b.Cost))
	}
	return ""
}

// describe formats a budget: "tokens 1000000, rounds 500".
func (b Budget) describe() string {
	var parts []string
	if b.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("tokens %d", b.Tokens))
	}
	if b.Rounds > 0 {
		parts = append(parts, fmt.Sprintf("rounds %d", b.Rounds))
	}
	if b.Wall > 0 {
		parts = append(parts, "run time "+b.Wall.String())
	}
	if b.Cost > 0 {
		parts = append(parts, "cost "+FormatUSD(b.Cost))
	}
	if len(parts) == 0 {
		return "no bound"
	}
	return strings.Join(parts, ", ")
}

// under reports whether agent b is a or in a's tree.
func (s *State) under(b, a *Agent) bool {
	for x := b; x != nil; x = s.Agents[x.Owner] {
		if x.ID == a.ID {
			return true
		}
		if x.Owner == "" {
			break
		}
	}
	return false
}

// treeWall is the run time of a's tree, the runs in progress included.
func (s *State) treeWall(a *Agent, now time.Time) time.Duration {
	w := a.Tree.Wall
	for _, id := range s.Order {
		if b := s.Agents[id]; b.Run != nil && s.under(b, a) {
			w += now.Sub(b.Run.Started)
		}
	}
	return w
}

// overBudget returns which budget a's next model round would exceed, in
// words naming the budget and the usage, or "".
func (st *stepper) overBudget(a *Agent) string {
	if st.seed(bugBudgetIgnored) {
		return ""
	}
	if main := st.s.Agents[MainAgent]; main != nil {
		if w := st.s.Session.Budget.over(main.Tree, st.s.treeWall(main, st.now)); w != "" {
			return "the session's budget: " + w
		}
	}
	for x := a; x != nil; x = st.s.Agents[x.Owner] {
		if !x.Budget.IsZero() {
			if w := x.Budget.over(x.Tree, st.s.treeWall(x, st.now)); w != "" {
				return fmt.Sprintf("the budget of %s's agent tree: %s", x.Name, w)
			}
		}
		if x.Owner == "" {
			break
		}
	}
	return ""
}

// budgetStop ends a's run over a budget and blocks the agent until a
// person raises the budget or releases it.
func (st *stepper) budgetStop(a *Agent, why string) { st.budgetStopWith(a, "", why) }

// budgetStopWith is budgetStop for a run that has a reply.
func (st *stepper) budgetStopWith(a *Agent, reply, why string) {
	seq := a.Run.Seq
	st.stopped = true
	st.endRunFailed(a, RunBudgetExceeded, reply, "budget exceeded: "+why, FailBudget)
	if a.Blocked == nil && a.State != AgentClosed && !st.s.Session.Closed {
		st.emit(&AgentBlocked{Agent: a.ID, Block: Block{Run: seq, Reason: "budget exceeded: " + why, Kind: FailBudget, Since: st.now}})
	}
}

// SetBudget replaces the budget of the session (Agent empty) or of an
// agent's tree. A tree's budget never exceeds what its owner's tree has
// left.
type SetBudget struct {
	Agent  string
	Budget Budget
	By     string
}

func (SetBudget) inputName() string { return "set-budget" }

// BudgetSet records a new budget for the session or an agent's tree.
type BudgetSet struct {
	Agent  AgentID `json:"agent,omitempty"`
	Budget Budget  `json:"budget"`
	By     string  `json:"by,omitempty"`
}

// Type implements Body: the name of the event.
func (*BudgetSet) Type() string { return "budget.set" }
func (e *BudgetSet) apply(s *State, _ time.Time) {
	if e.Agent == "" {
		s.Session.Budget = e.Budget
		return
	}
	s.Agents[e.Agent].Budget = e.Budget
}

func (st *stepper) setBudget(in SetBudget) {
	b := in.Budget
	if b.Tokens < 0 || b.Rounds < 0 || b.Wall < 0 || b.Cost < 0 {
		st.fail(CodeInvalid, "a budget's bounds are positive, or zero for none")
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	if in.Agent == "" {
		st.emit(&BudgetSet{Budget: b, By: by})
	} else {
		a := st.s.Agent(in.Agent)
		if a == nil {
			st.fail(CodeNotFound, "no agent %q", in.Agent)
			return
		}
		if o := st.s.Agents[a.Owner]; o != nil && !o.Budget.IsZero() {
			b = b.within(o.Budget, o.Tree)
		}
		st.emit(&BudgetSet{Agent: a.ID, Budget: b, By: by})
	}
	// A person raised a bound: the agents a budget blocked run again (a
	// bound still reached blocks them again at their next round).
	for _, id := range st.s.Order {
		if a := st.s.Agents[id]; a.Blocked != nil && a.Blocked.Kind == FailBudget {
			st.release(a, by+" set a budget")
		}
	}
}

// childBudget lowers a budget asked for a new subagent of owner to the
// room the owner's tree and the session have left.
func (st *stepper) childBudget(owner *Agent, b Budget) Budget {
	if main := st.s.Agents[MainAgent]; main != nil {
		b = b.within(st.s.Session.Budget, main.Tree)
	}
	for x := owner; x != nil; x = st.s.Agents[x.Owner] {
		if !x.Budget.IsZero() {
			b = b.within(x.Budget, x.Tree)
		}
		if x.Owner == "" {
			break
		}
	}
	return b
}

// roundCost prices a model round of a.
func (st *stepper) roundCost(a *Agent, u chat.Usage) (int64, bool) {
	if st.cfg.Price == nil || u == (chat.Usage{}) {
		return 0, u == (chat.Usage{})
	}
	_, model := st.modelOf(a)
	return st.cfg.Price(model, u)
}
