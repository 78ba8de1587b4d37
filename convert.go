package vigil

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/permission"
	"github.com/vigilrun/vigil/store"
)

// The copies from the core's state into the read types. They run on the
// session's goroutine; every slice, message and raw JSON value is new, so
// nothing the caller holds changes when the state does, and nothing the
// caller changes reaches the session. (An Event's Data is the exception:
// see Event.)

func ids[T ~string, U ~string](in []U) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = T(v)
	}
	return out
}

func budgetOut(b core.Budget) Budget {
	return Budget{Tokens: b.Tokens, Rounds: b.Rounds, Wall: b.Wall, CostMicros: b.Cost}
}

func budgetIn(b Budget) core.Budget {
	return core.Budget{Tokens: b.Tokens, Rounds: b.Rounds, Wall: b.Wall, Cost: b.CostMicros}
}

func spendOut(s core.Spend) Spend {
	return Spend{Usage: s.Usage, Rounds: s.Rounds, Wall: s.Wall, CostMicros: s.Cost, Unpriced: s.Unpriced}
}

func permissionsOut(p core.Permissions) Permissions {
	return Permissions{Mode: PermissionMode(p.Mode), Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
}

func permissionsIn(p Permissions) core.Permissions {
	return core.Permissions{Mode: core.PermissionMode(p.Mode), Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
}

func sessionOut(s *core.Session) Session {
	return Session{
		ID: SessionID(s.ID), Title: s.Title, Cwd: s.Cwd, Dirs: slices.Clone(s.Dirs), Provider: s.Provider,
		Model: s.Model, SubagentModel: s.SubagentModel, Permissions: permissionsOut(s.Permissions), Owner: s.Owner,
		Budget: budgetOut(s.Budget), Created: s.Created, Closed: s.Closed, CloseReason: s.CloseReason,
	}
}

func summaryOut(r store.SessionRow) SessionSummary {
	return SessionSummary{
		ID: SessionID(r.ID), Title: r.Title, Owner: r.Owner, Provider: r.Provider, Model: r.Model, Cwd: r.Cwd,
		Closed: r.Closed, Created: r.Created, Updated: r.Updated, LastSeq: r.LastSeq,
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, NeedsYou: r.NeedsYou,
	}
}

func holdOut(h *core.Hold) *Hold {
	if h == nil {
		return nil
	}
	return &Hold{By: h.By, Reason: h.Reason, Since: h.Since}
}

func noteKeyOut(k core.NoteKey) NotificationKey {
	return NotificationKey{Task: TaskID(k.Task), Run: k.Run}
}

func itemOut(s *core.State, a *core.Agent, it *core.Item, pos int) InboxItem {
	v := InboxItem{
		ID: ItemID(it.ID), Agent: AgentID(it.Agent), Kind: ItemKind(it.Kind), Priority: Priority(it.Priority),
		From: it.From, Text: it.Text, Msg: MessageID(it.Msg), Timer: string(it.Timer), Gate: it.Gate,
		Enqueued: it.Enqueued, Attempts: it.Attempts, AgentName: a.Name, Position: pos,
		Held: s.Hold != nil && it.Holdable(),
	}
	if it.Note != nil {
		k := noteKeyOut(*it.Note)
		v.Note = &k
		if n := s.Note(*it.Note); n != nil && it.Kind == core.KindNotification {
			v.Text = core.NoteSummary(n)
		}
	}
	return v
}

func inboxOut(s *core.State, a *core.Agent) []InboxItem {
	out := make([]InboxItem, len(a.Inbox))
	for i, it := range a.Inbox {
		out[i] = itemOut(s, a, it, i)
	}
	return out
}

func runSummaryOut(a *core.Agent, r core.RunSummary) Run {
	return Run{
		Agent: AgentID(a.ID), AgentName: a.Name, Seq: r.Seq, Kind: ItemKind(r.Kind), Status: RunStatus(r.Status),
		Started: r.Started, Ended: r.Ended, Reply: r.Reply, Error: r.Error, Items: ids[ItemID](r.Items),
		Answered: ids[MessageID](r.Answered), Returned: ids[ItemID](r.Returned), Usage: r.Usage, Calls: r.Calls,
		CostMicros: r.Cost, Unpriced: r.Unpriced,
	}
}

func runOut(a *core.Agent, r *core.Run) *Run {
	if r == nil {
		return nil
	}
	v := &Run{
		Agent: AgentID(a.ID), AgentName: a.Name, Seq: r.Seq, Kind: ItemKind(r.Kind), Status: RunRunning,
		Started: r.Started, Items: ids[ItemID](r.Items), Answered: ids[MessageID](r.Answered),
		Usage: r.Usage, Calls: r.Calls, CostMicros: r.Cost, Unpriced: r.Unpriced, Round: r.Round,
	}
	if c := r.Call; c != nil {
		v.Call = &ModelCall{ID: string(c.ID), Round: c.Round, State: string(c.State), Started: c.Started, Attempt: c.Attempt,
			RetryUntil: c.RetryUntil, RetryReason: c.RetryReason, Purpose: c.Purpose, Reason: c.Reason}
	}
	for _, t := range r.Tools {
		v.Tools = append(v.Tools, ToolCall{UseID: t.UseID, Name: t.Name, Input: slices.Clone(t.Input), Wait: string(t.Wait),
			Child: AgentID(t.Child), WaitFor: TaskID(t.WaitFor), Msg: MessageID(t.Msg), Approval: ApprovalID(t.Approval),
			Deadline: t.Deadline, Started: t.Started, Done: t.Done, Result: t.Result, IsError: t.IsError})
	}
	return v
}

func agentOut(s *core.State, a *core.Agent) Agent {
	v := Agent{
		ID: AgentID(a.ID), Name: a.Name, Description: a.Description, Owner: AgentID(a.Owner), Task: TaskID(a.Task),
		Depth: a.Depth, Model: a.Model, Provider: a.Provider, Driver: Driver(a.Driver), State: AgentState(a.State),
		Created: a.Created, LastActive: a.LastActive, Runs: len(a.Runs), Inbox: inboxOut(s, a), Run: runOut(a, a.Run),
		LiveTasks: ids[TaskID](s.LiveTasks(a.ID)), Usage: a.Usage, Spent: spendOut(a.Spent), Tree: spendOut(a.Tree),
		Budget: budgetOut(a.Budget), ContextTokens: core.ContextTokens(s, a), Why: whyOut(core.WhyOf(s, a)),
	}
	if g := a.Gate; g != nil {
		v.Gate = &Gate{Gen: g.Gen, Item: ItemID(g.Item), Opened: g.Opened, Deadline: g.Deadline}
	}
	if r := a.Retry; r != nil {
		v.Retry = &Retry{Attempt: r.Attempt, Max: r.Max, At: r.At, Run: r.Run, Reason: r.Reason, Kind: string(r.Kind)}
	}
	if b := a.Blocked; b != nil {
		v.Blocked = &Block{Run: b.Run, Reason: b.Reason, Kind: string(b.Kind), Since: b.Since}
	}
	if a.Compacted != nil {
		v.Compactions = a.Compacted.Seq
	}
	return v
}

func whyOut(w core.Why) Why {
	return Why{Kind: w.Kind, Text: w.Text, Since: w.Since, Until: w.Until, ClearsOn: w.ClearsOn, NeedsYou: w.NeedsYou,
		HoldsUp: ids[ItemID](w.HoldsUp)}
}

func agentDetailOut(s *core.State, a *core.Agent) *AgentDetail {
	d := &AgentDetail{Agent: agentOut(s, a), Transcript: make([]chat.Message, len(a.Transcript))}
	d.RunHistory = runHistory(a)
	for i, m := range a.Transcript {
		d.Transcript[i] = m.Clone()
	}
	return d
}

func runHistory(a *core.Agent) []Run {
	out := make([]Run, 0, len(a.Runs))
	for _, r := range a.Runs {
		out = append(out, runSummaryOut(a, r))
	}
	return out
}

func taskOut(t *core.Task) Task {
	v := Task{
		ID: TaskID(t.ID), Kind: TaskKind(t.Kind), Owner: AgentID(t.Owner), Agent: AgentID(t.Agent), Description: t.Description,
		Prompt: t.Prompt, Command: t.Command, Background: t.Background, Status: TaskStatus(t.Status), Started: t.Started,
		Ended: t.Ended, OutputPath: t.OutputPath, Timeout: t.Timeout, OutputTail: t.OutputTail, External: t.External,
	}
	if t.ExitCode != nil {
		c := *t.ExitCode
		v.ExitCode = &c
	}
	return v
}

func approvalOut(p *core.Approval) Approval {
	v := Approval{ID: ApprovalID(p.ID), Agent: AgentID(p.Agent), Run: p.Run, UseID: p.UseID, Tool: p.Tool,
		Input: slices.Clone(p.Input), Reason: p.Reason, Asked: p.Asked, Deadline: p.Deadline}
	if rule, err := permission.RuleFor(p.Tool, p.Input); err == nil {
		v.AlwaysRule = rule
		v.Grants, v.Arbitrary = permission.Grants(rule)
	}
	return v
}

func messageOut(s *core.State, m *core.Msg) Message {
	v := Message{ID: MessageID(m.ID), From: m.From, To: AgentID(m.To), Text: m.Text, Priority: Priority(m.Priority),
		Sent: m.Sent, Outcome: Outcome(m.Outcome), Reason: m.Reason, Run: m.Run, Item: ItemID(m.Item), AnsweredBy: m.AnsweredBy}
	var out struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal([]byte(core.RenderOutcome(s, m)), &out) == nil {
		v.Detail = out.Detail
	}
	return v
}

func noteOut(n *core.Note) Notification {
	v := Notification{
		Key: noteKeyOut(n.Key), Owner: AgentID(n.Owner), Agent: AgentID(n.Agent), AgentName: n.AgentName, Kind: TaskKind(n.Kind),
		Status: n.Status, Reply: n.Reply, Error: n.Error, Output: n.Output, OutputPath: n.OutputPath,
		Answered: ids[MessageID](n.Answered), LiveTasks: ids[TaskID](n.LiveTasks), Usage: n.Usage, CostMicros: n.Cost,
		Priced: n.Priced, Duration: n.Duration, Written: n.Written, Delivery: Delivery(n.Delivery), Item: ItemID(n.Item),
		DeliveredRun: n.DeliveredRun, DeliverBy: n.DeliverBy, Dropped: n.Dropped,
	}
	if n.ExitCode != nil {
		c := *n.ExitCode
		v.ExitCode = &c
	}
	return v
}

func statusesOut(in []core.InboxStatus) []InboxStatus {
	out := make([]InboxStatus, len(in))
	for i, st := range in {
		out[i] = InboxStatus{Agent: AgentID(st.Agent), Name: st.Name, State: st.State, Items: st.Items, Held: st.Held,
			Draining: st.Draining, Kind: st.Kind, Reason: st.Reason, Until: st.Until, ClearsOn: st.ClearsOn}
	}
	return out
}

func progressOut(in []core.Progress) []Progress {
	out := make([]Progress, len(in))
	for i, p := range in {
		out[i] = Progress{Agent: AgentID(p.Agent), Name: p.Name, Run: p.Run, Waiting: p.Waiting, Since: p.Since, Stalled: p.Stalled}
	}
	return out
}

// stallAfter is when a run in progress reads "no progress for …".
const stallAfter = time.Minute

func detailOut(s *core.State, now time.Time, p *SessionGetParams) *SessionDetail {
	d := &SessionDetail{
		Session: sessionOut(&s.Session), Seq: s.Seq, Hold: holdOut(s.Hold), Quiescent: s.Quiescent(),
		Agents: make([]Agent, 0, len(s.Order)), Tasks: make([]Task, 0, len(s.TaskOrder)), Approvals: approvalsOut(s),
		Status: statusesOut(core.Status(s)), NotificationCount: len(s.NoteOrder), MessageCount: len(s.Msgs),
		Progress: progressOut(core.RunProgress(s, now, stallAfter)),
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		v := agentOut(s, a)
		if p != nil && p.Runs {
			v.RunHistory = runHistory(a)
		}
		d.Agents = append(d.Agents, v)
	}
	for _, t := range s.Timers {
		d.Timers = append(d.Timers, PendingTimer{ID: string(t.ID), Agent: AgentID(t.Agent), At: t.At, Prompt: t.Prompt})
	}
	slices.SortFunc(d.Timers, func(a, b PendingTimer) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return compareIDs(a.ID, b.ID)
	})
	for _, id := range s.TaskOrder {
		d.Tasks = append(d.Tasks, taskOut(s.Tasks[id]))
	}
	if main := s.Agents[core.MainAgent]; main != nil {
		d.Spent = spendOut(main.Tree)
	}
	if len(s.Drops) > 0 {
		d.Drops = make(map[string]int, len(s.Drops))
		for k, v := range s.Drops {
			d.Drops[k] = v
		}
	}
	if p != nil && p.Messages {
		d.Messages = messagesOut(s)
	}
	if p != nil && p.Notifications {
		d.Notifications = notesOut(s)
	}
	return d
}

func approvalsOut(s *core.State) []Approval {
	out := make([]Approval, 0, len(s.Approvals))
	for _, p := range s.Approvals {
		out = append(out, approvalOut(p))
	}
	slices.SortFunc(out, func(a, b Approval) int { return compareIDs(string(a.ID), string(b.ID)) })
	return out
}

func messagesOut(s *core.State) []Message {
	out := make([]Message, 0, len(s.Msgs))
	for _, m := range s.Msgs {
		out = append(out, messageOut(s, m))
	}
	slices.SortFunc(out, func(a, b Message) int { return compareIDs(string(a.ID), string(b.ID)) })
	return out
}

func notesOut(s *core.State) []Notification {
	out := make([]Notification, 0, len(s.NoteOrder))
	for _, k := range s.NoteOrder {
		if n := s.Note(k); n != nil {
			out = append(out, noteOut(n))
		}
	}
	return out
}

func statusOut(s *core.State, now time.Time) *Status {
	v := &Status{Session: SessionID(s.Session.ID), Closed: s.Session.Closed, Hold: holdOut(s.Hold), Quiescent: s.Quiescent(),
		Inboxes: statusesOut(core.Status(s)), Progress: progressOut(core.RunProgress(s, now, stallAfter)),
		Budget: budgetOut(s.Session.Budget), Agents: make([]AgentWhy, 0, len(s.Order))}
	for _, id := range s.Order {
		a := s.Agents[id]
		v.Agents = append(v.Agents, AgentWhy{Agent: AgentID(a.ID), Name: a.Name, State: AgentState(a.State), Why: whyOut(core.WhyOf(s, a))})
	}
	if main := s.Agents[core.MainAgent]; main != nil {
		v.Spent = spendOut(main.Tree)
	}
	return v
}

// eventOut makes a stored event a reader's, without what the store keeps
// of processes and incarnations.
func eventOut(rec store.Record) Event {
	return Event{Session: SessionID(rec.Session), Seq: rec.Seq, Global: rec.Global, At: rec.At, Type: rec.Type, Data: eventData(rec.Type, rec.Data)}
}

// eventData is an event's body as readers get it: for the events that
// record a process or an incarnation, a new body without those fields
// (pid, start ticks, cgroup, incarnation), which only the store and the
// recovery of this node need. provider.process says instead whether the
// process runs ("running"), which its pid of 0 said.
func eventData(typ string, data []byte) json.RawMessage {
	var internal []string
	switch typ {
	case "task.process", "provider.process":
		internal = []string{"pid", "start_ticks", "cgroup"}
	case "recovered":
		internal = []string{"incarnation"}
	default:
		// Shared with every other reader of the event, which the live
		// fan-out hands to each subscriber: a copy per subscriber cost a
		// tenth of the SSE fan-out's throughput (BenchmarkSSEFanout).
		// Capped, so that an append never writes into another's bytes.
		return data[:len(data):len(data)]
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return bytes.Clone(data)
	}
	if typ == "provider.process" {
		// A pid of 0 records that the process ended.
		fields["running"] = json.RawMessage(strconv.FormatBool(string(fields["pid"]) != "0" && len(fields["pid"]) > 0))
	}
	for _, k := range internal {
		delete(fields, k)
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return bytes.Clone(data)
	}
	return out
}

// compareIDs orders core ids such as "m2" < "m10".
func compareIDs(a, b string) int {
	na, ea := strconv.Atoi(a[min(1, len(a)):])
	nb, eb := strconv.Atoi(b[min(1, len(b)):])
	if ea == nil && eb == nil && na != nb {
		if na < nb {
			return -1
		}
		return 1
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
