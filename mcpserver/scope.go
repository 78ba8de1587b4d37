package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
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

// toolErr is the one table from the runtime's error codes to what a tool
// answers (its error text). A code the runtime adds later answers with the
// runtime's own message.
func toolErr(err error) error {
	var e *vigil.Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return fmt.Errorf("%w; call again in %s", err, e.RetryAfter.Round(time.Second))
	}
	switch vigil.CodeOf(err) {
	case "":
		return nil
	case vigil.CodeShuttingDown:
		return errShuttingDown
	case vigil.CodeMoved:
		return fmt.Errorf("%w: another vigil process holds it (a second 'vigil mcp' or 'vigil serve' on the same store); use that process, or call again after it exits", err)
	case vigil.CodeRecovering:
		return fmt.Errorf("%w: vigil is taking it over right now; call again in a few seconds", err)
	case vigil.CodeUnavailable:
		return fmt.Errorf("%w: vigil's store refused the change, so nothing of it was kept; call again later", err)
	case vigil.CodeTimeout, vigil.CodeCanceled:
		return fmt.Errorf("interrupted: %w", err)
	case vigil.CodeBehind:
		return fmt.Errorf("%w; call again", err)
	case vigil.CodeNotFound, vigil.CodeInvalid, vigil.CodeConflict, vigil.CodeClosed, vigil.CodeInternal:
		return err // the runtime's message says it
	}
	return err
}

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
	session vigil.SessionID
	task    vigil.TaskID
}

// String implements fmt.Stringer.
func (r taskRef) String() string { return globalID(r.session, string(r.task)) }

// globalID joins a session and a session-local id.
func globalID(session vigil.SessionID, local string) string { return string(session) + "/" + local }

// parseTask parses "<session>/<task>".
func parseTask(s string) (taskRef, error) {
	sess, task, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || sess == "" || task == "" || strings.Contains(task, "/") {
		return taskRef{}, fmt.Errorf("bad task id %q: want <session>/<task> as vigil_spawn returned it, e.g. k3v9x2m4pq/t1", s)
	}
	return taskRef{session: vigil.SessionID(sess), task: vigil.TaskID(task)}, nil
}

// notFoundTask is the error for a task the caller may not see.
func notFoundTask(id string) error {
	return fmt.Errorf("%w %q (see vigil_list for yours)", errNoTask, id)
}

// need says what a view reads besides the session.
type need uint8

const (
	// needLists reads the session's notifications and messages.
	needLists need = 1 << iota
	// needRuns reads every agent's runs: what taskView and busy look at.
	needRuns
)

// view is what a tool read of one caller's session: one copy (SessionGet),
// owned by the tool, and maps into it.
type view struct {
	*vigil.SessionDetail
	id     vigil.SessionID
	agents map[vigil.AgentID]*vigil.Agent
	tasks  map[vigil.TaskID]*vigil.Task
	notes  map[vigil.NotificationKey]*vigil.Notification // with needLists
	msgs   map[vigil.MessageID]*vigil.Message            // with needLists
	runs   map[vigil.AgentID][]vigil.Run                 // with needRuns: ended, then the one in progress
	timers map[vigil.AgentID]int                         // with needRuns: pending timers by agent
}

// owned reads session when the caller owns it, in one read of the
// runtime. It returns errNoTask (wrapped, naming what) for a session that
// does not exist or is not the caller's.
func (s *Server) owned(ctx context.Context, owner string, session vigil.SessionID, what string, n need) (*view, error) {
	d, err := s.rt.SessionGet(ctx, session, &vigil.SessionGetParams{Notifications: n&needLists != 0, Messages: n&needLists != 0, Runs: n&needRuns != 0})
	if vigil.CodeOf(err) == vigil.CodeNotFound {
		return nil, notFoundTask(what) // as for another caller's: existence does not leak
	}
	if err != nil {
		return nil, toolErr(fmt.Errorf("read session %s: %w", session, err))
	}
	v := &view{SessionDetail: d, id: session, agents: map[vigil.AgentID]*vigil.Agent{}, tasks: map[vigil.TaskID]*vigil.Task{}}
	for i := range d.Agents {
		v.agents[d.Agents[i].ID] = &d.Agents[i]
	}
	main := v.agents[vigil.MainAgent]
	if d.Session.Owner != owner || main == nil || main.Driver != vigil.DriverCaller {
		return nil, notFoundTask(what)
	}
	for i := range d.Tasks {
		v.tasks[d.Tasks[i].ID] = &d.Tasks[i]
	}
	if n&needLists != 0 {
		v.notes = make(map[vigil.NotificationKey]*vigil.Notification, len(d.Notifications))
		for i := range d.Notifications {
			v.notes[d.Notifications[i].Key] = &d.Notifications[i]
		}
		v.msgs = make(map[vigil.MessageID]*vigil.Message, len(d.Messages))
		for i := range d.Messages {
			v.msgs[d.Messages[i].ID] = &d.Messages[i]
		}
	}
	if n&needRuns != 0 {
		// Every agent's runs: those that ended, then the one in progress.
		v.runs = map[vigil.AgentID][]vigil.Run{}
		for _, a := range v.agents {
			v.runs[a.ID] = append(v.runs[a.ID], a.RunHistory...)
			if a.Run != nil {
				v.runs[a.ID] = append(v.runs[a.ID], *a.Run)
			}
		}
		v.timers = map[vigil.AgentID]int{}
		for _, t := range d.Timers {
			v.timers[t.Agent]++
		}
	}
	return v, nil
}

// live reports whether a task still runs: a stopping shell task's process
// has not exited yet.
func live(t *vigil.Task) bool { return t.Live() }

// sessions lists the caller's sessions, open ones only unless all.
func (s *Server) sessions(ctx context.Context, owner string, all bool) ([]vigil.SessionSummary, error) {
	rows, err := s.rt.SessionList(ctx, &vigil.SessionListParams{Owner: owner, Open: !all})
	if err != nil {
		return nil, toolErr(fmt.Errorf("list your sessions: %w", err))
	}
	return rows, nil
}

// callerTasks returns the tasks a caller owns in a session: the agents it
// spawned (there is one per session).
func (v *view) callerTasks() []*vigil.Task {
	var out []*vigil.Task
	for i := range v.Tasks {
		if t := &v.Tasks[i]; t.Owner == vigil.MainAgent {
			out = append(out, t)
		}
	}
	return out
}

// agent finds an agent of the session by id or name, never the caller.
func (v *view) agent(ref string) *vigil.Agent {
	a := v.agents[vigil.AgentID(ref)]
	if a == nil {
		for i := range v.Agents {
			if v.Agents[i].Name == ref {
				a = &v.Agents[i]
				break
			}
		}
	}
	if a == nil || a.ID == vigil.MainAgent {
		return nil
	}
	return a
}

// lastRun returns an agent's last ended run, if any.
func (v *view) lastRun(a vigil.AgentID) *vigil.Run {
	runs := v.runs[a]
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Status != vigil.RunRunning {
			return &runs[i]
		}
	}
	return nil
}
