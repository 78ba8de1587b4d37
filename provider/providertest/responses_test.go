package providertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

// responsesClient is openai-go's Responses client, pointed at srv.
func responsesClient(srv *providertest.Server) *responses.ResponseService {
	c := sdk.NewClient(option.WithBaseURL(srv.BaseURL()), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return &c.Responses
}

// responsesParams is a request with history: a developer message, a user
// message, a function call and its output, and a user message; a
// function tool and a namespace of one function.
func responsesParams() responses.ResponseNewParams {
	call := responses.ResponseInputItemParamOfFunctionCall(`{"city":"Paris"}`, "call_0", "weather")
	output := responses.ResponseInputItemParamOfFunctionCallOutput("rain")
	output.OfFunctionCallOutput.CallID = param.NewOpt("call_0")
	return responses.ResponseNewParams{
		Model:           "gpt-test",
		Instructions:    param.NewOpt("Be brief."),
		MaxOutputTokens: param.NewOpt[int64](100),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("You are a test.", responses.EasyInputMessageRoleDeveloper),
			responses.ResponseInputItemParamOfMessage("weather in Paris?", responses.EasyInputMessageRoleUser),
			call, output,
			responses.ResponseInputItemParamOfMessage("and tomorrow?", responses.EasyInputMessageRoleUser),
		}},
		Tools: []responses.ToolUnionParam{
			responses.ToolParamOfFunction("weather", map[string]any{"type": "object"}, false),
			responses.ToolParamOfNamespace("an MCP server", "mcp__srv", []responses.NamespaceToolToolUnionParam{
				{OfFunction: &responses.NamespaceToolToolFunctionParam{Name: "sleep_seconds", Parameters: map[string]any{"type": "object"}}},
			}),
			responses.ToolParamOfWebSearch(responses.WebSearchToolTypeWebSearch),
		},
	}
}

func checkResponsesRequest(t *testing.T, r *providertest.Request, stream bool) {
	t.Helper()
	if r.Path != "/v1/responses" || r.Model != "gpt-test" || r.Stream != stream || r.MaxTokens != 100 ||
		r.Instructions != "Be brief." || r.System != "Be brief.\nYou are a test." || r.Header.Get("Authorization") != "Bearer sk-test" {
		t.Errorf("request = %+v", r)
	}
	var names []string
	for _, tool := range r.Tools {
		names = append(names, tool.Name)
	}
	if fmt.Sprint(names) != "[weather mcp__srv__sleep_seconds]" || string(r.Tools[0].InputSchema) != `{"type":"object"}` {
		t.Errorf("tools = %v", r.Tools)
	}
	if want := []providertest.ResponsesTool{{Name: "weather", Type: "function"}, {Name: "mcp__srv__sleep_seconds", Type: "function", Namespace: "mcp__srv", Function: "sleep_seconds"}, {Name: "web_search", Type: "web_search"}}; fmt.Sprint(r.ResponsesTools) != fmt.Sprint(want) {
		t.Errorf("responses tools = %+v, want %+v", r.ResponsesTools, want)
	}
	if len(r.Messages) != 3 || r.Messages[1].Content[0].ID != "call_0" || string(r.Messages[1].Content[0].Input) != `{"city":"Paris"}` {
		t.Fatalf("messages = %+v", r.Messages)
	}
	last := r.LastUser()
	if last.Content[0].Type != chat.BlockToolResult || last.Content[0].ToolUseID != "call_0" || r.LastUserText() != "rain\nand tomorrow?" {
		t.Errorf("last user = %+v", last)
	}
}

// TestResponsesStreamOpenAIGo drives the fake with openai-go's Responses
// client: the client decodes every event, the answer's text and calls
// come out of them, and the fake parsed the request.
func TestResponsesStreamOpenAIGo(t *testing.T) {
	srv := providertest.NewResponses(t)
	srv.Push(providertest.Reply{Blocks: []chat.Block{
		chat.Text("Sunny "), chat.Text("tomorrow."),
		providertest.ToolUse("", "weather", `{"city":"Paris","day":1}`),
		providertest.ToolUse("c9", "mcp__srv__sleep_seconds", `{"seconds":1}`),
	}, ChunkSize: 4})
	stream := responsesClient(srv).NewStreaming(context.Background(), responsesParams())
	var types []string
	var text strings.Builder
	var calls []responses.ResponseFunctionToolCall
	var completed responses.Response
	for stream.Next() {
		ev := stream.Current()
		if n := int64(len(types)); ev.SequenceNumber != n {
			t.Errorf("event %d (%s) has sequence_number %d", n, ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.output_item.done":
			if item := ev.AsResponseOutputItemDone().Item; item.Type == "function_call" {
				calls = append(calls, item.AsFunctionCall())
			}
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress " +
		"response.output_item.added " +
		"response.content_part.added response.output_text.delta response.output_text.delta response.output_text.done response.content_part.done " +
		"response.content_part.added response.output_text.delta response.output_text.delta response.output_text.delta response.output_text.done response.content_part.done " +
		"response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
		"response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events:\n%s\nwant\n%s", got, want)
	}
	if text.String() != "Sunny tomorrow." || completed.OutputText() != "Sunny tomorrow." {
		t.Errorf("text %q, completed output text %q", text.String(), completed.OutputText())
	}
	if len(calls) != 2 || calls[0].CallID != "call_fake_1_2" || calls[0].Name != "weather" || calls[0].Arguments != `{"city":"Paris","day":1}` ||
		!strings.HasPrefix(calls[0].ID, "fc_") || calls[1].CallID != "c9" || calls[1].Name != "sleep_seconds" || calls[1].Namespace != "mcp__srv" {
		t.Errorf("calls = %+v", calls)
	}
	r := srv.Request(1)
	checkResponsesRequest(t, r, true)
	u := completed.Usage
	if completed.Status != "completed" || completed.ID != "resp_fake_1" || completed.Model != "gpt-test" || len(completed.Output) != 3 ||
		u.InputTokens != r.Tokens || u.OutputTokens == 0 || u.TotalTokens != u.InputTokens+u.OutputTokens || u.InputTokensDetails.CachedTokens != 0 {
		t.Errorf("completed = %+v, usage %+v (prompt %d tokens)", completed, u, r.Tokens)
	}
}

func TestResponsesJSONOpenAIGo(t *testing.T) {
	srv := providertest.NewResponses(t)
	srv.Push(providertest.Reply{
		Blocks: []chat.Block{chat.Text("ok"), providertest.ToolUse("c1", "weather", `{}`)},
		Usage:  chat.Usage{InputTokens: 10, CacheReadTokens: 5, OutputTokens: 3},
	})
	resp, err := responsesClient(srv).New(context.Background(), responsesParams())
	if err != nil {
		t.Fatal(err)
	}
	checkResponsesRequest(t, srv.Request(1), false)
	u := resp.Usage
	if resp.OutputText() != "ok" || len(resp.Output) != 2 || resp.Output[1].AsFunctionCall().CallID != "c1" || resp.Status != "completed" ||
		u.InputTokens != 15 || u.InputTokensDetails.CachedTokens != 5 || u.OutputTokens != 3 || u.TotalTokens != 18 {
		t.Errorf("response = %+v", resp)
	}
}

func TestResponsesErrors(t *testing.T) {
	srv := providertest.NewResponses(t)
	client := responsesClient(srv)
	params := responsesParams()

	// An HTTP error: the OpenAI error body.
	srv.Push(providertest.Reply{Status: 429, Error: &providertest.APIError{Type: "requests", Code: "rate_limit_exceeded", Message: "Rate limit reached. Please try again in 2s."}})
	_, err := client.New(context.Background(), params)
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" || apiErr.Message != "Rate limit reached. Please try again in 2s." {
		t.Errorf("429: %v", err)
	}

	// A stream that fails part-way ends with response.failed.
	srv.Push(providertest.Reply{Blocks: []chat.Block{chat.Text("partial answer")}, FaultAfter: 3,
		Error: &providertest.APIError{Type: "server_error", Message: "The model had an error"}})
	stream := client.NewStreaming(context.Background(), params)
	var types []string
	var failed responses.ResponseFailedEvent
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.failed" {
			failed = ev.AsResponseFailed()
		}
	}
	if stream.Err() != nil || strings.Join(types, " ") != "response.created response.in_progress response.output_item.added response.failed" ||
		failed.SequenceNumber != 3 || failed.Response.Status != "failed" || failed.Response.Error.Code != "server_error" || failed.Response.Error.Message != "The model had an error" {
		t.Errorf("failed stream: %v %v %+v", stream.Err(), types, failed.Response.Error)
	}

	// Over the context window: Responses' own 400.
	srv.SetContextWindow(10)
	_, err = client.New(context.Background(), params)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" || apiErr.Param != "input" || !srv.Request(3).OverWindow {
		t.Errorf("over the window: %v", err)
	}
}

// TestResponsesWire checks what openai-go does not send: a string input,
// custom tools and their calls, namespaced calls in the input, unknown
// items and tools, and the stop reasons.
func TestResponsesWire(t *testing.T) {
	srv := providertest.NewResponses(t)
	url := srv.BaseURL() + "/responses"

	srv.Push(providertest.TextAnswer("hi"))
	if status, body := post(t, url, `{"model":"m","input":"hello","stream":false}`); status != 200 || !strings.Contains(body, `"text":"hi"`) {
		t.Errorf("string input: %d %s", status, body)
	}
	if r := srv.Request(1); r.LastUserText() != "hello" || r.Stream {
		t.Errorf("string input parsed as %+v", r)
	}

	body := `{"model":"m","stream":true,
		"tools":[{"type":"custom","name":"apply_patch","description":"patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}},
			{"type":"namespace","name":"mcp__srv","description":"d","tools":[{"type":"function","name":"env","parameters":{"type":"object"}}]},
			{"type":"local_shell"},{"type":"image_generation"}],
		"input":[
			{"role":"user","content":"go"},
			{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"xx"},
			{"type":"custom_tool_call","call_id":"p1","name":"apply_patch","input":"*** Begin Patch"},
			{"type":"function_call","call_id":"e1","namespace":"mcp__srv","name":"env","arguments":"{}"},
			{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}},
			{"type":"custom_tool_call_output","call_id":"p1","output":"Done!"},
			{"type":"function_call_output","call_id":"e1","output":[{"type":"input_text","text":"HOME=/root"},{"type":"input_image","image_url":"data:"}]},
			{"type":"tool_search_call","call_id":"s1","arguments":{"query":"x"},"execution":"client"},
			{"type":"compaction","encrypted_content":"yy"}
		]}`
	srv.Push(providertest.Answer(providertest.ToolUse("p2", "apply_patch", `"*** Begin Patch\n*** End Patch"`), providertest.ToolUse("e2", "mcp__srv__env", `{}`)))
	status, resp := post(t, url, body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, resp)
	}
	r := srv.Request(2)
	if len(r.Tools) != 2 || r.Tools[0].Name != "apply_patch" || !strings.Contains(string(r.Tools[0].InputSchema), "lark") || r.Tools[1].Name != "mcp__srv__env" ||
		len(r.ResponsesTools) != 4 || r.ResponsesTools[2].Name != "local_shell" {
		t.Errorf("tools = %+v / %+v", r.Tools, r.ResponsesTools)
	}
	var kinds []string
	for _, m := range r.Messages {
		for _, b := range m.Content {
			kinds = append(kinds, string(m.Role)+":"+string(b.Type)+":"+b.Name)
		}
	}
	if got := strings.Join(kinds, " "); got != "user:text: assistant:reasoning: assistant:tool_use:apply_patch assistant:tool_use:mcp__srv__env assistant:web_search_call: user:tool_result: user:tool_result: assistant:tool_search_call: assistant:compaction:" {
		t.Errorf("messages: %s", got)
	}
	if m := r.Messages[1]; string(m.Content[1].Input) != `"*** Begin Patch"` {
		t.Errorf("custom tool call input = %s", m.Content[1].Input)
	}
	if got := r.LastUserText(); got != "Done!\nHOME=/root" {
		t.Errorf("last user text = %q", got)
	}
	for _, want := range []string{
		`"item":{"call_id":"p2","id":"ctc_fake_2_0","input":"","name":"apply_patch","status":"in_progress","type":"custom_tool_call"}`,
		`event: response.custom_tool_call_input.delta`,
		`"input":"*** Begin Patch\n*** End Patch","item_id":"ctc_fake_2_0"`,
		`"item":{"arguments":"{}","call_id":"e2","id":"fc_fake_2_1","name":"env","namespace":"mcp__srv","status":"completed","type":"function_call"}`,
	} {
		if !strings.Contains(resp, want) {
			t.Errorf("stream lacks %s:\n%s", want, resp)
		}
	}

	// Stop reasons: max tokens ends with response.incomplete, a refusal
	// answers with refusal parts.
	srv.Push(providertest.Reply{Blocks: []chat.Block{chat.Text("cut")}, StopReason: chat.StopMaxTokens},
		providertest.Reply{Blocks: []chat.Block{chat.Text("no")}, StopReason: chat.StopRefusal})
	_, resp = post(t, url, `{"model":"m","input":"x","stream":true}`)
	if !strings.Contains(resp, "event: response.incomplete\n") || !strings.Contains(resp, `"incomplete_details":{"reason":"max_output_tokens"}`) || strings.Contains(resp, "response.completed") {
		t.Errorf("max tokens:\n%s", resp)
	}
	_, resp = post(t, url, `{"model":"m","input":"x","stream":true}`)
	if !strings.Contains(resp, `"delta":"no"`) || !strings.Contains(resp, "event: response.refusal.done\n") || !strings.Contains(resp, `"part":{"refusal":"no","type":"refusal"}`) {
		t.Errorf("refusal:\n%s", resp)
	}

	// Not a route of this wire.
	if status, body := post(t, srv.URL+"/v1/chat/completions", `{}`); status != 404 || !strings.Contains(body, `"type":"not_found_error"`) {
		t.Errorf("chat completions on the Responses fake: %d %s", status, body)
	}
}
