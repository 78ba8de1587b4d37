// Package server is vigil's HTTP edge: a JSON API over the library's
// Runtime, Server-Sent Events streams of committed events, Prometheus
// metrics, a health check and the embedded web UI.
//
// Every route except GET /healthz and the static UI files requires
// "Authorization: Bearer <token>", checked before any of the body is read.
// Every route checks the Host header (loopback names by default: a web page
// cannot reach the API through DNS rebinding). Every error is JSON
// {"error":{"code":"...","message":"..."}}; bad input is a 4xx, never a 500.
// The routes are documented in openapi.yaml, served at /api/openapi.json.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
)

// Options configures a Server. Zero fields mean defaults.
type Options struct {
	// Token is the bearer token every authenticated route requires. An
	// empty token refuses every authenticated request.
	Token string
	// Logger receives access logs (debug) and internal errors (error).
	Logger *slog.Logger
	// Metrics is served at /metrics. When it is also the runtime's
	// Observer, it counts runs, notifications, messages and drops; without
	// it the server makes its own, with the scrape-time gauges only.
	Metrics *Metrics
	// Heartbeat is how often an idle event stream gets a comment line
	// (15s).
	Heartbeat time.Duration
	// MaxBody caps request bodies in bytes (1 MiB).
	MaxBody int64
	// ShutdownTimeout bounds how long Serve waits for requests in flight
	// after its context ends (10s).
	ShutdownTimeout time.Duration
	// Defaults fill in what POST /api/sessions leaves out.
	Defaults SessionDefaults
	// MCP, when set, is served at /mcp behind the same bearer token: the
	// streamable HTTP transport of the MCP tools (mcpserver.Server.Handler).
	// Without it /mcp answers 404.
	MCP http.Handler
	// Peer, when set, makes the server a member of a cluster of nodes on
	// one store (vigil.Options.Cluster): it serves the calls other nodes
	// send at POST /api/internal/call (vigil.Runtime.PeerHandler), behind
	// the same bearer token, and a request to /mcp for an MCP session
	// another node holds (its Mcp-Session-Id begins with that node's
	// NodeTag) is sent on to that node, streaming, with Token as its
	// bearer token. Without it /api/internal/call answers 404 and /mcp
	// serves this node's MCP sessions only.
	Peer http.Handler
	// PeerTransport carries the requests sent on to other nodes; nil is
	// a transport with bounded connects and no bound on responses.
	PeerTransport http.RoundTripper

	// AllowedHosts are the names a request's Host header may give besides
	// localhost, loopback addresses and the address the connection came in
	// on: "name" for any port, "name:port" for one, "*" for any Host. Any
	// other Host is refused (403 host_not_allowed): it is how a web page
	// reaches a local server through DNS rebinding.
	AllowedHosts []string
	// MaxConns caps the open connections (1024, or half the open-file limit
	// when that is lower). Past it, a new connection takes the place of the
	// oldest one in no request (idle, or still sending its headers); when
	// all are in requests, the new one waits for one to end.
	MaxConns int
	// ReadHeaderTimeout bounds receiving a request's headers (10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds receiving a whole request, body included (30s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a response, from the end of its request's
	// headers (60s). Event streams and /mcp are not bounded by it but by
	// StreamWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long (2m).
	IdleTimeout time.Duration
	// StreamWriteTimeout ends an event stream or /mcp response whose client
	// takes no data for this long (30s).
	StreamWriteTimeout time.Duration
	// StreamBuffer bounds the bytes of live events an event stream holds
	// for a client that reads slower than they commit (1 MiB); past it the
	// client is sent a vigil.cut event to resume from, and the stream ends.
	// The server also keeps up to four times it of recent events rendered
	// as SSE, shared by every stream, while a stream is open.
	StreamBuffer int64
}

// DefaultMaxConns is Options.MaxConns when it is zero.
const DefaultMaxConns = 1024

// SessionDefaults are the server's choices for a new session that makes
// none of its own.
type SessionDefaults struct {
	// Provider is the runtime's default provider. Model and SubagentModel
	// apply to a session that names no model and no other provider.
	Provider      string
	Model         string
	SubagentModel string
	// Permissions apply to a session that gives none; a zero mode means
	// the runtime's default (ask).
	Permissions vigil.Permissions
	// ProjectRules, when set, returns the allow rules a person saved for a
	// working directory; they are added to a new session's rules.
	ProjectRules func(dir string) []string
	// SaveRule, when set, keeps a rule for a project directory ("allow
	// always" with save); without it such an answer is refused.
	SaveRule func(dir, rule string) error
}

// Server serves the API of one Runtime. It is an http.Handler; Serve runs
// it on a listener with a graceful shutdown.
type Server struct {
	rt      *vigil.Runtime
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	public  map[string]bool // patterns served without a token
	token   [32]byte
	metrics *Metrics
	spec    []byte // the OpenAPI document as JSON

	stopping chan struct{} // closed by Shutdown/Close: event streams end
	stopOnce sync.Once

	hosts   hostSet
	streams sync.WaitGroup // event streams in progress
	frames  *frameCache    // recent events rendered for the event streams

	mu    sync.Mutex
	http  *http.Server
	conns *connLimiter
}

// New returns a Server for rt.
func New(rt *vigil.Runtime, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 1 << 20
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
		if lim := openFileLimit(); lim > 0 && lim/2 < uint64(opts.MaxConns) {
			opts.MaxConns = max(16, int(lim/2))
		}
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 30 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 60 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.StreamWriteTimeout <= 0 {
		opts.StreamWriteTimeout = 30 * time.Second
	}
	if opts.StreamBuffer <= 0 {
		opts.StreamBuffer = vigil.DefaultSubscriptionBuffer
	}
	if opts.PeerTransport == nil {
		opts.PeerTransport = defaultPeerTransport()
	}
	s := &Server{
		rt: rt, opts: opts, log: opts.Logger, mux: http.NewServeMux(), public: map[string]bool{},
		token: sha256.Sum256([]byte(opts.Token)), metrics: opts.Metrics, stopping: make(chan struct{}),
		hosts: allowedHosts(opts.AllowedHosts), frames: newFrameCache(opts.Logger, 4*opts.StreamBuffer),
	}
	s.metrics.attach(rt)
	spec, err := openAPIJSON()
	if err != nil {
		// The document is embedded and checked by a test; this cannot
		// happen in a built binary.
		s.log.Error("openapi document does not parse", "err", err)
	}
	s.spec = spec
	for _, r := range s.routes() {
		pattern := r.method + " " + r.path
		s.mux.Handle(pattern, &routeHandler{next: r.handler, params: pathParams(r.path)})
		if r.public {
			s.public[pattern] = true
		}
	}
	return s
}

// routeHandler is a registered route: it checks the text of the path
// parameters, then serves. ServeHTTP tells the mux's own answers (404, 405,
// redirects) from the routes' by it.
type routeHandler struct {
	next   http.Handler
	params []string // the wildcard names of the path
}

// ServeHTTP implements http.Handler.
func (h *routeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, p := range h.params {
		if e := checkText("{"+p+"}", r.PathValue(p)); e != nil {
			writeError(w, e)
			return
		}
	}
	h.next.ServeHTTP(w, r)
}

// pathParams returns the wildcard names of a ServeMux pattern path.
func pathParams(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			name = strings.TrimSuffix(strings.TrimSuffix(name, "}"), "...")
			if name != "$" {
				out = append(out, name)
			}
		}
	}
	return out
}

// route is one registered endpoint. routes() is the only place routes are
// registered; the OpenAPI sync test reads the same table.
type route struct {
	method  string
	path    string // a ServeMux pattern path
	public  bool   // served without a token
	handler http.Handler
}

// ServeHTTP checks the Host, the path and the token, in that order and
// before any of the body is read, then dispatches the request. Every answer
// it or the mux gives is JSON.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w}
	if c, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
		c.serving(true)
		defer c.serving(false)
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v) // a handler's way to drop the connection
			}
			s.log.Error("request handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if rec.status == 0 {
				writeError(rec, &apiError{status: http.StatusInternalServerError, code: "internal", msg: "internal error (the server log has it)"})
			}
		}
		s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "dur", time.Since(start))
	}()
	if e := s.checkHost(r); e != nil {
		s.refuse(rec, r, e)
		return
	}
	if e := checkPath(r); e != nil {
		s.refuse(rec, r, e)
		return
	}
	h, pattern := s.mux.Handler(r)
	if !s.public[pattern] && !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="vigil"`)
		s.refuse(rec, r, &apiError{status: http.StatusUnauthorized, code: "unauthorized", msg: "missing or wrong bearer token (send Authorization: Bearer <token>; the token is in <data>/token)"})
		return
	}
	if e := checkRequestText(r); e != nil {
		s.refuse(rec, r, e)
		return
	}
	if _, ok := h.(*routeHandler); !ok {
		// The mux answers itself (404, 405, a redirect) in plain text or
		// HTML; make it JSON.
		s.mux.ServeHTTP(&jsonErrorWriter{ResponseWriter: rec}, r)
		return
	}
	s.mux.ServeHTTP(rec, r) // sets the path values; Handler does not
}

// refuse answers a request refused before its body was read. When it has
// a body, the connection is closed after the answer, unread: net/http
// would otherwise read up to 256 KiB of the body, as slowly as the client
// sends it, to reuse the connection (a read deadline already passed makes
// that read fail at once).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, e *apiError) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	writeError(w, e)
}

// authorized checks the bearer token; the scheme is case-insensitive.
func (s *Server) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || s.opts.Token == "" {
		return false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// hostSet is the Host names a server answers to besides loopback ones.
type hostSet struct {
	any   bool
	names map[string]bool // "name" (any port) and "name:port", lower case
}

func allowedHosts(list []string) hostSet {
	hs := hostSet{names: map[string]bool{}}
	for _, h := range list {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "*" {
			hs.any = true
		}
		if h != "" {
			hs.names[strings.TrimSuffix(h, ".")] = true
		}
	}
	return hs
}

// checkHost refuses a request whose Host header names something other
// than this server: localhost, a loopback address, the address the
// connection came in on, or Options.AllowedHosts.
func (s *Server) checkHost(r *http.Request) *apiError {
	if s.hosts.any || r.Host == "" {
		// No Host (HTTP/1.0, or a handler called in process): no browser
		// sends such a request, so no rebinding either.
		return nil
	}
	full := strings.TrimSuffix(strings.ToLower(r.Host), ".")
	name := full
	if h, _, err := net.SplitHostPort(full); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"), ".")
	if name == "localhost" || s.hosts.names[name] || s.hosts.names[full] {
		return nil
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		if ip.IsLoopback() {
			return nil
		}
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if ap, err := netip.ParseAddrPort(la.String()); err == nil && ap.Addr().Unmap() == ip.Unmap() {
				return nil
			}
		}
	}
	return &apiError{status: http.StatusForbidden, code: "host_not_allowed", msg: fmt.Sprintf(
		"Host %q is not one of this server's names: it answers to localhost, loopback addresses, its own address and the hosts it is told to allow, so that no web page can reach it through DNS rebinding; to use this name, start the server with --allow-host %s",
		r.Host, name)}
}

// checkPath refuses a path that the mux would redirect or that hides its
// segments: "//", "." or ".." segments, encoded or not, and encoded
// slashes.
func checkPath(r *http.Request) *apiError {
	p := r.URL.EscapedPath()
	if r.URL.Opaque != "" || !strings.HasPrefix(p, "/") {
		return badRequest("path %q: want an absolute path", r.RequestURI)
	}
	if clean := cleanPath(p); clean != p {
		return badRequest("path %q is not canonical (no //, . or .. segments); use %q", p, clean)
	}
	for _, seg := range strings.Split(p, "/") {
		if !strings.Contains(seg, "%") {
			continue
		}
		lower := strings.ToLower(seg)
		if strings.Contains(lower, "%2f") {
			return badRequest("path %q holds an encoded slash (%%2F); a path parameter cannot contain /", p)
		}
		if u, err := url.PathUnescape(seg); err == nil && (u == "." || u == "..") {
			return badRequest("path %q holds an encoded %q segment", p, u)
		}
	}
	return nil
}

// cleanPath is what ServeMux redirects a path to: path.Clean, keeping a
// final slash.
func cleanPath(p string) string {
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// maxHeaderBytes caps a request's headers: a token and a few names.
const maxHeaderBytes = 64 << 10

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting, ends the event streams, lets the requests in flight finish
// (bounded by Options.ShutdownTimeout) and returns. It does not close the
// runtime. Connections are capped (Options.MaxConns) and every phase of a
// request is bounded in time (the Options' timeouts).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	lim := newConnLimiter(ln, s.opts.MaxConns, s.metrics)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         lim.connState,
		ConnContext:       lim.connContext,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	if s.http != nil {
		s.mu.Unlock()
		return errors.New("server: already serving")
	}
	s.http, s.conns = hs, lim
	s.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lim) }()
	select {
	case err := <-errc:
		s.stop()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err := s.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("serve: %w", serr)
	}
	return err
}

// Shutdown ends the event streams, stops accepting connections and waits
// for the requests in flight until ctx ends; then it closes what is left.
// Safe to call twice.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	s.mu.Lock()
	hs := s.http
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	if err := hs.Shutdown(ctx); err != nil {
		s.log.Warn("shutdown: requests still in flight at the deadline; closing them", "err", err)
		_ = hs.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// Close ends the event streams and closes every connection at once. Safe
// to call twice.
func (s *Server) Close() error {
	s.stop()
	s.mu.Lock()
	hs := s.http
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	if err := hs.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// connStats returns the connections Serve has open, the most it had open
// at once and how many it closed to make room under Options.MaxConns.
func (s *Server) connStats() (open, peak int, evicted int64) {
	s.mu.Lock()
	lim := s.conns
	s.mu.Unlock()
	if lim == nil {
		return 0, 0, 0
	}
	return lim.stats()
}

// stop ends every event stream and lets go of idle connections to other
// nodes.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		close(s.stopping)
		if t, ok := s.opts.PeerTransport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	})
}

// statusWriter records the status for the access log. It unwraps for
// http.ResponseController (flushing event streams).
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader implements http.ResponseWriter, remembering the status.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements io.Writer.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// jsonErrorWriter turns the mux's plain-text 404 and 405 (and its
// redirects) into JSON; an Allow or Location header it set stays. With
// onlyErrors (the UI's file server) successes and 304 pass unchanged.
type jsonErrorWriter struct {
	http.ResponseWriter
	onlyErrors bool
	wrote      bool
	pass       bool // the answer passes unchanged
}

// WriteHeader implements http.ResponseWriter.
func (w *jsonErrorWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	if w.onlyErrors && (code < 300 || code == http.StatusNotModified) {
		w.pass = true
		w.ResponseWriter.WriteHeader(code)
		return
	}
	e := &apiError{status: code, code: "not_found", msg: "no such route"}
	switch {
	case code == http.StatusMethodNotAllowed:
		e.code, e.msg = "method_not_allowed", "method not allowed on this route (allowed: "+w.Header().Get("Allow")+")"
	case code >= 300 && code < 400:
		e.code, e.msg = "redirect", "this route is at "+w.Header().Get("Location")
	case code < 400:
		e.code, e.msg = "internal", "unexpected answer"
	case code != http.StatusNotFound:
		e.code, e.msg = "invalid", http.StatusText(code)
	}
	w.Header().Del("Content-Length")
	writeError(w.ResponseWriter, e)
}

// Write implements io.Writer: the mux's own body is dropped.
func (w *jsonErrorWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.pass {
		return w.ResponseWriter.Write(b)
	}
	return len(b), nil
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *jsonErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// streamWriter gives each write of a long-lived response (an event stream,
// /mcp) a deadline of its own, Options.StreamWriteTimeout from now: the
// response lives as long as its client takes data. (Options.ReadTimeout
// does not cut it: net/http lifts the read deadline once the body is read.)
type streamWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func newStreamWriter(w http.ResponseWriter, d time.Duration) *streamWriter {
	sw := &streamWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}
	sw.extend()
	return sw
}

// extend moves the write deadline to d from now. Call it once more after
// the handler's last write: net/http writes the response's end after the
// handler returns.
func (w *streamWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

// Write implements io.Writer.
func (w *streamWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *streamWriter) Flush() { _ = w.FlushError() }

// FlushError flushes, for http.ResponseController.
func (w *streamWriter) FlushError() error {
	w.extend()
	return w.rc.Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
