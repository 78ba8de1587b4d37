package openai

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// params maps a vigil request onto Chat Completions.
//
//   - The system prompt is the first message, role system.
//   - Consecutive messages of one role are merged (chat templates of many
//     local models insist that roles alternate).
//   - An assistant turn's text becomes its content, its tool_use blocks
//     its tool_calls.
//   - Tool results, wherever they are, become role tool messages with
//     tool_call_id, right after the assistant turn, before the user
//     turn's text. The wire has no error flag: a failed call's content is
//     prefixed with "Error: ".
func (p *Provider) params(req *provider.Request) (sdk.ChatCompletionNewParams, error) {
	params := sdk.ChatCompletionNewParams{
		Model:         shared.ChatModel(cmp.Or(req.Model, p.model)),
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	if params.Model == "" {
		return params, errors.New("no model: set Options.Model or Request.Model")
	}
	if n := cmpInt(req.MaxTokens, p.maxTokens); n > 0 {
		if p.mct {
			params.MaxCompletionTokens = sdk.Int(int64(n))
		} else {
			params.MaxTokens = sdk.Int(int64(n))
		}
	}
	for _, t := range req.Tools {
		schema := shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
		if len(t.InputSchema) > 0 {
			schema = nil
			if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema == nil {
				return params, fmt.Errorf("tool %s: input schema is not a JSON object", t.Name)
			}
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}

	if req.System != "" {
		params.Messages = append(params.Messages, sdk.SystemMessage(req.System))
	}
	type turn struct {
		role    chat.Role
		texts   []string
		calls   []sdk.ChatCompletionMessageToolCallUnionParam
		results []sdk.ChatCompletionMessageParamUnion
	}
	var turns []*turn
	for i, m := range req.Messages {
		if m.Role != chat.RoleUser && m.Role != chat.RoleAssistant {
			return params, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if n := len(turns); n == 0 || turns[n-1].role != m.Role {
			turns = append(turns, &turn{role: m.Role})
		}
		t := turns[len(turns)-1]
		for _, b := range m.Content {
			switch b.Type {
			case chat.BlockText:
				if b.Text != "" {
					t.texts = append(t.texts, b.Text)
				}
			case chat.BlockToolUse:
				if m.Role != chat.RoleAssistant {
					return params, fmt.Errorf("message %d: tool_use %s in a %s message", i, b.ID, m.Role)
				}
				args := string(b.Input)
				if len(b.Input) == 0 {
					args = "{}"
				} else if !json.Valid(b.Input) {
					return params, fmt.Errorf("message %d: tool_use %s input is not valid JSON", i, b.ID)
				}
				t.calls = append(t.calls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID:       b.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: args},
					},
				})
			case chat.BlockToolResult:
				content := b.Content
				if b.IsError && !strings.HasPrefix(content, "Error") {
					content = "Error: " + content
				}
				t.results = append(t.results, sdk.ToolMessage(content, b.ToolUseID))
			default:
				return params, fmt.Errorf("message %d: unknown block type %q", i, b.Type)
			}
		}
	}
	for _, t := range turns {
		text := strings.Join(t.texts, "\n")
		if t.role == chat.RoleAssistant {
			if text != "" || len(t.calls) > 0 {
				a := &sdk.ChatCompletionAssistantMessageParam{ToolCalls: t.calls}
				if text != "" {
					a.Content.OfString = param.NewOpt(text)
				}
				params.Messages = append(params.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: a})
			}
			// Results held by an assistant message still answer its calls.
			params.Messages = append(params.Messages, t.results...)
			continue
		}
		params.Messages = append(params.Messages, t.results...)
		if text != "" {
			params.Messages = append(params.Messages, sdk.UserMessage(text))
		}
	}
	return params, nil
}

func cmpInt(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}
