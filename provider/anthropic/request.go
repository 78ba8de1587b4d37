package anthropic

import (
	"cmp"
	"encoding/json"
	"fmt"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// params maps a vigil request onto the Messages API.
//
//   - Tool results always travel in user messages, whatever role the
//     message that held them had.
//   - Consecutive messages of one role are merged, so roles alternate.
//   - Within a user message, tool_result blocks come first (the API wants
//     them right after the assistant's tool_use), other blocks after them,
//     each group in its original order.
//   - Empty text blocks are dropped (the API rejects them), and so are the
//     messages they leave empty.
//   - The stable prefix is marked for prompt caching; see cacheBreakpoints.
func (p *Provider) params(req *provider.Request) (sdk.MessageNewParams, error) {
	params := sdk.MessageNewParams{
		Model:     sdk.Model(cmp.Or(req.Model, p.model)),
		MaxTokens: int64(p.maxTokens),
	}
	if req.MaxTokens > 0 {
		params.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	for _, t := range req.Tools {
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		} else if !json.Valid(schema) {
			return params, fmt.Errorf("tool %s: input schema is not valid JSON", t.Name)
		}
		tool := &sdk.ToolParam{
			Name:        t.Name,
			InputSchema: param.Override[sdk.ToolInputSchemaParam](schema),
		}
		if t.Description != "" {
			tool.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: tool})
	}

	type turn struct {
		role            chat.Role
		results, others []sdk.ContentBlockParamUnion
	}
	var turns []*turn
	for i, m := range req.Messages {
		if m.Role != chat.RoleUser && m.Role != chat.RoleAssistant {
			return params, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		for _, b := range m.Content {
			role := m.Role
			var out sdk.ContentBlockParamUnion
			switch b.Type {
			case chat.BlockText:
				if b.Text == "" {
					continue
				}
				out = sdk.NewTextBlock(b.Text)
			case chat.BlockToolUse:
				in := b.Input
				if len(in) == 0 {
					in = json.RawMessage(`{}`)
				} else if !json.Valid(in) {
					return params, fmt.Errorf("message %d: tool_use %s input is not valid JSON", i, b.ID)
				}
				out = sdk.NewToolUseBlock(b.ID, in, b.Name)
			case chat.BlockToolResult:
				role = chat.RoleUser
				r := &sdk.ToolResultBlockParam{ToolUseID: b.ToolUseID}
				if b.Content != "" {
					r.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: b.Content}}}
				}
				if b.IsError {
					r.IsError = sdk.Bool(true)
				}
				out = sdk.ContentBlockParamUnion{OfToolResult: r}
			default:
				return params, fmt.Errorf("message %d: unknown block type %q", i, b.Type)
			}
			if n := len(turns); n == 0 || turns[n-1].role != role {
				turns = append(turns, &turn{role: role})
			}
			t := turns[len(turns)-1]
			if b.Type == chat.BlockToolResult {
				t.results = append(t.results, out)
			} else {
				t.others = append(t.others, out)
			}
		}
	}
	contents := make([][]sdk.ContentBlockParamUnion, len(turns))
	roles := make([]chat.Role, len(turns))
	for i, t := range turns {
		contents[i], roles[i] = append(t.results, t.others...), t.role
	}
	cacheBreakpoints(&params, roles, contents)
	for i, blocks := range contents {
		if roles[i] == chat.RoleUser {
			params.Messages = append(params.Messages, sdk.NewUserMessage(blocks...))
		} else {
			params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
		}
	}
	return params, nil
}

// cacheBreakpoints puts cache_control {type: ephemeral} on the blocks where
// the stable prefix of the prompt ends, the way Claude Code does; roles and
// contents are the messages about to be sent. The API caches the prefix
// that ends at a marked block (tools first, then system, then messages)
// and allows at most four marks:
//
//  1. the last tool definition: the tools, which change least;
//  2. the last system block: tools and system prompt;
//  3. the last block of the last message: the whole prompt, written to the
//     cache so that the next round, which repeats this prompt and appends
//     to it, reads it back;
//  4. the last block of the user message before the last one: in the usual
//     round (this prompt = the previous one + the assistant's answer + a
//     new user message) that is where the previous round put mark 3, so
//     this round reads exactly the prefix the previous one wrote, however
//     many blocks were added since (the API looks only 20 blocks back from
//     a mark for a shorter cached prefix).
//
// A prompt without tools, system or an earlier user message gets fewer
// marks. Prefixes shorter than the model's minimum (1024 tokens or more)
// are not cached, at no cost. Usage reports the cache traffic:
// cache_read_input_tokens and cache_creation_input_tokens, with
// input_tokens only the uncached rest.
func cacheBreakpoints(params *sdk.MessageNewParams, roles []chat.Role, contents [][]sdk.ContentBlockParamUnion) {
	mark := sdk.NewCacheControlEphemeralParam()
	if n := len(params.Tools); n > 0 {
		if cc := params.Tools[n-1].GetCacheControl(); cc != nil {
			*cc = mark
		}
	}
	if n := len(params.System); n > 0 {
		params.System[n-1].CacheControl = mark
	}
	markLast := func(blocks []sdk.ContentBlockParamUnion) {
		if n := len(blocks); n > 0 {
			if cc := blocks[n-1].GetCacheControl(); cc != nil {
				*cc = mark
			}
		}
	}
	last := len(contents) - 1
	if last < 0 {
		return
	}
	markLast(contents[last])
	for i := last - 1; i >= 0; i-- {
		if roles[i] == chat.RoleUser {
			markLast(contents[i])
			return
		}
	}
}
