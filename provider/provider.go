// Package provider defines how vigil talks to a language model: one
// streaming call per model round, described by a Request and answered by a
// sequence of Events that ends in one complete response or an error.
//
// Adapters live in sub-packages, one per wire format: provider/anthropic
// (Messages API), provider/openai (Chat Completions and compatible servers),
// provider/script (scenario files for tests and demos). The HTTP adapters
// share HTTPAdapter (retries, error classification, stalls, cut streams,
// key redaction) and keep only their wire format; every adapter passes
// the conformance suite providertest.Run.
package provider

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// Request is one model round.
type Request struct {
	// CallID identifies the call. It is stable across a re-issue after a
	// crash, so adapters may use it as an idempotency key.
	CallID string
	// Session, Agent and AgentName say who is asking. Agent is the agent id;
	// AgentName its name ("main" for a session's main agent).
	Session   string
	Agent     string
	AgentName string
	// Model is the model name the adapter sends; empty means its default.
	Model string
	// System is the system prompt.
	System string
	// Messages is the conversation so far, oldest first. Consecutive
	// messages may share a role; adapters merge them where the wire format
	// demands alternation.
	Messages []chat.Message
	// Tools are the tools the model may call.
	Tools []chat.ToolSpec
	// MaxTokens caps the answer; zero means the adapter's default.
	MaxTokens int
	// Purpose says what the round is for: "" for a normal model round,
	// PurposeCompact for a request that asks the model to summarise the
	// older turns of the conversation. Adapters send it as the
	// X-Vigil-Purpose header and otherwise treat every purpose alike; a
	// compaction request carries no tools because its caller sends none.
	Purpose string
}

// PurposeCompact is the Request.Purpose of a context compaction: the
// request asks the model to summarise the older turns of the
// conversation, so that the summary can stand in for them.
const PurposeCompact = "compact"

// Windowed is implemented by a Provider that knows the context windows of
// its models.
type Windowed interface {
	// ContextWindow is the context window of model in tokens: the largest
	// prompt the model accepts. Zero means unknown.
	ContextWindow(model string) int
}

// EventType names the kind of a streamed Event.
type EventType string

// The event kinds a provider stream yields.
const (
	// EventText carries a text delta of the answer being produced.
	EventText EventType = "text"
	// EventToolUse carries one complete tool_use block.
	EventToolUse EventType = "tool_use"
	// EventRetry says the attempt failed and another follows after a delay.
	// Partial output yielded before it is void.
	EventRetry EventType = "retry"
	// EventDone carries the complete response. It is the last event of a
	// successful stream.
	EventDone EventType = "done"
)

// Event is one item of a provider stream.
type Event struct {
	Type     EventType
	Text     string
	Block    *chat.Block
	Retry    *Retry
	Response *chat.Response
}

// Retry describes a failed attempt that will be retried.
type Retry struct {
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// Delay is how long the adapter waits before the next attempt.
	Delay time.Duration
	// Reason says why, e.g. "529 overloaded_error".
	Reason string
}

// Provider is a model endpoint.
type Provider interface {
	// Name identifies the provider in logs and status output.
	Name() string
	// Stream performs one model round. The sequence ends after an EventDone
	// or after yielding a non-nil error; a stream that ends without either
	// is a bug in the adapter and callers treat it as truncated.
	Stream(ctx context.Context, req *Request) iter.Seq2[Event, error]
}

// ErrorKind classifies a provider failure.
type ErrorKind string

// Failure kinds. Retryable ones are retried by adapters before they surface.
const (
	ErrOverloaded  ErrorKind = "overloaded"   // 529, overloaded_error
	ErrRateLimited ErrorKind = "rate_limited" // 429
	ErrServer      ErrorKind = "server"       // 5xx
	ErrNetwork     ErrorKind = "network"      // connection refused or dropped
	ErrTruncated   ErrorKind = "truncated"    // stream ended before its final event
	ErrMalformed   ErrorKind = "malformed"    // unparseable frame or delta
	ErrBadRequest  ErrorKind = "bad_request"  // 400 and other client errors
	ErrAuth        ErrorKind = "auth"         // 401, 403
	ErrCanceled    ErrorKind = "canceled"     // the caller's context ended
	ErrStalled     ErrorKind = "stalled"      // no bytes arrived for RetryPolicy.StallTimeout
	ErrScript      ErrorKind = "script"       // a scripted provider's scenario error
)

// Error is a provider failure as the user sees it. Its message never holds
// an API key.
type Error struct {
	Provider  string
	Kind      ErrorKind
	Status    int // HTTP status, 0 when there was none
	Message   string
	Retryable bool
	// Attempts counts the attempts made before giving up.
	Attempts int
}

// Error implements error.
func (e *Error) Error() string {
	s := e.Provider + ": " + string(e.Kind)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	return s
}

// IsRetryable reports whether err is a provider error worth another attempt.
func IsRetryable(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Retryable
}

// Collect drains a stream into its final response. It calls observe, when
// not nil, for every event before EventDone. A stream that ends without
// EventDone yields an ErrTruncated error: a cut stream is never taken as a
// complete answer.
func Collect(seq iter.Seq2[Event, error], observe func(Event)) (*chat.Response, error) {
	for ev, err := range seq {
		if err != nil {
			return nil, err
		}
		if ev.Type == EventDone {
			if ev.Response == nil {
				return nil, &Error{Kind: ErrTruncated, Message: "done event without a response"}
			}
			return ev.Response, nil
		}
		if observe != nil {
			observe(ev)
		}
	}
	return nil, &Error{Kind: ErrTruncated, Message: "stream ended before its final event"}
}

// IdentityHeaders returns request options, made with header, that tell the
// server who is asking: X-Vigil-Session, X-Vigil-Agent (the agent's name),
// X-Vigil-Call (stable across a re-issue, usable as an idempotency key)
// and, when the request has one, X-Vigil-Purpose (e.g. "compact"). Empty
// values are not sent. Fake servers in tests use them to play each agent's
// part and to tell compaction requests apart.
func IdentityHeaders[O any](req *Request, header func(k, v string) O) []O {
	var out []O
	for _, kv := range [][2]string{{"X-Vigil-Session", req.Session}, {"X-Vigil-Agent", req.AgentName}, {"X-Vigil-Call", req.CallID}, {"X-Vigil-Purpose", req.Purpose}} {
		if kv[1] != "" {
			out = append(out, header(kv[0], kv[1]))
		}
	}
	return out
}

// contextErrors are the words providers use to refuse a request over the
// model's context window: Anthropic's "prompt is too long", OpenAI's
// context_length_exceeded code and "maximum context length" message, and
// the servers that copy them.
var contextErrors = []string{"prompt is too long", "context_length_exceeded", "maximum context length", "context window", "too many tokens"}

// FailureOf says what a model call's failure means for retrying it: a
// refusal over the context window, of the key, or of the request repeats
// if the same request is sent again; overloads, rate limits, server and
// network errors and cut streams may not.
func FailureOf(err error) core.FailureKind {
	var pe *Error
	if !errors.As(err, &pe) {
		return core.FailTransient
	}
	switch pe.Kind {
	case ErrAuth:
		return core.FailAuth
	case ErrBadRequest:
		switch pe.Status {
		case 408, 409, 425:
			return core.FailTransient // a timeout or a conflict may pass
		}
		msg := strings.ToLower(pe.Message)
		for _, w := range contextErrors {
			if strings.Contains(msg, w) {
				return core.FailContext
			}
		}
		return core.FailInvalid
	}
	return core.FailTransient
}
