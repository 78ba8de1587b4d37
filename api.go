package vigil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/permission"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/internal/snapshot"
	"github.com/vigilrun/vigil/internal/textcheck"
	"github.com/vigilrun/vigil/internal/transcript"
	"github.com/vigilrun/vigil/store"
)

func decodeState(b []byte, s *core.State) error { return snapshot.Decode(b, s) }

// SessionParams describes a new session.
type SessionParams struct {
	Title string
	// Prompt, when set, is queued as the first user prompt.
	Prompt string
	// MaxRounds bounds the model rounds of the run that takes Prompt
	// (PromptParams.MaxRounds).
	MaxRounds int
	// Provider names one of the runtime's providers; empty means the default.
	Provider string
	Model    string
	// SubagentModel is the model of subagents that ask for none; empty
	// means Model.
	SubagentModel string
	// Cwd is the working directory of file tools and shell commands; Dirs
	// are more directories file tools may use.
	Cwd  string
	Dirs []string
	// Permissions default to mode ask with no rules.
	Permissions Permissions
	// Owner is an opaque key of who created the session (an MCP caller).
	Owner string
	// Caller makes the main agent an outside caller: it never runs a model;
	// its notifications wait in its inbox until acknowledged (Ack). Use
	// Spawn to start its agents.
	Caller bool
	// Budget bounds the session; zero fields take the configured
	// defaults (DESIGN rule 10).
	Budget Budget
}

// CreateSession creates a session, commits it and starts it.
//
// In a cluster it goes to the live node that runs the fewest sessions
// (this one unless another runs at least two fewer); when that node
// cannot be reached it is made here.
func (r *Runtime) CreateSession(ctx context.Context, params *SessionParams) (*Session, error) {
	if r.cl != nil {
		if id, addr := r.placeFor(r.clock.Now()); addr != "" {
			r.cl.sent(id)
			sess, err := forward[*Session](ctx, r, addr, callCreate, "", params)
			var down *peerDown
			if !errors.As(err, &down) {
				return sess, wrapErr(err)
			}
			if down.sent {
				// It may have been made there: made here too, it would
				// be there twice.
				return nil, &Error{Code: CodeUnavailable, Err: err,
					Message: fmt.Sprintf("the node chosen for the new session stopped answering (%v); it may have made it: list the sessions before creating it again", err)}
			}
			r.log.Debug("the least loaded node did not answer; the session is made here", "node", addr, "err", err)
		}
	}
	sess, err := r.createSession(ctx, params)
	return sess, wrapErr(err)
}

func (r *Runtime) createSession(ctx context.Context, params *SessionParams) (*Session, error) {
	if params == nil {
		params = &SessionParams{}
	}
	p := *params
	p.Dirs = slices.Clone(p.Dirs)
	if err := checkText(p); err != nil {
		return nil, err
	}
	if p.Permissions.Mode == "" {
		p.Permissions.Mode = PermAsk
	}
	if !permission.ValidMode(string(p.Permissions.Mode)) {
		return nil, invalidf("unknown permission mode %q (want ask, accept-edits, auto or bypass)", p.Permissions.Mode)
	}
	for _, rule := range append(append([]string(nil), p.Permissions.Allow...), p.Permissions.Deny...) {
		if !permission.Valid(rule) {
			return nil, invalidf("bad permission rule %q (want Tool or Tool(pattern))", rule)
		}
	}
	if p.Provider == "" {
		p.Provider = r.opts.DefaultProvider
	}
	driver := core.DriverLoop
	if p.Caller {
		driver = core.DriverCaller
		if _, ok := r.opts.Providers[p.Provider]; !ok {
			return nil, invalidf("unknown provider %q", p.Provider)
		}
	} else if _, ok := r.opts.Drivers[p.Provider]; ok {
		driver = core.DriverExternal
	} else if _, ok := r.opts.Providers[p.Provider]; !ok {
		return nil, invalidf("unknown provider %q", p.Provider)
	}
	if p.Cwd != "" {
		abs, err := filepath.Abs(p.Cwd)
		if err != nil {
			return nil, invalidf("working directory: %v", err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, invalidf("working directory %s is not a directory", abs)
		}
		p.Cwd = abs
	}
	for i, d := range p.Dirs {
		abs, err := filepath.Abs(d)
		if d == "" || strings.ContainsRune(d, 0) || err != nil {
			return nil, invalidf("added directory %q is not a path", d)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, invalidf("added directory %s is not a directory", abs)
		}
		p.Dirs[i] = abs
	}
	if len(p.Dirs) > 0 && p.Cwd == "" {
		return nil, invalidf("added directories need a working directory")
	}
	id := core.SessionID(r.opts.NewID())
	// Reserve the id so that adoption never takes a session being created.
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errRuntimeDone
	}
	r.actors[id] = nil
	r.inflight.Add(1) // Close waits for it: its lease is released below
	r.mu.Unlock()
	defer r.inflight.Done()
	created := false
	defer func() {
		if !created {
			r.mu.Lock()
			delete(r.actors, id)
			r.mu.Unlock()
		}
	}()
	lease, err := r.st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: string(id), Owner: r.opts.Node, TTL: r.leaseTTL, Now: r.clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("create session: %w", storeDown(err))
	}
	s := core.NewState()
	a := r.newActor(id, s, lease)
	out := r.core.Step(s, r.clock.Now(), core.CreateSession{
		Session:   core.Session{ID: id, Title: p.Title, Cwd: p.Cwd, Dirs: p.Dirs, Provider: p.Provider, Model: p.Model, SubagentModel: p.SubagentModel, Permissions: permissionsIn(p.Permissions), Owner: p.Owner, Budget: budgetIn(p.Budget)},
		Prompt:    p.Prompt,
		MaxRounds: p.MaxRounds,
		Driver:    driver,
	})
	if out.Err != nil {
		a.cancel()
		return nil, out.Err
	}
	if _, err := a.commit(ctx, out.Events); err != nil {
		a.cancel()
		r.giveUpIfClosing(lease, err)
		return nil, fmt.Errorf("create session: %w", storeDown(err))
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		// Created, but Close did not see it: the next runtime resumes it.
		a.cancel()
		r.giveUp(lease, errRuntimeDone)
		return nil, errRuntimeDone
	}
	r.actors[id] = a
	created = true
	r.mu.Unlock()
	a.after(out.Events, out.Effects)
	a.start()
	sess := sessionOut(&s.Session)
	return &sess, nil
}

func (r *Runtime) do(ctx context.Context, session SessionID, in core.Input) (core.Output, error) {
	return r.doView(ctx, session, in, nil)
}

// doView is do with view run on the session's goroutine once the input is
// committed (see actor.submitView).
func (r *Runtime) doView(ctx context.Context, session SessionID, in core.Input, view func(s *core.State, out core.Output)) (core.Output, error) {
	if err := checkText(in); err != nil {
		return core.Output{}, err
	}
	a, err := r.actor(string(session))
	if err != nil {
		return core.Output{}, r.notHere(ctx, session, err)
	}
	out, err := a.submitView(ctx, in, view)
	return out, wrapErr(err)
}

// notHere explains an action refused because the session does not run
// here: a session the store knows is closed, or owned by another node.
func (r *Runtime) notHere(ctx context.Context, session SessionID, err error) error {
	if !errors.Is(err, errNoSession) {
		return wrapErr(err)
	}
	row, gerr := r.st.SessionGet(ctx, string(session))
	switch {
	case gerr != nil:
		return wrapErr(fmt.Errorf("session %s: %w", session, err))
	case row.Closed:
		return &Error{Code: CodeClosed, Message: fmt.Sprintf("session %s is closed", session)}
	}
	return &Error{Code: CodeMoved, Message: fmt.Sprintf("session %s is not running on this node (another node owns it)", session)}
}

// PromptParams is a user prompt.
type PromptParams struct {
	Text string
	// Priority is next when empty.
	Priority Priority
	// MaxRounds, when positive, bounds the model rounds of the run that
	// takes the prompt: when it has had that many and its model asks for
	// another, the run ends round_limit (Claude Code's --max-turns). Zero
	// sets no bound beyond the session's budget.
	MaxRounds int
}

// Prompt queues a user prompt for the session's main agent and returns its
// inbox item.
func (r *Runtime) Prompt(ctx context.Context, session SessionID, p *PromptParams) (ItemID, error) {
	return route(ctx, r, callPrompt, session, p, r.prompt)
}

func (r *Runtime) prompt(ctx context.Context, session SessionID, p *PromptParams) (ItemID, error) {
	if p == nil {
		return "", invalidf("a prompt needs text")
	}
	out, err := r.do(ctx, session, core.UserPrompt{Text: p.Text, Priority: core.Priority(p.Priority), MaxRounds: p.MaxRounds})
	return ItemID(out.Item), err
}

// MessageParams is a user message to an agent.
type MessageParams struct {
	// To is the agent's id or name.
	To   string
	Text string
	// Priority is next when empty.
	Priority Priority
}

// Message sends a user message to an agent and returns what happened to it
// (DESIGN rule 3) at once: it never waits on the agent's model (rule 11).
// When the agent's model round is in flight the outcome is pending, and
// that round's answer settles it: the message joins the run, or the next
// run answers it.
func (r *Runtime) Message(ctx context.Context, session SessionID, p *MessageParams) (*Message, error) {
	return route(ctx, r, callMessage, session, p, r.message)
}

func (r *Runtime) message(ctx context.Context, session SessionID, p *MessageParams) (*Message, error) {
	if p == nil {
		return nil, invalidf("a message needs a recipient and text")
	}
	var m Message
	_, err := r.doView(ctx, session, core.UserMessage{To: p.To, Text: p.Text, Priority: core.Priority(p.Priority)}, func(s *core.State, out core.Output) {
		if out.Msg == nil {
			return
		}
		cur := s.Msgs[out.Msg.ID]
		if cur == nil {
			cur = out.Msg
		}
		m = messageOut(s, cur)
	})
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// SpawnParams describes a background agent started from outside.
type SpawnParams struct {
	Name, Description, Prompt string
	// Model and Provider default to the session's subagent model and
	// provider.
	Model, Provider string
	// Budget bounds the agent's tree, within what the session has left.
	Budget Budget
}

// Spawn starts a background agent owned by the session's main agent and
// returns its agent and task ids.
func (r *Runtime) Spawn(ctx context.Context, session SessionID, p *SpawnParams) (AgentID, TaskID, error) {
	s, err := route(ctx, r, callSpawn, session, p, r.spawnCall)
	return s.Agent, s.Task, err
}

func (r *Runtime) spawn(ctx context.Context, session SessionID, p *SpawnParams) (AgentID, TaskID, error) {
	if p == nil {
		return "", "", invalidf("a spawn needs a prompt")
	}
	if p.Provider != "" {
		if _, ok := r.opts.Providers[p.Provider]; !ok {
			return "", "", invalidf("unknown provider %q", p.Provider)
		}
	}
	out, err := r.do(ctx, session, core.SpawnAgent{Name: p.Name, Description: p.Description, Prompt: p.Prompt, Model: p.Model, Provider: p.Provider, Budget: budgetIn(p.Budget)})
	return AgentID(out.Agent), TaskID(out.Task), err
}

// Ack acknowledges items of a caller's inbox: they are delivered and leave
// it. Acknowledging an item twice is harmless.
func (r *Runtime) Ack(ctx context.Context, session SessionID, items []ItemID) error {
	_, err := route(ctx, r, callAck, session, items, errOnly(r.ack))
	return err
}

func (r *Runtime) ack(ctx context.Context, session SessionID, items []ItemID) error {
	_, err := r.do(ctx, session, core.CallerAck{Agent: core.MainAgent, Items: ids[core.ItemID](items)})
	return err
}

// HoldParams says who holds the user queue and why.
type HoldParams struct {
	By, Reason string
}

// Hold holds the session's queue of user prompts. Nothing else is held.
func (r *Runtime) Hold(ctx context.Context, session SessionID, p *HoldParams) error {
	_, err := route(ctx, r, callHold, session, p, errOnly(r.hold))
	return err
}

func (r *Runtime) hold(ctx context.Context, session SessionID, p *HoldParams) error {
	if p == nil {
		p = &HoldParams{}
	}
	_, err := r.do(ctx, session, core.HoldQueue{By: p.By, Reason: p.Reason})
	return err
}

// Resume releases the hold; by says who.
func (r *Runtime) Resume(ctx context.Context, session SessionID, by string) error {
	_, err := route(ctx, r, callResume, session, by, errOnly(r.resume))
	return err
}

func (r *Runtime) resume(ctx context.Context, session SessionID, by string) error {
	_, err := r.do(ctx, session, core.ResumeQueue{By: by})
	return err
}

// AgentActionParams names an agent (by id or name) and who acts on it.
type AgentActionParams struct {
	Agent string
	By    string
}

func agentAction(p *AgentActionParams) (*AgentActionParams, error) {
	if p == nil || p.Agent == "" {
		return nil, invalidf("name an agent")
	}
	return p, nil
}

// CancelRun cancels an agent's current run.
func (r *Runtime) CancelRun(ctx context.Context, session SessionID, p *AgentActionParams) error {
	_, err := route(ctx, r, callCancelRun, session, p, errOnly(r.cancelRun))
	return err
}

func (r *Runtime) cancelRun(ctx context.Context, session SessionID, p *AgentActionParams) error {
	p, err := agentAction(p)
	if err != nil {
		return err
	}
	_, err = r.do(ctx, session, core.CancelRun{Agent: p.Agent, By: p.By})
	return err
}

// RetryAgent releases an agent that a failed run left blocked or backing
// off: it runs now for its inbox, and its items' attempts start again.
func (r *Runtime) RetryAgent(ctx context.Context, session SessionID, p *AgentActionParams) error {
	_, err := route(ctx, r, callRetryAgent, session, p, errOnly(r.retryAgent))
	return err
}

func (r *Runtime) retryAgent(ctx context.Context, session SessionID, p *AgentActionParams) error {
	p, err := agentAction(p)
	if err != nil {
		return err
	}
	_, err = r.do(ctx, session, core.RetryAgent{Agent: p.Agent, By: p.By})
	return err
}

// CloseAgent closes an agent and what it owns.
func (r *Runtime) CloseAgent(ctx context.Context, session SessionID, p *AgentActionParams) error {
	_, err := route(ctx, r, callCloseAgent, session, p, errOnly(r.closeAgent))
	return err
}

func (r *Runtime) closeAgent(ctx context.Context, session SessionID, p *AgentActionParams) error {
	p, err := agentAction(p)
	if err != nil {
		return err
	}
	_, err = r.do(ctx, session, core.CloseAgent{Agent: p.Agent, By: p.By})
	return err
}

// StopTaskParams names a task to stop and who stops it.
type StopTaskParams struct {
	Task TaskID
	By   string
}

// StopTask stops a task: its command, or its subagent's run.
func (r *Runtime) StopTask(ctx context.Context, session SessionID, p *StopTaskParams) error {
	_, err := route(ctx, r, callStopTask, session, p, errOnly(r.stopTask))
	return err
}

func (r *Runtime) stopTask(ctx context.Context, session SessionID, p *StopTaskParams) error {
	if p == nil || p.Task == "" {
		return invalidf("name a task")
	}
	_, err := r.do(ctx, session, core.StopTask{Task: core.TaskID(p.Task), By: p.By})
	return err
}

// SetBudgetParams replaces a budget: the session's when Agent is empty,
// otherwise that of the agent's tree.
type SetBudgetParams struct {
	Agent  string
	Budget Budget
	By     string
}

// SetBudget replaces a budget and releases the agents a spent budget
// blocked.
func (r *Runtime) SetBudget(ctx context.Context, session SessionID, p *SetBudgetParams) error {
	_, err := route(ctx, r, callSetBudget, session, p, errOnly(r.setBudget))
	return err
}

func (r *Runtime) setBudget(ctx context.Context, session SessionID, p *SetBudgetParams) error {
	if p == nil {
		return invalidf("a budget is needed")
	}
	_, err := r.do(ctx, session, core.SetBudget{Agent: p.Agent, Budget: budgetIn(p.Budget), By: p.By})
	return err
}

// CancelItemParams names a queued item to remove and who removes it.
type CancelItemParams struct {
	Item ItemID
	By   string
}

// CancelItem removes a queued prompt or continuation.
func (r *Runtime) CancelItem(ctx context.Context, session SessionID, p *CancelItemParams) error {
	_, err := route(ctx, r, callCancelItem, session, p, errOnly(r.cancelItem))
	return err
}

func (r *Runtime) cancelItem(ctx context.Context, session SessionID, p *CancelItemParams) error {
	if p == nil || p.Item == "" {
		return invalidf("name an item")
	}
	_, err := r.do(ctx, session, core.CancelItem{Item: core.ItemID(p.Item), By: p.By})
	return err
}

// MoveItemParams moves a queued item to Index within its inbox.
type MoveItemParams struct {
	Item  ItemID
	Index int
}

// MoveItem moves a queued item within its inbox.
func (r *Runtime) MoveItem(ctx context.Context, session SessionID, p *MoveItemParams) error {
	_, err := route(ctx, r, callMoveItem, session, p, errOnly(r.moveItem))
	return err
}

func (r *Runtime) moveItem(ctx context.Context, session SessionID, p *MoveItemParams) error {
	if p == nil || p.Item == "" {
		return invalidf("name an item")
	}
	_, err := r.do(ctx, session, core.MoveItem{Item: core.ItemID(p.Item), Index: p.Index})
	return err
}

// AnswerApprovalParams answers a permission request.
type AnswerApprovalParams struct {
	Approval ApprovalID
	Allow    bool
	// Always, with Allow, adds a session rule that allows the same call
	// from now on (Approval.AlwaysRule); pending requests the rule allows
	// are answered too.
	Always bool
	By     string
	Reason string
	// Input, with Allow, is the tool input the call runs with instead of
	// the model's (a JSON object); nil runs the model's. The session's
	// deny rules are checked against it: a denied one denies the call.
	Input json.RawMessage
}

// AnswerApproval answers a permission request.
func (r *Runtime) AnswerApproval(ctx context.Context, session SessionID, p *AnswerApprovalParams) error {
	_, err := route(ctx, r, callAnswerApproval, session, p, errOnly(r.answerApproval))
	return err
}

func (r *Runtime) answerApproval(ctx context.Context, session SessionID, p *AnswerApprovalParams) error {
	if p == nil || p.Approval == "" {
		return invalidf("name a permission request")
	}
	if p.Always && !p.Allow {
		return invalidf("always goes with allow")
	}
	if len(p.Input) > 0 && !p.Allow {
		return invalidf("an updated input goes with allow")
	}
	_, err := r.do(ctx, session, core.AnswerApproval{Approval: core.ApprovalID(p.Approval), Allow: p.Allow, Always: p.Always, By: p.By, Reason: p.Reason, Input: p.Input})
	return err
}

// SetPermissionModeParams changes a session's permission mode.
type SetPermissionModeParams struct {
	Mode PermissionMode
	By   string
}

// SetPermissionMode changes the session's permission mode from now on.
// Pending permission requests that the new mode decides are answered at
// once: allowed, or denied (mode auto denies what the rules do not allow).
// A provider process already running (Claude Code, Codex) keeps the
// settings it was started with (a Claude Code process started in bypass
// asks nothing) until the agent's next process; every request it does
// send is decided by the new mode.
func (r *Runtime) SetPermissionMode(ctx context.Context, session SessionID, p *SetPermissionModeParams) error {
	_, err := route(ctx, r, callSetPermMode, session, p, errOnly(r.setPermissionMode))
	return err
}

func (r *Runtime) setPermissionMode(ctx context.Context, session SessionID, p *SetPermissionModeParams) error {
	if p == nil || p.Mode == "" {
		return invalidf("name a permission mode (ask, accept-edits, auto or bypass)")
	}
	_, err := r.do(ctx, session, core.SetPermissionMode{Mode: core.PermissionMode(p.Mode), By: p.By})
	return err
}

// CloseSession closes every agent of the session and the session; by says
// who.
func (r *Runtime) CloseSession(ctx context.Context, session SessionID, by string) error {
	_, err := route(ctx, r, callCloseSession, session, by, errOnly(r.closeSession))
	return err
}

func (r *Runtime) closeSession(ctx context.Context, session SessionID, by string) error {
	_, err := r.do(ctx, session, core.CloseSession{By: by, Reason: "closed by " + by})
	return err
}

// inspect runs fn on the session's state, on the session's goroutine, or
// on the state read from the store when no actor runs it here (closed, or
// never). fn must not keep the state or anything in it.
func (r *Runtime) inspect(ctx context.Context, session SessionID, fn func(s *core.State)) error {
	a, err := r.actor(string(session))
	if err != nil {
		if errors.Is(err, errNoSession) {
			s, lerr := loadState(ctx, r.st, string(session))
			if lerr != nil {
				if errors.Is(lerr, errNoSession) {
					return wrapErr(err)
				}
				return wrapErr(lerr)
			}
			fn(s)
			return nil
		}
		return wrapErr(err)
	}
	return wrapErr(a.view(ctx, fn))
}

// SessionGetParams asks for more of a session than SessionGet gives by
// default.
type SessionGetParams struct {
	// Messages and Notifications fill the detail's lists of every message
	// and notification of the session; Runs fills each agent's
	// RunHistory.
	Messages, Notifications, Runs bool
}

// SessionGet returns a session with its agents, tasks, pending approvals,
// hold, and the status of every non-empty inbox.
func (r *Runtime) SessionGet(ctx context.Context, session SessionID, p *SessionGetParams) (*SessionDetail, error) {
	return route(ctx, r, callSessionGet, session, p, r.sessionGet)
}

func (r *Runtime) sessionGet(ctx context.Context, session SessionID, p *SessionGetParams) (*SessionDetail, error) {
	var d *SessionDetail
	err := r.inspect(ctx, session, func(s *core.State) { d = detailOut(s, r.clock.Now(), p) })
	return d, err
}

// SessionStatus lists the session's non-empty inboxes and why each is not
// draining, what each run in progress waits on, and its budget.
func (r *Runtime) SessionStatus(ctx context.Context, session SessionID) (*Status, error) {
	return route(ctx, r, callSessionStatus, session, struct{}{}, r.sessionStatusCall)
}

func (r *Runtime) sessionStatus(ctx context.Context, session SessionID) (*Status, error) {
	var st *Status
	err := r.inspect(ctx, session, func(s *core.State) { st = statusOut(s, r.clock.Now()) })
	return st, err
}

// SessionListParams filters SessionList.
type SessionListParams struct {
	// Owner, when set, keeps only sessions with that owner key.
	Owner string
	// Open keeps only sessions that are not closed.
	Open bool
}

// SessionList lists the store's sessions, oldest first.
func (r *Runtime) SessionList(ctx context.Context, p *SessionListParams) ([]SessionSummary, error) {
	if p == nil {
		p = &SessionListParams{}
	}
	rows, err := r.st.SessionList(ctx, &store.SessionListParams{Owner: p.Owner, Open: p.Open})
	if err != nil {
		return nil, wrapErr(fmt.Errorf("list sessions: %w", err))
	}
	out := make([]SessionSummary, len(rows))
	for i, row := range rows {
		out[i] = summaryOut(row)
	}
	return out, nil
}

// AgentGet returns an agent (by id or name) with its run history and
// transcript.
func (r *Runtime) AgentGet(ctx context.Context, session SessionID, agent string) (*AgentDetail, error) {
	return route(ctx, r, callAgentGet, session, agent, r.agentGet)
}

func (r *Runtime) agentGet(ctx context.Context, session SessionID, agent string) (*AgentDetail, error) {
	var d *AgentDetail
	err := r.inspect(ctx, session, func(s *core.State) {
		if a := s.Agent(agent); a != nil {
			d = agentDetailOut(s, a)
		}
	})
	if err == nil && d == nil {
		err = notFoundf("no agent %q", agent)
	}
	return d, err
}

// RunList lists the runs of an agent (by id or name), or of every agent
// when agent is empty, ended ones first, then the one in progress.
func (r *Runtime) RunList(ctx context.Context, session SessionID, agent string) ([]Run, error) {
	return route(ctx, r, callRunList, session, agent, r.runList)
}

func (r *Runtime) runList(ctx context.Context, session SessionID, agent string) ([]Run, error) {
	var out []Run
	found := agent == ""
	err := r.inspect(ctx, session, func(s *core.State) {
		out = []Run{}
		for _, id := range s.Order {
			a := s.Agents[id]
			if agent != "" && a != s.Agent(agent) {
				continue
			}
			found = true
			out = append(out, runHistory(a)...)
			if run := runOut(a, a.Run); run != nil {
				out = append(out, *run)
			}
		}
	})
	if err == nil && !found {
		err = notFoundf("no agent %q", agent)
	}
	return out, err
}

// InboxList lists the queued items of an agent (by id or name), or of
// every agent when agent is empty, in the order they run.
func (r *Runtime) InboxList(ctx context.Context, session SessionID, agent string) ([]InboxItem, error) {
	return route(ctx, r, callInboxList, session, agent, r.inboxList)
}

func (r *Runtime) inboxList(ctx context.Context, session SessionID, agent string) ([]InboxItem, error) {
	var out []InboxItem
	found := agent == ""
	err := r.inspect(ctx, session, func(s *core.State) {
		out = []InboxItem{}
		for _, id := range s.Order {
			a := s.Agents[id]
			if agent != "" && a != s.Agent(agent) {
				continue
			}
			found = true
			out = append(out, inboxOut(s, a)...)
		}
	})
	if err == nil && !found {
		err = notFoundf("no agent %q", agent)
	}
	return out, err
}

// TaskOutputParams reads a shell task's output file: up to Limit bytes
// (1 MiB when 0) from Offset.
type TaskOutputParams struct {
	Task   TaskID
	Offset int64
	Limit  int64
}

// TaskOutput reads a shell task's output file.
func (r *Runtime) TaskOutput(ctx context.Context, session SessionID, p *TaskOutputParams) (*TaskOutput, error) {
	return route(ctx, r, callTaskOutput, session, p, r.taskOutput)
}

func (r *Runtime) taskOutput(ctx context.Context, session SessionID, p *TaskOutputParams) (*TaskOutput, error) {
	if p == nil || p.Task == "" {
		return nil, invalidf("name a task")
	}
	if p.Offset < 0 || p.Limit < 0 {
		return nil, invalidf("offset and limit must not be negative")
	}
	var rel string
	var found, mirrored bool
	out := &TaskOutput{Task: p.Task, Offset: p.Offset, Next: p.Offset}
	if err := r.inspect(ctx, session, func(s *core.State) {
		if t := s.Tasks[core.TaskID(p.Task)]; t != nil {
			found, rel, mirrored, out.Status = true, t.OutputPath, t.External != "", TaskStatus(t.Status)
		}
	}); err != nil {
		return nil, err
	}
	if !found {
		return nil, notFoundf("no task %q", p.Task)
	}
	if rel == "" {
		return nil, invalidf("task %s is an agent task; it has no output file (read its runs)", p.Task)
	}
	path, err := r.resolveOutput(core.SessionID(session), rel)
	if mirrored && filepath.IsAbs(rel) {
		// A provider process's task writes its output where the provider
		// keeps it (Claude Code: its own temp directory).
		path, err = filepath.Clean(rel), nil
	}
	if err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = 1 << 20
	}
	data, next, err := shell.ReadOutput(path, p.Offset, limit)
	if errors.Is(err, fs.ErrNotExist) && r.cl != nil && !mirrored {
		// Run by a node that is gone: its output is in the store.
		data, next, err = r.storedOutput(ctx, core.SessionID(session), core.TaskID(p.Task), p.Offset, limit)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read output of %s: %w", p.Task, err)
	}
	out.Data, out.Next = data, next
	return out, nil
}

// EventList reads a session's committed events with Seq > after, from
// the store, in order.
func (r *Runtime) EventList(ctx context.Context, session SessionID, after int64) ([]Event, error) {
	var out []Event
	err := r.records(ctx, session, after, func(rec store.Record) error {
		out = append(out, eventOut(rec))
		return nil
	})
	return out, wrapErr(err)
}

// records calls fn with each committed event of the session after Seq
// after, in order.
func (r *Runtime) records(ctx context.Context, session SessionID, after int64, fn func(store.Record) error) error {
	for {
		recs, err := r.st.EventList(ctx, &store.EventListParams{Session: string(session), AfterSeq: after, Limit: 5000})
		if err != nil {
			return fmt.Errorf("read events of %s: %w", session, err)
		}
		for _, rec := range recs {
			if err := fn(rec); err != nil {
				return err
			}
			after = rec.Seq
		}
		if len(recs) < 5000 {
			return nil
		}
	}
}

// coreEvents reads and decodes a session's events.
func (r *Runtime) coreEvents(ctx context.Context, session SessionID, after int64) ([]core.Event, error) {
	var out []core.Event
	err := r.records(ctx, session, after, func(rec store.Record) error {
		e, err := decodeEvent(rec)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// TranscriptParams chooses what Transcript writes.
type TranscriptParams struct {
	Session SessionID
	// Agent, an id or a name, writes one agent's transcript; empty writes
	// every agent's.
	Agent string
}

// Transcript writes a transcript as JSONL: messages, tool calls and
// results, notifications and inbox operations, with timestamps.
func (r *Runtime) Transcript(ctx context.Context, w io.Writer, p *TranscriptParams) error {
	if p == nil || p.Session == "" {
		return invalidf("name a session")
	}
	evs, err := r.coreEvents(ctx, p.Session, 0)
	if err != nil {
		return wrapErr(err)
	}
	if len(evs) == 0 {
		return wrapErr(fmt.Errorf("session %s: %w", p.Session, errNoSession))
	}
	id := core.AgentID(p.Agent)
	if p.Agent != "" {
		s := core.Replay(evs)
		a := s.Agent(p.Agent)
		if a == nil {
			return notFoundf("no agent %q", p.Agent)
		}
		id = a.ID
	}
	return wrapErr(transcript.Write(w, evs, id))
}

// WaitQuiescent waits until the session has nothing left to do: no run in
// progress, no live task, no timer, every inbox empty.
func (r *Runtime) WaitQuiescent(ctx context.Context, session SessionID) error {
	_, err := route(ctx, r, callWaitQuiescent, session, struct{}{}, r.waitQuiescentCall)
	return err
}

func (r *Runtime) waitQuiescent(ctx context.Context, session SessionID) error {
	a, err := r.actor(string(session))
	if err != nil {
		return wrapErr(err)
	}
	w := make(chan struct{})
	quiet := false
	if err := a.view(ctx, func(s *core.State) {
		if s.Quiescent() {
			quiet = true
			return
		}
		a.quiet = append(a.quiet, w)
	}); err != nil {
		return wrapErr(err)
	}
	if quiet {
		return nil
	}
	select {
	case <-w:
		select {
		case <-a.done:
			return errRuntimeDone
		default:
			return nil
		}
	case <-ctx.Done():
		return wrapErr(ctx.Err())
	}
}

// checkText refuses a request whose text no store can keep (a NUL byte,
// invalid UTF-8), naming the field, before any of it is stepped.
func checkText(v any) error {
	if err := textcheck.Check(v); err != nil {
		return invalidf("%s", err)
	}
	return nil
}

// storeDown marks an error of a store that cannot be written now
// (unreachable, full, read-only) as errStoreDown, keeping it in the chain.
func storeDown(err error) error {
	for _, e := range []error{store.ErrUnavailable, store.ErrFull, store.ErrReadOnly} {
		if errors.Is(err, e) && !errors.Is(err, errStoreDown) {
			return fmt.Errorf("%w: %w", errStoreDown, err)
		}
	}
	return err
}
