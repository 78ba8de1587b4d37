package providertest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strings"

	"github.com/vigilrun/vigil/chat"
)

// The Anthropic Messages API wire format, as much of it as the fake needs.

func anthropicErrorBody(e *APIError) []byte {
	return []byte(mustJSON(map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": e.Type, "message": e.Message},
		"request_id": "req_fake",
	}))
}

func parseAnthropic(r *Request) error {
	var body struct {
		Model     string            `json:"model"`
		MaxTokens int               `json:"max_tokens"`
		Stream    bool              `json:"stream"`
		System    json.RawMessage   `json:"system"`
		Tools     []json.RawMessage `json:"tools"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return err
	}
	r.Model, r.MaxTokens, r.Stream = body.Model, body.MaxTokens, body.Stream
	sys, err := anthropicText(body.System)
	if err != nil {
		return fmt.Errorf("system: %w", err)
	}
	r.System = sys
	// The prompt cache's prefixes run over the tools, the system blocks and
	// the messages' blocks, in this order, as the API has it.
	key := newPrefixKey(r.Model)
	var marks []pendingMark
	for i, raw := range body.Tools {
		var t struct {
			Name         string          `json:"name"`
			Description  string          `json:"description"`
			InputSchema  json.RawMessage `json:"input_schema"`
			CacheControl *cacheControl   `json:"cache_control"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("tool %d: %w", i, err)
		}
		r.Tools = append(r.Tools, chat.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
		key.add("tool", raw)
		if t.CacheControl != nil {
			marks = append(marks, pendingMark{CacheMark{Part: "tools", Index: i, Type: t.CacheControl.Type, TTL: t.CacheControl.TTL}, key.sum(), len(r.Tools), 0, -1, -1})
		}
	}
	var sysBlocks []struct {
		Type         string        `json:"type"`
		Text         string        `json:"text"`
		CacheControl *cacheControl `json:"cache_control"`
	}
	var sysRaw []json.RawMessage
	if json.Unmarshal(body.System, &sysRaw) == nil && json.Unmarshal(body.System, &sysBlocks) == nil {
		var texts []string
		for i, b := range sysBlocks {
			if b.Type == "text" {
				texts = append(texts, b.Text)
			}
			key.add("system", sysRaw[i])
			if b.CacheControl != nil {
				marks = append(marks, pendingMark{CacheMark{Part: "system", Index: i, Type: b.CacheControl.Type, TTL: b.CacheControl.TTL}, key.sum(), len(r.Tools), len(strings.Join(texts, "\n")), -1, -1})
			}
		}
	} else if sys != "" {
		key.add("system", body.System)
	}
	var msgs []chat.Message
	for i, m := range body.Messages {
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		msgs = append(msgs, chat.Message{Role: chat.Role(m.Role), Content: blocks})
		key.add("message", []byte(m.Role))
		var raws []json.RawMessage
		if json.Unmarshal(m.Content, &raws) != nil {
			key.add("block", m.Content) // a string: one text block, no mark
			continue
		}
		for j, raw := range raws {
			key.add("block", raw)
			var cc struct {
				CacheControl *cacheControl `json:"cache_control"`
			}
			if json.Unmarshal(raw, &cc) == nil && cc.CacheControl != nil {
				marks = append(marks, pendingMark{CacheMark{Part: "messages", Index: i, Block: j, Type: cc.CacheControl.Type, TTL: cc.CacheControl.TTL}, key.sum(), len(r.Tools), len(sys), i, j})
			}
		}
	}
	r.Messages = mergeRoles(msgs)
	r.Tokens = PromptTokens(r)
	for _, pm := range marks {
		pm.mark.Tokens = pm.tokens(r, msgs)
		r.CacheMarks = append(r.CacheMarks, pm.mark)
		r.prefixes = append(r.prefixes, cachePrefix{key: pm.key, tokens: pm.mark.Tokens})
	}
	return nil
}

// cacheControl is the cache_control of a block: {"type":"ephemeral"},
// with an optional "ttl".
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl"`
}

// pendingMark is a cache mark whose prefix is counted once the whole
// request is parsed: the prefix holds the first tools tools, the first
// system bytes of the system prompt and, when msg is not negative, the
// wire messages before msg and the blocks of msg up to block.
type pendingMark struct {
	mark       CacheMark
	key        string
	tools      int
	system     int
	msg, block int
}

// tokens counts the prefix as PromptTokens counts a prompt. Messages are
// counted merged, as in r.Messages, so that the prefix that ends at the
// last block is the whole prompt.
func (pm pendingMark) tokens(r *Request, wire []chat.Message) int64 {
	n := toolTokens(r.Tools[:pm.tools]) + int64(pm.system/4)
	if pm.msg < 0 {
		return n
	}
	prefix := append([]chat.Message(nil), wire[:pm.msg]...)
	prefix = append(prefix, chat.Message{Role: wire[pm.msg].Role, Content: wire[pm.msg].Content[:min(pm.block+1, len(wire[pm.msg].Content))]})
	return n + chat.EstimateTokens(mergeRoles(prefix))
}

// prefixKey identifies a prompt prefix: a running hash of the model and
// of each part of the prompt, cache_control marks left out (moving a mark
// does not change what is cached).
type prefixKey struct {
	h hash.Hash
}

func newPrefixKey(model string) *prefixKey {
	k := &prefixKey{h: sha256.New()}
	k.add("model", []byte(model))
	return k
}

func (k *prefixKey) add(kind string, raw []byte) {
	var v any
	if json.Unmarshal(raw, &v) == nil {
		raw, _ = json.Marshal(stripCacheControl(v)) // canonical: keys sorted, no spaces
	}
	fmt.Fprintf(k.h, "%s %d\n", kind, len(raw))
	k.h.Write(raw)
}

// stripCacheControl removes the cache_control fields of a decoded value,
// at every depth.
func stripCacheControl(v any) any {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "cache_control")
		for k, x := range v {
			v[k] = stripCacheControl(x)
		}
	case []any:
		for i, x := range v {
			v[i] = stripCacheControl(x)
		}
	}
	return v
}

func (k *prefixKey) sum() string { return hex.EncodeToString(k.h.Sum(nil)) }

// anthropicText reads a string or an array of text blocks.
func anthropicText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", err
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n"), nil
}

func anthropicBlocks(raw json.RawMessage) ([]chat.Block, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chat.Block{chat.Text(s)}, nil
	}
	var blocks []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, err
	}
	var out []chat.Block
	for _, b := range blocks {
		switch b.Type {
		case "text":
			out = append(out, chat.Text(b.Text))
		case "tool_use":
			out = append(out, chat.Block{Type: chat.BlockToolUse, ID: b.ID, Name: b.Name, Input: b.Input})
		case "tool_result":
			content, err := anthropicText(b.Content)
			if err != nil {
				return nil, fmt.Errorf("tool_result %s: %w", b.ToolUseID, err)
			}
			out = append(out, chat.ToolResult(b.ToolUseID, content, b.IsError))
		default:
			out = append(out, chat.Block{Type: chat.BlockType(b.Type)})
		}
	}
	return out, nil
}

func anthropicUsage(u chat.Usage, output bool) map[string]any {
	m := map[string]any{
		"input_tokens":                u.InputTokens,
		"cache_creation_input_tokens": u.CacheWriteTokens,
		"cache_read_input_tokens":     u.CacheReadTokens,
		"output_tokens":               int64(1),
	}
	if output {
		m["output_tokens"] = u.OutputTokens
	}
	return m
}

func replyModel(req *Request, reply Reply) string {
	if reply.Model != "" {
		return reply.Model
	}
	if req.Model != "" {
		return req.Model
	}
	return "fake-model"
}

func toolID(b chat.Block, i int, prefix string) string {
	if b.ID != "" {
		return b.ID
	}
	return fmt.Sprintf("%s%d", prefix, i)
}

func anthropicEvents(req *Request, reply Reply) []Event {
	ev := func(name string, v any) Event { return Event{Name: name, Data: mustJSON(v)} }
	events := []Event{
		ev("message_start", map[string]any{
			"type": "message_start",
			"message": map[string]any{
				"id": fmt.Sprintf("msg_fake_%d", req.N), "type": "message", "role": "assistant",
				"model": replyModel(req, reply), "content": []any{},
				"stop_reason": nil, "stop_sequence": nil,
				"usage": anthropicUsage(reply.Usage, false),
			},
		}),
		{Name: "ping", Data: `{"type": "ping"}`},
	}
	for i, b := range reply.Blocks {
		switch b.Type {
		case chat.BlockText:
			events = append(events, ev("content_block_start", map[string]any{
				"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""},
			}))
			for _, piece := range chunks(b.Text, reply.chunk()) {
				events = append(events, ev("content_block_delta", map[string]any{
					"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": piece},
				}))
			}
		case chat.BlockToolUse:
			events = append(events, ev("content_block_start", map[string]any{
				"type": "content_block_start", "index": i,
				"content_block": map[string]any{
					"type": "tool_use", "id": toolID(b, i, fmt.Sprintf("toolu_fake_%d_", req.N)),
					"name": b.Name, "input": map[string]any{},
				},
			}))
			for _, piece := range chunks(string(b.Input), reply.chunk()) {
				events = append(events, ev("content_block_delta", map[string]any{
					"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": piece},
				}))
			}
		default:
			panic(fmt.Sprintf("providertest: cannot answer with a %s block", b.Type))
		}
		events = append(events, ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}))
	}
	events = append(events,
		ev("message_delta", map[string]any{
			"type":  "message_delta",
			"delta": map[string]any{"stop_reason": reply.stopReason(), "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": reply.Usage.OutputTokens},
		}),
		ev("message_stop", map[string]any{"type": "message_stop"}),
	)
	return events
}

func anthropicMessage(req *Request, reply Reply) []byte {
	var content []any
	for i, b := range reply.Blocks {
		switch b.Type {
		case chat.BlockText:
			content = append(content, map[string]any{"type": "text", "text": b.Text})
		case chat.BlockToolUse:
			var input any = b.Input
			if !json.Valid(b.Input) {
				input = string(b.Input) // keep the response encodable
			}
			content = append(content, map[string]any{
				"type": "tool_use", "id": toolID(b, i, fmt.Sprintf("toolu_fake_%d_", req.N)),
				"name": b.Name, "input": input,
			})
		}
	}
	return []byte(mustJSON(map[string]any{
		"id": fmt.Sprintf("msg_fake_%d", req.N), "type": "message", "role": "assistant",
		"model": replyModel(req, reply), "content": content,
		"stop_reason": reply.stopReason(), "stop_sequence": nil,
		"usage": anthropicUsage(reply.Usage, true),
	}))
}
