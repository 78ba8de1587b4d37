// Package server is vigil's HTTP edge: a JSON API over the library's
// Runtime, Server-Sent Events streams of committed events, Prometheus
// metrics, a health check and the embedded web UI.
//
// Every route except GET /healthz and the static UI files requires
// "Authorization: Bearer <token>". Every error is JSON
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
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
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
}

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
	Permissions core.Permissions
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

	mu   sync.Mutex
	http *http.Server
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
	s := &Server{
		rt: rt, opts: opts, log: opts.Logger, mux: http.NewServeMux(), public: map[string]bool{},
		token: sha256.Sum256([]byte(opts.Token)), metrics: opts.Metrics, stopping: make(chan struct{}),
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
		s.mux.Handle(pattern, r.handler)
		if r.public {
			s.public[pattern] = true
		}
	}
	return s
}

// route is one registered endpoint. routes() is the only place routes are
// registered; the OpenAPI sync test reads the same table.
type route struct {
	method  string
	path    string // a ServeMux pattern path
	public  bool   // served without a token
	handler http.Handler
}

// ServeHTTP authenticates the request and dispatches it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w}
	defer func() {
		s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "dur", time.Since(start))
	}()
	_, pattern := s.mux.Handler(r)
	if !s.public[pattern] && !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="vigil"`)
		writeError(rec, &apiError{status: http.StatusUnauthorized, code: "unauthorized", msg: "missing or wrong bearer token (send Authorization: Bearer <token>; the token is in <data>/token)"})
		return
	}
	if pattern == "" {
		// No route: the mux answers 404 or 405 in plain text; make it JSON.
		s.mux.ServeHTTP(&jsonErrorWriter{ResponseWriter: rec}, r)
		return
	}
	s.mux.ServeHTTP(rec, r) // sets the path values; Handler does not
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" || s.opts.Token == "" {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting, ends the event streams, lets the requests in flight finish
// (bounded by Options.ShutdownTimeout) and returns. It does not close the
// runtime.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	if s.http != nil {
		s.mu.Unlock()
		return errors.New("server: already serving")
	}
	s.http = hs
	s.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
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

// stop ends every event stream.
func (s *Server) stop() { s.stopOnce.Do(func() { close(s.stopping) }) }

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

// jsonErrorWriter turns the mux's plain-text 404 and 405 into JSON errors.
type jsonErrorWriter struct {
	http.ResponseWriter
	wrote bool
}

// WriteHeader implements http.ResponseWriter.
func (w *jsonErrorWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	e := &apiError{status: code, code: "not_found", msg: "no such route"}
	if code == http.StatusMethodNotAllowed {
		e.code, e.msg = "method_not_allowed", "method not allowed on this route (see Allow)"
	}
	writeError(w.ResponseWriter, e)
}

// Write implements io.Writer.
func (w *jsonErrorWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}
