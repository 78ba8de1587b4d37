package ccwire

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP servers the Agent SDK hosts in the program (createSdkMcpServer):
// the initialize request names them (sdkMcpServers), and the CLI talks to
// each with mcp_message control requests, {"server_name", "message": a
// JSON-RPC message}, which the SDK answers {"mcp_response": the server's
// JSON-RPC answer} (a notification gets a dummy answer). SDKTransport is
// such a server as an MCP transport, for vigil's MCP client.

// sdkTransport is the MCP transport of one SDK-hosted server.
type sdkTransport struct {
	s    *Server
	name string
}

// Connect implements mcp.Transport.
func (t *sdkTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &sdkConn{s: t.s, name: t.name, in: make(chan jsonrpc.Message, 16), closed: make(chan struct{})}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.s.stdinClosed {
		return nil, io.ErrClosedPipe
	}
	t.s.sdkConns = append(t.s.sdkConns, c)
	return c, nil
}

// closeSDKConns ends every connection to an SDK-hosted server: the
// program's stdin is closed, so no answer can come; calls waiting for one
// end in an error instead of waiting for ever.
func (s *Server) closeSDKConns() {
	s.mu.Lock()
	s.stdinClosed = true
	conns := s.sdkConns
	s.sdkConns = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// sdkConn is a connection to an SDK-hosted server.
type sdkConn struct {
	s      *Server
	name   string
	in     chan jsonrpc.Message
	closed chan struct{}
	once   sync.Once
}

// Read implements mcp.Connection: the next answer of the server.
func (c *sdkConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write implements mcp.Connection: the message goes to the program as an
// mcp_message control request; a request's answer comes back through
// Server.mcpAnswered.
func (c *sdkConn) Write(_ context.Context, msg jsonrpc.Message) error {
	select {
	case <-c.closed:
		return io.ErrClosedPipe
	default:
	}
	raw, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("mcp message to %s: %w", c.name, err)
	}
	id := c.s.nextRequestID("vigil-mcp")
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.s.mu.Lock()
		c.s.mcpCalls[id] = mcpCall{conn: c, id: req.ID}
		c.s.mu.Unlock()
	}
	err = c.s.write(Frame{"type": "control_request", "request_id": id, "request": Frame{
		"subtype": "mcp_message", "server_name": c.name, "message": json.RawMessage(raw),
	}})
	if err != nil {
		c.s.mu.Lock()
		delete(c.s.mcpCalls, id)
		c.s.mu.Unlock()
	}
	return err
}

// Close implements mcp.Connection.
func (c *sdkConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// SessionID implements mcp.Connection.
func (c *sdkConn) SessionID() string { return "" }

// mcpCall is a request vigil's client sent an SDK-hosted server, waiting
// for its answer.
type mcpCall struct {
	conn *sdkConn
	id   jsonrpc.ID
}

// mcpAnswered takes the program's answer to an mcp_message request, on
// the reader's goroutine (Serve's may be waiting for the servers), and
// reports whether it was one.
func (s *Server) mcpAnswered(requestID, subtype string, resp json.RawMessage, errMsg string) bool {
	s.mu.Lock()
	call, ok := s.mcpCalls[requestID]
	delete(s.mcpCalls, requestID)
	s.mu.Unlock()
	if !ok {
		return false
	}
	var msg jsonrpc.Message
	if subtype == "success" {
		var r struct {
			MCPResponse json.RawMessage `json:"mcp_response"`
		}
		if err := json.Unmarshal(resp, &r); err == nil && len(r.MCPResponse) > 0 {
			if m, err := jsonrpc.DecodeMessage(r.MCPResponse); err == nil {
				msg = m
			} else {
				errMsg = fmt.Sprintf("the program's MCP answer: %v", err)
			}
		} else {
			errMsg = "the program's answer has no mcp_response"
		}
	}
	if msg == nil {
		msg = &jsonrpc.Response{ID: call.id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "SDK MCP server " + call.conn.name + ": " + errMsg}}
	}
	select {
	case call.conn.in <- msg:
	case <-call.conn.closed:
	}
	return true
}

// nextRequestID returns a new id for a control request of vigil's.
func (s *Server) nextRequestID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqSeq++
	return fmt.Sprintf("%s-%d", prefix, s.reqSeq)
}
