package providertest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/vigilrun/vigil/chat"
)

// The OpenAI Responses API wire format (POST /v1/responses), as much of it
// as the fake needs to play the model for the Codex CLI and for
// openai-go's Responses client.

// ResponsesTool is one tool of a Responses API request as the request
// lists it. Function tools, custom (freeform) tools and the function
// tools of a namespace are also in Request.Tools, under Name; tools of
// other types (web_search, local_shell, ...) are only here.
type ResponsesTool struct {
	// Name is the tool's name in Request.Tools: the function's own name,
	// or namespace + "__" + name for a function of a namespace (Codex
	// lists the tools of MCP server srv in namespace "mcp__srv", so its
	// tool t is "mcp__srv__t"). A tool without a name has its type.
	Name string
	// Type is the tool's type: function, custom, web_search, ...
	Type string
	// Namespace and Function are the namespace and the function's name in
	// it, for a tool of a namespace; a ToolUse block naming the tool by
	// Name is answered as a function_call of Function in Namespace.
	Namespace, Function string
}

// responsesTool finds the request's tool called name, by Name.
func (r *Request) responsesTool(name string) (ResponsesTool, bool) {
	for _, t := range r.ResponsesTools {
		if t.Name == name {
			return t, true
		}
	}
	return ResponsesTool{}, false
}

type responsesToolJSON struct {
	Type        string              `json:"type"`
	Name        string              `json:"name"`
	Description string              `json:"description"`
	Parameters  json.RawMessage     `json:"parameters"`
	Format      json.RawMessage     `json:"format"`
	Tools       []responsesToolJSON `json:"tools"`
}

func parseResponses(r *Request) error {
	var body struct {
		Model           string              `json:"model"`
		Instructions    string              `json:"instructions"`
		MaxOutputTokens int                 `json:"max_output_tokens"`
		Stream          bool                `json:"stream"`
		Input           json.RawMessage     `json:"input"`
		Tools           []responsesToolJSON `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return err
	}
	r.Model, r.Stream, r.MaxTokens, r.Instructions = body.Model, body.Stream, body.MaxOutputTokens, body.Instructions
	for _, t := range body.Tools {
		switch t.Type {
		case "function", "custom":
			r.addResponsesTool(ResponsesTool{Name: t.Name, Type: t.Type}, t)
		case "namespace":
			for _, f := range t.Tools {
				r.addResponsesTool(ResponsesTool{Name: t.Name + "__" + f.Name, Type: f.Type, Namespace: t.Name, Function: f.Name}, f)
			}
		default:
			name := t.Name
			if name == "" {
				name = t.Type
			}
			r.ResponsesTools = append(r.ResponsesTools, ResponsesTool{Name: name, Type: t.Type})
		}
	}

	var system []string
	if body.Instructions != "" {
		system = append(system, body.Instructions)
	}
	var msgs []chat.Message
	var s string
	if json.Unmarshal(body.Input, &s) == nil {
		msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text(s)}})
	} else if len(body.Input) > 0 && string(body.Input) != "null" {
		var items []json.RawMessage
		if err := json.Unmarshal(body.Input, &items); err != nil {
			return fmt.Errorf("input: %w", err)
		}
		for i, raw := range items {
			m, sys, err := responsesItem(raw)
			if err != nil {
				return fmt.Errorf("input item %d: %w", i, err)
			}
			if sys != "" {
				system = append(system, sys)
			}
			if m.Role != "" {
				msgs = append(msgs, m)
			}
		}
	}
	r.System = strings.Join(system, "\n")
	r.Messages = mergeRoles(msgs)
	r.Tokens = PromptTokens(r)
	return nil
}

func (r *Request) addResponsesTool(t ResponsesTool, spec responsesToolJSON) {
	r.ResponsesTools = append(r.ResponsesTools, t)
	schema := spec.Parameters
	if t.Type == "custom" {
		schema = spec.Format
	}
	r.Tools = append(r.Tools, chat.ToolSpec{Name: t.Name, Description: spec.Description, InputSchema: schema})
}

// responsesItem reads one input item: a message (a system or developer
// message's text is returned as system instead), a tool call or a tool
// call's output. Other items (reasoning, web_search_call, ...) become a
// block of their type, in an assistant message, or in a user message for
// an item whose type ends in _output.
func responsesItem(raw json.RawMessage) (msg chat.Message, system string, err error) {
	var it struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Namespace string          `json:"namespace"`
		Arguments json.RawMessage `json:"arguments"`
		Input     json.RawMessage `json:"input"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return msg, "", err
	}
	if it.Type == "" && it.Role != "" {
		it.Type = "message" // an EasyInputMessage: {role, content}
	}
	name := it.Name
	if it.Namespace != "" {
		name = it.Namespace + "__" + it.Name
	}
	switch it.Type {
	case "message":
		blocks, err := responsesContent(it.Content)
		if err != nil {
			return msg, "", err
		}
		switch it.Role {
		case "system", "developer":
			var texts []string
			for _, b := range blocks {
				if b.Type == chat.BlockText {
					texts = append(texts, b.Text)
				}
			}
			return msg, strings.Join(texts, "\n"), nil
		case "assistant":
			return chat.Message{Role: chat.RoleAssistant, Content: blocks}, "", nil
		default:
			return chat.Message{Role: chat.Role(it.Role), Content: blocks}, "", nil
		}
	case "function_call":
		// arguments is JSON text in a string.
		var args string
		if err := jsonString(it.Arguments, &args); err != nil {
			return msg, "", fmt.Errorf("function_call %s arguments: %w", it.CallID, err)
		}
		return chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{{
			Type: chat.BlockToolUse, ID: it.CallID, Name: name, Input: json.RawMessage(args),
		}}}, "", nil
	case "custom_tool_call":
		// input is free text: the block's input is it as a JSON string.
		var input string
		if err := jsonString(it.Input, &input); err != nil {
			return msg, "", fmt.Errorf("custom_tool_call %s input: %w", it.CallID, err)
		}
		return chat.Message{Role: chat.RoleAssistant, Content: []chat.Block{{
			Type: chat.BlockToolUse, ID: it.CallID, Name: name, Input: json.RawMessage(mustJSON(input)),
		}}}, "", nil
	case "function_call_output", "custom_tool_call_output":
		out, err := responsesOutput(it.Output)
		if err != nil {
			return msg, "", err
		}
		return chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.ToolResult(it.CallID, out, false)}}, "", nil
	default:
		role := chat.RoleAssistant
		if strings.HasSuffix(it.Type, "_output") {
			role = chat.RoleUser
		}
		return chat.Message{Role: role, Content: []chat.Block{{Type: chat.BlockType(it.Type), ID: it.CallID}}}, "", nil
	}
}

// jsonString decodes a JSON string into s; absent or null leaves s empty.
func jsonString(raw json.RawMessage, s *string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, s)
}

// responsesContent reads a message's content: a string, or an array of
// content parts (input_text, output_text, refusal, input_image, ...).
// Parts that hold no text become a block of their type.
func responsesContent(raw json.RawMessage) ([]chat.Block, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chat.Block{chat.Text(s)}, nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, err
	}
	var out []chat.Block
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text", "summary_text":
			out = append(out, chat.Text(p.Text))
		case "refusal":
			out = append(out, chat.Text(p.Refusal))
		default:
			out = append(out, chat.Block{Type: chat.BlockType(p.Type)})
		}
	}
	return out, nil
}

// responsesOutput reads a tool call's output: a string, or an array of
// content parts whose texts it joins.
func responsesOutput(raw json.RawMessage) (string, error) {
	blocks, err := responsesContent(raw)
	if err != nil {
		return "", err
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == chat.BlockText {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

func responsesUsage(u chat.Usage) map[string]any {
	input := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
	return map[string]any{
		"input_tokens":          input,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadTokens, "cache_write_tokens": u.CacheWriteTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          input + u.OutputTokens,
	}
}

// outputItem is an output item of a reply.
type outputItem struct {
	item map[string]any // the done item
	// texts are the text parts of a message item, of kind output_text or
	// refusal; input is the arguments of a function call or the input of
	// a custom tool call.
	texts []string
	kind  string
	input string
}

// responsesItems builds the output items of reply: a message item for a
// run of text blocks (an output_text part each, or refusal parts for a
// refusal), a function_call or custom_tool_call item for each tool_use
// block, of the namespace its name has in the request's tools.
func responsesItems(req *Request, reply Reply) []outputItem {
	var items []outputItem
	kind := "output_text"
	if reply.stopReason() == chat.StopRefusal {
		kind = "refusal"
	}
	for i, b := range reply.Blocks {
		switch b.Type {
		case chat.BlockText:
			if n := len(items); n > 0 && items[n-1].texts != nil {
				items[n-1].texts = append(items[n-1].texts, b.Text)
				continue
			}
			items = append(items, outputItem{texts: []string{b.Text}, kind: kind, item: map[string]any{
				"id": fmt.Sprintf("msg_fake_%d_%d", req.N, i), "type": "message", "role": "assistant", "status": "completed",
			}})
		case chat.BlockToolUse:
			callID := toolID(b, i, fmt.Sprintf("call_fake_%d_", req.N))
			t, _ := req.responsesTool(b.Name)
			name := b.Name
			if t.Namespace != "" {
				name = t.Function
			}
			it := map[string]any{"call_id": callID, "name": name, "status": "completed"}
			if t.Namespace != "" {
				it["namespace"] = t.Namespace
			}
			if t.Type == "custom" {
				input := string(b.Input)
				var s string
				if json.Unmarshal(b.Input, &s) == nil {
					input = s
				}
				it["id"], it["type"], it["input"] = fmt.Sprintf("ctc_fake_%d_%d", req.N, i), "custom_tool_call", input
				items = append(items, outputItem{item: it, input: input})
				continue
			}
			it["id"], it["type"], it["arguments"] = fmt.Sprintf("fc_fake_%d_%d", req.N, i), "function_call", string(b.Input)
			items = append(items, outputItem{item: it, input: string(b.Input)})
		default:
			panic(fmt.Sprintf("providertest: cannot answer with a %s block", b.Type))
		}
	}
	for _, it := range items {
		if it.texts != nil {
			var parts []any
			for _, text := range it.texts {
				parts = append(parts, responsesPart(it.kind, text))
			}
			it.item["content"] = parts
		}
	}
	return items
}

// responsesPart is a content part of a message item: output_text or
// refusal, holding text.
func responsesPart(kind, text string) map[string]any {
	if kind == "refusal" {
		return map[string]any{"type": "refusal", "refusal": text}
	}
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// responsesObject is the response object: in progress (no output, no
// usage yet) or finished with items.
func responsesObject(req *Request, reply Reply, items []outputItem, done bool) map[string]any {
	var instructions, maxOutput any
	if req.Instructions != "" {
		instructions = req.Instructions
	}
	if req.MaxTokens > 0 {
		maxOutput = req.MaxTokens
	}
	tools := []any{}
	if raw, ok := req.JSON()["tools"].([]any); ok {
		tools = raw
	}
	resp := map[string]any{
		"id": fmt.Sprintf("resp_fake_%d", req.N), "object": "response", "created_at": 1700000000,
		"status": "in_progress", "error": nil, "incomplete_details": nil,
		"instructions": instructions, "max_output_tokens": maxOutput, "model": replyModel(req, reply),
		"output": []any{}, "parallel_tool_calls": true, "previous_response_id": nil,
		"reasoning": map[string]any{"effort": nil, "summary": nil}, "store": false,
		"temperature": 1, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice": "auto", "tools": tools, "top_p": 1, "truncation": "disabled",
		"usage": nil, "user": nil, "metadata": map[string]any{},
	}
	if !done {
		return resp
	}
	output := []any{}
	for _, it := range items {
		output = append(output, it.item)
	}
	resp["output"], resp["usage"], resp["status"] = output, responsesUsage(reply.Usage), "completed"
	if reply.stopReason() == chat.StopMaxTokens {
		resp["status"], resp["incomplete_details"] = "incomplete", map[string]any{"reason": "max_output_tokens"}
	}
	return resp
}

func responsesEvents(req *Request, reply Reply) []Event {
	var events []Event
	ev := func(name string, v map[string]any) {
		v["type"], v["sequence_number"] = name, len(events)
		events = append(events, Event{Name: name, Data: mustJSON(v)})
	}
	items := responsesItems(req, reply)
	ev("response.created", map[string]any{"response": responsesObject(req, reply, items, false)})
	ev("response.in_progress", map[string]any{"response": responsesObject(req, reply, items, false)})
	for i, it := range items {
		id := it.item["id"]
		added := map[string]any{"status": "in_progress"}
		for k, v := range it.item {
			if k != "status" {
				added[k] = v
			}
		}
		switch added["type"] {
		case "message":
			added["content"] = []any{}
		case "function_call":
			added["arguments"] = ""
		case "custom_tool_call":
			added["input"] = ""
		}
		ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
		switch it.item["type"] {
		case "message":
			delta, done := "response.output_text.delta", "response.output_text.done"
			if it.kind == "refusal" {
				delta, done = "response.refusal.delta", "response.refusal.done"
			}
			for j, text := range it.texts {
				ev("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": j, "part": responsesPart(it.kind, "")})
				for _, piece := range chunks(text, reply.chunk()) {
					d := map[string]any{"item_id": id, "output_index": i, "content_index": j, "delta": piece}
					if it.kind != "refusal" {
						d["logprobs"] = []any{}
					}
					ev(delta, d)
				}
				d := map[string]any{"item_id": id, "output_index": i, "content_index": j}
				if it.kind == "refusal" {
					d["refusal"] = text
				} else {
					d["text"], d["logprobs"] = text, []any{}
				}
				ev(done, d)
				ev("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": j, "part": responsesPart(it.kind, text)})
			}
		case "function_call":
			for _, piece := range chunks(it.input, reply.chunk()) {
				ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": piece})
			}
			ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "name": it.item["name"], "arguments": it.input})
		case "custom_tool_call":
			for _, piece := range chunks(it.input, reply.chunk()) {
				ev("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": i, "delta": piece})
			}
			ev("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": i, "input": it.input})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": it.item})
	}
	final := responsesObject(req, reply, items, true)
	if final["status"] == "incomplete" {
		ev("response.incomplete", map[string]any{"response": final})
	} else {
		ev("response.completed", map[string]any{"response": final})
	}
	return events
}

// responsesFailed is the response.failed event that ends a stream with
// e, the seq-th event of the stream.
func responsesFailed(req *Request, e *APIError, seq int) Event {
	resp := responsesObject(req, Reply{}, nil, false)
	code := e.Code
	if code == "" {
		code = e.Type
	}
	var param any
	if e.Param != "" {
		param = e.Param
	}
	resp["status"], resp["error"] = "failed", map[string]any{"code": code, "message": e.Message, "type": e.Type, "param": param}
	return Event{Name: "response.failed", Data: mustJSON(map[string]any{"type": "response.failed", "sequence_number": seq, "response": resp})}
}

func responsesJSON(req *Request, reply Reply) []byte {
	return []byte(mustJSON(responsesObject(req, reply, responsesItems(req, reply), true)))
}

// CodexConfig returns a Codex CLI config.toml that makes s (a WireResponses
// server) the model provider, with no approvals, no sandbox, no analytics
// and no plugins (whose sync would reach out to the network). Append
// further tables (an [mcp_servers.NAME]) after it. FAKE_OPENAI_KEY must be
// set, to anything, in Codex's environment.
func CodexConfig(s *Server) string {
	return fmt.Sprintf(`model = "gpt-test"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[analytics]
enabled = false

[features]
plugins = false

[model_providers.fake]
name = "fake"
base_url = %q
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
request_max_retries = 0
stream_max_retries = 0
`, s.BaseURL())
}
