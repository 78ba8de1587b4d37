// Package mcpserver is vigil's MCP edge: it gives any agent that speaks the
// Model Context Protocol (Claude Code, Codex, an IDE) durable background
// agents it can spawn, message, wait for and stop, over stdio or streamable
// HTTP, with the official Go SDK.
//
// Every spawn_agent creates a vigil session whose main agent is the MCP
// caller itself (vigil.SessionParams.Caller): the caller never runs a model,
// and the notifications of its agents wait in its durable inbox until it
// acknowledges them. The spawned agent is that session's background
// subagent. Task ids are global: "<session>/<task>", e.g. "k3v9x2m4pq/t1".
//
// The wait tool is the heart of it: it blocks server-side (subscribed to the
// sessions' committed events, never polling) until a notification arrives or
// its timeout passes, and returns the notifications still unacknowledged. A
// notification leaves the inbox only when the caller acknowledges it (the
// ack argument of its next wait, or the ack tool), so a client that
// disconnects, or a vigil that is killed, before the caller read a result
// loses nothing, and an acknowledged notification never comes back.
//
// # Identity and scoping
//
// A caller sees and acts only on the sessions whose owner is its identity;
// anyone else's ids answer "no such task", so their existence does not
// leak. The identity of a tool call is, in order:
//
//  1. its owner_key argument, when given;
//  2. the connection's key: Options.Owner for stdio (vigil mcp --owner), the
//     Vigil-Owner request header for HTTP;
//  3. the MCP session: the Mcp-Session-Id of an HTTP session, or for stdio
//     (which has no session id) a random key made for the connection.
//
// A key from 3 ends with its connection; pass an explicit key (1 or 2) to
// find your tasks again after a reconnect or a restart. spawn_agent returns
// the key it used.
package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
)

// OwnerHeader is the HTTP request header that names a caller's owner key on
// the streamable HTTP transport.
const OwnerHeader = "Vigil-Owner"

// Options configures a Server. Zero fields mean defaults.
type Options struct {
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Owner is the owner key of stdio connections whose tool calls give
	// none; empty means a random key per connection.
	Owner string
	// Provider, Model and SubagentModel are the defaults of spawned agents
	// that name none (Model and SubagentModel only when the provider is the
	// default one). An empty Provider is the runtime's default.
	Provider      string
	Model         string
	SubagentModel string
	// Cwd is the working directory of spawned agents that give none.
	Cwd string
	// Permissions are the tool rules of spawned agents; a zero mode means
	// auto (allow rules decide, the rest is denied: nobody answers
	// permission requests over MCP).
	Permissions vigil.Permissions
	// DefaultWait is the timeout of a wait that gives none (2m); MaxWait
	// caps it (1h).
	DefaultWait time.Duration
	MaxWait     time.Duration
	// SessionTimeout closes HTTP MCP sessions idle this long (24h).
	SessionTimeout time.Duration
	// NewKey makes the owner keys of connections that have none; the
	// default is random.
	NewKey func() string
	// Version is reported to clients as the server's version.
	Version string
}

// Server serves vigil's MCP tools over one Runtime. Its methods are safe for
// concurrent use.
type Server struct {
	rt   *vigil.Runtime
	opts Options
	log  *slog.Logger

	ctx    context.Context // ends at Close: waits in flight return
	cancel context.CancelFunc

	httpOnce sync.Once
	httpSrv  *mcp.Server
	httpH    http.Handler

	mu      sync.Mutex
	spawned map[string]chan struct{}       // owner -> closed at its next spawn
	shown   map[string]map[string]struct{} // owner -> ids a wait returned, not yet acknowledged
	spawnMu sync.Mutex                     // serialises the name check and the creation of spawns
	servers map[*mcp.Server]struct{}       // stdio servers running

	// onBlock, when set (by tests), is called when a wait blocks.
	onBlock func(owner string)
}

// New returns a Server for rt.
func New(rt *vigil.Runtime, opts *Options) *Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Permissions.Mode == "" {
		o.Permissions.Mode = vigil.PermAuto
	}
	if o.DefaultWait <= 0 {
		o.DefaultWait = 2 * time.Minute
	}
	if o.MaxWait <= 0 {
		o.MaxWait = time.Hour
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 24 * time.Hour
	}
	if o.NewKey == nil {
		o.NewKey = randomKey
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		rt: rt, opts: o, log: o.Logger, ctx: ctx, cancel: cancel,
		spawned: map[string]chan struct{}{}, shown: map[string]map[string]struct{}{},
		servers: map[*mcp.Server]struct{}{},
	}
}

// randomKey returns 128 random bits as 26 base32 characters.
func randomKey() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 26)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "mcp-" + string(b)
}

// instructions tell the client's model how to use the tools.
const instructions = `vigil runs durable background agents for you. spawn_agent starts one and returns its task id ("<session>/<task>") at once.
Then call wait: it blocks until one of your agents reports (or its timeout passes) and returns the notifications, each with its reply.
Pass the ids of the notifications you got in the ack argument of your next wait (or call ack): a notification stays until you acknowledge it,
so nothing is lost if you disconnect, and it never comes back once acknowledged. send_message talks to a running or finished agent and tells you
what happened to the message (joined, queued-behind-stop, resumed or rejected). Prefer blocking in wait over ending your turn.`

// newMCP returns an SDK server with the tools, whose calls without an
// explicit owner key get theirs from connKey.
func (s *Server) newMCP(connKey func(*mcp.CallToolRequest) string) *mcp.Server {
	ms := mcp.NewServer(&mcp.Implementation{Name: "vigil", Title: "vigil: durable background agents", Version: s.opts.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: s.log})
	s.addTools(ms, connKey)
	return ms
}

// Run serves one MCP connection on t (the SDK's StdioTransport, or any
// other) until the client disconnects or ctx ends. Its calls that give no
// owner key use Options.Owner, else a random key made for this connection.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	key := s.opts.Owner
	if key == "" {
		key = s.opts.NewKey()
		s.log.Info("mcp connection without an owner key: its tasks are scoped to this connection (pass --owner or owner_key to keep them across restarts)", "owner_key", key)
	}
	ms := s.newMCP(func(*mcp.CallToolRequest) string { return key })
	s.mu.Lock()
	s.servers[ms] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.servers, ms)
		s.mu.Unlock()
	}()
	if err := ms.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// Handler returns the streamable HTTP handler of the tools, to mount at
// /mcp behind the server's bearer token. Its calls that give no owner key
// use the Vigil-Owner header, else the MCP session id.
func (s *Server) Handler() http.Handler {
	s.httpOnce.Do(func() {
		ms := s.newMCP(func(req *mcp.CallToolRequest) string {
			if req.Extra != nil && req.Extra.Header != nil {
				if k := req.Extra.Header.Get(OwnerHeader); k != "" {
					return k
				}
			}
			if req.Session != nil {
				return req.Session.ID()
			}
			return ""
		})
		s.mu.Lock()
		s.httpSrv = ms
		s.mu.Unlock()
		s.httpH = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms },
			// The Host check is server.Server's, the one edge every route
			// shares; the SDK's own would refuse a name it allows with a
			// plain-text 403. Serve Handler only behind server.Server.
			&mcp.StreamableHTTPOptions{Logger: s.log, SessionTimeout: s.opts.SessionTimeout, DisableLocalhostProtection: true})
	})
	return s.httpH
}

// Close ends the waits in flight (they answer that vigil is shutting down)
// and closes the MCP sessions. It does not close the runtime. Safe to call
// twice.
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	servers := make([]*mcp.Server, 0, len(s.servers)+1)
	for ms := range s.servers {
		servers = append(servers, ms)
	}
	if s.httpSrv != nil {
		servers = append(servers, s.httpSrv)
	}
	s.mu.Unlock()
	var errs []error
	for _, ms := range servers {
		for ss := range ms.Sessions() {
			if err := ss.Close(); err != nil && !errors.Is(err, io.EOF) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close mcp sessions: %w", err)
	}
	return nil
}

// spawnSignal returns a channel closed at the owner's next spawn.
func (s *Server) spawnSignal(owner string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.spawned[owner]
	if ch == nil {
		ch = make(chan struct{})
		s.spawned[owner] = ch
	}
	return ch
}

// spawnedNow wakes the owner's waits: a new task is in their scope.
func (s *Server) spawnedNow(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.spawned[owner]; ch != nil {
		close(ch)
		delete(s.spawned, owner)
	}
}

// markShown records the ids a wait returned and reports which of them an
// earlier wait had returned already.
func (s *Server) markShown(owner string, ids []string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.shown[owner]
	if set == nil {
		set = map[string]struct{}{}
		s.shown[owner] = set
	}
	repeat := map[string]bool{}
	for _, id := range ids {
		if _, ok := set[id]; ok {
			repeat[id] = true
		}
		set[id] = struct{}{}
	}
	return repeat
}

// forgetShown drops acknowledged ids.
func (s *Server) forgetShown(owner string, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.shown[owner]
	for _, id := range ids {
		delete(set, id)
	}
	if len(set) == 0 {
		delete(s.shown, owner)
	}
}
