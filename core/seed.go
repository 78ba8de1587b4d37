package core

// Seed bugs (DESIGN section 3). A build with the seedbugs tag can put back
// one of the bugs of the seed reports (shared/seeds) or of later issues, so
// that the simulator shows its checks fail when a rule is broken:
//
//	go build -tags seedbugs -o /tmp/vigil-bugs ./cmd/vigil
//	/tmp/vigil-bugs sim --list-bugs
//	/tmp/vigil-bugs sim --seeds 300 --inject notified-flag --expect-violation
//
// The core marks each place a bug changes with st.seed(bug), or calls a
// seed hook (st.seedXxx) where a bug replaces a step. In the default build
// (seed_off.go) every one of them is a constant the compiler removes, and
// the bugs' own state, events, inputs and effects do not exist: the product
// has no notified flag. They live in seed_on.go.

// seedBug names a seed bug, as vigil sim --inject takes it.
type seedBug string

// The seed bugs.
const (
	// bugNotifiedFlag (000): a run's stop notification is written in a
	// later step than its end, guarded by one boolean flag per task that a
	// follow-on run's registration clears.
	bugNotifiedFlag seedBug = "notified-flag"
	// bugOneshotDrain (003): the inbox is drained only on the edge of an
	// enqueue; a pass that finds the agent busy is never repeated.
	bugOneshotDrain seedBug = "oneshot-drain"
	// bugHeldContinuation (002): a continuation is queued like a user
	// prompt (so a hold holds it) and its gate is released only when it
	// drains; later wakes are swallowed while the gate is set.
	bugHeldContinuation seedBug = "held-continuation"
	// bugProviderForever (002, seed 610484): what vigil expects of a
	// provider process — a mirrored subagent's run to end, a turn to end,
	// a notification to be delivered — has no deadline, so a process that
	// never does it leaves the run "running" and the notification owed
	// forever.
	bugProviderForever seedBug = "provider-forever"
	// bugConsumedByFailedRun (issue 18): an item counts as delivered when a
	// run takes it, so a run that fails before its model sees it loses it.
	bugConsumedByFailedRun seedBug = "consumed-by-failed-run"
	// bugSenderWaits (issue 10): a SendMessage to an agent whose model
	// round is in flight keeps the sender's tool call open until that
	// round answers, so one agent waits on another's model.
	bugSenderWaits seedBug = "sender-waits"
	// bugBudgetIgnored (issue 10): budgets are recorded but never checked,
	// so a loop runs on past them.
	bugBudgetIgnored seedBug = "budget-ignored"
	// bugLedgerForgets (issue 10): the task ledger given to the model
	// after a compaction leaves out the newest live task, so the model
	// may forget it or start it again.
	bugLedgerForgets seedBug = "ledger-forgets"
	// bugQuiescentOwed (issue 17's stop): quiescence ignores the
	// notifications a provider process still owes, so a caller that closes
	// a quiescent session drops them.
	bugQuiescentOwed seedBug = "quiescent-owed"
	// bugWhyOverlap ("status is wrong when states overlap"): what a run
	// does hides a pending approval of its agent, so an agent that waits
	// for a person reads as running a tool, and nobody is told it needs
	// them.
	bugWhyOverlap seedBug = "why-overlap"
	// bugRoundLimitIgnored (issue 15): a prompt's bound on its run's model
	// rounds (Claude Code's --max-turns) is recorded but never checked, so
	// the run goes on past it.
	bugRoundLimitIgnored seedBug = "round-limit-ignored"
)
