package providertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MemTransport answers each request in memory with the next of its
// Bodies, as a 200 event stream: for tests inside a testing/synctest
// bubble, where the fake server's real sockets do not work. It is for one
// goroutine at a time.
type MemTransport struct {
	Bodies []func(ctx context.Context) io.ReadCloser
	n      int
}

// RoundTrip implements http.RoundTripper.
func (m *MemTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if m.n >= len(m.Bodies) {
		return nil, fmt.Errorf("MemTransport: no body for attempt %d", m.n+1)
	}
	body := m.Bodies[m.n](r.Context())
	m.n++
	return &http.Response{
		StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r, Body: body,
		Header: http.Header{"Content-Type": {"text/event-stream"}},
	}, nil
}

// Quiet is a body that sends data, then blocks until the request's
// context ends, like a connection that went dead.
func Quiet(data string) func(context.Context) io.ReadCloser {
	return func(ctx context.Context) io.ReadCloser { return &quietBody{ctx: ctx, data: strings.NewReader(data)} }
}

// Whole is a body that sends data and ends.
func Whole(data string) func(context.Context) io.ReadCloser {
	return func(context.Context) io.ReadCloser { return io.NopCloser(strings.NewReader(data)) }
}

type quietBody struct {
	ctx  context.Context
	data *strings.Reader
}

// Read implements io.Reader: the data, then nothing until ctx ends.
func (b *quietBody) Read(p []byte) (int, error) {
	if b.data.Len() > 0 {
		return b.data.Read(p)
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

// Close implements io.Closer.
func (b *quietBody) Close() error { return nil }
