// Package anthropic adapts the Anthropic Messages API, streamed over SSE,
// to provider.Provider.
//
// It uses github.com/anthropics/anthropic-sdk-go for what the SDK does
// well: the request types and their JSON, the HTTP call (base URL,
// x-api-key, anthropic-version and the other headers), and SSE framing.
// It does not use the SDK's retries or its stream accumulation: vigil runs
// its own retry loop, because it must announce each backoff as a
// provider.EventRetry before sleeping and must retry (or report as
// ErrTruncated) a stream cut before message_stop, which the SDK would
// hand back as a complete answer; and it accumulates the stream itself so
// that it can tell a dropped connection from a malformed frame and reject
// tool input that is not valid JSON. The SDK is built without its
// environment defaults: reading ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is
// the caller's job.
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
	"fmt"
	"io"
	"iter"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

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
	name      string
	apiKey    string
	model     string
	maxTokens int
	retry     provider.RetryPolicy
	log       *slog.Logger
	messages  sdk.MessageService
}

var _ provider.Provider = (*Provider)(nil)

// New returns a Provider configured by opts.
func New(opts Options) *Provider {
	p := &Provider{
		name:      cmp.Or(opts.Name, "anthropic"),
		apiKey:    opts.APIKey,
		model:     cmp.Or(opts.Model, DefaultModel),
		maxTokens: opts.MaxTokens,
		retry:     opts.Retry.WithDefaults(),
		log:       opts.Logger,
	}
	if p.maxTokens <= 0 {
		p.maxTokens = DefaultMaxTokens
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	hc = p.retry.StallClient(hc)
	sdkOpts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(cmp.Or(opts.BaseURL, DefaultBaseURL)),
		option.WithHTTPClient(hc),
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

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 10 * time.Minute
	return &http.Client{Transport: t}
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return p.name }

// Stream implements provider.Provider. It yields EventText deltas and an
// EventToolUse per completed tool_use block as they arrive, an EventRetry
// before each backoff (the output yielded before it is void), and ends
// with one EventDone or one *provider.Error.
func (p *Provider) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	return func(yield func(provider.Event, error) bool) {
		params, err := p.params(req)
		if err != nil {
			yield(provider.Event{}, p.newError(provider.ErrBadRequest, 0, err.Error(), false))
			return
		}
		p.retry.Run(ctx, p.name, req.CallID, p.log, func(n int) (*chat.Response, *provider.Failure, bool) {
			p.log.Debug("model call", "provider", p.name, "call", req.CallID, "model", params.Model, "attempt", n)
			return p.attempt(ctx, req, params, yield)
		}, yield)
	}
}

func (p *Provider) newError(kind provider.ErrorKind, status int, msg string, retryable bool) *provider.Error {
	return &provider.Error{Provider: p.name, Kind: kind, Status: status, Message: provider.Redact(msg, p.apiKey), Retryable: retryable}
}

// attempt makes one request and reads its stream. It returns the response,
// or the failure, or stopped when the consumer stopped the iteration.
func (p *Provider) attempt(ctx context.Context, req *provider.Request, params sdk.MessageNewParams, yield func(provider.Event, error) bool) (resp *chat.Response, f *provider.Failure, stopped bool) {
	var res *http.Response
	if err := p.messages.NewStreaming(ctx, params, append(provider.IdentityHeaders(req, option.WithHeader), option.WithResponseInto(&res))...).Err(); err != nil {
		if f := p.stalled(err); f != nil {
			if res != nil && res.Body != nil {
				res.Body.Close()
			}
			return nil, f, false
		}
		if res != nil && res.StatusCode >= 400 {
			return nil, p.httpFailure(res), false
		}
		if res != nil && res.Body != nil {
			res.Body.Close()
		}
		return nil, &provider.Failure{Err: p.newError(provider.ErrNetwork, 0, err.Error(), provider.TransportRetryable(err))}, false
	}
	if res == nil || res.Body == nil {
		return nil, &provider.Failure{Err: p.newError(provider.ErrNetwork, 0, "no response", true)}, false
	}
	defer res.Body.Close()
	if isJSON(res) {
		// Not a stream: an error in a 200, or a proxy that ignored
		// "stream": true. Either way, no retry will change it.
		body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		if f := p.stalled(err); f != nil {
			return nil, f, false
		}
		if bytes.Contains(body, []byte(`"error"`)) {
			se := errorEvent(body)
			return nil, &provider.Failure{Err: p.newError(se.kind, 0, se.msg, se.retryable)}, false
		}
		return nil, &provider.Failure{Err: p.newError(provider.ErrMalformed, 0, "expected an event stream, got JSON: "+provider.Truncate(string(body), 200), false)}, false
	}

	dec := ssestream.NewDecoder(res)
	acc := &accumulator{model: string(params.Model)}
	for dec.Next() {
		evs, err := acc.add(dec.Event())
		if err != nil {
			return nil, &provider.Failure{Err: p.newError(err.kind, 0, err.msg, err.retryable)}, false
		}
		for _, ev := range evs {
			if !yield(ev, nil) {
				return nil, nil, true
			}
		}
		if acc.stopped {
			return acc.response(), nil, false
		}
	}
	msg := "stream ended before message_stop"
	if err := dec.Err(); err != nil {
		if f := p.stalled(err); f != nil {
			return nil, f, false
		}
		msg += ": " + err.Error()
	}
	return nil, &provider.Failure{Err: p.newError(provider.ErrTruncated, 0, msg, true)}, false
}

// stalled returns the failure of an attempt whose response went quiet
// (err holds a *provider.StallError), or nil.
func (p *Provider) stalled(err error) *provider.Failure {
	var se *provider.StallError
	if !errors.As(err, &se) {
		return nil
	}
	return &provider.Failure{Err: p.newError(provider.ErrStalled, 0, se.Error(), true)}
}

func isJSON(res *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	return mt == "application/json"
}

// httpFailure reads an error response: {"type":"error","error":{"type",
// "message"}}.
func (p *Provider) httpFailure(res *http.Response) *provider.Failure {
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var eb struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	var msg, errType string
	if json.Unmarshal(body, &eb) == nil && (eb.Error.Type != "" || eb.Error.Message != "") {
		errType = eb.Error.Type
		msg = joinNonEmpty(": ", eb.Error.Type, eb.Error.Message)
	} else if s := provider.Truncate(string(body), 300); s != "" {
		msg = s
	} else {
		msg = http.StatusText(res.StatusCode)
	}
	if id := res.Header.Get("request-id"); id != "" {
		msg += " (request-id " + id + ")"
	}
	kind, retryable := provider.StatusKind(res.StatusCode, errType)
	f := &provider.Failure{Err: p.newError(kind, res.StatusCode, msg, retryable)}
	f.Wait, f.HasWait = provider.RetryAfter(res.Header, p.retry.Now())
	return f
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, sep)
}

// streamError is a failure found in the stream's content.
type streamError struct {
	kind      provider.ErrorKind
	msg       string
	retryable bool
}

func malformed(format string, args ...any) *streamError {
	return &streamError{kind: provider.ErrMalformed, msg: fmt.Sprintf(format, args...)}
}

// errorEvent turns the data of an SSE error event into a stream error.
func errorEvent(data []byte) *streamError {
	var eb struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &eb); err != nil {
		return malformed("error event: %v", err)
	}
	kind, retryable := provider.ErrServer, true
	switch eb.Error.Type {
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
	return &streamError{kind: kind, msg: joinNonEmpty(": ", eb.Error.Type, eb.Error.Message) + " (in stream)", retryable: retryable}
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

func (a *accumulator) add(ev ssestream.Event) ([]provider.Event, *streamError) {
	data := ev.Data
	if ev.Type == "error" {
		return nil, errorEvent(data)
	}
	if ev.Type == "ping" || len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil
	}
	var e sdk.MessageStreamEventUnion
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, malformed("%s event: %v", cmp.Or(ev.Type, "unnamed"), err)
	}
	typ := cmp.Or(e.Type, ev.Type)
	if typ != "message_start" && typ != "error" && typ != "ping" && !a.started {
		return nil, malformed("%s before message_start", typ)
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
			return nil, malformed("content_block_start: index %d started twice", e.Index)
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
			return nil, malformed("content_block_delta for index %d, which is not open", e.Index)
		}
		switch e.Delta.Type {
		case "text_delta":
			if b.typ != "text" {
				return nil, malformed("text_delta for a %s block", b.typ)
			}
			b.text.WriteString(e.Delta.Text)
			return []provider.Event{{Type: provider.EventText, Text: e.Delta.Text}}, nil
		case "input_json_delta":
			if b.typ != "tool_use" {
				return nil, malformed("input_json_delta for a %s block", b.typ)
			}
			b.input.WriteString(e.Delta.PartialJSON)
		}
	case "content_block_stop":
		b, ok := a.blocks[e.Index]
		if !ok || b.done {
			return nil, malformed("content_block_stop for index %d, which is not open", e.Index)
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
func (a *accumulator) finish(b *block) ([]provider.Event, *streamError) {
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
		return nil, malformed("tool_use %s (%s): input is not a JSON object: %v: %s", b.id, b.name, err, provider.Truncate(string(in), 200))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, in); err == nil {
		in = buf.Bytes()
	}
	b.final = in
	blk := a.toolBlock(b)
	return []provider.Event{{Type: provider.EventToolUse, Block: &blk}}, nil
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
