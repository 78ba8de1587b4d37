package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// StallError is the error of a request whose response went quiet: no
// byte of it (headers or body) arrived for Timeout. Its message reads
// "no bytes for 2m0s".
type StallError struct {
	Timeout time.Duration
}

// Error implements error.
func (e *StallError) Error() string { return fmt.Sprintf("no bytes for %s", e.Timeout) }

// StallTransport returns a RoundTripper that sends requests with base
// (http.DefaultTransport when nil) and aborts one whose response goes quiet:
// a timer of length timeout starts when the request is sent, restarts
// whenever a read of the response body returns bytes, and stops when the
// body is closed. When it fires, the request's context is cancelled, and
// the pending RoundTrip or body Read returns a *StallError (wrapped by
// http.Client and SDKs; find it with errors.As). A timeout of zero or less
// returns base unchanged.
//
// base must abort a request, and a read of its body, when the request's
// context ends; http.Transport does.
func StallTransport(base http.RoundTripper, timeout time.Duration) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if timeout <= 0 {
		return base
	}
	return &stallTransport{base: base, timeout: timeout}
}

// StallClient returns a copy of hc (a zero client when nil) whose
// transport is StallTransport(hc.Transport, p.StallTimeout), with a zero
// StallTimeout taken as DefaultStallTimeout. When stall detection is off
// (a negative StallTimeout) it returns hc itself. The copy shares hc's
// transport, so their connections are pooled together.
func (p RetryPolicy) StallClient(hc *http.Client) *http.Client {
	if hc == nil {
		hc = &http.Client{}
	}
	d := p.StallTimeout
	if d == 0 {
		d = DefaultStallTimeout
	}
	if d < 0 {
		return hc
	}
	c := *hc
	c.Transport = StallTransport(hc.Transport, d)
	return &c
}

type stallTransport struct {
	base    http.RoundTripper
	timeout time.Duration
}

// RoundTrip implements http.RoundTripper.
func (t *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	w := &stallWatch{timeout: t.timeout, cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(t.timeout, w.fire)
	w.mu.Unlock()
	res, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stalled := w.stop()
		if stalled {
			return nil, &StallError{Timeout: t.timeout}
		}
		return nil, err
	}
	w.kick() // the headers are bytes too
	if res.Body == nil || res.Body == http.NoBody {
		w.stop()
		return res, nil
	}
	res.Body = &stallBody{rc: res.Body, w: w}
	return res, nil
}

// stallWatch is the timer of one request.
type stallWatch struct {
	timeout time.Duration
	cancel  context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	fired   bool
	stopped bool
}

func (w *stallWatch) fire() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.mu.Unlock()
	w.cancel(&StallError{Timeout: w.timeout})
}

// kick restarts the timer after bytes arrived.
func (w *stallWatch) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.fired && !w.stopped {
		w.timer.Reset(w.timeout)
	}
}

// stalled reports whether the timer fired.
func (w *stallWatch) stalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// stop ends the watch, releases the request's context and reports whether
// the timer had fired.
func (w *stallWatch) stop() bool {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	fired := w.fired
	w.mu.Unlock()
	w.cancel(nil)
	return fired
}

// stallBody restarts its watch's timer on every read that returns bytes.
type stallBody struct {
	rc io.ReadCloser
	w  *stallWatch
}

// Read implements io.Reader, restarting the stall timer on every byte.
func (b *stallBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.w.kick()
	}
	if err != nil && !errors.Is(err, io.EOF) && b.w.stalled() {
		err = &StallError{Timeout: b.w.timeout}
	}
	return n, err
}

// Close implements io.Closer and stops the stall timer.
func (b *stallBody) Close() error {
	err := b.rc.Close()
	b.w.stop()
	return err
}
