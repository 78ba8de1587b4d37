package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// HTTPAdapter is what every adapter of a streaming HTTP API shares,
// whatever its wire format: the retry loop and its EventRetry
// announcements, the classification of HTTP errors, network errors,
// stalls and cut streams, the removal of the API key from every error
// message and log line, and the reading of one attempt's response. An
// adapter keeps its wire format: it sends a request with its SDK, reads an
// error body, and turns the frames of a stream into Events and a response
// with an Accumulator. providertest.Run checks what HTTPAdapter does, once
// per adapter.
//
// Set the fields before the first call; it is then safe for concurrent
// use.
type HTTPAdapter struct {
	// Name identifies the provider in errors and logs.
	Name string
	// APIKey is the key the adapter sends. It is removed from every error
	// message, and so from every log line, the adapter produces.
	APIKey string
	// Retry is the retry policy; zero fields mean the defaults.
	Retry RetryPolicy
	// Logger receives retries (warn) and attempts (debug); nil discards.
	Logger *slog.Logger
	// RequestIDHeader names the response header that holds the server's
	// request id, quoted in error messages.
	RequestIDHeader string
	// ErrorBody reads the body of an HTTP error response: the error's
	// type, as StatusKind takes it, and the message for the user. ok is
	// false when the body holds no error object.
	ErrorBody func(body []byte) (errType, msg string, ok bool)
	// StreamError classifies an error object sent with a successful
	// status: a JSON error body in place of the event stream. It returns
	// nil when data holds none; nil means none ever does.
	StreamError func(data []byte) *Error
}

// Frame is one server-sent event of a response stream. An SDK's
// ssestream.Event converts to it.
type Frame struct {
	Type string
	Data []byte
}

// Frames reads the frames of one response, as an SDK's SSE decoder does.
type Frames interface {
	// Next reads the next frame; false at the end of the body or when
	// reading it failed (see Err).
	Next() bool
	// Frame is the frame Next read.
	Frame() Frame
	// Err is the error that ended the body early, nil at a clean end.
	Err() error
}

// Accumulator builds the response of one attempt from its frames. Its
// errors need only Kind, Message and Retryable: HTTPAdapter names the
// provider and removes the API key.
type Accumulator interface {
	// Add reads one frame: it returns the events the frame completes, or
	// a failure that ends the attempt.
	Add(f Frame) ([]Event, *Error)
	// Done reports that the stream's final frame arrived: the rest of the
	// body is not read.
	Done() bool
	// Finish is called once the body ended or Done: it returns the events
	// still to yield and the response. cut is the error that ended the
	// body early, nil at a clean end or after Done. A stream that ended
	// before its answer was whole is a Truncated error, never a response.
	Finish(cut error) ([]Event, *chat.Response, *Error)
}

// Malformed is the error of a frame or a delta that makes no sense. It is
// not retried: the same request would get the same answer.
func Malformed(format string, args ...any) *Error {
	return &Error{Kind: ErrMalformed, Message: fmt.Sprintf(format, args...)}
}

// Truncated is the error of a stream that ended before final, its last
// frame; cut is what ended it, nil for a clean end. It is retried.
func Truncated(final string, cut error) *Error {
	msg := "stream ended before " + final
	if cut != nil {
		msg += ": " + cut.Error()
	}
	return &Error{Kind: ErrTruncated, Message: msg, Retryable: true}
}

// ErrorText is "label: message", or whichever of the two is not empty.
func ErrorText(label, message string) string {
	switch {
	case label == "":
		return message
	case message == "":
		return label
	}
	return label + ": " + message
}

// Client returns the client an adapter sends with: hc, or when nil a
// client whose transport waits at most 10 minutes for response headers,
// with its transport wrapped in StallTransport unless the policy turns
// stall detection off.
func (a *HTTPAdapter) Client(hc *http.Client) *http.Client {
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		hc = &http.Client{Transport: t}
	}
	return a.Retry.StallClient(hc)
}

// Refuse is the stream of a call refused before anything was sent, because
// the request cannot be put on the wire (err says why): one ErrBadRequest.
func (a *HTTPAdapter) Refuse(err error) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		yield(Event{}, a.stamp(&Error{Kind: ErrBadRequest, Message: err.Error()}))
	}
}

// Stream performs a model call under the retry policy. Each attempt sends
// the request with send, which returns the server's response and the
// SDK's error (with the response when the server answered), and reads an
// event stream through read's Frames and Accumulator. Stream yields the
// events as they come, EventRetry before each backoff, and ends with one
// EventDone or one *Error; model names the model in logs.
func (a *HTTPAdapter) Stream(ctx context.Context, req *Request, model string,
	send func(ctx context.Context) (*http.Response, error),
	read func(res *http.Response) (Frames, Accumulator)) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		retry := a.Retry.WithDefaults()
		log := a.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		retry.run(ctx, a.Name, req.CallID, log, func(n int) (*chat.Response, *failure, bool) {
			log.Debug("model call", "provider", a.Name, "call", req.CallID, "model", model, "attempt", n)
			return a.attempt(ctx, retry.Now, send, read, yield)
		}, yield)
	}
}

// stamp names the provider in e and removes the API key from its message.
func (a *HTTPAdapter) stamp(e *Error) *Error {
	e.Provider = a.Name
	e.Message = redact(e.Message, a.APIKey)
	return e
}

func (a *HTTPAdapter) fail(e *Error) *failure { return &failure{Err: a.stamp(e)} }

// attempt makes one request and reads its stream. It returns the response,
// or the failure, or stopped when the consumer stopped the iteration.
func (a *HTTPAdapter) attempt(ctx context.Context, now func() time.Time,
	send func(context.Context) (*http.Response, error), read func(*http.Response) (Frames, Accumulator),
	yield func(Event, error) bool) (*chat.Response, *failure, bool) {
	res, err := send(ctx)
	if err != nil {
		if f := a.stalled(err); f != nil {
			closeBody(res)
			return nil, f, false
		}
		if res != nil && res.StatusCode >= 400 {
			return nil, a.httpFailure(res, now()), false
		}
		closeBody(res)
		return nil, a.fail(&Error{Kind: ErrNetwork, Message: err.Error(), Retryable: transportRetryable(err)}), false
	}
	if res == nil || res.Body == nil {
		return nil, a.fail(&Error{Kind: ErrNetwork, Message: "no response", Retryable: true}), false
	}
	defer res.Body.Close()
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "application/json" {
		// Not a stream: an error in a 200, or a server that ignored
		// "stream": true. Either way, no retry will change it.
		body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		if f := a.stalled(err); f != nil {
			return nil, f, false
		}
		if a.StreamError != nil {
			if e := a.StreamError(body); e != nil {
				return nil, a.fail(e), false
			}
		}
		return nil, a.fail(Malformed("expected an event stream, got JSON: %s", Truncate(string(body), 200))), false
	}

	frames, acc := read(res)
	for frames.Next() {
		evs, e := acc.Add(frames.Frame())
		if e != nil {
			return nil, a.fail(e), false
		}
		for _, ev := range evs {
			if !yield(ev, nil) {
				return nil, nil, true
			}
		}
		if acc.Done() {
			break
		}
	}
	var cut error
	if !acc.Done() {
		cut = frames.Err()
		if f := a.stalled(cut); f != nil {
			return nil, f, false
		}
	}
	evs, resp, e := acc.Finish(cut)
	if e != nil {
		return nil, a.fail(e), false
	}
	for _, ev := range evs {
		if !yield(ev, nil) {
			return nil, nil, true
		}
	}
	return resp, nil, false
}

func closeBody(res *http.Response) {
	if res != nil && res.Body != nil {
		res.Body.Close()
	}
}

// stalled returns the failure of an attempt whose response went quiet
// (err holds a *StallError), or nil.
func (a *HTTPAdapter) stalled(err error) *failure {
	var se *StallError
	if !errors.As(err, &se) {
		return nil
	}
	return a.fail(&Error{Kind: ErrStalled, Message: se.Error(), Retryable: true})
}

// httpFailure reads an error response.
func (a *HTTPAdapter) httpFailure(res *http.Response, now time.Time) *failure {
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var errType, msg string
	ok := false
	if a.ErrorBody != nil {
		errType, msg, ok = a.ErrorBody(body)
	}
	if !ok {
		msg = Truncate(string(body), 300)
		if msg == "" {
			msg = http.StatusText(res.StatusCode)
		}
	}
	if a.RequestIDHeader != "" {
		if id := res.Header.Get(a.RequestIDHeader); id != "" {
			msg += " (request-id " + id + ")"
		}
	}
	kind, retryable := StatusKind(res.StatusCode, errType)
	f := a.fail(&Error{Kind: kind, Status: res.StatusCode, Message: msg, Retryable: retryable})
	f.Wait, f.HasWait = retryAfter(res.Header, now)
	return f
}
