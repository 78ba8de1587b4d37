// Package tui is vigil's interactive terminal client: a conversation pane
// with the model's text as it streams, tool calls folded to a line, and
// beside it the agent tree with what each agent waits on, background
// tasks, notifications and inboxes. Permission requests are answered
// inline by a key.
//
// The client speaks only vigil's HTTP API and its event streams (package
// server), through API: a session run in the same process is served on a
// loopback port like any other, so one code path covers a local session,
// a remote server, attaching to an existing session and reconnecting with
// Last-Event-ID after the server restarts.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"

	tea "github.com/charmbracelet/bubbletea"
)

// API is what the client needs of a vigil server.
type API interface {
	// Do sends a request with a JSON body (nil for none) and returns the
	// body of a 2xx answer; any other answer is an error carrying the
	// server's message.
	Do(ctx context.Context, method, path string, body any) ([]byte, error)
	// Stream reads the event stream at path from after the event with
	// sequence number after (0: from the start), calling fn with the data
	// of each frame, a vigil.Event in JSON, until fn returns false (then
	// nil), the stream ends (nil) or fails.
	Stream(ctx context.Context, path string, after int64, fn func(data []byte) bool) error
}

// Options configure a client.
type Options struct {
	// API reaches the server.
	API API
	// Session is the session to attach to; empty starts a new session at
	// the first prompt, made from New.
	Session string
	// New is the body of the request that creates a session at the first
	// prompt (its prompt is the prompt typed); nil is the server's
	// defaults.
	New map[string]any
	// Prompt, when set, is sent as the first prompt at once.
	Prompt string
	// Where names the server for the status line ("in-process",
	// "127.0.0.1:7777").
	Where string
	// In and Out are the terminal; nil means the process's.
	In  io.Reader
	Out io.Writer
}

// Run runs the client until the user quits or ctx ends.
func Run(ctx context.Context, opts Options) error {
	if opts.API == nil {
		return errors.New("tui: no API")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := newModel(ctx, opts)
	popts := []tea.ProgramOption{tea.WithAltScreen(), tea.WithContext(ctx)}
	if opts.In != nil {
		popts = append(popts, tea.WithInput(opts.In))
	}
	if opts.Out != nil {
		popts = append(popts, tea.WithOutput(opts.Out))
	}
	p := tea.NewProgram(m, popts...)
	m.send = p.Send
	_, err := p.Run()
	m.stopStream()
	if err != nil && !errors.Is(err, tea.ErrProgramKilled) && ctx.Err() == nil {
		return fmt.Errorf("terminal client: %w", err)
	}
	if m.fatal != nil {
		return m.fatal
	}
	return nil
}
