package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BridgeOptions configures a Bridge. Zero fields mean defaults.
type BridgeOptions struct {
	// URL is the MCP endpoint of a running 'vigil serve', e.g.
	// http://127.0.0.1:7777/mcp. Required.
	URL string
	// Token is the server's bearer token.
	Token string
	// Owner is sent as the Vigil-Owner header: the identity of the calls
	// that give no owner_key. Empty means a random key for the bridge's
	// lifetime, which stays the same across reconnects to the server.
	Owner string
	// HTTPClient makes the requests; its Transport is wrapped to add the
	// token and the owner. Nil means a new client.
	HTTPClient *http.Client
	// Logger receives the bridge's logs; nil discards them.
	Logger *slog.Logger
	// Version is reported to both sides.
	Version string
	// MaxWait, when set, is the longest wait of the client behind the
	// bridge; zero learns it from the client's name (WaitLimit).
	MaxWait time.Duration
	// Ensure, when set, is called when the server cannot be reached, before
	// the bridge connects again: it may start the server (vigil mcp starts
	// its daemon again after a crash). It returns the URL and token to
	// connect to, or why the server cannot be had.
	Ensure func(ctx context.Context) (url, token string, err error)
	// Cwd, when set, is the working directory of the agents a vigil_spawn
	// through the bridge starts when it names none: the client's project,
	// not the server's directory.
	Cwd string
	// Now is the bridge's clock; nil is time.Now.
	Now func() time.Time
}

// Bridge serves a remote vigil's MCP tools on a local transport (stdio):
// 'vigil mcp --server URL'. It lists the tools of the server's /mcp
// endpoint and forwards every call, so the tools and their semantics are
// the server's own. When the server restarts, the bridge opens a new MCP
// session at the next call with the same owner, so the caller keeps its
// tasks and unacknowledged notifications.
type Bridge struct {
	opts BridgeOptions
	log  *slog.Logger
	cl   *mcp.Client
	tr   *headerTransport

	mu  sync.Mutex
	cs  *mcp.ClientSession
	url string // the server's MCP endpoint: Ensure may move it

	// retry are the tools a call of which may be sent again after the
	// server was lost: those that change nothing, or nothing more the
	// second time.
	retry map[string]bool
}

// NewBridge returns a Bridge; it connects at Run.
func NewBridge(opts *BridgeOptions) *Bridge {
	var o BridgeOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Owner == "" {
		o.Owner = randomKey()
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	hc := &http.Client{}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		hc = &c
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	host := ""
	if u, err := url.Parse(o.URL); err == nil {
		host = u.Host
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tr := &headerTransport{base: base, token: o.Token, owner: o.Owner, host: host}
	hc.Transport = tr
	o.HTTPClient = hc
	return &Bridge{opts: o, log: o.Logger, tr: tr, retry: map[string]bool{}, url: o.URL,
		cl: mcp.NewClient(&mcp.Implementation{Name: "vigil-bridge", Version: o.Version}, nil)}
}

// headerTransport adds the bearer token, the owner and the client's wait
// limit to every request.
type headerTransport struct {
	base  http.RoundTripper
	owner string

	mu    sync.Mutex
	token string
	// host is the server's host: the token goes to it only, never to a
	// host a redirect names.
	host  string
	limit int // seconds; 0 until the client is known
}

// set changes the server the token goes to.
func (t *headerTransport) set(rawURL, token string) {
	host := ""
	if u, err := url.Parse(rawURL); err == nil {
		host = u.Host
	}
	t.mu.Lock()
	t.token, t.host = token, host
	t.mu.Unlock()
}

// setLimit records the client's wait limit.
func (t *headerTransport) setLimit(d time.Duration) {
	t.mu.Lock()
	t.limit = int(d / time.Second)
	t.mu.Unlock()
}

// RoundTrip implements http.RoundTripper.
func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	t.mu.Lock()
	token, host, limit := t.token, t.host, t.limit
	t.mu.Unlock()
	if token != "" && r.URL.Host == host {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	r.Header.Set(OwnerHeader, t.owner)
	if limit > 0 {
		r.Header.Set(WaitLimitHeader, strconv.Itoa(limit))
	}
	return t.base.RoundTrip(r)
}

// session returns the MCP session with the server, opening one if needed.
func (b *Bridge) session(ctx context.Context) (*mcp.ClientSession, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cs != nil {
		return b.cs, nil
	}
	cs, err := b.cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url, HTTPClient: b.opts.HTTPClient, MaxRetries: -1}, nil)
	if err != nil && b.opts.Ensure != nil && ctx.Err() == nil {
		b.log.Info("vigil is not reachable; starting it again", "url", b.url, "err", err)
		u, token, eerr := b.opts.Ensure(ctx)
		if eerr != nil {
			return nil, fmt.Errorf("cannot reach vigil at %s (%v), and could not start it: %w", b.url, err, eerr)
		}
		if !strings.HasSuffix(u, "/mcp") {
			u += "/mcp"
		}
		b.url = u
		b.tr.set(u, token)
		cs, err = b.cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url, HTTPClient: b.opts.HTTPClient, MaxRetries: -1}, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot reach vigil at %s (is 'vigil serve' running, and is the token right?): %w", b.url, err)
	}
	b.cs = cs
	return cs, nil
}

// endpoint returns the server's MCP endpoint.
func (b *Bridge) endpoint() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.url
}

// drop forgets a broken session.
func (b *Bridge) drop(cs *mcp.ClientSession) {
	b.mu.Lock()
	if b.cs == cs {
		b.cs = nil
	}
	b.mu.Unlock()
	_ = cs.Close()
}

// Run connects to the server, lists its tools and serves them on t until
// the client disconnects or ctx ends.
func (b *Bridge) Run(ctx context.Context, t mcp.Transport) error {
	cs, err := b.session(ctx)
	if err != nil {
		return err
	}
	instr := ""
	if ir := cs.InitializeResult(); ir != nil {
		instr = ir.Instructions
	}
	if b.opts.Owner != "" {
		instr = instructions(b.opts.Owner)
	}
	ms := mcp.NewServer(&mcp.Implementation{Name: "vigil", Title: "vigil: durable background agents", Version: b.opts.Version},
		&mcp.ServerOptions{Instructions: instr, Logger: b.log})
	n := 0
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the tools of %s: %w", b.endpoint(), err)
		}
		if a := tool.Annotations; a != nil && (a.ReadOnlyHint || a.IdempotentHint) {
			b.retry[tool.Name] = true
		}
		ms.AddTool(tool, b.forward(tool.Name))
		n++
	}
	ms.AddReceivingMiddleware(fitWaitTool(b.limitOf))
	b.log.Info("bridging vigil's MCP tools", "url", b.endpoint(), "tools", n, "owner_key", b.opts.Owner)
	defer func() {
		b.mu.Lock()
		cs := b.cs
		b.cs = nil
		b.mu.Unlock()
		if cs != nil {
			_ = cs.Close()
		}
	}()
	return serve(ctx, ms, t, b.log)
}

// limitOf returns the longest wait the named client allows.
func (b *Bridge) limitOf(client string) time.Duration {
	if b.opts.MaxWait > 0 {
		return min(b.opts.MaxWait, maxWaitCap)
	}
	return WaitLimit(client)
}

// forward returns the handler that calls tool name on the server. A call
// the server never received (its MCP session was gone after a restart) is
// sent again on a new session. A call whose connection broke is sent again
// once the server is back (Ensure may start it) when its tool changes
// nothing more the second time (a wait keeps its deadline); any other
// broken call is reported as a tool error, and the next call reconnects.
func (b *Bridge) forward(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		limit := limitFor(req.Extra, req.Session, b.limitOf)
		b.tr.setLimit(limit)
		args := req.Params.Arguments
		if name == ToolSpawn && b.opts.Cwd != "" {
			args = withDefault(args, "cwd", b.opts.Cwd)
		}
		start := b.opts.Now()
		for attempt := 0; ; attempt++ {
			cs, err := b.session(ctx)
			if err != nil {
				return errorResult(err.Error()), nil
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			if err == nil {
				return res, nil
			}
			var werr *jsonrpc.Error
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.As(err, &werr) && werr.Code != codeRejected:
				return nil, werr // the server's own protocol error
			}
			b.drop(cs)
			if errors.Is(err, mcp.ErrSessionMissing) && attempt == 0 {
				b.log.Info("vigil's MCP session is gone (server restarted?); reconnecting", "url", b.endpoint())
				continue
			}
			if b.retry[name] && attempt < 3 {
				b.log.Info("lost vigil during a call; calling again once it is back", "tool", name, "url", b.endpoint(), "err", err)
				if name == ToolWait {
					args = waitRest(args, limit, b.opts.Now().Sub(start))
				}
				continue
			}
			return errorResult(fmt.Sprintf("lost the connection to vigil at %s (%v); the next call reconnects. "+
				"vigil_wait, vigil_ack and the read-only tools are safe to call again; check vigil_list before you repeat vigil_spawn, vigil_send or vigil_approve.", b.endpoint(), err)), nil
		}
	}
}

// codeRejected is the JSON-RPC code the SDK gives a request its transport
// could not deliver (the server went away): a broken connection, not the
// server's answer.
const codeRejected = -32005

// withDefault returns a call's arguments with key set to value when they
// give none.
func withDefault(raw json.RawMessage, key string, value any) json.RawMessage {
	args := map[string]any{}
	if len(raw) > 0 && json.Unmarshal(raw, &args) != nil {
		return raw // the server reports what is wrong with them
	}
	if v, ok := args[key]; ok && v != "" {
		return raw
	}
	args[key] = value
	out, err := json.Marshal(args)
	if err != nil {
		return raw
	}
	return out
}

// waitRest returns a wait's arguments with the timeout it has left after
// elapsed, so that a wait sent again still ends within the client's limit.
func waitRest(raw json.RawMessage, limit, elapsed time.Duration) json.RawMessage {
	args := map[string]any{}
	if len(raw) > 0 && json.Unmarshal(raw, &args) != nil {
		return raw
	}
	timeout := min(limit, 120*time.Second)
	if v, ok := args["timeout_seconds"].(float64); ok {
		timeout = min(time.Duration(v)*time.Second, limit)
	}
	args["timeout_seconds"] = max(int((timeout-elapsed)/time.Second), 0)
	out, err := json.Marshal(args)
	if err != nil {
		return raw
	}
	return out
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
