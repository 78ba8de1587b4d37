// Package openai adapts OpenAI-compatible Chat Completions, streamed over
// SSE, to provider.Provider: the OpenAI API itself, and the servers that
// speak its dialect (Ollama at http://localhost:11434/v1, vLLM, llama.cpp,
// LM Studio, OpenRouter).
//
// It uses github.com/openai/openai-go for the request types and their
// JSON, the HTTP call, and SSE framing. It does not use the SDK's retries
// or its stream iterator: vigil runs its own retry loop
// (provider.HTTPAdapter, shared with provider/anthropic), because it must
// announce each backoff as a provider.EventRetry before sleeping and must
// retry (or report as ErrTruncated) a stream cut before its end, which the
// SDK's iterator cannot tell from a complete one (it treats "data: [DONE]"
// and a closed connection alike); and it accumulates tool calls itself to
// validate their JSON and to tell a dropped connection from a malformed
// frame. The SDK's client is not used either, since it reads OPENAI_API_KEY,
// OPENAI_BASE_URL and other variables from the environment and would send
// a real OpenAI key to whatever local server BaseURL names: only the chat
// completion service is built, from explicit options.
//
// Usage counts prompt_tokens_details.cached_tokens (and cache_write_tokens,
// where a server reports it) as CacheReadTokens (CacheWriteTokens), and
// only the rest of prompt_tokens as InputTokens. A response that sends no
// byte for RetryPolicy.StallTimeout is abandoned and retried
// (provider.ErrStalled).
package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a Provider. Nil or zero fields mean the defaults.
type Options struct {
	// Name identifies the provider in errors and logs; empty means
	// "openai".
	Name string
	// APIKey is sent as a bearer token. Empty sends none: local servers
	// need none.
	APIKey string
	// BaseURL is the API root including /v1, e.g.
	// http://localhost:11434/v1; empty means DefaultBaseURL.
	BaseURL string
	// Model is used when a Request names none. There is no default: model
	// names differ from server to server.
	Model string
	// MaxTokens is used when a Request sets none; zero sends no limit and
	// leaves it to the server.
	MaxTokens int
	// MaxCompletionTokens sends the limit as max_completion_tokens, which
	// OpenAI's reasoning models require, instead of max_tokens, which
	// every compatible server understands.
	MaxCompletionTokens bool
	// HTTPClient sends the requests; nil means a client whose transport
	// waits at most 10 minutes for response headers. The provider wraps
	// its transport in provider.StallTransport unless Retry turns stall
	// detection off.
	HTTPClient *http.Client
	// Retry is the retry policy, stall detection included. A local server
	// on slow hardware may send nothing while it reads a long prompt: give
	// it a StallTimeout longer than that.
	Retry provider.RetryPolicy
	// Logger receives retries (warn) and attempts (debug); nil discards.
	Logger *slog.Logger
	// Header holds extra request headers, e.g. OpenRouter's HTTP-Referer.
	Header http.Header
}

// Provider talks to an OpenAI-compatible Chat Completions endpoint. It is
// safe for concurrent use.
type Provider struct {
	http      provider.HTTPAdapter
	model     string
	maxTokens int
	mct       bool
	chat      sdk.ChatCompletionService
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider configured by opts.
func New(opts Options) *Provider {
	p := &Provider{
		http: provider.HTTPAdapter{
			Name:            cmp.Or(opts.Name, "openai"),
			APIKey:          opts.APIKey,
			Retry:           opts.Retry.WithDefaults(),
			Logger:          opts.Logger,
			RequestIDHeader: "x-request-id",
			ErrorBody:       errorBody,
			StreamError:     streamError,
		},
		model:     opts.Model,
		maxTokens: opts.MaxTokens,
		mct:       opts.MaxCompletionTokens,
	}
	sdkOpts := []option.RequestOption{
		option.WithBaseURL(cmp.Or(opts.BaseURL, DefaultBaseURL)),
		option.WithHTTPClient(p.http.Client(opts.HTTPClient)),
		option.WithMaxRetries(0),
	}
	if opts.APIKey != "" {
		sdkOpts = append(sdkOpts, option.WithAPIKey(opts.APIKey))
	}
	for k, vs := range opts.Header {
		for _, v := range vs {
			sdkOpts = append(sdkOpts, option.WithHeaderAdd(k, v))
		}
	}
	p.chat = sdk.NewChatCompletionService(sdkOpts...)
	return p
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return p.http.Name }

// Stream implements provider.Provider. It yields EventText deltas as they
// arrive, an EventToolUse per tool call once the answer is complete, an
// EventRetry before each backoff (the output yielded before it is void),
// and ends with one EventDone or one *provider.Error.
func (p *Provider) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	params, err := p.params(req)
	if err != nil {
		return p.http.Refuse(err)
	}
	send := func(ctx context.Context) (*http.Response, error) {
		var res *http.Response
		err := p.chat.NewStreaming(ctx, params, append(provider.IdentityHeaders(req, option.WithHeader), option.WithResponseInto(&res))...).Err()
		return res, err
	}
	read := func(res *http.Response) (provider.Frames, provider.Accumulator) {
		return frames{ssestream.NewDecoder(res)}, &accumulator{model: params.Model, callID: req.CallID, calls: map[int64]*toolCall{}}
	}
	return p.http.Stream(ctx, req, params.Model, send, read)
}

// frames reads the SDK's SSE decoder as provider.Frames.
type frames struct{ ssestream.Decoder }

// Frame implements provider.Frames.
func (f frames) Frame() provider.Frame { return provider.Frame(f.Event()) }

// wireError is the error object of an OpenAI-style error body. Compatible
// servers vary: code may be a string or a number, and some send the error
// as a bare string.
type wireError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

func (e wireError) code() string {
	var s string
	if json.Unmarshal(e.Code, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(e.Code, &n) == nil {
		return n.String()
	}
	return ""
}

// text is "type: message", with the code when it says more than the type.
func (e wireError) text() string {
	label := e.Type
	if c := e.code(); c != "" && c != e.Type {
		label = strings.TrimSpace(label + " (" + c + ")")
	}
	return provider.ErrorText(label, e.Message)
}

// parseErrorBody reads {"error":{...}}, {"error":"..."} or {"message":...}.
func parseErrorBody(body []byte) (wireError, bool) {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &top) != nil {
		return wireError{}, false
	}
	var we wireError
	if json.Unmarshal(top.Error, &we) == nil && (we.Message != "" || we.Type != "") {
		return we, true
	}
	var s string
	if json.Unmarshal(top.Error, &s) == nil && s != "" {
		return wireError{Message: s}, true
	}
	if top.Message != "" {
		return wireError{Message: top.Message}, true
	}
	return wireError{}, false
}

// errorBody reads an error response's body for provider.HTTPAdapter.
func errorBody(body []byte) (errType, msg string, ok bool) {
	we, ok := parseErrorBody(body)
	return we.Type, we.text(), ok
}

// streamError classifies a JSON error body sent in place of the stream;
// nil when body holds none.
func streamError(body []byte) *provider.Error {
	if we, ok := parseErrorBody(body); ok {
		return inStreamError(we)
	}
	return nil
}

// inStreamError classifies an error object sent in the middle of a stream.
// An error the server could not classify is taken as a retryable server
// error: the request was accepted, so it was well-formed.
func inStreamError(we wireError) *provider.Error {
	label := strings.ToLower(we.Type + " " + we.code())
	kind, retryable := provider.ErrServer, true
	if n, err := strconv.Atoi(we.code()); err == nil && n >= 400 {
		kind, retryable = provider.StatusKind(n, we.Type)
	}
	switch {
	case strings.Contains(label, "overloaded"):
		kind, retryable = provider.ErrOverloaded, true
	case strings.Contains(label, "rate_limit"):
		kind, retryable = provider.ErrRateLimited, true
	case strings.Contains(label, "invalid_request"):
		kind, retryable = provider.ErrBadRequest, false
	case strings.Contains(label, "authentication"), strings.Contains(label, "permission"):
		kind, retryable = provider.ErrAuth, false
	}
	return &provider.Error{Kind: kind, Message: we.text() + " (in stream)", Retryable: retryable}
}

// accumulator builds a response from the chunks of one stream. Only the
// first choice (index 0) is read.
type accumulator struct {
	model  string
	callID string
	text   strings.Builder
	calls  map[int64]*toolCall
	order  []int64
	finish string
	usage  chat.Usage
	// usageSeen says a chunk with usage arrived.
	usageSeen bool
	done      bool // data: [DONE] arrived
}

type toolCall struct {
	id, name string
	args     strings.Builder
}

// Add implements provider.Accumulator.
func (a *accumulator) Add(ev provider.Frame) ([]provider.Event, *provider.Error) {
	data := strings.TrimSpace(string(ev.Data))
	if data == "" {
		return nil, nil
	}
	if data == "[DONE]" {
		a.done = true
		return nil, nil
	}
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &probe); err != nil {
		return nil, provider.Malformed("chunk: %v", err)
	}
	if len(probe.Error) > 0 && string(probe.Error) != "null" {
		we, ok := parseErrorBody([]byte(data))
		if !ok {
			we = wireError{Message: provider.Truncate(string(probe.Error), 300)}
		}
		return nil, inStreamError(we)
	}
	if ev.Type == "error" {
		return nil, inStreamError(wireError{Message: provider.Truncate(data, 300)})
	}
	var c sdk.ChatCompletionChunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return nil, provider.Malformed("chunk: %v", err)
	}
	if c.Model != "" {
		a.model = c.Model
	}
	if c.JSON.Usage.Valid() {
		a.usageSeen = true
		u := c.Usage
		cached := u.PromptTokensDetails.CachedTokens
		written := u.PromptTokensDetails.CacheWriteTokens
		a.usage = chat.Usage{
			InputTokens:      max(0, u.PromptTokens-cached-written),
			OutputTokens:     u.CompletionTokens,
			CacheReadTokens:  cached,
			CacheWriteTokens: written,
		}
	}
	var out []provider.Event
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		for _, s := range []string{d.Content, d.Refusal} {
			if s != "" {
				a.text.WriteString(s)
				out = append(out, provider.Event{Type: provider.EventText, Text: s})
			}
		}
		for _, tc := range d.ToolCalls {
			key := tc.Index
			if !tc.JSON.Index.Valid() {
				// Servers that omit the index send one call per delta,
				// each with its own id.
				key = int64(len(a.order)) - 1
				if tc.ID != "" || key < 0 {
					key = int64(len(a.order))
				}
			}
			call, ok := a.calls[key]
			if !ok {
				call = &toolCall{}
				a.calls[key] = call
				a.order = append(a.order, key)
			}
			if call.id == "" {
				call.id = tc.ID
			}
			if call.name == "" {
				call.name = tc.Function.Name
			}
			call.args.WriteString(tc.Function.Arguments)
		}
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
	}
	return out, nil
}

// Done implements provider.Accumulator: data: [DONE] arrived.
func (a *accumulator) Done() bool { return a.done }

// Finish implements provider.Accumulator. A stream that ends cleanly
// without [DONE] is taken as whole once both its finish_reason and its
// usage chunk (which include_usage asks for, after the finish_reason)
// arrived: some servers do not send [DONE]. Without the usage, it was cut
// between the two.
func (a *accumulator) Finish(cut error) ([]provider.Event, *chat.Response, *provider.Error) {
	if !a.done && (cut != nil || a.finish == "" || !a.usageSeen) {
		final := "[DONE]"
		switch {
		case a.finish == "":
			final += " and before a finish_reason"
		case !a.usageSeen:
			final += " and before the usage chunk"
		}
		return nil, nil, provider.Truncated(final, cut)
	}
	return a.response()
}

// response validates the tool calls and builds the response, with an
// EventToolUse for each call.
func (a *accumulator) response() ([]provider.Event, *chat.Response, *provider.Error) {
	r := &chat.Response{Usage: a.usage, Model: a.model}
	if a.text.Len() > 0 {
		r.Content = append(r.Content, chat.Text(a.text.String()))
	}
	var evs []provider.Event
	for i, key := range a.order {
		call := a.calls[key]
		if call.name == "" {
			return nil, nil, provider.Malformed("tool call %d has no function name", i)
		}
		id := call.id
		if id == "" {
			id = fmt.Sprintf("call_%s_%d", cmp.Or(a.callID, "vigil"), i)
		}
		in := strings.TrimSpace(call.args.String())
		if in == "" {
			in = "{}"
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &obj); err != nil || obj == nil {
			msg := "not an object"
			if err != nil {
				msg = err.Error()
			}
			return nil, nil, provider.Malformed("tool call %s (%s): arguments are not a JSON object: %s: %s", id, call.name, msg, provider.Truncate(in, 200))
		}
		compact, _ := json.Marshal(json.RawMessage(in))
		b := chat.Block{Type: chat.BlockToolUse, ID: id, Name: call.name, Input: compact}
		r.Content = append(r.Content, b)
		ev := b
		ev.Input = append(json.RawMessage(nil), compact...)
		evs = append(evs, provider.Event{Type: provider.EventToolUse, Block: &ev})
	}
	r.StopReason = stopReason(a.finish, len(a.order) > 0)
	return evs, r, nil
}

func stopReason(finish string, calls bool) chat.StopReason {
	switch finish {
	case "tool_calls", "function_call":
		return chat.StopToolUse
	case "stop", "eos", "end_turn":
		if calls {
			// Ollama and others report "stop" for an answer with calls.
			return chat.StopToolUse
		}
		return chat.StopEndTurn
	case "length":
		return chat.StopMaxTokens
	case "content_filter":
		return chat.StopRefusal
	default:
		return chat.StopUnknown
	}
}
