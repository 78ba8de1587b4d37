package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/vigilrun/vigil"
)

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine-readable code and a message for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// apiError is an error with its HTTP status and code.
type apiError struct {
	status int
	code   string
	msg    string
	// retryAfter, when positive, is sent as the Retry-After header.
	retryAfter time.Duration
}

// Error implements error.
func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "invalid", msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf(format, args...)}
}

// statusOf is the HTTP status of each error code of the library: the one
// table from vigil's error vocabulary to HTTP.
var statusOf = map[vigil.ErrorCode]int{
	vigil.CodeNotFound:     http.StatusNotFound,
	vigil.CodeInvalid:      http.StatusBadRequest,
	vigil.CodeConflict:     http.StatusConflict,
	vigil.CodeClosed:       http.StatusConflict,
	vigil.CodeMoved:        http.StatusConflict,
	vigil.CodeUnavailable:  http.StatusServiceUnavailable,
	vigil.CodeRecovering:   http.StatusServiceUnavailable,
	vigil.CodeShuttingDown: http.StatusServiceUnavailable,
	vigil.CodeBehind:       http.StatusConflict,
	vigil.CodeTimeout:      http.StatusGatewayTimeout,
	vigil.CodeCanceled:     499,
	vigil.CodeInternal:     http.StatusInternalServerError,
}

// toAPIError classifies an error of the library (vigil.CodeOf) or of the
// edge itself. Anything unclassified is a 500.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	code := vigil.CodeOf(err)
	status, ok := statusOf[code]
	if !ok {
		status, code = http.StatusInternalServerError, vigil.CodeInternal
	}
	msg := err.Error()
	if code == vigil.CodeShuttingDown {
		msg = "the server is shutting down"
	}
	e := &apiError{status: status, code: string(code), msg: msg}
	if ra := retryAfterOf(err); ra > 0 {
		// A session between owners (failover): whatever the code, the
		// client may try again after a while.
		e.status, e.retryAfter = http.StatusServiceUnavailable, ra
	}
	return e
}

// writeError writes err as a JSON error, with a Retry-After header when
// it says when to try again.
func writeError(w http.ResponseWriter, err error) {
	e := toAPIError(err)
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterValue(e.retryAfter))
	}
	writeJSON(w, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: e.msg}})
}

// writeJSON writes v as the JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshal(ErrorBody{Error: ErrorDetail{Code: "internal", Message: "encode response: " + err.Error()}})
	}
	writeRaw(w, status, b)
}

// writeRaw writes an encoded JSON body.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// marshal encodes v without HTML escaping, with a final newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decode reads a JSON body into v strictly: bodies over the limit are 413,
// a body not received within the read timeout is 408, unknown fields and
// trailing data are 400, and so is text no store can keep (checkJSONText).
// An empty body is an error unless optional.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if optional {
			return nil
		}
		return badRequest("request body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("bad JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("bad JSON body: data after the object")
	}
	if e := checkJSONText(b); e != nil {
		return e
	}
	return nil
}

// readBody reads the whole body, up to Options.MaxBody, within
// Options.ReadTimeout.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
	b, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: "too_large", msg: fmt.Sprintf("request body is over %d bytes", mbe.Limit)}
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			return nil, &apiError{status: http.StatusRequestTimeout, code: "timeout", msg: fmt.Sprintf("the request body did not arrive within %s", s.opts.ReadTimeout)}
		}
		w.Header().Set("Connection", "close")
		return nil, badRequest("read body: %v", err)
	}
	return b, nil
}
