package providertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
)

// memURL is the root of a server made with NewInMemory: a name that
// resolves nowhere, so a request sent past its Client fails at once.
const memURL = "http://providertest.invalid"

// memTransport hands each request to its server's handler in memory: the
// response body is a pipe the handler writes into. A handler that aborts
// (Reply.Abort) breaks the pipe as a dropped connection would; the
// request's context ending, or the client closing the body, ends the
// handler's request context and breaks the pipe, so that nothing is left
// blocked.
type memTransport struct{ s *Server }

// RoundTrip implements http.RoundTripper.
func (m memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	ctx, cancel := context.WithCancel(r.Context())
	hr := r.Clone(ctx)
	hr.Body = io.NopCloser(bytes.NewReader(body))
	hr.RequestURI = r.URL.RequestURI()
	hr.RemoteAddr = "memory"
	pr, pw := io.Pipe()
	w := &memWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				panic(v)
			}
			if v != nil {
				w.drop()
				return
			}
			w.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		m.s.serve(w, hr)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		cancel()
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	if w.dropped {
		cancel()
		pr.Close()
		return nil, io.ErrUnexpectedEOF
	}
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	b := &memBody{ctx: ctx, pr: pr, path: r.URL.Path, s: m.s, cancel: func() { stop(); cancel() }}
	m.s.mu.Lock()
	m.s.open[b] = true
	m.s.mu.Unlock()
	return &http.Response{
		Status: http.StatusText(w.status), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, ContentLength: -1, Request: r, Body: b,
	}, nil
}

// memWriter is the handler's side of an in-memory exchange.
type memWriter struct {
	header http.Header
	body   *io.PipeWriter
	ready  chan struct{} // closed once the headers are sent, or the exchange dropped
	once   sync.Once
	// Set before ready is closed.
	status  int
	sent    http.Header
	dropped bool
}

// Header implements http.ResponseWriter.
func (w *memWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter.
func (w *memWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

// Write implements http.ResponseWriter. It returns once the client has
// read p, or with an error once the client went away.
func (w *memWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush implements http.Flusher: every Write reaches the client as it is.
func (w *memWriter) Flush() {}

// drop breaks the exchange as a dropped connection does: before the
// headers, RoundTrip fails; after them, the body's next read does.
func (w *memWriter) drop() {
	w.once.Do(func() {
		w.dropped = true
		close(w.ready)
	})
	w.body.CloseWithError(io.ErrUnexpectedEOF)
}

// memBody is the client's side of the response body. Until it is closed
// it is in its server's open set, and Server.Close breaks it.
type memBody struct {
	ctx    context.Context // the request's, ended by Close too
	pr     *io.PipeReader
	path   string
	s      *Server
	cancel func()
}

// Read implements io.Reader. Once the request's context ended, a read
// fails with its error, as on a connection the client gave up, even when
// the handler, seeing the context end too, closed the body first.
func (b *memBody) Read(p []byte) (int, error) {
	n, err := b.pr.Read(p)
	if err == io.EOF && b.ctx.Err() != nil {
		err = b.ctx.Err()
	}
	return n, err
}

// Close implements io.Closer: the handler's writes fail and its request
// context ends, as when a client hangs up.
func (b *memBody) Close() error {
	b.s.mu.Lock()
	delete(b.s.open, b)
	b.s.mu.Unlock()
	b.pr.Close()
	b.cancel()
	return nil
}

// breakBody ends a body its client never closed, when the server stops,
// so that its handler does not wait on it for ever.
func (b *memBody) breakBody() {
	b.pr.CloseWithError(errServerClosed)
	b.cancel()
}

var errServerClosed = errors.New("providertest: server closed")
