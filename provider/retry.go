package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vigilrun/vigil/chat"
)

// RetryPolicy says how often and how long an adapter retries a failed
// attempt. The zero value means the defaults.
//
// Retried: HTTP 429, 500-504 and 529, an overloaded_error (also as an SSE
// error event in the middle of a stream), a connection refused or reset,
// a stream that ends before its final event, and a response that stalls
// (see StallTimeout). Not retried: other client
// errors (400, 401, 403, 404, ...), malformed frames, and the caller's
// context ending.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one call, the first included.
	// Zero means 5; 1 turns retries off.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the exponential backoff with full
	// jitter: before attempt n+1 the adapter waits a random duration in
	// [0, min(MaxDelay, BaseDelay*2^(n-1))). Zero means 1s and 30s.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest wait a server may ask for with
	// retry-after or retry-after-ms; the adapter waits exactly what the
	// server asks. A longer request ends the call at once with a retryable
	// error that names the wait. Zero means 5 minutes.
	MaxRetryAfter time.Duration
	// Sleep waits d, or until ctx ends and then returns its error. Nil
	// means a timer. Tests inject one so they need not wait.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform random number in [0, 1) for the jitter. Nil
	// means math/rand/v2.
	Rand func() float64
	// Now reads the clock, to turn an HTTP-date retry-after into a wait.
	// Nil means time.Now.
	Now func() time.Time
	// StallTimeout is the longest an attempt may go without receiving a
	// byte, counted from sending the request to the response headers and
	// then between reads of the response body (the event stream). When it
	// passes, the attempt is aborted and fails with ErrStalled, which is
	// retried; see StallTransport. Zero means DefaultStallTimeout; a
	// negative value turns stall detection off.
	StallTimeout time.Duration
}

// DefaultStallTimeout is the StallTimeout of a zero RetryPolicy. The
// Anthropic API sends a ping event every few seconds while the model
// thinks, so two minutes of silence there means a dead connection. A
// local server on slow hardware may send nothing while it reads a long
// prompt: give it a longer StallTimeout.
const DefaultStallTimeout = 2 * time.Minute

// WithDefaults fills in the zero fields.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = time.Second
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 5 * time.Minute
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.StallTimeout == 0 {
		p.StallTimeout = DefaultStallTimeout
	}
	return p
}

// Backoff returns the wait after the failed attempt n (from 1).
func (p RetryPolicy) Backoff(n int) time.Duration {
	ceil := p.BaseDelay
	for i := 1; i < n && ceil < p.MaxDelay; i++ {
		ceil *= 2
	}
	ceil = min(ceil, p.MaxDelay)
	return time.Duration(p.Rand() * float64(ceil))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryAfter reads retry-after-ms, then retry-after (seconds or an HTTP
// date), from h.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// failure is one failed attempt of a model call.
type failure struct {
	Err *Error
	// Wait is the server's retry-after, when HasWait.
	Wait    time.Duration
	HasWait bool
}

// StatusKind classifies an HTTP error status and the error type of its
// body.
func StatusKind(status int, errType string) (ErrorKind, bool) {
	switch {
	case status == 529 || errType == "overloaded_error":
		return ErrOverloaded, true
	case status == http.StatusTooManyRequests:
		return ErrRateLimited, true
	case status >= 500 && status <= 504:
		return ErrServer, true
	case status >= 500:
		return ErrServer, false
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ErrAuth, false
	default:
		return ErrBadRequest, false
	}
}

// transportRetryable reports whether a transport error (no response) is
// worth another attempt: refused and reset connections, timeouts and EOFs
// are; certificate and malformed-URL errors are not.
func transportRetryable(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verify           *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknownAuthority), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &verify):
		return false
	case strings.Contains(err.Error(), "unsupported protocol scheme"):
		return false
	}
	return true
}

// redact removes secret from s.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

// Truncate shortens s to about n bytes, on a rune boundary, for an error
// message.
func Truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// run performs a model call under the policy: attempt is called for
// attempt n (from 1) and returns the response, or the failure, or stopped
// when the consumer stopped reading. It yields EventRetry before each
// backoff, then the final EventDone or error. name is the provider's name
// for errors and logs.
func (p RetryPolicy) run(ctx context.Context, name, callID string, log *slog.Logger,
	attempt func(n int) (*chat.Response, *failure, bool), yield func(Event, error) bool) {
	canceled := func(attempts int) *Error {
		msg := "context canceled"
		if err := ctx.Err(); err != nil {
			msg = err.Error()
		}
		return &Error{Provider: name, Kind: ErrCanceled, Message: msg, Attempts: attempts}
	}
	for n := 1; ; n++ {
		resp, f, stopped := attempt(n)
		if stopped {
			return
		}
		if f == nil {
			yield(Event{Type: EventDone, Response: resp}, nil)
			return
		}
		e := f.Err
		e.Attempts = n
		if ctx.Err() != nil {
			yield(Event{}, canceled(n))
			return
		}
		if !e.Retryable || n >= p.MaxAttempts {
			yield(Event{}, e)
			return
		}
		delay := p.Backoff(n)
		if f.HasWait {
			if f.Wait > p.MaxRetryAfter {
				e.Message += fmt.Sprintf(" (server asks to retry after %s)", f.Wait)
				yield(Event{}, e)
				return
			}
			delay = f.Wait
		}
		reason := reasonOf(e)
		log.Warn("model call failed; retrying", "provider", name, "call", callID, "attempt", n, "delay", delay, "reason", reason)
		if !yield(Event{Type: EventRetry, Retry: &Retry{Attempt: n, Delay: delay, Reason: reason}}, nil) {
			return
		}
		if err := p.Sleep(ctx, delay); err != nil {
			yield(Event{}, canceled(n))
			return
		}
	}
}

// reasonOf is a short reason for a failed attempt, e.g. "529 overloaded".
func reasonOf(e *Error) string {
	if e.Status != 0 {
		return fmt.Sprintf("%d %s", e.Status, e.Message)
	}
	return string(e.Kind) + ": " + e.Message
}
