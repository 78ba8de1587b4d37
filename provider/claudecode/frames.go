package claudecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/vigilrun/vigil/chat"
)

// The stream-json wire format of Claude Code, as much of it as the driver
// reads. Every struct tolerates unknown fields; a field of an unexpected
// JSON type makes its frame undecodable (logged at warn and counted).

// header is what every output line carries.
type header struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
}

// messageFrame is an "assistant" or "user" line.
type messageFrame struct {
	Message struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	ParentToolUseID string `json:"parent_tool_use_id"`
	AgentID         string `json:"agent_id"`
	SessionID       string `json:"session_id"`
}

// wireBlock is one content block of a message.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	ToolName  string          `json:"tool_name"`
}

// initFrame is a "system"/"init" line: the start of a turn.
type initFrame struct {
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	Version   string `json:"claude_code_version"`
}

// resultFrame is a "result" line: the end of a turn.
type resultFrame struct {
	Subtype        string          `json:"subtype"`
	IsError        bool            `json:"is_error"`
	NumTurns       int             `json:"num_turns"`
	Result         string          `json:"result"`
	Errors         json.RawMessage `json:"errors"`
	TerminalReason string          `json:"terminal_reason"`
	SessionID      string          `json:"session_id"`
	Usage          *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	Origin *struct {
		Kind string `json:"kind"`
	} `json:"origin"`
}

// taskFrame is a "system" line about a background task: task_started,
// task_progress, task_updated or task_notification.
type taskFrame struct {
	TaskID          string `json:"task_id"`
	ToolUseID       string `json:"tool_use_id"`
	Description     string `json:"description"`
	Prompt          string `json:"prompt"`
	TaskType        string `json:"task_type"`
	IsBackgrounded  *bool  `json:"is_backgrounded"`
	OwnedBySubagent bool   `json:"owned_by_subagent"`
	ParentTaskID    string `json:"parent_task_id"`
	Status          string `json:"status"`
	OutputFile      string `json:"output_file"`
	Summary         string `json:"summary"`
	Patch           struct {
		Status string `json:"status"`
	} `json:"patch"`
	Usage *struct {
		TotalTokens int64 `json:"total_tokens"`
		ToolUses    int64 `json:"tool_uses"`
		DurationMS  int64 `json:"duration_ms"`
	} `json:"usage"`
}

// tasksChangedFrame is a "system"/"background_tasks_changed" line: the
// whole set of live background tasks.
type tasksChangedFrame struct {
	Tasks []struct {
		TaskID      string `json:"task_id"`
		TaskType    string `json:"task_type"`
		Description string `json:"description"`
	} `json:"tasks"`
}

// controlResponseFrame answers a control request the driver sent.
type controlResponseFrame struct {
	Response struct {
		Subtype   string          `json:"subtype"`
		RequestID string          `json:"request_id"`
		Error     string          `json:"error"`
		Response  json.RawMessage `json:"response"`
	} `json:"response"`
}

// controlRequestFrame is a control request the CLI sends to its host.
type controlRequestFrame struct {
	RequestID string `json:"request_id"`
	Request   struct {
		Subtype string `json:"subtype"`
		// can_use_tool: the tool call the CLI asks permission for.
		ToolName  string          `json:"tool_name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
	} `json:"request"`
}

// permissionAnswer answers a can_use_tool request: allow (with the input
// to run, unchanged) or deny with a message the model sees.
type permissionAnswer struct {
	Type     string `json:"type"`
	Response struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Response  struct {
			Behavior     string          `json:"behavior"`
			UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
			Message      string          `json:"message,omitempty"`
		} `json:"response"`
	} `json:"response"`
}

// controlCancelFrame withdraws a control request of the CLI.
type controlCancelFrame struct {
	RequestID string `json:"request_id"`
}

// userLine is the stdin line that hands the CLI a user message.
type userLine struct {
	Type    string `json:"type"`
	Message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"message"`
	ParentToolUseID *string `json:"parent_tool_use_id"`
	Priority        string  `json:"priority,omitempty"`
}

// controlLine is the stdin line of a control request.
type controlLine struct {
	Type      string         `json:"type"`
	RequestID string         `json:"request_id"`
	Request   map[string]any `json:"request"`
}

// controlAnswer is the stdin line that answers a control request of the
// CLI.
type controlAnswer struct {
	Type     string `json:"type"`
	Response struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Error     string `json:"error,omitempty"`
	} `json:"response"`
}

var errEmptyLine = errors.New("empty line")

// decodeHeader reads a line's type and subtype.
func decodeHeader(line []byte) (header, error) {
	var h header
	if len(strings.TrimSpace(string(line))) == 0 {
		return h, errEmptyLine
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("decode frame: %w", err)
	}
	if h.Type == "" {
		return h, errors.New("decode frame: no type")
	}
	return h, nil
}

// blocks converts a message's content (a string or an array of blocks)
// into chat blocks. Blocks vigil has no type for (thinking, images) are
// left out and counted in skipped.
func blocks(raw json.RawMessage) (out []chat.Block, skipped []string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil, nil
		}
		return []chat.Block{chat.Text(s)}, nil, nil
	}
	var wire []wireBlock
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, nil, fmt.Errorf("decode content: %w", err)
	}
	for _, b := range wire {
		switch b.Type {
		case "text":
			out = append(out, chat.Text(b.Text))
		case "tool_use", "server_tool_use":
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			out = append(out, chat.Block{Type: chat.BlockToolUse, ID: b.ID, Name: b.Name, Input: input})
		case "tool_result":
			out = append(out, chat.ToolResult(b.ToolUseID, resultText(b.Content), b.IsError))
		default:
			skipped = append(skipped, b.Type)
		}
	}
	return out, skipped, nil
}

// resultText flattens a tool result's content: a string, or blocks whose
// text is joined (other blocks are named in brackets).
func resultText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var wire []wireBlock
	if json.Unmarshal(raw, &wire) != nil {
		return string(raw)
	}
	var parts []string
	for _, b := range wire {
		switch {
		case b.Type == "text":
			parts = append(parts, b.Text)
		case b.ToolName != "":
			parts = append(parts, "["+b.Type+" "+b.ToolName+"]")
		default:
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, "\n")
}

// errorsText joins a result's "errors" (strings or objects).
func errorsText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "; ")
	}
	return string(raw)
}
