package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigilrun/vigil"
)

// mcpSessionHeader is the streamable HTTP transport's session header.
const mcpSessionHeader = "Mcp-Session-Id"

// NodeTag is the short, stable form of a node id that begins the ids of
// the MCP sessions the node holds (mcpserver.Options.SessionTag): 10 hex
// digits of its SHA-256. Any node can tell from an Mcp-Session-Id which
// node to send the request to.
func NodeTag(nodeID string) string {
	sum := sha256.Sum256([]byte(nodeID))
	return hex.EncodeToString(sum[:5])
}

// mcpSessionTag returns the node tag an MCP session id begins with
// ("<tag>.<random>"), or false when it has none.
func mcpSessionTag(id string) (string, bool) {
	tag, rest, ok := strings.Cut(id, ".")
	if !ok || tag == "" || rest == "" {
		return "", false
	}
	return tag, true
}

// retryAfterValue is the Retry-After header of a wait: whole seconds,
// rounded up, at least 1.
func retryAfterValue(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}

// peerCall serves POST /api/internal/call: the calls other nodes of the
// cluster send this one (Options.Peer), behind the same bearer token.
func (s *Server) peerCall(w http.ResponseWriter, r *http.Request) {
	if s.opts.Peer == nil {
		writeError(w, notFound("this server is not a member of a cluster"))
		return
	}
	// A forwarded call may wait long (for a session to be quiescent);
	// the calling node's own request bounds it, and ends it when it ends.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	s.opts.Peer.ServeHTTP(w, r)
}

// defaultPeerTransport is Options.PeerTransport when it is nil: bounded
// connects and TLS handshakes, no bound on a response (an MCP response may
// be an event stream held open by a long wait).
func defaultPeerTransport() http.RoundTripper {
	return &http.Transport{
		Proxy:                 nil, // nodes reach each other directly
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// retryAfterOf is how long err asks the caller to wait before trying
// again (vigil.Error.RetryAfter), or 0.
func retryAfterOf(err error) time.Duration {
	var ve *vigil.Error
	if errors.As(err, &ve) {
		return ve.RetryAfter
	}
	return 0
}

// nodes serves GET /api/nodes.
func (s *Server) nodes(w http.ResponseWriter, r *http.Request) error {
	list, err := s.rt.Nodes(r.Context())
	if err != nil {
		return err
	}
	out := make([]Node, 0, len(list))
	for _, n := range list {
		out = append(out, nodeView(n))
	}
	writeJSON(w, http.StatusOK, NodeList{Nodes: out})
	return nil
}

func nodeView(n vigil.NodeInfo) Node {
	return Node{ID: n.ID, Tag: NodeTag(n.ID), Address: n.Address, Started: n.Started, Beat: n.Beat,
		Alive: n.Alive, Draining: n.Draining, Self: n.Self, Sessions: n.Sessions}
}

// routeMCP answers a request to /mcp for an MCP session this node does
// not hold: it sends it on to the live node whose tag the session id
// begins with, or answers 404 (the MCP answer for a session the server
// does not know: the client starts a new one) when no live node has that
// tag. It reports whether it answered; a request without a session id
// (initialize), or for a session of this node's, is this node's to serve.
func (s *Server) routeMCP(w http.ResponseWriter, r *http.Request) bool {
	id := r.Header.Get(mcpSessionHeader)
	tag, ok := mcpSessionTag(id)
	if !ok || tag == NodeTag(s.rt.NodeID()) {
		return false
	}
	if by := r.Header.Get(vigil.ForwardedHeader); by != "" {
		s.log.Warn("mcp session is not on the node it was sent to", "session", id, "from", by)
		writeError(w, notFound("MCP session %s is not on this node, and the request was already sent on once (by %s): start a new session", id, by))
		return true
	}
	if s.opts.Peer == nil {
		writeError(w, notFound("no MCP session %s: start a new session", id))
		return true
	}
	list, err := s.rt.Nodes(r.Context())
	if err != nil {
		writeError(w, err)
		return true
	}
	for _, n := range list {
		if !n.Self && n.Alive && NodeTag(n.ID) == tag {
			s.forward(w, r, n)
			return true
		}
	}
	writeError(w, notFound("no MCP session %s: the node that held it is gone; start a new session", id))
	return true
}

// forward sends r on to node n and streams its answer back.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, n vigil.NodeInfo) {
	target, err := url.Parse(n.Address)
	if err != nil || target.Host == "" || (target.Scheme != "http" && target.Scheme != "https") {
		s.log.Error("a node advertises an address that is not an http(s) URL", "node", n.ID, "address", n.Address)
		writeError(w, &apiError{status: http.StatusBadGateway, code: "bad_gateway", msg: "node " + n.ID + " advertises a bad address " + n.Address})
		return
	}
	// The server's end ends it: the MCP waits it carries may last long,
	// and would hold the graceful shutdown for its whole timeout (this
	// node's own MCP waits end at once then too). The client reconnects
	// through another node.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	r = r.WithContext(ctx)
	self := s.rt.NodeID()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("Authorization", "Bearer "+s.opts.Token)
			pr.Out.Header.Set(vigil.ForwardedHeader, self)
		},
		Transport:     s.opts.PeerTransport,
		FlushInterval: -1, // an event stream: every write at once
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			select {
			case <-s.stopping:
				writeError(w, &apiError{status: http.StatusServiceUnavailable, code: string(vigil.CodeShuttingDown), msg: "the server is shutting down"})
				return
			default:
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				// Nothing listens there: the process that held the
				// session in memory is gone (a restart is another node,
				// with another tag), its heartbeat not yet judged.
				s.log.Info("mcp session's node refuses connections: gone", "node", n.ID, "address", n.Address)
				writeError(w, notFound("no MCP session %s: the node that held it (%s) is gone (it refuses connections); start a new session", r.Header.Get(mcpSessionHeader), n.ID))
				return
			}
			s.log.Warn("send an mcp request on to its node", "node", n.ID, "address", n.Address, "err", err)
			writeError(w, &apiError{status: http.StatusBadGateway, code: "bad_gateway", msg: "node " + n.ID + " (" + n.Address + "), which holds this MCP session, did not answer: " + err.Error()})
		},
	}
	rp.ServeHTTP(w, r)
}
