package codex

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The app-server speaks JSON-RPC 2.0 without the "jsonrpc" member, one
// message a line, both ways (codex app-server generate-json-schema prints
// the schema of every message).

// rpcRequest is a request of the driver.
type rpcRequest struct {
	ID     int64  `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params,omitempty"`
}

// rpcNotification is a notification of the driver (initialized).
type rpcNotification struct {
	Method string `json:"method"`
	Params any    `json:"params,omitempty"`
}

// rpcMessage is any message of Codex: a response (id, result or error), a
// request (id, method, params) or a notification (method, params).
type rpcMessage struct {
	ID     *json.RawMessage `json:"id"`
	Method string           `json:"method"`
	Params json.RawMessage  `json:"params"`
	Result json.RawMessage  `json:"result"`
	Error  *rpcError        `json:"error"`
}

// rpcError is the error of a response.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error implements error.
func (e *rpcError) Error() string { return fmt.Sprintf("codex error %d: %s", e.Code, e.Message) }

var errEmptyLine = errors.New("empty line")

// decodeMessage reads one line of Codex's output.
func decodeMessage(line []byte) (*rpcMessage, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, errEmptyLine
	}
	var m rpcMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	if m.Method == "" && m.ID == nil {
		return nil, errors.New("neither a method nor an id")
	}
	return &m, nil
}
