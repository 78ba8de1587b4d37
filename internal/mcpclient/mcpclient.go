// Package mcpclient connects a vigil session to MCP servers a program
// names, the way Claude Code's --mcp-config does, and offers their tools to
// the session's models as a vigil.ToolSet: each tool under the name
// mcp__<server>__<tool>, each call forwarded to its server with the
// official go-sdk client.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/cmdenv"
)

// Config is one MCP server as an --mcp-config file names it: a program
// to run on stdio (Command, Args, Env), or an endpoint (Type "http" or
// "sse", URL, Headers). Type "sdk" is a server the Agent SDK hosts in the
// program's own process, which this package does not reach.
type Config struct {
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// ParseConfigs reads --mcp-config values, each a JSON text or the path of
// a JSON file holding {"mcpServers": {name: Config}}; a later value's
// server replaces an earlier one of the same name.
func ParseConfigs(values []string) (map[string]Config, error) {
	out := map[string]Config{}
	for _, v := range values {
		raw := []byte(strings.TrimSpace(v))
		if len(raw) == 0 || raw[0] != '{' {
			b, err := os.ReadFile(v)
			if err != nil {
				return nil, fmt.Errorf("--mcp-config %s: %w", v, err)
			}
			raw = b
		}
		var f struct {
			MCPServers map[string]Config `json:"mcpServers"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("--mcp-config: %w", err)
		}
		for name, c := range f.MCPServers {
			if !validName.MatchString(name) {
				return nil, fmt.Errorf("--mcp-config: server name %q: want letters, digits, _ and -", name)
			}
			out[name] = c
		}
	}
	return out, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Status is how connecting to one server went, as system/init reports it.
type Status struct {
	Name string
	// Status is "connected" or "failed".
	Status string
	Err    error
}

// Set is the tools of the connected servers. It implements vigil.ToolSet.
type Set struct {
	log      *slog.Logger
	mu       sync.Mutex
	sessions map[string]*mcp.ClientSession
	specs    []chat.ToolSpec
	targets  map[string]target
}

type target struct{ server, tool string }

// ToolName is the name a server's tool is offered as: mcp__<server>__<tool>,
// as Claude Code names it.
func ToolName(server, tool string) string { return "mcp__" + server + "__" + tool }

// Connect starts or reaches every server of configs and lists its tools.
// A server that cannot be reached is reported failed and left out; the
// others serve. environ is the environment a stdio server's own comes
// from (os.Environ()); only cmdenv's allowlist of it passes, and the
// server's Env on top.
func Connect(ctx context.Context, configs map[string]Config, environ []string, log *slog.Logger) (*Set, []Status) {
	s := New(log)
	return s, s.Add(ctx, configs, environ)
}

// New returns a set with no server.
func New(log *slog.Logger) *Set {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{log: log, sessions: map[string]*mcp.ClientSession{}, targets: map[string]target{}}
}

// Add connects the servers of configs (see Connect) and reports how each
// went; a server of a name the set has is left as it is, reported failed.
func (s *Set) Add(ctx context.Context, configs map[string]Config, environ []string) []Status {
	log := s.log
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	slices.Sort(names)
	var statuses []Status
	for _, name := range names {
		s.mu.Lock()
		_, dup := s.sessions[name]
		s.mu.Unlock()
		if dup {
			statuses = append(statuses, Status{Name: name, Status: "failed", Err: errors.New("a server of that name is connected already")})
			continue
		}
		if err := s.connect(ctx, name, configs[name], environ); err != nil {
			log.Warn("mcp: a server could not be reached; its tools are left out", "server", name, "err", err)
			statuses = append(statuses, Status{Name: name, Status: "failed", Err: err})
			continue
		}
		statuses = append(statuses, Status{Name: name, Status: "connected"})
	}
	return statuses
}

// ParseServers reads a {name: Config} object, as the Agent SDK's
// initialize request carries its mcpServers.
func ParseServers(raw json.RawMessage) (map[string]Config, error) {
	var m map[string]Config
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("mcpServers: %w", err)
	}
	for name := range m {
		if !validName.MatchString(name) {
			return nil, fmt.Errorf("mcpServers: server name %q: want letters, digits, _ and -", name)
		}
	}
	return m, nil
}

func (s *Set) connect(ctx context.Context, name string, c Config, environ []string) error {
	var tr mcp.Transport
	switch c.Type {
	case "", "stdio":
		if c.Command == "" {
			return errors.New("a stdio server needs a command")
		}
		cmd := exec.Command(c.Command, c.Args...)
		var set []string
		for k, v := range c.Env {
			set = append(set, k+"="+v)
		}
		slices.Sort(set)
		cmd.Env = cmdenv.Build(environ, cmdenv.Spec{Set: set})
		tr = &mcp.CommandTransport{Command: cmd}
	case "http", "sse":
		if c.URL == "" {
			return fmt.Errorf("a %s server needs a url", c.Type)
		}
		client := &http.Client{Transport: headers{h: c.Headers, next: http.DefaultTransport}}
		if c.Type == "sse" {
			tr = &mcp.SSEClientTransport{Endpoint: c.URL, HTTPClient: client}
		} else {
			tr = &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: client, MaxRetries: -1}
		}
	case "sdk":
		return errors.New("a server the Agent SDK hosts in the program is reached through the SDK's control messages, not a config")
	default:
		return fmt.Errorf("server type %q is not supported (want stdio, http or sse)", c.Type)
	}
	return s.connectTransport(ctx, name, tr)
}

// AddTransport connects the server name over tr (an Agent SDK-hosted
// server, say) and lists its tools.
func (s *Set) AddTransport(ctx context.Context, name string, tr mcp.Transport) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("server name %q: want letters, digits, _ and -", name)
	}
	s.mu.Lock()
	_, dup := s.sessions[name]
	s.mu.Unlock()
	if dup {
		return errors.New("a server of that name is connected already")
	}
	return s.connectTransport(ctx, name, tr)
}

// ConnectTimeout bounds connecting to one server and listing its tools.
const ConnectTimeout = 30 * time.Second

func (s *Set) connectTransport(ctx context.Context, name string, tr mcp.Transport) error {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "vigil", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	var specs []chat.ToolSpec
	targets := map[string]target{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			cs.Close()
			return fmt.Errorf("list tools: %w", err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || t.InputSchema == nil {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		n := ToolName(name, t.Name)
		specs = append(specs, chat.ToolSpec{Name: n, Description: t.Description, InputSchema: schema})
		targets[n] = target{server: name, tool: t.Name}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[name] = cs
	s.specs = append(s.specs, specs...)
	for k, v := range targets {
		s.targets[k] = v
	}
	return nil
}

// Specs returns the servers' tools.
func (s *Set) Specs() []chat.ToolSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.specs)
}

// Names returns the tools' names, in order.
func (s *Set) Names() []string {
	var out []string
	for _, sp := range s.Specs() {
		out = append(out, sp.Name)
	}
	return out
}

// Call forwards a call to its server; the result is the text of its
// content, an error when the server says so or cannot be reached.
func (s *Set) Call(ctx context.Context, name string, input json.RawMessage) (string, bool) {
	s.mu.Lock()
	t, ok := s.targets[name]
	cs := s.sessions[t.server]
	s.mu.Unlock()
	if !ok || cs == nil {
		return fmt.Sprintf("Error: no MCP tool %q", name), true
	}
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.tool, Arguments: input})
	if err != nil {
		return fmt.Sprintf("Error: MCP server %s: %v", t.server, err), true
	}
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		default:
			b, _ := json.Marshal(c)
			parts = append(parts, string(b))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		parts = append(parts, string(b))
	}
	return strings.Join(parts, "\n"), res.IsError
}

// Close ends every server's session (and stops stdio servers).
func (s *Set) Close() {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = map[string]*mcp.ClientSession{}
	s.mu.Unlock()
	for name, cs := range sessions {
		if err := cs.Close(); err != nil {
			s.log.Debug("mcp: closing a server's session", "server", name, "err", err)
		}
	}
}

// headers adds a server's headers to every request.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.h {
			r.Header.Set(k, v)
		}
	}
	return t.next.RoundTrip(r)
}
