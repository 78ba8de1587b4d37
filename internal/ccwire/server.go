package ccwire

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/core"
)

// Version is the Claude Code version this protocol follows, reported in
// system/init and the initialize response.
const Version = "2.1.328"

// Session is the vigil session a Server drives. The first Prompt creates
// it (or, resuming, queues to it); Events then carries its events in order.
type Session interface {
	// Prompt queues a user prompt and returns the session's id.
	Prompt(ctx context.Context, text string) (string, error)
	// Interrupt cancels the main agent's run in progress, if any.
	Interrupt(ctx context.Context) error
	// Answer answers a permission request; input, when allowing and not
	// nil, is the tool input to run the call with (the program's
	// updatedInput).
	Answer(ctx context.Context, approval core.ApprovalID, allow bool, reason string, input json.RawMessage) error
	// SetMode changes the session's permission mode (vigil's words: ask,
	// accept-edits, auto, bypass), also before the session exists.
	SetMode(ctx context.Context, mode string) error
	// Events delivers the session's events, and live text of the model
	// calls in flight, once the session exists; it is closed when the
	// session's subscription ends.
	Events() <-chan Update
	// Quiescent waits until nothing is left to run (no run, no live task,
	// empty inboxes) and returns the sequence number of the last event.
	Quiescent(ctx context.Context) (int64, error)
	// Replayed is, for a resumed session, the sequence number of its last
	// event before this process took it over: Events delivers the
	// session's events from its first, and those up to Replayed are
	// mapped, so that the mapper knows the session's agents and tasks,
	// but not printed. It is 0 for a new session.
	Replayed() int64
}

// Update is one thing a session delivers: a committed event, or, when Live
// is not nil, a piece of a model's text while its call is in flight.
type Update struct {
	Event core.Event
	Live  *LiveText
}

// LiveText is a piece of text of a model call in flight (vigil's
// text.delta live event).
type LiveText struct {
	Agent core.AgentID
	Call  string
	Text  string
	// Reset says the call is retried: its text so far is void. Dropped
	// says pieces were dropped before this one; the committed message has
	// them.
	Reset, Dropped bool
}

// Server speaks Claude Code's stream-json protocol on in and out for one
// vigil session.
type Server struct {
	// Args are the process's arguments.
	Args *Args
	// Session is the session driven.
	Session Session
	// Mapper makes the frames; its Session field is set at the first
	// prompt.
	Mapper *Mapper
	// Stderr gets diagnostics.
	Stderr io.Writer
	// MCPServers, when set, takes the MCP servers of an initialize request
	// (the Agent SDK's mcpServers, a {name: config} object) before the
	// first prompt, and reports whether they were applied.
	MCPServers func(ctx context.Context, servers json.RawMessage) bool
	// SDKServer, when set, connects vigil to an MCP server the Agent SDK
	// hosts in the program (named in the initialize request's
	// sdkMcpServers), over t; prompts wait until every one is connected
	// or has failed. It runs on a goroutine of its own.
	SDKServer func(ctx context.Context, name string, t mcp.Transport) error
	// ToolsChanged, when set, is called on Serve's goroutine once the
	// SDK-hosted servers are connected, before the prompts that waited
	// for them: the caller offers their tools (Mapper.Tools, the session).
	ToolsChanged func()

	mu      sync.Mutex
	out     *json.Encoder
	pending map[string]core.ApprovalID // can_use_tool request id -> approval
	reqSeq  int
	lastErr bool // the last result printed was an error
	// mcpCalls are the requests to SDK-hosted servers waiting for their
	// answers, by control request id.
	mcpCalls map[string]mcpCall
	// sdkReady is closed once the SDK-hosted servers are connected; until
	// then (not nil) prompts wait in queued.
	sdkReady chan struct{}
	// sdkStatus is written by the goroutine that connects the SDK-hosted
	// servers, and read by Serve once sdkReady is closed.
	sdkStatus []Frame
	queued    []inFrame
	// sdkConns are the connections to SDK-hosted servers, closed with
	// stdin (stdinClosed); under mu.
	sdkConns    []*sdkConn
	stdinClosed bool
}

// inFrame is a line read from the program.
type inFrame struct {
	Type      string          `json:"type"`
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	Response  *struct {
		Subtype   string          `json:"subtype"`
		RequestID string          `json:"request_id"`
		Response  json.RawMessage `json:"response"`
		Error     string          `json:"error"`
	} `json:"response"`
	Message *struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

// Serve runs until in is closed and the session is quiescent, or ctx ends.
// It returns ErrLastResultError when the last result it printed was an
// error, as the CLI exits 1 then.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	s.out = json.NewEncoder(out)
	s.out.SetEscapeHTML(false)
	s.pending = map[string]core.ApprovalID{}
	s.mu.Lock()
	s.mcpCalls = map[string]mcpCall{}
	s.mu.Unlock()
	lines := make(chan inFrame)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			var f inFrame
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				fmt.Fprintf(s.Stderr, "vigil: ignoring a line that is not JSON: %v\n", err)
				continue
			}
			if r := f.Response; f.Type == "control_response" && r != nil && s.mcpAnswered(r.RequestID, r.Subtype, r.Response, r.Error) {
				continue
			}
			select {
			case lines <- f:
			case <-ctx.Done():
				return
			}
		}
		s.closeSDKConns()
		readErr <- sc.Err()
	}()
	var events <-chan Update
	started := false
	eof := false
	var last int64 = -1
	var unanswered []core.Approval // of a resumed session, while replaying
	quiet := make(chan int64, 1)
	quietErr := make(chan error, 1)
	waitQuiet := func() {
		go func() {
			seq, err := s.Session.Quiescent(ctx)
			if err != nil {
				quietErr <- err
				return
			}
			quiet <- seq
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.sdkReadyChan():
			// The SDK-hosted servers are connected: their tools are
			// offered, and the prompts that waited for them go in, in
			// order.
			s.sdkReady = nil
			s.Mapper.MCPServers = append(s.Mapper.MCPServers, s.sdkStatus...)
			if s.ToolsChanged != nil {
				s.ToolsChanged()
			}
			queued := s.queued
			s.queued = nil
			for _, f := range queued {
				if err := s.handle(ctx, f, &started); err != nil {
					return err
				}
			}
			if started && events == nil {
				events = s.Session.Events()
			}
			if eof {
				if !started {
					return nil
				}
				waitQuiet()
			}
		case err := <-readErr:
			if err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
			eof, lines = true, nil
			switch {
			case started:
				waitQuiet()
			case s.sdkReady == nil:
				return nil // no prompt came, none waits
			}
		case err := <-quietErr:
			return fmt.Errorf("wait for the session to finish: %w", err)
		case seq := <-quiet:
			last = seq
			if s.Mapper.lastSeq >= last {
				return s.ended()
			}
		case f := <-lines:
			if err := s.handle(ctx, f, &started); err != nil {
				return err
			}
			if started && events == nil {
				events = s.Session.Events()
			}
		case u, ok := <-events:
			if !ok {
				return errors.New("the session's event stream ended")
			}
			if u.Live != nil {
				for _, fr := range s.Mapper.Live(*u.Live) {
					if err := s.write(fr); err != nil {
						return err
					}
				}
				continue
			}
			e := u.Event
			s.Mapper.lastSeq = e.Seq
			frames := s.Mapper.Map(e)
			if replayed := s.Session.Replayed(); e.Seq <= replayed {
				// Printed by an earlier process; a permission request it
				// left unanswered is asked again once the replay is done.
				switch b := e.Body.(type) {
				case *core.ApprovalRequested:
					unanswered = append(unanswered, b.Approval)
				case *core.ApprovalResolved:
					unanswered = slices.DeleteFunc(unanswered, func(a core.Approval) bool { return a.ID == b.Approval })
				}
				if e.Seq == replayed {
					for _, a := range unanswered {
						if err := s.askApproval(a); err != nil {
							return err
						}
					}
					unanswered = nil
				}
				continue
			}
			for _, fr := range frames {
				if err := s.write(fr); err != nil {
					return err
				}
			}
			if a, ok := e.Body.(*core.ApprovalRequested); ok {
				if err := s.askApproval(a.Approval); err != nil {
					return err
				}
			}
			if eof && last >= 0 && e.Seq >= last {
				return s.ended()
			}
		}
	}
}

// ErrLastResultError is what Serve returns when the session's last result
// was an error (interrupted, out of turns, failed): the CLI then exits
// with status 1, and the Agent SDK reports that result's error.
var ErrLastResultError = errors.New("the last result was an error")

// ended is Serve's end once the session is done.
func (s *Server) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr {
		return ErrLastResultError
	}
	return nil
}

func (s *Server) write(f Frame) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f["type"] == "result" {
		s.lastErr = f["is_error"] == true
	}
	if err := s.out.Encode(f); err != nil {
		return fmt.Errorf("write stdout: %w", err)
	}
	return nil
}

// sdkReadyChan is what Serve waits on for the SDK-hosted servers: nil
// (never ready) when none is being connected.
func (s *Server) sdkReadyChan() <-chan struct{} { return s.sdkReady }

func (s *Server) handle(ctx context.Context, f inFrame, started *bool) error {
	if f.Type == "user" && s.sdkReady != nil {
		s.queued = append(s.queued, f) // its tools are not there yet
		return nil
	}
	switch f.Type {
	case "user":
		if f.Message == nil {
			return errors.New("a user frame without a message")
		}
		text, err := contentText(f.Message.Content)
		if err != nil {
			return err
		}
		id, err := s.Session.Prompt(ctx, text)
		if err != nil {
			return fmt.Errorf("prompt: %w", err)
		}
		s.Mapper.Session = id
		*started = true
	case "control_request":
		return s.control(ctx, f)
	case "control_response":
		if f.Response == nil {
			return nil
		}
		return s.answered(ctx, f.Response.RequestID, f.Response.Subtype, f.Response.Response, f.Response.Error)
	case "control_cancel_request", "keep_alive", "update_environment_variables":
	default:
		fmt.Fprintf(s.Stderr, "vigil: ignoring a %q frame\n", f.Type)
	}
	return nil
}

// contentText reads a user message's content: a string, or text blocks.
func contentText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", fmt.Errorf("user message content: %w", err)
	}
	var parts []string
	for _, b := range blocks {
		if b.Type != "text" {
			return "", fmt.Errorf("user message content of type %q is not supported (text only)", b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

func (s *Server) control(ctx context.Context, f inFrame) error {
	var req struct {
		Subtype    string          `json:"subtype"`
		Mode       string          `json:"mode"`
		MCPServers json.RawMessage `json:"mcpServers"`
		SDKServers []string        `json:"sdkMcpServers"`
	}
	if err := json.Unmarshal(f.Request, &req); err != nil {
		return s.controlError(f.RequestID, fmt.Sprintf("bad control request: %v", err))
	}
	switch req.Subtype {
	case "initialize":
		resp := Frame{}
		if len(req.MCPServers) > 0 && string(req.MCPServers) != "null" && string(req.MCPServers) != "{}" {
			resp["mcp_servers_applied"] = s.MCPServers != nil && s.MCPServers(ctx, req.MCPServers)
		}
		if len(req.SDKServers) > 0 && s.SDKServer == nil {
			fmt.Fprintln(s.Stderr, "vigil: MCP servers hosted by the Agent SDK in the program (createSdkMcpServer) are not supported here; their tools are not offered")
		}
		if len(req.SDKServers) > 0 && s.SDKServer != nil && s.sdkReady == nil {
			// Connected once the program has the answer below: the
			// prompts wait for them.
			ready := make(chan struct{})
			s.sdkReady = ready
			s.sdkStatus = nil
			defer func() {
				go func() {
					// sdkStatus is Serve's again once ready is closed.
					defer close(ready)
					for _, name := range req.SDKServers {
						cctx, cancel := context.WithTimeout(ctx, sdkConnectTimeout)
						status := "connected"
						if err := s.SDKServer(cctx, name, &sdkTransport{s: s, name: name}); err != nil {
							status = "failed"
							fmt.Fprintf(s.Stderr, "vigil: SDK MCP server %s: %v\n", name, err)
						}
						cancel()
						s.sdkStatus = append(s.sdkStatus, Frame{"name": name, "status": status})
					}
				}()
			}()
		}
		out := Frame{
			"commands": []any{}, "agents": []any{Frame{"name": "general-purpose", "description": "A vigil subagent"}},
			"output_style": "default", "available_output_styles": []string{"default"},
			"models": []any{}, "account": Frame{}, "pid": os.Getpid(), "claude_code_version": Version,
			"current_permission_mode": s.Mapper.PermissionMode, "session_state": "idle", "capabilities": []string{},
		}
		for k, v := range resp {
			out[k] = v
		}
		return s.controlOK(f.RequestID, out)
	case "interrupt":
		if err := s.Session.Interrupt(ctx); err != nil {
			return s.controlError(f.RequestID, err.Error())
		}
		return s.controlOK(f.RequestID, Frame{"still_queued": []any{}})
	case "set_permission_mode":
		return s.setMode(ctx, f.RequestID, req.Mode)
	}
	return s.controlError(f.RequestID, fmt.Sprintf("control request %q is not supported by vigil", req.Subtype))
}

// setMode answers set_permission_mode as the CLI does: the new mode, or an
// error with the CLI's error_code.
func (s *Server) setMode(ctx context.Context, id, mode string) error {
	switch mode {
	case "default", "acceptEdits", "bypassPermissions", "dontAsk":
	case "plan", "auto":
		return s.controlErrorCode(id, "invalid_mode", fmt.Sprintf("Cannot set permission mode to %s: vigil has no %s mode (it supports default, acceptEdits, bypassPermissions and dontAsk)", mode, mode))
	default:
		return s.controlErrorCode(id, "invalid_mode", "Cannot set permission mode: must be one of acceptEdits, bypassPermissions, default, dontAsk")
	}
	if mode == "bypassPermissions" && !s.Args.SkipPermissions && s.Args.PermissionMode != "bypassPermissions" {
		return s.controlErrorCode(id, "bypass_not_launched", "Cannot set permission mode to bypassPermissions because the session was not launched with --dangerously-skip-permissions")
	}
	vm, _ := VigilMode(mode)
	if vm == "ask" && s.Args.PermissionPromptTool != "stdio" {
		vm = "auto" // nobody to ask, as at the start
	}
	if err := s.Session.SetMode(ctx, vm); err != nil {
		return s.controlError(id, err.Error())
	}
	s.Mapper.PermissionMode = mode
	return s.controlOK(id, Frame{"mode": mode})
}

func (s *Server) controlErrorCode(id, code, msg string) error {
	return s.write(Frame{"type": "control_response", "response": Frame{"subtype": "error", "request_id": id, "error": msg, "error_code": code}})
}

func (s *Server) controlOK(id string, resp Frame) error {
	return s.write(Frame{"type": "control_response", "response": Frame{"subtype": "success", "request_id": id, "response": resp}})
}

func (s *Server) controlError(id, msg string) error {
	return s.write(Frame{"type": "control_response", "response": Frame{"subtype": "error", "request_id": id, "error": msg}})
}

// sdkConnectTimeout bounds the connection to one SDK-hosted server.
const sdkConnectTimeout = 30 * time.Second

// askApproval sends a can_use_tool request for a permission request.
func (s *Server) askApproval(a core.Approval) error {
	id := s.nextRequestID("vigil-perm")
	s.pending[id] = a.ID
	input := a.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	return s.write(Frame{"type": "control_request", "request_id": id, "request": Frame{
		"subtype": "can_use_tool", "tool_name": a.Tool, "input": input, "tool_use_id": a.UseID,
		"permission_suggestions": []any{}, "decision_reason": a.Reason,
	}})
}

// answered takes the program's answer to a can_use_tool request.
func (s *Server) answered(ctx context.Context, id, subtype string, resp json.RawMessage, errMsg string) error {
	ap, ok := s.pending[id]
	if !ok {
		return nil
	}
	delete(s.pending, id)
	if subtype != "success" {
		if err := s.Session.Answer(ctx, ap, false, "the program's permission callback failed: "+errMsg, nil); err != nil {
			fmt.Fprintf(s.Stderr, "vigil: the answer to permission request %s was not applied: %v\n", ap, err)
		}
		return nil
	}
	var d struct {
		Behavior     string          `json:"behavior"`
		Message      string          `json:"message"`
		UpdatedInput json.RawMessage `json:"updatedInput"`
	}
	if err := json.Unmarshal(resp, &d); err != nil {
		d.Behavior, d.Message = "deny", fmt.Sprintf("unreadable permission answer: %v", err)
	}
	var input json.RawMessage
	if d.Behavior == "allow" && len(d.UpdatedInput) > 0 && string(d.UpdatedInput) != "null" {
		input = d.UpdatedInput // the session keeps the model's when it is the same
	}
	err := s.Session.Answer(ctx, ap, d.Behavior == "allow", d.Message, input)
	if err != nil && input != nil {
		// The updated input was refused (not an object): the call is
		// denied, with the reason, rather than left waiting. (A request
		// already gone fails again, below.)
		fmt.Fprintf(s.Stderr, "vigil: the updated input for permission request %s was refused (%v); the call is denied\n", ap, err)
		err = s.Session.Answer(ctx, ap, false, "the program's updated input was refused: "+err.Error(), nil)
	}
	if err != nil {
		// Most often the request is gone: an interrupt withdrew it.
		fmt.Fprintf(s.Stderr, "vigil: the answer to permission request %s was not applied: %v\n", ap, err)
	}
	return nil
}
