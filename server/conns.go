package server

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// connKey is the request context key of the connection a request came in
// on (a *trackedConn), set by http.Server.ConnContext.
type connKey struct{}

// connLimiter caps the open connections of a listener. Past the cap, a
// new connection takes the place of the oldest one that is in no request:
// idle between requests, or still sending its headers (a slow or hostile
// client). When every connection is in a request, the new one waits until
// one ends. A flood of connections that never finish their headers
// therefore cannot keep a quick request such as GET /healthz out.
type connLimiter struct {
	net.Listener
	max     int
	metrics *Metrics

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	tick  uint64 // orders the connections' last changes, oldest first
	peak  int
	evict int64

	freed     chan struct{} // a connection closed (buffered, 1)
	closed    chan struct{} // the listener closed
	closeOnce sync.Once
}

func newConnLimiter(ln net.Listener, maxConns int, m *Metrics) *connLimiter {
	return &connLimiter{
		Listener: ln, max: maxConns, metrics: m, conns: map[*trackedConn]struct{}{},
		freed: make(chan struct{}, 1), closed: make(chan struct{}),
	}
}

// Accept waits for a connection and makes room for it under the cap.
func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			tc := &trackedConn{Conn: c, l: l, state: http.StateNew}
			l.tick++
			tc.changed = l.tick
			l.conns[tc] = struct{}{}
			l.peak = max(l.peak, len(l.conns))
			l.mu.Unlock()
			l.metrics.httpConns.Inc()
			return tc, nil
		}
		victim := l.oldestIdleLocked()
		if victim != nil {
			l.evict++
		}
		l.mu.Unlock()
		if victim != nil {
			l.metrics.httpEvicted.Inc()
			_ = victim.Close()
			continue
		}
		select {
		case <-l.freed:
		case <-l.closed:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and wakes an Accept waiting for room.
func (l *connLimiter) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// oldestIdleLocked returns the connection in no request that changed
// least recently, or nil.
func (l *connLimiter) oldestIdleLocked() *trackedConn {
	var victim *trackedConn
	for c := range l.conns {
		if c.busy > 0 || c.state == http.StateHijacked {
			continue
		}
		if victim == nil || c.changed < victim.changed {
			victim = c
		}
	}
	return victim
}

// connState is the http.Server's ConnState hook.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	tc.state = st
	l.tick++
	tc.changed = l.tick
	l.mu.Unlock()
}

// connContext is the http.Server's ConnContext hook: a request can mark
// its connection busy.
func (l *connLimiter) connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// stats returns the connections open now, the most open at once and how
// many were closed to make room.
func (l *connLimiter) stats() (open, peak int, evicted int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.peak, l.evict
}

func (l *connLimiter) release(c *trackedConn) {
	l.mu.Lock()
	_, ok := l.conns[c]
	delete(l.conns, c)
	l.mu.Unlock()
	if !ok {
		return
	}
	l.metrics.httpConns.Dec()
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// trackedConn is a connection counted by a connLimiter.
type trackedConn struct {
	net.Conn
	l *connLimiter

	// Guarded by l.mu.
	state   http.ConnState
	busy    int    // requests of it in a handler
	changed uint64 // l.tick at its last change

	closeOnce sync.Once
	closeErr  error
}

// Close closes the connection and frees its place.
func (c *trackedConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.Conn.Close()
		c.l.release(c)
	})
	return c.closeErr
}

// CloseWrite half-closes a TCP connection, which http.Server does before
// closing one after its last response.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serving marks a request of the connection in (true) or out of (false) a
// handler: a connection in a request is never closed to make room.
func (c *trackedConn) serving(in bool) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if in {
		c.busy++
	} else {
		c.busy--
	}
	c.l.tick++
	c.changed = c.l.tick
}
