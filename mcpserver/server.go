// Package mcpserver is vigil's MCP edge: it gives any agent that speaks the
// Model Context Protocol (Claude Code, Codex, an IDE) durable background
// agents it can spawn, message, wait for and stop, over stdio or streamable
// HTTP, with the official Go SDK.
//
// Every vigil_spawn creates a vigil session whose main agent is the MCP
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
//  2. the connection's key: Options.Owner for stdio ('vigil mcp' gives the
//     project's key, ProjectKey, unless --owner names one), the Vigil-Owner
//     request header for HTTP;
//  3. the MCP session: the Mcp-Session-Id of an HTTP session, or for stdio
//     without Options.Owner a random key made for the connection.
//
// A key from 3 ends with its connection. spawn returns the key it used.
//
// # Waits that fit the client
//
// A client cancels a tool call that outlasts its own timeout (Codex 0.169
// after 300 s), and its model then sees an error. A wait therefore never
// blocks longer than the client allows (WaitLimit, from the name the client
// gives at initialize, or Options.MaxWait): it returns at the limit as a
// normal result that lists what still runs and says to wait again. The
// limit is in the wait tool's description and schema as each client lists
// them.
//
// # Tasks that end
//
// vigil_close ends a task (stopping it if it runs) and returns what it had
// not acknowledged. A task's name is taken only while the task is live
// (working, or with notifications not acknowledged). A session whose
// tasks have all ended and been acknowledged closes by itself after
// Options.Retention.
package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
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
	// ProjectRules, when set, returns the allow rules a person saved for the
	// project at dir: a spawned agent working there gets them too.
	ProjectRules func(dir string) []string
	// DefaultWait is the timeout of a wait that gives none (2m, or the
	// client's limit when that is shorter).
	DefaultWait time.Duration
	// MaxWait, when set, is the longest wait of every client: the client's
	// own tool-call timeout less a margin ('vigil mcp --max-wait'). Zero
	// learns it from the client's name (WaitLimit). Never more than 1h.
	MaxWait time.Duration
	// Retention is how long a session whose tasks have all ended, and whose
	// notifications are all acknowledged, stays open before it closes by
	// itself (24h); negative keeps such sessions open.
	Retention time.Duration
	// Now is the clock of the retention sweep; nil is time.Now.
	Now func() time.Time
	// SessionTimeout closes HTTP MCP sessions idle this long (24h).
	SessionTimeout time.Duration
	// NewKey makes the owner keys of connections that have none; the
	// default is random.
	NewKey func() string
	// Version is reported to clients as the server's version.
	Version string
	// SessionTag, when set, begins the id of every MCP session the HTTP
	// handler makes: "<tag>.<random>". Several nodes serving one cluster
	// each give their own (server.NodeTag of the node's id), so that a
	// request reaching any node can be sent to the node that holds its
	// session in memory. It must hold only letters, digits, '-' and '_'.
	SessionTag string
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

	sweepOnce sync.Once
	sweeps    sync.WaitGroup // the retention sweep, until Close

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
	o.MaxWait = min(o.MaxWait, maxWaitCap)
	if o.Retention == 0 {
		o.Retention = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
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

// instructions tell the client's model how to use the tools; key is the
// connection's owner key, when it has one.
func instructions(key string) string {
	var b strings.Builder
	b.WriteString(`vigil runs durable background agents for you: they keep working after your turn ends, after you exit and after a restart, and their results wait for you.
Use vigil_spawn instead of your built-in sub-agent tool when the work may outlast this turn or this session, take longer than one tool call may, or must survive a restart; use the built-in one for quick work you wait for in this turn.
vigil_spawn starts an agent and returns its task id ("<session>/<task>") at once. Then call vigil_wait: it blocks until one of your agents reports, or until this client's limit, and returns the notifications, each with its reply, and the tasks still running.
When vigil_wait returns with tasks still running and no notification, call it again: that is normal, not an error.
Pass the ids of the notifications you got in the ack argument of your next vigil_wait (or call vigil_ack): a notification stays until you acknowledge it, so nothing is lost if you disconnect, and it never comes back once acknowledged.
vigil_send talks to a running or finished agent and tells you what happened to the message (joined, queued-behind-stop, resumed, pending or rejected).
vigil_close ends a task you no longer need and frees its name; vigil_list shows what is open, oldest first.`)
	if key != "" {
		fmt.Fprintf(&b, "\nYour tasks belong to the owner key %q (this project's): a later session of yours in this project finds them again.", key)
	}
	return b.String()
}

// newMCP returns an SDK server with the tools, whose calls without an
// explicit owner key get theirs from connKey.
func (s *Server) newMCP(key string, connKey func(*mcp.CallToolRequest) string) *mcp.Server {
	so := &mcp.ServerOptions{Instructions: instructions(key), Logger: s.log}
	if tag := s.opts.SessionTag; tag != "" {
		so.GetSessionID = func() string { return tag + "." + rand.Text() }
	}
	ms := mcp.NewServer(&mcp.Implementation{Name: "vigil", Title: "vigil: durable background agents", Version: s.opts.Version}, so)
	s.addTools(ms, connKey)
	ms.AddReceivingMiddleware(fitWaitTool(s.limitOf))
	return ms
}

// limitOf returns the longest wait the named client allows.
func (s *Server) limitOf(client string) time.Duration {
	if s.opts.MaxWait > 0 {
		return s.opts.MaxWait
	}
	return WaitLimit(client)
}

// Run serves one MCP connection on t (the SDK's StdioTransport, or any
// other) until the client disconnects or ctx ends. Its calls that give no
// owner key use Options.Owner, else a random key made for this connection.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	key := s.opts.Owner
	named := key
	if key == "" {
		key = s.opts.NewKey()
		s.log.Info("mcp connection without an owner key: its tasks are scoped to this connection (pass --owner or owner_key to keep them across restarts)", "owner_key", key)
	}
	s.startSweep()
	ms := s.newMCP(named, func(*mcp.CallToolRequest) string { return key })
	s.mu.Lock()
	s.servers[ms] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.servers, ms)
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	return serve(ctx, ms, t, s.log)
}

// Handler returns the streamable HTTP handler of the tools, to mount at
// /mcp behind the server's bearer token. Its calls that give no owner key
// use the Vigil-Owner header, else the MCP session id.
func (s *Server) Handler() http.Handler {
	s.httpOnce.Do(func() {
		s.startSweep()
		ms := s.newMCP("", func(req *mcp.CallToolRequest) string {
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
	s.sweeps.Wait()
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
