// Package anthropic adapts the Anthropic Messages API, streamed over SSE,
// to provider.Provider.
//
// It uses github.com/anthropics/anthropic-sdk-go for what the SDK does
// well: the request types and their JSON, the HTTP call (base URL,
// x-api-key, anthropic-version and the other headers), and SSE framing. It
// does not use the SDK's retries or its stream accumulation: vigil runs its
// own retry loop (provider.HTTPAdapter, shared with provider/openai),
// because it must announce each backoff as a provider.EventRetry before
// sleeping and must retry (or report as ErrTruncated) a stream cut before
// message_stop, which the SDK would hand back as a complete answer; and it
// accumulates the stream itself so that it can tell a dropped connection
// from a malformed frame and reject tool input that is not valid JSON. The
// SDK is built without its environment defaults: reading ANTHROPIC_API_KEY
// or ANTHROPIC_BASE_URL is the caller's job.
//
// Requests mark their stable prefix for prompt caching, as Claude Code
// does: the last tool, the last system block, the last message and the
// user message before it carry cache_control {type: ephemeral}, so each
// round reads what the previous one wrote. The usage reports the cache
// traffic as CacheReadTokens and CacheWriteTokens, with InputTokens only
// the uncached rest. A response that sends no byte for
// RetryPolicy.StallTimeout is abandoned and retried (provider.ErrStalled).
package anthropic

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"log/slog"
	"net/http"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// Defaults used when Options leave a field empty.
const (
	DefaultBaseURL   = "https://api.anthropic.com"
	DefaultModel     = string(sdk.ModelClaudeSonnet5_5)
	DefaultMaxTokens = 8192
)

// Options configure a Provider. Nil or zero fields mean the defaults.
type Options struct {
	// Name identifies the provider in errors and logs; empty means
	// "anthropic".
	Name string
	// APIKey is sent as a bearer token (the SDK's way) and as x-api-key.
	// Empty sends none, for a local fake or a proxy that adds its own.
	APIKey string
	// BaseURL is the API root, without /v1; empty means DefaultBaseURL.
	// Pass ANTHROPIC_BASE_URL here if you honour it.
	BaseURL string
	// Model is used when a Request names none; empty means DefaultModel.
	Model string
	// MaxTokens is used when a Request sets none; zero means
	// DefaultMaxTokens.
	MaxTokens int
	// HTTPClient sends the requests; nil means a client whose transport
	// waits at most 10 minutes for response headers. The provider wraps
	// its transport in provider.StallTransport unless Retry turns stall
	// detection off.
	HTTPClient *http.Client
	// Retry is the retry policy, stall detection included.
	Retry provider.RetryPolicy
	// Logger receives retries (warn) and attempts (debug); nil discards.
	Logger *slog.Logger
	// Header holds extra request headers, e.g. anthropic-beta.
	Header http.Header
}

// Provider talks to the Anthropic Messages API. It is safe for concurrent
// use.
type Provider struct {
	http      provider.HTTPAdapter
	model     string
	maxTokens int
	messages  sdk.MessageService
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider configured by opts.
func New(opts Options) *Provider {
	p := &Provider{
		http: provider.HTTPAdapter{
			Name:            cmp.Or(opts.Name, "anthropic"),
			APIKey:          opts.APIKey,
			Retry:           opts.Retry.WithDefaults(),
			Logger:          opts.Logger,
			RequestIDHeader: "request-id",
			ErrorBody:       errorBody,
			StreamError:     streamError,
		},
		model:     cmp.Or(opts.Model, DefaultModel),
		maxTokens: opts.MaxTokens,
	}
	if p.maxTokens <= 0 {
		p.maxTokens = DefaultMaxTokens
	}
	sdkOpts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(cmp.Or(opts.BaseURL, DefaultBaseURL)),
		option.WithHTTPClient(p.http.Client(opts.HTTPClient)),
		option.WithMaxRetries(0),
	}
	if opts.APIKey != "" {
		// The SDK sends the key as a bearer token; Anthropic-compatible
		// proxies and older deployments read x-api-key, so send both.
		sdkOpts = append(sdkOpts, option.WithAPIKey(opts.APIKey), option.WithHeader("x-api-key", opts.APIKey))
	}
	for k, vs := range opts.Header {
		for _, v := range vs {
			sdkOpts = append(sdkOpts, option.WithHeaderAdd(k, v))
		}
	}
	client := sdk.NewClient(sdkOpts...)
	p.messages = client.Messages
	return p
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return p.http.Name }

// Stream implements provider.Provider. It yields EventText deltas and an
// EventToolUse per completed tool_use block as they arrive, an EventRetry
// before each backoff (the output yielded before it is void), and ends
// with one EventDone or one *provider.Error.
func (p *Provider) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	params, err := p.params(req)
	if err != nil {
		return p.http.Refuse(err)
	}
	send := func(ctx context.Context) (*http.Response, error) {
		var res *http.Response
		err := p.messages.NewStreaming(ctx, params, append(provider.IdentityHeaders(req, option.WithHeader), option.WithResponseInto(&res))...).Err()
		return res, err
	}
	read := func(res *http.Response) (provider.Frames, provider.Accumulator) {
		return frames{ssestream.NewDecoder(res)}, &accumulator{model: string(params.Model)}
	}
	return p.http.Stream(ctx, req, string(params.Model), send, read)
}

// frames reads the SDK's SSE decoder as provider.Frames.
type frames struct{ ssestream.Decoder }

// Frame implements provider.Frames.
func (f frames) Frame() provider.Frame { return provider.Frame(f.Event()) }

// errorBody reads {"type":"error","error":{"type","message"}}.
func errorBody(body []byte) (errType, msg string, ok bool) {
	var eb struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil || eb.Error.Type == "" && eb.Error.Message == "" {
		return "", "", false
	}
	return eb.Error.Type, provider.ErrorText(eb.Error.Type, eb.Error.Message), true
}

// streamError classifies the error object of an SSE error event, or of a
// JSON body sent in place of the stream; nil when data holds none.
func streamError(data []byte) *provider.Error {
	typ, msg, ok := errorBody(data)
	if !ok {
		return nil
	}
	kind, retryable := provider.ErrServer, true
	switch typ {
	case "overloaded_error":
		kind = provider.ErrOverloaded
	case "rate_limit_error":
		kind = provider.ErrRateLimited
	case "api_error", "timeout_error", "":
	case "authentication_error", "permission_error":
		kind, retryable = provider.ErrAuth, false
	default:
		kind, retryable = provider.ErrBadRequest, false
	}
	return &provider.Error{Kind: kind, Message: msg + " (in stream)", Retryable: retryable}
}

// accumulator builds a response from the events of one stream.
type accumulator struct {
	model   string
	usage   chat.Usage
	stop    string
	blocks  map[int64]*block
	order   []int64
	started bool
	stopped bool
}

type block struct {
	typ   string // text, tool_use, or a kind vigil ignores (thinking, ...)
	text  strings.Builder
	id    string
	name  string
	input strings.Builder
	start json.RawMessage // the input of content_block_start
	final json.RawMessage // the validated input, once stopped
	done  bool
}

// Add implements provider.Accumulator.
func (a *accumulator) Add(ev provider.Frame) ([]provider.Event, *provider.Error) {
	data := ev.Data
	if ev.Type == "error" {
		return nil, errorEvent(data)
	}
	if ev.Type == "ping" || len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil
	}
	var e sdk.MessageStreamEventUnion
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, provider.Malformed("%s event: %v", cmp.Or(ev.Type, "unnamed"), err)
	}
	typ := cmp.Or(e.Type, ev.Type)
	if typ != "message_start" && typ != "error" && typ != "ping" && !a.started {
		return nil, provider.Malformed("%s before message_start", typ)
	}
	switch typ {
	case "ping":
	case "error":
		return nil, errorEvent(data)
	case "message_start":
		a.started = true
		a.blocks = map[int64]*block{}
		if m := e.Message.Model; m != "" {
			a.model = string(m)
		}
		u := e.Message.Usage
		a.usage = chat.Usage{
			InputTokens:      u.InputTokens,
			OutputTokens:     u.OutputTokens,
			CacheReadTokens:  u.CacheReadInputTokens,
			CacheWriteTokens: u.CacheCreationInputTokens,
		}
	case "content_block_start":
		if _, dup := a.blocks[e.Index]; dup {
			return nil, provider.Malformed("content_block_start: index %d started twice", e.Index)
		}
		cb := e.ContentBlock
		b := &block{typ: cb.Type, id: cb.ID, name: cb.Name}
		a.blocks[e.Index] = b
		a.order = append(a.order, e.Index)
		switch cb.Type {
		case "text":
			if cb.Text != "" {
				b.text.WriteString(cb.Text)
				return []provider.Event{{Type: provider.EventText, Text: cb.Text}}, nil
			}
		case "tool_use":
			if raw := cb.JSON.Input.Raw(); raw != "" && raw != "null" {
				b.start = json.RawMessage(raw)
			}
		}
	case "content_block_delta":
		b, ok := a.blocks[e.Index]
		if !ok || b.done {
			return nil, provider.Malformed("content_block_delta for index %d, which is not open", e.Index)
		}
		switch e.Delta.Type {
		case "text_delta":
			if b.typ != "text" {
				return nil, provider.Malformed("text_delta for a %s block", b.typ)
			}
			b.text.WriteString(e.Delta.Text)
			return []provider.Event{{Type: provider.EventText, Text: e.Delta.Text}}, nil
		case "input_json_delta":
			if b.typ != "tool_use" {
				return nil, provider.Malformed("input_json_delta for a %s block", b.typ)
			}
			b.input.WriteString(e.Delta.PartialJSON)
		}
	case "content_block_stop":
		b, ok := a.blocks[e.Index]
		if !ok || b.done {
			return nil, provider.Malformed("content_block_stop for index %d, which is not open", e.Index)
		}
		return a.finish(b)
	case "message_delta":
		if s := e.Delta.StopReason; s != "" {
			a.stop = string(s)
		}
		u := e.Usage
		if u.JSON.OutputTokens.Valid() {
			a.usage.OutputTokens = u.OutputTokens
		}
		if u.JSON.InputTokens.Valid() && u.InputTokens > 0 {
			a.usage.InputTokens = u.InputTokens
		}
		if u.JSON.CacheReadInputTokens.Valid() && u.CacheReadInputTokens > 0 {
			a.usage.CacheReadTokens = u.CacheReadInputTokens
		}
		if u.JSON.CacheCreationInputTokens.Valid() && u.CacheCreationInputTokens > 0 {
			a.usage.CacheWriteTokens = u.CacheCreationInputTokens
		}
	case "message_stop":
		// Blocks left open are closed by the end of the message.
		var out []provider.Event
		for _, i := range a.order {
			if b := a.blocks[i]; !b.done {
				evs, err := a.finish(b)
				if err != nil {
					return nil, err
				}
				out = append(out, evs...)
			}
		}
		a.stopped = true
		return out, nil
	}
	return nil, nil
}

// finish closes a block; a tool_use block's input must be a JSON object.
func (a *accumulator) finish(b *block) ([]provider.Event, *provider.Error) {
	b.done = true
	if b.typ != "tool_use" {
		return nil, nil
	}
	in := []byte(b.input.String())
	if len(strings.TrimSpace(string(in))) == 0 {
		in = b.start
		if len(in) == 0 {
			in = []byte("{}")
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(in, &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("not an object")
		}
		return nil, provider.Malformed("tool_use %s (%s): input is not a JSON object: %v: %s", b.id, b.name, err, provider.Truncate(string(in), 200))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, in); err == nil {
		in = buf.Bytes()
	}
	b.final = in
	blk := a.toolBlock(b)
	return []provider.Event{{Type: provider.EventToolUse, Block: &blk}}, nil
}

// errorEvent is the failure an SSE error event reports. One whose error
// has no type is taken as a retryable server error: the request was
// accepted, so it was well-formed.
func errorEvent(data []byte) *provider.Error {
	if e := streamError(data); e != nil {
		return e
	}
	msg := "error event: " + provider.Truncate(string(data), 200)
	if !json.Valid(data) {
		return provider.Malformed("%s", msg)
	}
	return &provider.Error{Kind: provider.ErrServer, Message: msg, Retryable: true}
}

// Done implements provider.Accumulator: message_stop arrived.
func (a *accumulator) Done() bool { return a.stopped }

// Finish implements provider.Accumulator.
func (a *accumulator) Finish(cut error) ([]provider.Event, *chat.Response, *provider.Error) {
	if !a.stopped {
		return nil, nil, provider.Truncated("message_stop", cut)
	}
	return nil, a.response(), nil
}

func (a *accumulator) toolBlock(b *block) chat.Block {
	return chat.Block{Type: chat.BlockToolUse, ID: b.id, Name: b.name, Input: append(json.RawMessage(nil), b.final...)}
}

func (a *accumulator) response() *chat.Response {
	r := &chat.Response{StopReason: stopReason(a.stop), Usage: a.usage, Model: a.model}
	for _, i := range a.order {
		b := a.blocks[i]
		switch b.typ {
		case "text":
			if b.text.Len() > 0 {
				r.Content = append(r.Content, chat.Text(b.text.String()))
			}
		case "tool_use":
			r.Content = append(r.Content, a.toolBlock(b))
		}
	}
	return r
}

func stopReason(s string) chat.StopReason {
	switch r := chat.StopReason(s); r {
	case chat.StopEndTurn, chat.StopToolUse, chat.StopMaxTokens, chat.StopSequence, chat.StopRefusal, chat.StopPauseTurn:
		return r
	case "model_context_window_exceeded":
		return chat.StopMaxTokens
	default:
		return chat.StopUnknown
	}
}
