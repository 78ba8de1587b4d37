package server

import (
	"encoding/json"
	"math"
	"time"

	"github.com/vigilrun/vigil"
)

// The request and response bodies of the API. openapi.yaml documents the
// same shapes; the CLI client decodes them.

// CreateSessionRequest is the body of POST /api/sessions.
type CreateSessionRequest struct {
	// Prompt, when set, is queued as the first user prompt.
	Prompt string `json:"prompt,omitempty"`
	// MaxRounds bounds the model rounds of the run that takes Prompt.
	MaxRounds int `json:"max_rounds,omitempty"`
	// Title defaults to the prompt's first line.
	Title    string `json:"title,omitempty"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	// SubagentModel is the model of subagents that ask for none.
	SubagentModel string `json:"subagent_model,omitempty"`
	// Cwd is the working directory of the session's tools; it must exist on
	// the server.
	Cwd         string             `json:"cwd,omitempty"`
	Dirs        []string           `json:"dirs,omitempty"`
	Permissions *vigil.Permissions `json:"permissions,omitempty"`
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
func (b *BudgetRequest) budget(prefix string) (vigil.Budget, error) {
	if b == nil {
		return vigil.Budget{}, nil
	}
	switch {
	case b.Tokens < 0:
		return vigil.Budget{}, badRequest("%stokens=%d: want 0 (no bound) or more", prefix, b.Tokens)
	case b.Rounds < 0:
		return vigil.Budget{}, badRequest("%srounds=%d: want 0 (no bound) or more", prefix, b.Rounds)
	case b.WallSeconds < 0 || b.WallSeconds > maxBudgetWallSeconds:
		return vigil.Budget{}, badRequest("%swall_seconds=%d: want 0 (no bound) to %d", prefix, b.WallSeconds, maxBudgetWallSeconds)
	case !(b.CostUSD >= 0 && b.CostUSD <= maxBudgetCostUSD): // NaN too
		return vigil.Budget{}, badRequest("%scost_usd=%v: want 0 (no bound) to %g", prefix, b.CostUSD, float64(maxBudgetCostUSD))
	}
	return vigil.Budget{Tokens: b.Tokens, Rounds: b.Rounds, Wall: time.Duration(b.WallSeconds) * time.Second, CostMicros: int64(math.Round(b.CostUSD * 1e6))}, nil
}

// BudgetView is a scope's budget and what it used.
type BudgetView struct {
	Agent  string       `json:"agent,omitempty"`
	Budget vigil.Budget `json:"budget"`
	Spent  vigil.Spend  `json:"spent"`
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
	Priority vigil.Priority `json:"priority,omitempty"`
	// MaxRounds bounds the model rounds of the run that takes the prompt
	// (0: no bound); the run then ends round_limit.
	MaxRounds int `json:"max_rounds,omitempty"`
}

// PromptResult says which inbox item a prompt became.
type PromptResult struct {
	Session vigil.SessionID `json:"session"`
	Item    vigil.ItemID    `json:"item"`
}

// MessageRequest is the body of POST .../agents/{agent}/messages.
type MessageRequest struct {
	Text     string         `json:"text"`
	Priority vigil.Priority `json:"priority,omitempty"`
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
	// Input, with allow, is the tool input the call runs with instead of
	// the model's (a JSON object); the session's deny rules still hold.
	Input json.RawMessage `json:"input,omitempty"`
}

// PermissionModeRequest is the body of POST .../permissions: the
// session's new permission mode.
type PermissionModeRequest struct {
	Mode string `json:"mode"`
}

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}

// SessionList is the body of GET /api/sessions.
type SessionList struct {
	Sessions []vigil.SessionSummary `json:"sessions"`
}

// AgentList is the body of GET .../agents.
type AgentList struct {
	Agents []vigil.Agent `json:"agents"`
}

// RunList is the body of GET .../runs.
type RunList struct {
	Runs []vigil.Run `json:"runs"`
}

// TaskList is the body of GET .../tasks.
type TaskList struct {
	Tasks []vigil.Task `json:"tasks"`
}

// TaskOutput is a chunk of a shell task's output file.
type TaskOutput struct {
	Task   vigil.TaskID     `json:"task"`
	Status vigil.TaskStatus `json:"status"`
	Offset int64            `json:"offset"`
	// Next is the offset to read from next.
	Next int64  `json:"next"`
	Data string `json:"data"`
	// Encoding is "base64" when the bytes are not valid UTF-8 (binary
	// output, or a read that cut a character): Data is then base64.
	Encoding string `json:"encoding,omitempty"`
}

// InboxList is the body of GET .../inbox.
type InboxList struct {
	Items []vigil.InboxItem `json:"items"`
}

// MessageList is the body of GET .../messages.
type MessageList struct {
	Messages []vigil.Message `json:"messages"`
}

// NoteList is the body of GET .../notifications.
type NoteList struct {
	Notifications []vigil.Notification `json:"notifications"`
}

// ApprovalList is the body of GET .../approvals.
type ApprovalList struct {
	Approvals []vigil.Approval `json:"approvals"`
}

// nonNil makes a nil slice encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// NodeList is the body of GET /api/nodes: the members of the cluster, this
// node among them.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// Node is a member of the cluster (vigil.NodeInfo).
type Node struct {
	// ID is the node's id; Tag is the short form of it that begins the
	// ids of the MCP sessions it holds (NodeTag).
	ID  string `json:"id"`
	Tag string `json:"tag"`
	// Address is the base URL other nodes reach its API at.
	Address string    `json:"address"`
	Started time.Time `json:"started"`
	// Beat is its last heartbeat.
	Beat time.Time `json:"beat"`
	// Alive: its heartbeat is recent. Draining: it is shutting down and
	// takes no new sessions.
	Alive    bool `json:"alive"`
	Draining bool `json:"draining"`
	// Self: the node that answered.
	Self bool `json:"self"`
	// Sessions is how many sessions it owns.
	Sessions int `json:"sessions"`
}
