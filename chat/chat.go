// Package chat defines the provider-neutral conversation types that vigil's
// core keeps in transcripts and that every model provider translates to and
// from its own wire format.
package chat

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Role is the author of a message in a conversation.
type Role string

// The roles a transcript holds. Inbox items, tool results and notifications
// are all delivered to the model as user content.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// BlockType names the kind of a content block.
type BlockType string

// The content block kinds vigil understands.
const (
	BlockText       BlockType = "text"
	BlockToolUse    BlockType = "tool_use"
	BlockToolResult BlockType = "tool_result"
)

// Block is one piece of a message: text, a tool call the model made, or the
// result of such a call.
type Block struct {
	Type BlockType `json:"type"`
	// Text is set for text blocks.
	Text string `json:"text,omitempty"`
	// ID and Name identify a tool_use block; Input holds its JSON arguments.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError describe a tool_result block.
	ToolUseID string `json:"tool_use_id,omitempty"`
	Content   string `json:"content,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`
}

// Text returns a text block.
func Text(s string) Block { return Block{Type: BlockText, Text: s} }

// ToolResult returns a tool_result block answering the tool call useID.
func ToolResult(useID, content string, isError bool) Block {
	return Block{Type: BlockToolResult, ToolUseID: useID, Content: content, IsError: isError}
}

// Message is one turn of a conversation.
type Message struct {
	Role    Role    `json:"role"`
	Content []Block `json:"content"`
}

// Clone returns a copy of m that shares no memory with it.
func (m Message) Clone() Message {
	c := Message{Role: m.Role, Content: make([]Block, len(m.Content))}
	for i, b := range m.Content {
		b.Input = bytes.Clone(b.Input)
		c.Content[i] = b
	}
	return c
}

// PlainText joins the text blocks of the message.
func (m Message) PlainText() string {
	// One text block, the common answer, is its own text: no copy.
	var first string
	texts := 0
	for _, c := range m.Content {
		if c.Type == BlockText {
			if texts == 0 {
				first = c.Text
			}
			texts++
		}
	}
	if texts <= 1 {
		return first
	}
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == BlockText {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// ToolUses returns the tool_use blocks of the message in order.
func (m Message) ToolUses() []Block {
	var out []Block
	for _, c := range m.Content {
		if c.Type == BlockToolUse {
			out = append(out, c)
		}
	}
	return out
}

// StopReason says why the model ended its answer.
type StopReason string

// Stop reasons, named as in the Anthropic Messages API; OpenAI-compatible
// providers map theirs onto these.
const (
	StopEndTurn   StopReason = "end_turn"
	StopToolUse   StopReason = "tool_use"
	StopMaxTokens StopReason = "max_tokens"
	StopSequence  StopReason = "stop_sequence"
	StopRefusal   StopReason = "refusal"
	StopPauseTurn StopReason = "pause_turn"
	StopUnknown   StopReason = "unknown"
)

// Usage counts the tokens of one or more model calls.
type Usage struct {
	InputTokens      int64 `json:"input_tokens,omitempty"`
	OutputTokens     int64 `json:"output_tokens,omitempty"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + o.InputTokens,
		OutputTokens:     u.OutputTokens + o.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + o.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + o.CacheWriteTokens,
	}
}

// Total is the number of tokens counted, input and output.
func (u Usage) Total() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Response is a complete model answer.
type Response struct {
	Content    []Block    `json:"content"`
	StopReason StopReason `json:"stop_reason"`
	Usage      Usage      `json:"usage"`
	Model      string     `json:"model,omitempty"`
}

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// EstimateTokens is a rough, deterministic count of the tokens messages
// take in a prompt: four bytes of text, tool input or tool result per
// token, and a few tokens of framing per block. vigil uses it for what a
// provider has not counted yet (what was added since its last reported
// usage), never in place of a count a provider reported.
func EstimateTokens(msgs []Message) int64 {
	var n int64
	for _, m := range msgs {
		n += 4
		for _, b := range m.Content {
			n += 3 + int64(len(b.Text)+len(b.Name)+len(b.Input)+len(b.Content)+3)/4
		}
	}
	return n
}
