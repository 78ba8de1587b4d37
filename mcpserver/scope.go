package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// Errors of the tools. Each reaches the client as a tool error (IsError)
// with its message.
var (
	// errNoTask: no such task, or it is another caller's (the two are not
	// told apart, so that other callers' tasks do not leak).
	errNoTask = errors.New("no such task")
	// errShuttingDown: the server is closing.
	errShuttingDown = errors.New("vigil is shutting down; call again once it is back (nothing you have not acknowledged is lost)")
)

// maxKey bounds an owner key's length.
const maxKey = 256

// ownerOf returns the identity of a tool call: the explicit key, else the
// connection's.
func ownerOf(explicit string, conn string) (string, error) {
	k := strings.TrimSpace(explicit)
	if k == "" {
		k = conn
	}
	switch {
	case k == "":
		return "", errors.New("no caller identity: pass owner_key")
	case len(k) > maxKey:
		return "", fmt.Errorf("owner_key is longer than %d bytes", maxKey)
	}
	return k, nil
}

// taskRef names a task globally: "<session>/<task>".
type taskRef struct {
	session string
	task    core.TaskID
}

// String implements fmt.Stringer.
func (r taskRef) String() string { return r.session + "/" + string(r.task) }

// globalID joins a session and a session-local id.
func globalID(session core.SessionID, local string) string { return string(session) + "/" + local }

// parseTask parses "<session>/<task>".
func parseTask(s string) (taskRef, error) {
	sess, task, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || sess == "" || task == "" || strings.Contains(task, "/") {
		return taskRef{}, fmt.Errorf("bad task id %q: want <session>/<task> as spawn_agent returned it, e.g. k3v9x2m4pq/t1", s)
	}
	return taskRef{session: sess, task: core.TaskID(task)}, nil
}

// notFoundTask is the error for a task the caller may not see.
func notFoundTask(id string) error {
	return fmt.Errorf("%w %q (see list_tasks for yours)", errNoTask, id)
}

// owned runs fn on the state of session when the caller owns it, on the
// session's goroutine; fn must not keep the state. It returns errNoTask
// (wrapped, naming what) for a session that does not exist or is not the
// caller's.
func (s *Server) owned(ctx context.Context, owner, session, what string, fn func(st *core.State) error) error {
	found := false
	var ferr error
	err := s.rt.Inspect(ctx, session, func(st *core.State) {
		main := st.Agents[core.MainAgent]
		if st.Session.Owner != owner || main == nil || main.Driver != core.DriverCaller {
			return
		}
		found = true
		ferr = fn(st)
	})
	switch {
	case errors.Is(err, vigil.ErrNoSession):
		return notFoundTask(what)
	case errors.Is(err, vigil.ErrClosed):
		return errShuttingDown
	case err != nil:
		return fmt.Errorf("read session %s: %w", session, err)
	case !found:
		return notFoundTask(what)
	}
	return ferr
}

// actionErr explains an error of an action on a caller's session.
func (s *Server) actionErr(session string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, vigil.ErrClosed):
		return errShuttingDown
	case errors.Is(err, vigil.ErrNoSession):
		return fmt.Errorf("session %s is not running in this vigil: it is closed, or another vigil process holds it (a second 'vigil mcp' on the same data directory); use that process, or call again after it exits", session)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("interrupted: %w", err)
	}
	var ce *core.Error
	if errors.As(err, &ce) {
		return errors.New(ce.Message)
	}
	return err
}

// sessions lists the caller's sessions, open ones only unless all.
func (s *Server) sessions(ctx context.Context, owner string, all bool) ([]store.SessionRow, error) {
	rows, err := s.rt.Sessions(ctx, &store.SessionListParams{Owner: owner, Open: !all})
	if err != nil {
		return nil, fmt.Errorf("list your sessions: %w", err)
	}
	return rows, nil
}

// callerTasks returns the tasks a caller owns in a session: the agents it
// spawned (there is one per session).
func callerTasks(st *core.State) []*core.Task {
	var out []*core.Task
	for _, id := range st.TaskOrder {
		if t := st.Tasks[id]; t.Owner == core.MainAgent {
			out = append(out, t)
		}
	}
	return out
}

// agentByRef finds an agent of a session by id or name, never the caller.
func agentByRef(st *core.State, ref string) *core.Agent {
	a := st.Agent(ref)
	if a == nil || a.ID == core.MainAgent {
		return nil
	}
	return a
}
