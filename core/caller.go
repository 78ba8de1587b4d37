package core

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/text"
)

// DriverCaller: the agent is an outside caller (an MCP client) that never
// runs a model. vigil keeps its inbox durable; the caller reads it with a
// wait and acknowledges what it read with CallerAck, which delivers those
// items in a run of the caller. Nothing is lost across disconnects or
// restarts: an item stays in the inbox until acknowledged.
const DriverCaller Driver = "caller"

// callerDriver is an outside caller (DriverCaller): vigil never starts its
// runs; it reads its inbox and acknowledges what it read (CallerAck), in a
// run that ends at once. Otherwise it is the loop's.
type callerDriver struct{ loopDriver }

// schedules: the caller takes its items with CallerAck.
func (callerDriver) schedules(*Agent) bool { return false }

// tell: a message waits in the inbox for the caller's next wait; it is
// never a run of ours.
func (callerDriver) tell(_ *stepper, _ *Agent, m *Msg, _ Priority) {
	m.Outcome, m.Reason = OutcomeJoined, "queued for the caller's next wait"
}

// inFlight: a caller's run ends in the step that starts it.
func (callerDriver) inFlight(*stepper, *Agent) []Effect { return nil }

// SpawnAgent starts a background subagent owned by the main agent, as the
// Agent tool with run_in_background would, for a caller outside the
// session.
type SpawnAgent struct {
	Name        string
	Description string
	Prompt      string
	Model       string
	Provider    string
	// Budget bounds the new agent's tree, within what the session has
	// left; zero sets no bound of its own.
	Budget Budget
}

// CallerAck delivers the caller's inbox items it has read: they leave the
// inbox in a run of the caller that ends at once.
type CallerAck struct {
	Agent AgentID
	Items []ItemID
}

func (SpawnAgent) inputName() string { return "spawn-agent" }
func (CallerAck) inputName() string  { return "caller-ack" }

func (st *stepper) spawnAgent(in SpawnAgent) {
	main := st.s.Agents[MainAgent]
	switch {
	case st.s.Session.Closed:
		st.fail(CodeClosed, "session is closed")
		return
	case strings.TrimSpace(in.Prompt) == "":
		st.fail(CodeInvalid, "prompt is required")
		return
	case len(st.s.Agents) >= st.cfg.MaxAgents:
		st.fail(CodeConflict, "this session has reached its limit of %d agents", st.cfg.MaxAgents)
		return
	case in.Name != "" && (in.Name == "main" || in.Name == "user" || st.s.Agent(in.Name) != nil):
		st.fail(CodeConflict, "an agent named %q exists", in.Name)
		return
	}
	id := AgentID("a" + strconv.Itoa(st.s.Counters.Agent+1))
	taskID := TaskID("t" + strconv.Itoa(st.s.Counters.Task+1))
	name := in.Name
	if name == "" {
		name = string(id)
	}
	desc := in.Description
	if desc == "" {
		desc = text.FirstLine(in.Prompt, 60)
	}
	model := in.Model
	if model == "" {
		model = st.s.Session.SubagentModel
	}
	prov := in.Provider
	if prov == "" {
		prov = main.Provider
	}
	b := in.Budget
	if b.Tokens < 0 || b.Rounds < 0 || b.Wall < 0 || b.Cost < 0 {
		st.fail(CodeInvalid, "a budget's bounds are positive, or zero for none")
		return
	}
	if !b.IsZero() {
		b = st.childBudget(main, b)
	}
	st.emit(&AgentCreated{Agent: Agent{
		ID: id, Name: name, Description: desc, Owner: main.ID, Task: taskID, Depth: main.Depth + 1,
		Model: model, Provider: prov, Driver: DriverLoop, Budget: b,
	}})
	st.emit(&TaskStarted{Task: Task{
		ID: taskID, Kind: TaskAgent, Owner: main.ID, Agent: id, Description: desc, Prompt: in.Prompt, Background: true,
		Status: TaskIdle, Incarnation: st.s.Incarnation,
	}})
	st.enqueue(st.s.Agents[id], Item{Kind: KindSpawn, Priority: PriorityNext, From: string(main.ID), Text: in.Prompt})
	st.out.Agent = id
	st.out.Task = taskID
}

func (st *stepper) callerAck(in CallerAck) {
	a := st.s.Agents[in.Agent]
	if a == nil || a.Driver != DriverCaller {
		st.fail(CodeInvalid, "agent %q is not a caller", in.Agent)
		return
	}
	var items []*Item
	for _, id := range in.Items {
		i := slices.IndexFunc(a.Inbox, func(it *Item) bool { return it.ID == id })
		if i < 0 {
			continue // acknowledged before: acknowledging twice is harmless
		}
		items = append(items, a.Inbox[i])
	}
	if len(items) == 0 {
		return
	}
	ids, notes := itemIDs(items)
	seq := len(a.Runs) + 1
	st.emit(&RunStarted{Agent: a.ID, Seq: seq, Kind: RunKind(items[0].Kind), Items: ids, Notes: notes})
	st.releaseGatesOf(a, items)
	// What the caller read is its transcript.
	st.emit(&TranscriptAppended{Agent: a.ID, Message: chat.Message{Role: chat.RoleUser, Content: st.renderItems(items)}})
	st.seen(a) // the caller read them: its acknowledgement says so
	st.emit(&RunEnded{Agent: a.ID, Seq: seq, Status: RunCompleted, Reply: fmt.Sprintf("the caller acknowledged %d item(s)", len(ids))})
}
