package provider

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/vigilrun/vigil/core"
)

// ErrProcessEnded is returned by a SessionProcess that is ending or gone
// (an idle release, an exit): the caller starts a new process.
var ErrProcessEnded = errors.New("provider process ended")

// SessionDriver is a provider that runs an agent's turns itself, in a
// long-lived process with its own subagents and background tasks: the
// Claude Code CLI. vigil hands it inbox items between its turns and
// records what it reports.
type SessionDriver interface {
	// Name identifies the driver in logs and status output.
	Name() string
	// Start starts a process for one agent, resuming a provider session
	// when SessionStart.Resume is set.
	Start(ctx context.Context, p *SessionStart) (SessionProcess, error)
}

// SessionStart describes a process to start.
type SessionStart struct {
	// Session and Agent are the vigil session and agent the process runs.
	Session string
	Agent   core.AgentID
	// Cwd is the process's working directory.
	Cwd string
	// Model is the model to ask for; empty means the driver's default.
	Model string
	// Resume is the provider session id to resume, empty for a new one.
	Resume string
	// PermissionMode is the session's permission mode.
	PermissionMode core.PermissionMode
	// Cgroup, when set, is a cgroup v2 directory to create for the
	// process (see shell.IntoCgroup): it and every process it starts stay
	// there, and the driver kills the group when the process ends, so
	// nothing it started outlives it; a successor ends what is left by the
	// same path (shell.KillCgroup).
	Cgroup string
	// Emit receives what the process reports, mapped to core inputs
	// (ExternalTurnStarted, ExternalMessage, ExternalTask,
	// ExternalTurnEnded, ExternalPermission and its withdrawal), in the
	// order the process sent it. The last input
	// is always ProviderExited, after every frame the process sent. Emit
	// may block briefly; it must be called from one goroutine at a time.
	Emit func(core.Input)
}

// SessionProcess is a running provider process. Its methods are safe for
// concurrent use.
type SessionProcess interface {
	// PID and StartTicks identify the process, so a later vigil can end it
	// if it outlives this one.
	PID() int
	StartTicks() uint64
	// Deliver hands text to the process as a user message.
	Deliver(text string, priority core.Priority) error
	// Interrupt asks the process to end its current turn.
	Interrupt() error
	// StopTask asks the process to stop one of its background tasks.
	StopTask(id string) error
	// AnswerPermission answers the process's permission request (an
	// ExternalPermission it emitted): allow the tool call, or deny it with
	// the message the model sees. input, when allowed and not nil, is the
	// input the call runs with instead of the one asked about.
	AnswerPermission(request string, allow bool, message string, input json.RawMessage) error
	// Close ends the process. Safe to call twice.
	Close() error
}
