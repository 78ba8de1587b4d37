package vigil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/permission"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/internal/textcheck"
	"github.com/vigilrun/vigil/internal/transcript"
	"github.com/vigilrun/vigil/store"
)

func decodeState(b []byte, s *core.State) error { return json.Unmarshal(b, s) }

// SessionParams describes a new session.
type SessionParams struct {
	Title string
	// Prompt, when set, is queued as the first user prompt.
	Prompt string
	// Provider names one of the runtime's providers; empty means the default.
	Provider string
	Model    string
	// SubagentModel is the model of subagents that ask for none; empty
	// means Model.
	SubagentModel string
	// Cwd is the working directory of file tools and shell commands; Dirs
	// are more directories file tools may use.
	Cwd         string
	Dirs        []string
	Permissions core.Permissions
	// Owner is an opaque key of who created the session (an MCP caller).
	Owner string
	// Caller makes the main agent an outside caller: it never runs a model;
	// its notifications wait in its inbox until acknowledged (Ack). Use
	// Spawn to start its agents.
	Caller bool
	// Budget bounds the session; zero fields take the configured
	// defaults (DESIGN rule 10).
	Budget core.Budget
}

// CreateSession creates a session, commits it and starts it.
func (r *Runtime) CreateSession(ctx context.Context, p SessionParams) (*core.Session, error) {
	if err := checkText(p); err != nil {
		return nil, err
	}
	if p.Permissions.Mode == "" {
		p.Permissions.Mode = core.PermAsk
	}
	if !permission.ValidMode(string(p.Permissions.Mode)) {
		return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("unknown permission mode %q (want ask, accept-edits, auto or bypass)", p.Permissions.Mode)}
	}
	for _, rule := range append(append([]string(nil), p.Permissions.Allow...), p.Permissions.Deny...) {
		if !permission.Valid(rule) {
			return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("bad permission rule %q (want Tool or Tool(pattern))", rule)}
		}
	}
	if p.Provider == "" {
		p.Provider = r.opts.DefaultProvider
	}
	driver := core.DriverLoop
	if p.Caller {
		driver = core.DriverCaller
		if _, ok := r.opts.Providers[p.Provider]; !ok {
			return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("unknown provider %q", p.Provider)}
		}
	} else if _, ok := r.opts.Drivers[p.Provider]; ok {
		driver = core.DriverExternal
	} else if _, ok := r.opts.Providers[p.Provider]; !ok {
		return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("unknown provider %q", p.Provider)}
	}
	if p.Cwd != "" {
		abs, err := filepath.Abs(p.Cwd)
		if err != nil {
			return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("working directory: %v", err)}
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("working directory %s is not a directory", abs)}
		}
		p.Cwd = abs
	}
	for i, d := range p.Dirs {
		abs, err := filepath.Abs(d)
		if d == "" || strings.ContainsRune(d, 0) || err != nil {
			return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("added directory %q is not a path", d)}
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("added directory %s is not a directory", abs)}
		}
		p.Dirs[i] = abs
	}
	if len(p.Dirs) > 0 && p.Cwd == "" {
		return nil, &core.Error{Code: core.CodeInvalid, Message: "added directories need a working directory"}
	}
	id := core.SessionID(r.opts.NewID())
	// Reserve the id so that adoption never takes a session being created.
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	r.actors[id] = nil
	r.mu.Unlock()
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
		Session: core.Session{ID: id, Title: p.Title, Cwd: p.Cwd, Dirs: p.Dirs, Provider: p.Provider, Model: p.Model, SubagentModel: p.SubagentModel, Permissions: p.Permissions, Owner: p.Owner, Budget: p.Budget},
		Prompt:  p.Prompt,
		Driver:  driver,
	})
	if out.Err != nil {
		return nil, out.Err
	}
	if _, err := a.commit(ctx, out.Events); err != nil {
		return nil, fmt.Errorf("create session: %w", storeDown(err))
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	r.actors[id] = a
	created = true
	r.mu.Unlock()
	a.after(out.Events, out.Effects)
	a.start()
	sess := s.Session
	return &sess, nil
}

func (r *Runtime) do(ctx context.Context, session string, in core.Input) (core.Output, error) {
	if err := checkText(in); err != nil {
		return core.Output{}, err
	}
	a, err := r.actor(session)
	if err != nil {
		return core.Output{}, err
	}
	return a.submit(ctx, in)
}

// Prompt queues a user prompt for the session's main agent.
func (r *Runtime) Prompt(ctx context.Context, session, text string, p core.Priority) (core.ItemID, error) {
	out, err := r.do(ctx, session, core.UserPrompt{Text: text, Priority: p})
	return out.Item, err
}

// Message sends a user message to an agent (by id or name) and returns what
// happened to it (DESIGN rule 3) at once: it never waits on the agent's
// model (rule 11). When the agent's model round is in flight the outcome
// is pending, and that round's answer settles it: the message joins the
// run, or the next run answers it.
func (r *Runtime) Message(ctx context.Context, session, to, text string, p core.Priority) (*core.Msg, error) {
	out, err := r.do(ctx, session, core.UserMessage{To: to, Text: text, Priority: p})
	if err != nil {
		return nil, err
	}
	return out.Msg, nil
}

// SpawnParams describes a background agent started from outside.
type SpawnParams struct {
	Name, Description, Prompt, Model, Provider string
	// Budget bounds the agent's tree, within what the session has left.
	Budget core.Budget
}

// Spawn starts a background agent owned by the session's main agent and
// returns its agent and task ids.
func (r *Runtime) Spawn(ctx context.Context, session string, p SpawnParams) (core.AgentID, core.TaskID, error) {
	if p.Provider != "" {
		if _, ok := r.opts.Providers[p.Provider]; !ok {
			return "", "", &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("unknown provider %q", p.Provider)}
		}
	}
	out, err := r.do(ctx, session, core.SpawnAgent{Name: p.Name, Description: p.Description, Prompt: p.Prompt, Model: p.Model, Provider: p.Provider, Budget: p.Budget})
	return out.Agent, out.Task, err
}

// Ack acknowledges items of a caller's inbox: they are delivered and leave
// it. Acknowledging an item twice is harmless.
func (r *Runtime) Ack(ctx context.Context, session string, items []string) error {
	ids := make([]core.ItemID, len(items))
	for i, it := range items {
		ids[i] = core.ItemID(it)
	}
	_, err := r.do(ctx, session, core.CallerAck{Agent: core.MainAgent, Items: ids})
	return err
}

// Hold holds the session's queue of user prompts. Nothing else is held.
func (r *Runtime) Hold(ctx context.Context, session, by, reason string) error {
	_, err := r.do(ctx, session, core.HoldQueue{By: by, Reason: reason})
	return err
}

// Resume releases the hold.
func (r *Runtime) Resume(ctx context.Context, session, by string) error {
	_, err := r.do(ctx, session, core.ResumeQueue{By: by})
	return err
}

// CancelRun cancels an agent's current run.
func (r *Runtime) CancelRun(ctx context.Context, session, agent, by string) error {
	_, err := r.do(ctx, session, core.CancelRun{Agent: agent, By: by})
	return err
}

// StopTask stops a task.
func (r *Runtime) StopTask(ctx context.Context, session, task, by string) error {
	_, err := r.do(ctx, session, core.StopTask{Task: core.TaskID(task), By: by})
	return err
}

// RetryAgent releases an agent that a failed run left blocked or backing
// off: it runs now for its inbox, and its items' attempts start again.
func (r *Runtime) RetryAgent(ctx context.Context, session, agent, by string) error {
	_, err := r.do(ctx, session, core.RetryAgent{Agent: agent, By: by})
	return err
}

// SetBudget replaces the budget of the session (agent empty) or of an
// agent's tree, and releases the agents a spent budget blocked.
func (r *Runtime) SetBudget(ctx context.Context, session, agent string, b core.Budget, by string) error {
	_, err := r.do(ctx, session, core.SetBudget{Agent: agent, Budget: b, By: by})
	return err
}

// CancelItem removes a queued prompt or continuation.
func (r *Runtime) CancelItem(ctx context.Context, session, item, by string) error {
	_, err := r.do(ctx, session, core.CancelItem{Item: core.ItemID(item), By: by})
	return err
}

// MoveItem moves a queued item within its inbox.
func (r *Runtime) MoveItem(ctx context.Context, session, item string, index int) error {
	_, err := r.do(ctx, session, core.MoveItem{Item: core.ItemID(item), Index: index})
	return err
}

// AnswerApprovalAlways allows a permission request and adds a session rule
// that allows the same call from now on (DESIGN: approvals, "allow
// always"); pending requests the rule allows are answered too.
func (r *Runtime) AnswerApprovalAlways(ctx context.Context, session, approval, by string) error {
	_, err := r.do(ctx, session, core.AnswerApproval{Approval: core.ApprovalID(approval), Allow: true, Always: true, By: by})
	return err
}

// AnswerApproval answers a permission request.
func (r *Runtime) AnswerApproval(ctx context.Context, session, approval string, allow bool, by, reason string) error {
	_, err := r.do(ctx, session, core.AnswerApproval{Approval: core.ApprovalID(approval), Allow: allow, By: by, Reason: reason})
	return err
}

// CloseAgent closes an agent and what it owns.
func (r *Runtime) CloseAgent(ctx context.Context, session, agent, by string) error {
	_, err := r.do(ctx, session, core.CloseAgent{Agent: agent, By: by})
	return err
}

// CloseSession closes every agent of the session and the session.
func (r *Runtime) CloseSession(ctx context.Context, session, by string) error {
	_, err := r.do(ctx, session, core.CloseSession{By: by, Reason: "closed by " + by})
	return err
}

// ProviderWake records that a provider needs a turn of an agent to continue
// work of its own.
func (r *Runtime) ProviderWake(ctx context.Context, session, agent, evidence string) error {
	_, err := r.do(ctx, session, core.ProviderWake{Agent: core.AgentID(agent), Evidence: evidence})
	return err
}

// Inspect runs fn on the session's state, on the session's goroutine. fn
// must not keep the state or anything in it.
func (r *Runtime) Inspect(ctx context.Context, session string, fn func(s *core.State)) error {
	a, err := r.actor(session)
	if err != nil {
		if errors.Is(err, ErrNoSession) {
			// Not running here (closed, or never): read it from the store.
			s, lerr := loadState(ctx, r.st, session)
			if lerr != nil {
				if errors.Is(lerr, ErrNoSession) {
					return err
				}
				return lerr
			}
			fn(s)
			return nil
		}
		return err
	}
	return a.view(ctx, fn)
}

// State returns a copy of the session's state.
func (r *Runtime) State(ctx context.Context, session string) (*core.State, error) {
	var b []byte
	var merr error
	if err := r.Inspect(ctx, session, func(s *core.State) { b, merr = json.Marshal(s) }); err != nil {
		return nil, err
	}
	if merr != nil {
		return nil, merr
	}
	s := core.NewState()
	return s, decodeState(b, s)
}

// Status lists the session's non-empty inboxes and why each is not
// draining.
func (r *Runtime) Status(ctx context.Context, session string) ([]core.InboxStatus, error) {
	var st []core.InboxStatus
	err := r.Inspect(ctx, session, func(s *core.State) { st = core.Status(s) })
	return st, err
}

// Sessions lists the store's sessions.
func (r *Runtime) Sessions(ctx context.Context, p *store.SessionListParams) ([]store.SessionRow, error) {
	if p == nil {
		p = &store.SessionListParams{}
	}
	return r.st.SessionList(ctx, p)
}

// WaitQuiescent waits until the session has nothing left to do: no run in
// progress, no live task, no timer, every inbox empty.
func (r *Runtime) WaitQuiescent(ctx context.Context, session string) error {
	a, err := r.actor(session)
	if err != nil {
		return err
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
		return err
	}
	if quiet {
		return nil
	}
	select {
	case <-w:
		select {
		case <-a.done:
			return ErrClosed
		default:
			return nil
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TaskOutput reads a shell task's output file from offset; it returns the
// bytes and the offset to read from next.
func (r *Runtime) TaskOutput(ctx context.Context, session, task string, offset, limit int64) ([]byte, int64, error) {
	var rel string
	var found, mirrored bool
	if err := r.Inspect(ctx, session, func(s *core.State) {
		if t := s.Tasks[core.TaskID(task)]; t != nil {
			found, rel, mirrored = true, t.OutputPath, t.External != ""
		}
	}); err != nil {
		return nil, 0, err
	}
	if !found {
		return nil, 0, &core.Error{Code: core.CodeNotFound, Message: fmt.Sprintf("no task %q", task)}
	}
	if rel == "" {
		return nil, 0, &core.Error{Code: core.CodeInvalid, Message: fmt.Sprintf("task %s is an agent task; it has no output file (read its runs)", task)}
	}
	path, err := r.resolveOutput(core.SessionID(session), rel)
	if mirrored && filepath.IsAbs(rel) {
		// A provider process's task writes its output where the provider
		// keeps it (Claude Code: its own temp directory).
		path, err = filepath.Clean(rel), nil
	}
	if err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		limit = 1 << 20
	}
	data, next, err := shell.ReadOutput(path, offset, limit)
	if os.IsNotExist(err) {
		return nil, offset, nil
	}
	return data, next, err
}

// Events reads a session's committed events with Seq > after, from the
// store, in order.
func (r *Runtime) Events(ctx context.Context, session string, after int64) ([]core.Event, error) {
	var out []core.Event
	for {
		recs, err := r.st.EventList(ctx, &store.EventListParams{Session: session, AfterSeq: after, Limit: 5000})
		if err != nil {
			return nil, fmt.Errorf("read events of %s: %w", session, err)
		}
		for _, rec := range recs {
			e, err := DecodeEvent(rec)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
			after = rec.Seq
		}
		if len(recs) < 5000 {
			return out, nil
		}
	}
}

// Transcript writes an agent's transcript (every agent's when agent is
// empty) as JSONL: messages, tool calls and results, notifications and
// inbox operations, with timestamps.
func (r *Runtime) Transcript(ctx context.Context, session, agent string, w io.Writer) error {
	evs, err := r.Events(ctx, session, 0)
	if err != nil {
		return err
	}
	if len(evs) == 0 {
		return fmt.Errorf("session %s: %w", session, ErrNoSession)
	}
	id := core.AgentID(agent)
	if agent != "" {
		s := core.Replay(evs)
		a := s.Agent(agent)
		if a == nil {
			return &core.Error{Code: core.CodeNotFound, Message: fmt.Sprintf("no agent %q", agent)}
		}
		id = a.ID
	}
	return transcript.Write(w, evs, id)
}

// checkText refuses a request whose text no store can keep (a NUL byte,
// invalid UTF-8), naming the field, before any of it is stepped.
func checkText(v any) error {
	if err := textcheck.Check(v); err != nil {
		return &core.Error{Code: core.CodeInvalid, Message: err.Error()}
	}
	return nil
}

// storeDown marks an error of a store that cannot be written now
// (unreachable, full, read-only) as ErrStoreDown, keeping it in the chain.
func storeDown(err error) error {
	for _, e := range []error{store.ErrUnavailable, store.ErrFull, store.ErrReadOnly} {
		if errors.Is(err, e) && !errors.Is(err, ErrStoreDown) {
			return fmt.Errorf("%w: %w", ErrStoreDown, err)
		}
	}
	return err
}
