package server

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// The request and response bodies of the API. openapi.yaml documents the
// same shapes; the CLI client decodes them.

// CreateSessionRequest is the body of POST /api/sessions.
type CreateSessionRequest struct {
	// Prompt, when set, is queued as the first user prompt.
	Prompt string `json:"prompt,omitempty"`
	// Title defaults to the prompt's first line.
	Title    string `json:"title,omitempty"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	// SubagentModel is the model of subagents that ask for none.
	SubagentModel string `json:"subagent_model,omitempty"`
	// Cwd is the working directory of the session's tools; it must exist on
	// the server.
	Cwd         string            `json:"cwd,omitempty"`
	Dirs        []string          `json:"dirs,omitempty"`
	Permissions *core.Permissions `json:"permissions,omitempty"`
	// Budget bounds the session; unset bounds take the server's defaults.
	Budget *BudgetRequest `json:"budget,omitempty"`
}

// BudgetRequest is a budget as a client writes it (DESIGN rule 10): the
// session's, or with Agent that of an agent's tree. Zero or absent bounds
// set no bound at that level (on create: the server's default).
type BudgetRequest struct {
	Agent       string  `json:"agent,omitempty"`
	Tokens      int64   `json:"tokens,omitempty"`
	Rounds      int     `json:"rounds,omitempty"`
	WallSeconds int64   `json:"wall_seconds,omitempty"`
	CostUSD     float64 `json:"cost_usd,omitempty"`
}

// Bounds a budget may set: beyond them the core's arithmetic (cost in
// millionths of a dollar, wall time in nanoseconds) would overflow.
const (
	maxBudgetWallSeconds = 100 * 365 * 24 * 3600
	maxBudgetCostUSD     = 1e9
)

// budget checks and converts the request; prefix is its place in the body
// ("budget." in a create request).
func (b *BudgetRequest) budget(prefix string) (core.Budget, error) {
	if b == nil {
		return core.Budget{}, nil
	}
	switch {
	case b.Tokens < 0:
		return core.Budget{}, badRequest("%stokens=%d: want 0 (no bound) or more", prefix, b.Tokens)
	case b.Rounds < 0:
		return core.Budget{}, badRequest("%srounds=%d: want 0 (no bound) or more", prefix, b.Rounds)
	case b.WallSeconds < 0 || b.WallSeconds > maxBudgetWallSeconds:
		return core.Budget{}, badRequest("%swall_seconds=%d: want 0 (no bound) to %d", prefix, b.WallSeconds, maxBudgetWallSeconds)
	case !(b.CostUSD >= 0 && b.CostUSD <= maxBudgetCostUSD): // NaN too
		return core.Budget{}, badRequest("%scost_usd=%v: want 0 (no bound) to %g", prefix, b.CostUSD, float64(maxBudgetCostUSD))
	}
	return core.Budget{Tokens: b.Tokens, Rounds: b.Rounds, Wall: time.Duration(b.WallSeconds) * time.Second, Cost: int64(math.Round(b.CostUSD * 1e6))}, nil
}

// BudgetView is a scope's budget and what it used.
type BudgetView struct {
	Agent  string      `json:"agent,omitempty"`
	Budget core.Budget `json:"budget"`
	Spent  core.Spend  `json:"spent"`
}

// IsolationView is how a node confines agents' commands (its sandbox) and
// keeps their processes within reach.
type IsolationView struct {
	Sandbox     string `json:"sandbox"`
	Network     bool   `json:"network"`
	Kernel      string `json:"kernel"`
	Cgroups     bool   `json:"cgroups"`
	Containment string `json:"containment"`
	Warning     string `json:"warning,omitempty"`
}

func isolationView(iso vigil.Isolation) IsolationView {
	return IsolationView{Sandbox: string(iso.Sandbox), Network: iso.Network, Kernel: iso.Kernel,
		Cgroups: iso.Containment.Cgroups, Containment: iso.Containment.Note, Warning: iso.Warning}
}

// PromptRequest is the body of POST .../prompts.
type PromptRequest struct {
	Text string `json:"text"`
	// Priority is now, next (default) or later.
	Priority core.Priority `json:"priority,omitempty"`
}

// PromptResult says which inbox item a prompt became.
type PromptResult struct {
	Session core.SessionID `json:"session"`
	Item    core.ItemID    `json:"item"`
}

// MessageRequest is the body of POST .../agents/{agent}/messages.
type MessageRequest struct {
	Text     string        `json:"text"`
	Priority core.Priority `json:"priority,omitempty"`
}

// HoldRequest is the optional body of POST .../hold.
type HoldRequest struct {
	Reason string `json:"reason,omitempty"`
}

// MoveRequest is the body of POST .../inbox/{item}/move.
type MoveRequest struct {
	Index *int `json:"index"`
}

// ApprovalRequest is the body of POST .../approvals/{approval}.
type ApprovalRequest struct {
	Allow *bool `json:"allow"`
	// Always, with allow, adds a session rule that allows the same call
	// again, and answers the pending requests it allows.
	Always bool `json:"always,omitempty"`
	// Save, with always, also keeps the rule for the session's working
	// directory, for later sessions there.
	Save   bool   `json:"save,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}

// SessionList is the body of GET /api/sessions.
type SessionList struct {
	Sessions []store.SessionRow `json:"sessions"`
}

// SessionDetail is a session with its agents, tasks, pending approvals,
// hold and the status of every non-empty inbox.
type SessionDetail struct {
	Session       core.Session       `json:"session"`
	Seq           int64              `json:"seq"`
	Hold          *core.Hold         `json:"hold,omitempty"`
	Quiescent     bool               `json:"quiescent"`
	Agents        []AgentView        `json:"agents"`
	Tasks         []*core.Task       `json:"tasks"`
	Approvals     []*core.Approval   `json:"approvals"`
	Status        []core.InboxStatus `json:"status"`
	Notifications int                `json:"notifications"`
	Messages      int                `json:"messages"`
	Drops         map[string]int     `json:"drops,omitempty"`
	// Progress says what each run in progress waits on, since when, and
	// "no progress for …" past a minute (DESIGN rule 10).
	Progress []core.Progress `json:"progress"`
	// Spent is what the session used; its budget is Session.Budget.
	Spent core.Spend `json:"spent"`
}

// AgentView is an agent without its transcript: state, counts, inbox, the
// run in progress and last activity.
type AgentView struct {
	ID          core.AgentID    `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Owner       core.AgentID    `json:"owner,omitempty"`
	Task        core.TaskID     `json:"task,omitempty"`
	Depth       int             `json:"depth"`
	Model       string          `json:"model,omitempty"`
	Provider    string          `json:"provider,omitempty"`
	Driver      core.Driver     `json:"driver"`
	State       core.AgentState `json:"state"`
	Created     time.Time       `json:"created"`
	LastActive  time.Time       `json:"last_active"`
	Runs        int             `json:"runs"`
	Inbox       []*core.Item    `json:"inbox"`
	Run         *core.Run       `json:"run,omitempty"`
	Gate        *core.Gate      `json:"gate,omitempty"`
	// Retry and Blocked say why an idle agent with items does not run:
	// backing off after a failed run, or blocked until a person retries.
	Retry     *core.Retry   `json:"retry,omitempty"`
	Blocked   *core.Block   `json:"blocked,omitempty"`
	LiveTasks []core.TaskID `json:"live_tasks,omitempty"`
	Usage     chat.Usage    `json:"usage"`
	// Spent is what the agent used, Tree what its tree used, Budget its
	// tree's own bound (the session's is on the session).
	Spent  core.Spend  `json:"spent"`
	Tree   core.Spend  `json:"tree"`
	Budget core.Budget `json:"budget,omitzero"`
	// ContextTokens estimates what its next model round sends;
	// Compactions counts its context compactions.
	ContextTokens int64 `json:"context_tokens"`
	Compactions   int   `json:"compactions,omitempty"`
}

// AgentDetail is an agent with its run history and transcript.
type AgentDetail struct {
	AgentView
	RunHistory []core.RunSummary `json:"run_history"`
	Transcript []chat.Message    `json:"transcript"`
}

// AgentList is the body of GET .../agents.
type AgentList struct {
	Agents []AgentView `json:"agents"`
}

// RunView is one run of an agent, ended or in progress (status running).
type RunView struct {
	Agent     core.AgentID `json:"agent"`
	AgentName string       `json:"agent_name"`
	core.RunSummary
}

// RunList is the body of GET .../runs.
type RunList struct {
	Runs []RunView `json:"runs"`
}

// TaskList is the body of GET .../tasks.
type TaskList struct {
	Tasks []*core.Task `json:"tasks"`
}

// TaskOutput is a chunk of a shell task's output file.
type TaskOutput struct {
	Task   core.TaskID     `json:"task"`
	Status core.TaskStatus `json:"status"`
	Offset int64           `json:"offset"`
	// Next is the offset to read from next.
	Next int64  `json:"next"`
	Data string `json:"data"`
	// Encoding is "base64" when the bytes are not valid UTF-8 (binary
	// output, or a read that cut a character): Data is then base64.
	Encoding string `json:"encoding,omitempty"`
}

// InboxItem is a queued item with its agent, position and whether a user
// hold keeps it.
type InboxItem struct {
	core.Item
	AgentName string `json:"agent_name"`
	Position  int    `json:"position"`
	Held      bool   `json:"held"`
}

// InboxList is the body of GET .../inbox.
type InboxList struct {
	Items []InboxItem `json:"items"`
}

// StatusView lists every non-empty inbox and why it is not draining.
type StatusView struct {
	Session   core.SessionID     `json:"session"`
	Closed    bool               `json:"closed"`
	Hold      *core.Hold         `json:"hold,omitempty"`
	Quiescent bool               `json:"quiescent"`
	Inboxes   []core.InboxStatus `json:"inboxes"`
	// Progress is what each run in progress waits on and since when.
	Progress []core.Progress `json:"progress"`
	// Budget and Spent are the session's budget and what it used.
	Budget core.Budget `json:"budget"`
	Spent  core.Spend  `json:"spent"`
	// Isolation says how this node confines and contains what the
	// session's agents run.
	Isolation IsolationView `json:"isolation"`
}

// MessageList is the body of GET .../messages.
type MessageList struct {
	Messages []*core.Msg `json:"messages"`
}

// NoteList is the body of GET .../notifications.
type NoteList struct {
	Notifications []*core.Note `json:"notifications"`
}

// ApprovalList is the body of GET .../approvals.
type ApprovalList struct {
	Approvals []*core.Approval `json:"approvals"`
}

// Event is the data of one Server-Sent Event: a committed event of a
// session. The SSE id is Seq on a session's stream and Global on the
// stream of all sessions.
type Event struct {
	Session string          `json:"session"`
	Seq     int64           `json:"seq"`
	Global  int64           `json:"global"`
	At      time.Time       `json:"at"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
}

// The builders below run on the session's goroutine (Runtime.Inspect);
// their results are encoded there and never kept.

func sessionDetail(s *core.State) SessionDetail {
	d := SessionDetail{
		Session: s.Session, Seq: s.Seq, Hold: s.Hold, Quiescent: s.Quiescent(), Agents: agentViews(s),
		Tasks: tasks(s), Approvals: approvals(s), Status: nonNil(core.Status(s)),
		Notifications: len(s.NoteOrder), Messages: len(s.Msgs), Drops: s.Drops,
		Progress: nonNil(core.RunProgress(s, time.Now(), time.Minute)),
	}
	if main := s.Agents[core.MainAgent]; main != nil {
		d.Spent = main.Tree
	}
	if len(d.Drops) == 0 {
		d.Drops = nil
	}
	return d
}

func agentViews(s *core.State) []AgentView {
	out := make([]AgentView, 0, len(s.Order))
	for _, id := range s.Order {
		out = append(out, agentView(s, s.Agents[id]))
	}
	return out
}

func agentView(s *core.State, a *core.Agent) AgentView {
	return AgentView{
		ID: a.ID, Name: a.Name, Description: a.Description, Owner: a.Owner, Task: a.Task, Depth: a.Depth,
		Model: a.Model, Provider: a.Provider, Driver: a.Driver, State: a.State, Created: a.Created,
		LastActive: a.LastActive, Runs: len(a.Runs), Inbox: nonNil(a.Inbox), Run: a.Run, Gate: a.Gate,
		Retry: a.Retry, Blocked: a.Blocked,
		LiveTasks: s.LiveTasks(a.ID), Usage: a.Usage, Spent: a.Spent, Tree: a.Tree, Budget: a.Budget,
		ContextTokens: core.ContextTokens(s, a), Compactions: compactions(a),
	}
}

func compactions(a *core.Agent) int {
	if a.Compacted == nil {
		return 0
	}
	return a.Compacted.Seq
}

func agentDetail(s *core.State, a *core.Agent) AgentDetail {
	return AgentDetail{AgentView: agentView(s, a), RunHistory: nonNil(a.Runs), Transcript: nonNil(a.Transcript)}
}

func tasks(s *core.State) []*core.Task {
	out := make([]*core.Task, 0, len(s.TaskOrder))
	for _, id := range s.TaskOrder {
		out = append(out, s.Tasks[id])
	}
	return out
}

func approvals(s *core.State) []*core.Approval {
	out := make([]*core.Approval, 0, len(s.Approvals))
	for _, p := range s.Approvals {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *core.Approval) int { return compareIDs(string(a.ID), string(b.ID)) })
	return out
}

func runs(s *core.State, agent *core.Agent) []RunView {
	out := []RunView{}
	for _, id := range s.Order {
		a := s.Agents[id]
		if agent != nil && a != agent {
			continue
		}
		for _, r := range a.Runs {
			out = append(out, RunView{Agent: a.ID, AgentName: a.Name, RunSummary: r})
		}
		if r := a.Run; r != nil {
			out = append(out, RunView{Agent: a.ID, AgentName: a.Name, RunSummary: core.RunSummary{
				Seq: r.Seq, Kind: r.Kind, Status: core.RunRunning, Started: r.Started, Items: r.Items,
				Answered: r.Answered, Usage: r.Usage, Calls: r.Calls,
			}})
		}
	}
	return out
}

func inbox(s *core.State, agent *core.Agent) []InboxItem {
	out := []InboxItem{}
	for _, id := range s.Order {
		a := s.Agents[id]
		if agent != nil && a != agent {
			continue
		}
		for i, it := range a.Inbox {
			out = append(out, InboxItem{Item: *it, AgentName: a.Name, Position: i, Held: s.Hold != nil && it.Holdable()})
		}
	}
	return out
}

func statusView(s *core.State) StatusView {
	v := StatusView{Session: s.Session.ID, Closed: s.Session.Closed, Hold: s.Hold, Quiescent: s.Quiescent(), Inboxes: nonNil(core.Status(s)),
		Progress: nonNil(core.RunProgress(s, time.Now(), time.Minute)), Budget: s.Session.Budget}
	if main := s.Agents[core.MainAgent]; main != nil {
		v.Spent = main.Tree
	}
	return v
}

func messages(s *core.State) []*core.Msg {
	out := make([]*core.Msg, 0, len(s.Msgs))
	for _, m := range s.Msgs {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *core.Msg) int { return compareIDs(string(a.ID), string(b.ID)) })
	return out
}

func notes(s *core.State) []*core.Note {
	out := make([]*core.Note, 0, len(s.NoteOrder))
	for _, k := range s.NoteOrder {
		if n := s.Note(k); n != nil {
			out = append(out, n)
		}
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

// nonNil makes a nil slice encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
