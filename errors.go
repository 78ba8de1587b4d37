package vigil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// ErrorCode classifies an error of the runtime. Every edge (HTTP, MCP, the
// CLI) maps codes to its own format in one table; the codes are also the
// "code" of the HTTP API's error bodies.
type ErrorCode string

// The error codes.
const (
	// CodeNotFound: no such session, agent, task, item or approval.
	CodeNotFound ErrorCode = "not_found"
	// CodeInvalid: the request is malformed or names something of the
	// wrong kind; nothing of it was kept.
	CodeInvalid ErrorCode = "invalid"
	// CodeConflict: the request contradicts the session's state (an item
	// already taken by a run, an approval already answered).
	CodeConflict ErrorCode = "conflict"
	// CodeClosed: the session or agent is closed.
	CodeClosed ErrorCode = "closed"
	// CodeMoved: another node holds the session's lease.
	CodeMoved ErrorCode = "moved"
	// CodeUnavailable: the store refused a commit (unreachable, full,
	// read-only); nothing of the request was kept.
	CodeUnavailable ErrorCode = "unavailable"
	// CodeRecovering: the session is being taken over at this moment.
	CodeRecovering ErrorCode = "recovering"
	// CodeShuttingDown: the runtime was closed.
	CodeShuttingDown ErrorCode = "shutting_down"
	// CodeBehind: a subscriber fell behind the live events.
	CodeBehind ErrorCode = "behind"
	// CodeTimeout: the caller's deadline passed.
	CodeTimeout ErrorCode = "timeout"
	// CodeCanceled: the caller canceled.
	CodeCanceled ErrorCode = "canceled"
	// CodeInternal: anything else.
	CodeInternal ErrorCode = "internal"
)

// Error is an error of the runtime: a code, a message for people, and the
// error of the core, the store or the context it came from, if any.
//
// errors.Is(err, ErrNotFound) holds for every error with that code; the
// other sentinels below match by code the same way.
type Error struct {
	Code    ErrorCode
	Message string
	// Err is the cause, kept for errors.Is and errors.As.
	Err error
	// RetryAfter, when positive, says the same request may succeed after
	// it: the session is between nodes (a failover). Nothing of the
	// request was kept.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string {
	switch {
	case e.Message != "":
		return e.Message
	case e.Err != nil:
		return e.Err.Error()
	}
	return string(e.Code)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a sentinel of the same code (an *Error
// with no message and no cause), or the very same error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t == e || (t.Message == "" && t.Err == nil && t.Code == e.Code)
}

// Sentinels for errors.Is, one per code. ErrSessionClosed is the code
// closed (a session or an agent); the runtime's own end is
// ErrShuttingDown.
var (
	ErrNotFound      = &Error{Code: CodeNotFound}
	ErrInvalid       = &Error{Code: CodeInvalid}
	ErrConflict      = &Error{Code: CodeConflict}
	ErrSessionClosed = &Error{Code: CodeClosed}
	ErrMoved         = &Error{Code: CodeMoved}
	ErrUnavailable   = &Error{Code: CodeUnavailable}
	ErrRecovering    = &Error{Code: CodeRecovering}
	ErrShuttingDown  = &Error{Code: CodeShuttingDown}
	ErrBehind        = &Error{Code: CodeBehind}
)

// The runtime's own errors, with their messages.
var (
	errNoSession   = &Error{Code: CodeNotFound, Message: "no such session"}
	errRecovering  = &Error{Code: CodeRecovering, Message: "session is being recovered; try again"}
	errMoved       = &Error{Code: CodeMoved, Message: "session moved to another node (lease lost)"}
	errStoreDown   = &Error{Code: CodeUnavailable, Message: "store unavailable"}
	errRuntimeDone = &Error{Code: CodeShuttingDown, Message: "runtime closed"}
	errBehind      = &Error{Code: CodeBehind, Message: "the subscriber fell behind the live events"}
)

// CodeOf returns the code of err: its own when it is an *Error, otherwise
// the code of the core's, the store's or the context's error it wraps,
// otherwise CodeInternal. A nil error has no code.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	switch core.ErrorCodeOf(err) {
	case core.CodeNotFound:
		return CodeNotFound
	case core.CodeInvalid:
		return CodeInvalid
	case core.CodeConflict:
		return CodeConflict
	case core.CodeClosed:
		return CodeClosed
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, store.ErrRefused):
		return CodeInvalid // refused for good: no retry makes it succeed
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrFull), errors.Is(err, store.ErrReadOnly):
		return CodeUnavailable
	case errors.Is(err, store.ErrFenced), errors.Is(err, store.ErrLeaseHeld):
		return CodeMoved
	case errors.Is(err, store.ErrClosed):
		return CodeShuttingDown
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	}
	return CodeInternal
}

// wrapErr makes every error that leaves the library API an *Error, keeping
// the original as its cause; nil stays nil.
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e == err {
			return err
		}
		// An *Error wrapped with more context: keep the context.
		return &Error{Code: e.Code, Message: err.Error(), Err: err, RetryAfter: e.RetryAfter}
	}
	return &Error{Code: CodeOf(err), Message: err.Error(), Err: err}
}

// invalidf is a CodeInvalid error.
func invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

// notFoundf is a CodeNotFound error.
func notFoundf(format string, args ...any) error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}
