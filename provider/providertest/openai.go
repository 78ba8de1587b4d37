package providertest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/vigilrun/vigil/chat"
)

// The OpenAI Chat Completions wire format, as much of it as the fake needs.

func openAIErrorBody(e *APIError) []byte {
	var code, param any
	if e.Code != "" {
		code = e.Code
	}
	if e.Param != "" {
		param = e.Param
	}
	return []byte(mustJSON(map[string]any{
		"error": map[string]any{"message": e.Message, "type": e.Type, "code": code, "param": param},
	}))
}

func parseOpenAI(r *Request) error {
	var body struct {
		Model               string `json:"model"`
		MaxTokens           int    `json:"max_tokens"`
		MaxCompletionTokens int    `json:"max_completion_tokens"`
		Stream              bool   `json:"stream"`
		StreamOptions       struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return err
	}
	r.Model, r.Stream, r.IncludeUsage = body.Model, body.Stream, body.StreamOptions.IncludeUsage
	r.MaxTokens = max(body.MaxTokens, body.MaxCompletionTokens)
	for _, t := range body.Tools {
		r.Tools = append(r.Tools, chat.ToolSpec{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}
	var msgs []chat.Message
	var system []string
	for i, m := range body.Messages {
		text, err := openAIText(m.Content)
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "tool":
			msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.ToolResult(m.ToolCallID, text, false)}})
		case "assistant":
			msg := chat.Message{Role: chat.RoleAssistant}
			if text != "" {
				msg.Content = append(msg.Content, chat.Text(text))
			}
			for _, tc := range m.ToolCalls {
				msg.Content = append(msg.Content, chat.Block{
					Type: chat.BlockToolUse, ID: tc.ID, Name: tc.Function.Name,
					Input: json.RawMessage(tc.Function.Arguments),
				})
			}
			msgs = append(msgs, msg)
		default:
			msgs = append(msgs, chat.Message{Role: chat.Role(m.Role), Content: []chat.Block{chat.Text(text)}})
		}
	}
	r.System = strings.Join(system, "\n")
	r.Messages = mergeRoles(msgs)
	r.Tokens = PromptTokens(r)
	return nil
}

// openAIText reads a content string, null, or an array of content parts.
func openAIText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

func finishReason(s chat.StopReason) string {
	switch s {
	case chat.StopToolUse:
		return "tool_calls"
	case chat.StopMaxTokens:
		return "length"
	case chat.StopRefusal:
		return "content_filter"
	default:
		return "stop"
	}
}

func openAIUsage(u chat.Usage) map[string]any {
	prompt := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
	return map[string]any{
		"prompt_tokens":         prompt,
		"completion_tokens":     u.OutputTokens,
		"total_tokens":          prompt + u.OutputTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CacheReadTokens, "cache_write_tokens": u.CacheWriteTokens},
	}
}

func openAIEvents(req *Request, reply Reply) []Event {
	id := fmt.Sprintf("chatcmpl-fake-%d", req.N)
	model := replyModel(req, reply)
	chunk := func(delta map[string]any, finish any) Event {
		return Event{Data: mustJSON(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		})}
	}
	events := []Event{chunk(map[string]any{"role": "assistant", "content": ""}, nil)}
	call := 0
	for i, b := range reply.Blocks {
		switch b.Type {
		case chat.BlockText:
			for _, piece := range chunks(b.Text, reply.chunk()) {
				events = append(events, chunk(map[string]any{"content": piece}, nil))
			}
		case chat.BlockToolUse:
			events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": call, "id": toolID(b, i, fmt.Sprintf("call_fake_%d_", req.N)), "type": "function",
				"function": map[string]any{"name": b.Name, "arguments": ""},
			}}}, nil))
			for _, piece := range chunks(string(b.Input), reply.chunk()) {
				events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
					"index": call, "function": map[string]any{"arguments": piece},
				}}}, nil))
			}
			call++
		default:
			panic(fmt.Sprintf("providertest: cannot answer with a %s block", b.Type))
		}
	}
	events = append(events, chunk(map[string]any{}, finishReason(reply.stopReason())))
	if req.IncludeUsage {
		events = append(events, Event{Data: mustJSON(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{}, "usage": openAIUsage(reply.Usage),
		})})
	}
	return append(events, Event{Data: "[DONE]"})
}

func openAICompletion(req *Request, reply Reply) []byte {
	var texts []string
	var calls []any
	for i, b := range reply.Blocks {
		switch b.Type {
		case chat.BlockText:
			texts = append(texts, b.Text)
		case chat.BlockToolUse:
			calls = append(calls, map[string]any{
				"id": toolID(b, i, fmt.Sprintf("call_fake_%d_", req.N)), "type": "function",
				"function": map[string]any{"name": b.Name, "arguments": string(b.Input)},
			})
		}
	}
	msg := map[string]any{"role": "assistant", "content": strings.Join(texts, "")}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	return []byte(mustJSON(map[string]any{
		"id": fmt.Sprintf("chatcmpl-fake-%d", req.N), "object": "chat.completion", "created": 1700000000,
		"model":   replyModel(req, reply),
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(reply.stopReason())}},
		"usage":   openAIUsage(reply.Usage),
	}))
}
