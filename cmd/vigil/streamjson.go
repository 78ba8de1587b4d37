package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/ccwire"
	"github.com/vigilrun/vigil/internal/mcpclient"
	"github.com/vigilrun/vigil/internal/text"
)

// runStreamJSON runs vigil as a Claude Code-compatible executable: one
// session, driven by Claude Code's stream-json protocol on stdin and
// stdout (internal/ccwire), on the default store and provider.
func runStreamJSON(ctx context.Context, e *env, args []string) error {
	a, err := ccwire.ParseArgs(args)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pf := providerFlags{model: a.Model, script: e.getenv("VIGIL_SCRIPT")}
	provs, err := pf.build(e, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if provs.note != "" {
		fmt.Fprintln(e.stderr, "vigil:", provs.note)
	}
	mcpConfigs, err := mcpclient.ParseConfigs(a.MCPConfig)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var sf storeFlags
	st, dataDir, node, closeStore, err := sf.open(ctx, e, logger)
	if err != nil {
		return err
	}
	defer closeStore()
	rt, err := vigil.Open(ctx, vigil.Options{
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st,
		Providers: provs.providers, Drivers: provs.drivers, DefaultProvider: provs.name, DataDir: dataDir, Node: node, Logger: logger,
		Adopt: func(s vigil.SessionSummary) bool { return a.Resume != "" && string(s.ID) == a.Resume },
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	cwd := a.Cwd
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
	}
	mode, err := ccwire.VigilMode(a.PermissionMode)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	switch {
	case a.SkipPermissions && (a.PermissionMode == "" || a.PermissionMode == "bypassPermissions"):
		mode = string(vigil.PermBypass)
	case mode == string(vigil.PermAsk) && a.PermissionPromptTool != "stdio":
		// Nobody to ask: what the rules do not allow is denied, as the
		// CLI does without a permission prompt tool.
		mode = string(vigil.PermAuto)
	}
	sess := &sdkSession{
		rt: rt, resume: vigil.SessionID(a.Resume), events: make(chan ccwire.Update, 256), live: a.IncludePartial, maxTurns: a.MaxTurns, stderr: e.stderr,
		params: vigil.SessionParams{
			Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel, Cwd: cwd,
			Permissions: vigil.Permissions{Mode: vigil.PermissionMode(mode), Allow: a.AllowedTools, Deny: a.DisallowedTools},
		},
	}
	defer sess.close()
	model := provs.model
	if model == "" {
		model = provs.name
	}
	m := ccwire.NewMapper("", model, cwd, newUUID)
	if a.PermissionMode != "" {
		m.PermissionMode = a.PermissionMode
	}
	baseTools := []string{"Agent", "Bash", "Read", "Write", "Edit", "SendMessage", "TaskOutput", "TaskStop"}
	m.Tools = baseTools
	m.Partial, m.MaxTurns = a.IncludePartial, a.MaxTurns
	// The program's MCP servers (--mcp-config, and the Agent SDK's
	// mcpServers in its initialize request): their tools join the
	// session's as mcp__<server>__<tool>; one that cannot be reached is
	// reported failed in system/init, as the CLI does.
	tools := mcpclient.New(logger)
	defer tools.Close()
	addServers := func(ctx context.Context, configs map[string]mcpclient.Config) bool {
		applied := true
		for _, st := range tools.Add(ctx, configs, os.Environ()) {
			m.MCPServers = append(m.MCPServers, ccwire.Frame{"name": st.Name, "status": st.Status})
			if st.Err != nil {
				applied = false
				fmt.Fprintf(e.stderr, "vigil: MCP server %s: %v\n", st.Name, st.Err)
			}
		}
		m.Tools = append(m.Tools[:len(baseTools):len(baseTools)], tools.Names()...)
		if len(tools.Names()) > 0 {
			sess.setTools(tools)
		}
		return applied
	}
	if len(mcpConfigs) > 0 {
		addServers(ctx, mcpConfigs)
	}
	srv := &ccwire.Server{Args: a, Session: sess, Mapper: m, Stderr: e.stderr,
		MCPServers: func(ctx context.Context, raw json.RawMessage) bool {
			configs, err := mcpclient.ParseServers(raw)
			if err != nil {
				fmt.Fprintf(e.stderr, "vigil: %v\n", err)
				return false
			}
			return addServers(ctx, configs)
		},
		SDKServer: func(ctx context.Context, name string, t mcp.Transport) error {
			return tools.AddTransport(ctx, name, t) // the set is safe for concurrent use
		},
		ToolsChanged: func() {
			m.Tools = append(m.Tools[:len(baseTools):len(baseTools)], tools.Names()...)
			if len(tools.Names()) > 0 {
				sess.setTools(tools)
			}
		}}
	if err := srv.Serve(ctx, os.Stdin, e.stdout); errors.Is(err, ccwire.ErrLastResultError) {
		return &exitError{code: 1} // the result said what went wrong, as the CLI's does
	} else if err != nil {
		return err
	}
	return nil
}

// sdkSession is the vigil session behind a stream-json process.
type sdkSession struct {
	rt     *vigil.Runtime
	params vigil.SessionParams
	resume vigil.SessionID
	events chan ccwire.Update
	live   bool // pass live text on (--include-partial-messages)
	// maxTurns bounds each prompt's run (--max-turns; 0: no bound).
	maxTurns int
	// tools are the program's MCP servers' tools, or nil.
	tools  vigil.ToolSet
	stderr io.Writer

	mu       sync.Mutex
	id       vigil.SessionID
	sub      *vigil.Subscription
	replayed int64
}

// Prompt creates the session with its first prompt (or takes over the
// resumed one), subscribes to it, and queues later prompts.
func (s *sdkSession) Prompt(ctx context.Context, prompt string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" {
		_, err := s.rt.Prompt(ctx, s.id, &vigil.PromptParams{Text: prompt, MaxRounds: s.maxTurns})
		return string(s.id), err
	}
	if s.resume != "" {
		d, err := s.rt.SessionGet(ctx, s.resume, nil)
		if err != nil {
			return "", fmt.Errorf("resume %s: %w", s.resume, err)
		}
		s.replayed = d.Seq
		s.id = s.resume
	} else {
		p := s.params
		p.Title = text.FirstLine(prompt, 60)
		if s.tools == nil {
			// With MCP tools the prompt waits for them (below), so that
			// the first round is offered them.
			p.Prompt, p.MaxRounds = prompt, s.maxTurns
		}
		sess, err := s.rt.CreateSession(ctx, &p)
		if err != nil {
			return "", err
		}
		s.id = sess.ID
	}
	if s.tools != nil {
		if err := s.rt.SetTools(s.id, s.tools); err != nil {
			return "", fmt.Errorf("the MCP servers' tools: %w", err)
		}
	}
	// From the first event, also when resuming: the server maps the
	// events before the takeover without printing them (Replayed).
	sub, err := s.rt.Subscribe(ctx, &vigil.SubscribeParams{Session: s.id})
	if err != nil {
		return "", fmt.Errorf("subscribe to %s: %w", s.id, err)
	}
	s.sub = sub
	go s.forward(sub)
	if s.resume != "" || s.tools != nil {
		if _, err := s.rt.Prompt(ctx, s.id, &vigil.PromptParams{Text: prompt, MaxRounds: s.maxTurns}); err != nil {
			return "", err
		}
	}
	return string(s.id), nil
}

// forward decodes the subscription's events for the server.
func (s *sdkSession) forward(sub *vigil.Subscription) {
	defer close(s.events)
	for ev := range sub.C {
		if ev.Live {
			var d vigil.TextDelta
			if !s.live || ev.Type != vigil.LiveTextType || json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			s.events <- ccwire.Update{Live: &ccwire.LiveText{Agent: core.AgentID(d.Agent), Call: d.Call, Text: d.Text, Reset: d.Reset, Dropped: d.Dropped}}
			continue
		}
		body, err := core.DecodeBody(ev.Type, ev.Data)
		if err != nil {
			continue // a type this build does not know: nothing to print
		}
		// The payloads' times (a message's sent, a notification's written,
		// an item's enqueued, a task's started) are the event's, also in
		// a resumed session's events logged before bodies carried them.
		core.Stamp(body, ev.At)
		s.events <- ccwire.Update{Event: core.Event{Seq: ev.Seq, At: ev.At, Body: body}}
	}
}

// setTools offers the program's MCP tools: to the session from its first
// prompt on, or now when it exists.
func (s *sdkSession) setTools(ts vigil.ToolSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = ts
	if s.id != "" {
		if err := s.rt.SetTools(s.id, ts); err != nil {
			fmt.Fprintf(s.stderr, "vigil: the MCP servers' tools could not be offered: %v\n", err)
		}
	}
}

// Interrupt cancels the main agent's run, if one is in progress.
func (s *sdkSession) Interrupt(ctx context.Context) error {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	if id == "" {
		return nil
	}
	err := s.rt.CancelRun(ctx, id, &vigil.AgentActionParams{Agent: string(vigil.MainAgent), By: "sdk"})
	if vigil.CodeOf(err) == vigil.CodeConflict {
		return nil // no run in progress: nothing to interrupt
	}
	return err
}

// Answer answers a permission request.
func (s *sdkSession) Answer(ctx context.Context, ap core.ApprovalID, allow bool, reason string, input json.RawMessage) error {
	return s.rt.AnswerApproval(ctx, s.id, &vigil.AnswerApprovalParams{Approval: vigil.ApprovalID(ap), Allow: allow, By: "sdk", Reason: reason, Input: input})
}

// SetMode changes the permission mode: of the session to be created, or
// of the session.
func (s *sdkSession) SetMode(ctx context.Context, mode string) error {
	s.mu.Lock()
	id := s.id
	if id == "" && s.resume == "" {
		s.params.Permissions.Mode = vigil.PermissionMode(mode)
	}
	s.mu.Unlock()
	if id == "" && s.resume != "" {
		id = s.resume
	}
	if id == "" {
		return nil
	}
	return s.rt.SetPermissionMode(ctx, id, &vigil.SetPermissionModeParams{Mode: vigil.PermissionMode(mode), By: "sdk"})
}

// Replayed is the resumed session's last event before this process.
func (s *sdkSession) Replayed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replayed
}

// Events delivers the session's events.
func (s *sdkSession) Events() <-chan ccwire.Update { return s.events }

// Quiescent waits until the session is quiescent.
func (s *sdkSession) Quiescent(ctx context.Context) (int64, error) {
	if err := s.rt.WaitQuiescent(ctx, s.id); err != nil {
		if errors.Is(err, vigil.ErrNotFound) {
			return 0, fmt.Errorf("session %s is held by another vigil process", s.id)
		}
		return 0, err
	}
	d, err := s.rt.SessionGet(ctx, s.id, nil)
	if err != nil {
		return 0, err
	}
	return d.Seq, nil
}

func (s *sdkSession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub != nil {
		s.sub.Close()
	}
}

// newUUID returns a random version 4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
