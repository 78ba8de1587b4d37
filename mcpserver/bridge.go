package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"

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

	mu sync.Mutex
	cs *mcp.ClientSession
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
	hc.Transport = &headerTransport{base: base, token: o.Token, owner: o.Owner, host: host}
	o.HTTPClient = hc
	return &Bridge{opts: o, log: o.Logger, cl: mcp.NewClient(&mcp.Implementation{Name: "vigil-bridge", Version: o.Version}, nil)}
}

// headerTransport adds the bearer token and the owner to every request.
type headerTransport struct {
	base         http.RoundTripper
	token, owner string
	// host is the server's host: the token goes to it only, never to a
	// host a redirect names.
	host string
}

// RoundTrip implements http.RoundTripper.
func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.token != "" && r.URL.Host == t.host {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	r.Header.Set(OwnerHeader, t.owner)
	return t.base.RoundTrip(r)
}

// session returns the MCP session with the server, opening one if needed.
func (b *Bridge) session(ctx context.Context) (*mcp.ClientSession, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cs != nil {
		return b.cs, nil
	}
	cs, err := b.cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.opts.URL, HTTPClient: b.opts.HTTPClient}, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot reach vigil at %s (is 'vigil serve' running, and is the token right?): %w", b.opts.URL, err)
	}
	b.cs = cs
	return cs, nil
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
	ms := mcp.NewServer(&mcp.Implementation{Name: "vigil", Title: "vigil: durable background agents", Version: b.opts.Version},
		&mcp.ServerOptions{Instructions: instr, Logger: b.log})
	n := 0
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the tools of %s: %w", b.opts.URL, err)
		}
		ms.AddTool(tool, b.forward(tool.Name))
		n++
	}
	b.log.Info("bridging vigil's MCP tools", "url", b.opts.URL, "tools", n, "owner_key", b.opts.Owner)
	defer func() {
		b.mu.Lock()
		cs := b.cs
		b.cs = nil
		b.mu.Unlock()
		if cs != nil {
			_ = cs.Close()
		}
	}()
	if err := ms.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("mcp bridge: %w", err)
	}
	return nil
}

// forward returns the handler that calls tool name on the server. A call
// the server never received (its MCP session was gone after a restart) is
// sent again on a new session; any other broken call is reported as a tool
// error, and the next call reconnects.
func (b *Bridge) forward(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for attempt := 0; ; attempt++ {
			cs, err := b.session(ctx)
			if err != nil {
				return errorResult(err.Error()), nil
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments})
			if err == nil {
				return res, nil
			}
			var werr *jsonrpc.Error
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.As(err, &werr):
				return nil, werr // the server's own protocol error
			}
			b.drop(cs)
			if errors.Is(err, mcp.ErrSessionMissing) && attempt == 0 {
				b.log.Info("vigil's MCP session is gone (server restarted?); reconnecting", "url", b.opts.URL)
				continue
			}
			return errorResult(fmt.Sprintf("lost the connection to vigil at %s (%v); the next call reconnects. "+
				"wait, ack and the read-only tools are safe to call again; check list_tasks before you repeat spawn_agent, send_message or stop_task.", b.opts.URL, err)), nil
		}
	}
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
