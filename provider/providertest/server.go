// Package providertest holds the conformance suite of provider adapters,
// Run, and the fake model servers it runs them against: an Anthropic
// Messages API, an OpenAI-compatible Chat Completions API and an OpenAI
// Responses API (the Codex CLI's), all speaking the real streaming wire
// formats (SSE), on loopback or in memory
// (NewInMemory, for testing/synctest bubbles). A test scripts what the
// fake answers to each request, and reads back what the fake received.
//
// A typical scenario test plays the model's side of a whole session:
//
//	srv := providertest.NewAnthropic(t)
//	srv.On(providertest.Nth(1), providertest.Answer(providertest.ToolUse("t1", "bash", `{"cmd":"ls"}`)))
//	srv.On(providertest.LastUserContains("README"), providertest.Answer(chat.Text("done")))
//	p := anthropic.New(anthropic.Options{BaseURL: srv.BaseURL(), APIKey: "sk-test"})
//
// Rules are tried in the order they were added; the first rule whose Match
// accepts the request and that still holds a reply answers it, and its reply
// is used up. A request no rule answers gets a 400 invalid_request_error, and
// the test fails when it ends.
//
// The fakes count tokens as PromptTokens does. With SetContextWindow, a
// prompt over the window gets the API's own 400 error ("prompt is too
// long: ..." from Anthropic, context_length_exceeded from OpenAI) before
// any rule is consulted. A Reply that scripts no Usage is answered with
// the counted usage: the prompt's tokens as input, the answer's as output.
// The Anthropic fake also plays the prompt cache: it keeps, per server,
// the prefixes that end at a block marked with cache_control, and reports
// the longest one it holds as cache_read_input_tokens, the rest up to the
// last mark as cache_creation_input_tokens, and only what follows the last
// mark as input_tokens. Unlike the real cache it has no minimum length and
// nothing expires.
package providertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// Wire names the wire format a fake server speaks.
type Wire string

// The wire formats the fakes speak.
const (
	WireAnthropic Wire = "anthropic"
	WireOpenAI    Wire = "openai"
	// WireResponses is the OpenAI Responses API (POST /v1/responses).
	WireResponses Wire = "responses"
)

// Server is a fake model server on loopback. Its methods are safe for
// concurrent use.
type Server struct {
	// URL is the server's root, e.g. http://127.0.0.1:41234.
	URL string

	t    testing.TB
	wire Wire
	srv  *httptest.Server
	done chan struct{}

	mu       sync.Mutex
	rules    []*rule
	fallback func(*Request) (Reply, bool)
	reqs     []*Request
	misses   []string
	closed   bool
	window   int64
	// cache holds the token counts of the prompt prefixes written to the
	// simulated prompt cache, by prefix key (Anthropic only).
	cache map[string]int64
	// open holds the response bodies of an in-memory server that the
	// client has not closed yet.
	open map[*memBody]bool
}

type rule struct {
	match   Match
	replies []Reply
}

// NewAnthropic starts a fake Anthropic Messages API. It answers
// POST .../v1/messages (any query, so ?beta=true too), streaming or not, and
// POST .../v1/messages/count_tokens with a rough count. The server stops
// when the test ends.
func NewAnthropic(t testing.TB) *Server { return NewServer(t, WireAnthropic) }

// NewOpenAI starts a fake OpenAI-compatible Chat Completions API. It answers
// POST requests whose path ends in /chat/completions, streaming or not. The
// server stops when the test ends.
func NewOpenAI(t testing.TB) *Server { return NewServer(t, WireOpenAI) }

// NewResponses starts a fake OpenAI Responses API, the API the Codex CLI
// speaks (wire_api = "responses"). It answers POST requests whose path
// ends in /responses (/v1/responses from a client given BaseURL),
// streaming or not. The server stops when the test ends.
//
// A request's input items become Messages: message items by role
// (system and developer messages, and the instructions, make System),
// function_call and custom_tool_call items tool_use blocks of the
// assistant, their outputs tool_result blocks of the user; other items
// (reasoning, ...) a block of their type. Its function and custom tools
// are its Tools, the functions of a namespace named namespace + "__" +
// name (see ResponsesTool); a ToolUse block answers with a function_call
// item (a custom_tool_call for a custom tool) whose call_id is the
// block's ID.
func NewResponses(t testing.TB) *Server { return NewServer(t, WireResponses) }

// NewServer starts a fake server of wire on loopback. The server stops
// when the test ends.
func NewServer(t testing.TB, wire Wire) *Server {
	t.Helper()
	s := newServer(t, wire)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// NewInMemory starts a fake server of wire that listens on no socket: it
// answers only the requests sent with its Client, in memory, and so works
// inside a testing/synctest bubble, where a Reply's Delay, Hold and Stall
// pass in the bubble's time. Its URL is http://providertest.invalid. The
// server stops when the test ends, and fails the test if a response body
// was never closed.
func NewInMemory(t testing.TB, wire Wire) *Server {
	t.Helper()
	s := newServer(t, wire)
	s.URL = memURL
	return s
}

func newServer(t testing.TB, wire Wire) *Server {
	s := &Server{t: t, wire: wire, done: make(chan struct{}), cache: map[string]int64{}, open: map[*memBody]bool{}}
	t.Cleanup(func() {
		s.Close()
		s.mu.Lock()
		misses := s.misses
		for b := range s.open {
			misses = append(misses, "a response body of "+b.path+" was never closed")
		}
		s.mu.Unlock()
		for _, m := range misses {
			t.Errorf("providertest: %s", m)
		}
	})
	return s
}

// BaseURL is the base URL an adapter for this server's wire format takes:
// the root for Anthropic (the client appends /v1/messages), root + "/v1"
// for OpenAI (the client appends /chat/completions) and for Responses
// (the client appends /responses; Codex's base_url).
func (s *Server) BaseURL() string {
	if s.wire == WireOpenAI || s.wire == WireResponses {
		return s.URL + "/v1"
	}
	return s.URL
}

// Close stops the server. Handlers waiting on a Reply's Delay or Hold give
// up. It is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	open := slices.Collect(maps.Keys(s.open))
	s.mu.Unlock()
	for _, b := range open {
		b.breakBody()
	}
	if s.srv != nil {
		s.srv.CloseClientConnections()
		s.srv.Close()
	}
}

// Client returns a client that reaches the server: over loopback, or in
// memory for a server made with NewInMemory.
func (s *Server) Client() *http.Client {
	if s.srv != nil {
		return s.srv.Client()
	}
	return &http.Client{Transport: memTransport{s}}
}

// On adds a rule: requests that m accepts get replies, one each, in order.
// Once its replies are used up the rule no longer answers.
func (s *Server) On(m Match, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, &rule{match: m, replies: replies})
}

// SetContextWindow sets the model's context window in tokens: a request
// whose prompt, counted by PromptTokens, is larger is answered with HTTP
// 400 and the API's own error body, without consulting the rules (no
// scripted reply is used up). It is still recorded in Requests, with
// OverWindow set. Zero or less removes the window.
func (s *Server) SetContextWindow(tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window = int64(max(0, tokens))
}

// PromptTokens is the fakes' count of the tokens of a request's prompt:
// chat.EstimateTokens of its messages plus a token per four bytes of the
// system prompt and of the tools' JSON (as []chat.ToolSpec, so the count
// does not depend on the wire format).
func PromptTokens(r *Request) int64 {
	return chat.EstimateTokens(r.Messages) + int64(len(r.System)/4) + toolTokens(r.Tools)
}

func toolTokens(tools []chat.ToolSpec) int64 {
	if len(tools) == 0 {
		return 0
	}
	return int64(len(mustJSON(tools)) / 4)
}

// Push queues replies for any request, in order: On(Any(), replies...).
func (s *Server) Push(replies ...Reply) { s.On(Any(), replies...) }

// Fallback sets a function consulted when no rule answers a request. It
// returns the reply and true, or false to leave the request unanswered
// (which fails the test).
func (s *Server) Fallback(fn func(*Request) (Reply, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallback = fn
}

// Requests returns the model requests received so far, in order of arrival.
// Token-count requests are not included.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.reqs...)
}

// Request returns the n-th model request received (from 1), or nil.
func (s *Server) Request(n int) *Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 1 || n > len(s.reqs) {
		return nil
	}
	return s.reqs[n-1]
}

// Pending reports how many scripted replies have not been used yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rules {
		n += len(r.replies)
	}
	return n
}

// Match selects the requests a rule answers.
type Match func(*Request) bool

// Any accepts every request.
func Any() Match { return func(*Request) bool { return true } }

// Nth accepts the n-th model request the server receives (from 1).
func Nth(n int) Match { return func(r *Request) bool { return r.N == n } }

// LastUserContains accepts requests whose last user message holds sub in a
// text block or in a tool result's content.
func LastUserContains(sub string) Match {
	return func(r *Request) bool { return strings.Contains(r.LastUserText(), sub) }
}

// PurposeIs accepts requests whose X-Vigil-Purpose header is purpose
// (provider.PurposeCompact for a compaction; "" for a normal round).
func PurposeIs(purpose string) Match { return func(r *Request) bool { return r.Purpose == purpose } }

// HeaderContains accepts requests whose header key holds sub.
func HeaderContains(key, sub string) Match {
	return func(r *Request) bool { return strings.Contains(r.Header.Get(key), sub) }
}

// All accepts requests every one of ms accepts.
func All(ms ...Match) Match {
	return func(r *Request) bool {
		for _, m := range ms {
			if !m(r) {
				return false
			}
		}
		return true
	}
}

// Request is one model request as the fake received it.
type Request struct {
	// N numbers the model requests a server receives, from 1.
	N int
	// At is when the server received the request: the bubble's time for
	// a server inside a testing/synctest bubble.
	At     time.Time
	Method string
	Path   string
	Query  string
	Header http.Header
	// Body is the raw request body.
	Body []byte

	// The request in vigil's terms, parsed from the wire format.
	// Consecutive same-role messages are merged; OpenAI tool messages
	// (Responses: function_call_output items) become tool_result blocks
	// of a user message.
	Model     string
	System    string
	Messages  []chat.Message
	Tools     []chat.ToolSpec
	MaxTokens int
	Stream    bool
	// IncludeUsage reports stream_options.include_usage (OpenAI).
	IncludeUsage bool
	// Instructions is the request's instructions (Responses), also the
	// start of System.
	Instructions string
	// ResponsesTools are the request's tools as the Responses API lists
	// them, all types, namespaces flattened (Responses only).
	ResponsesTools []ResponsesTool
	// Purpose is the X-Vigil-Purpose header: "compact" for a compaction
	// request, empty for a normal round.
	Purpose string
	// Tokens is the prompt's size as PromptTokens counts it.
	Tokens int64
	// OverWindow reports that the prompt was over the server's context
	// window and was refused (see SetContextWindow).
	OverWindow bool
	// CacheMarks are the cache_control marks the request carried, in the
	// order of the prompt: tools, system, messages (Anthropic only).
	CacheMarks []CacheMark

	prefixes []cachePrefix
}

// CacheMark is a block of an Anthropic request marked with cache_control:
// the end of a prompt prefix to cache.
type CacheMark struct {
	// Part is where the block is: "tools", "system" or "messages".
	Part string
	// Index is the block's position in the request body, from 0: in the
	// tools array, in the system array, or of its message in the messages
	// array (before same-role messages are merged).
	Index int
	// Block is the position of the block in its message's content, for
	// Part "messages".
	Block int
	// Type is the cache_control type ("ephemeral"); TTL its ttl, empty
	// when the request sent none.
	Type, TTL string
	// Tokens is the size of the prefix that ends with the block, counted
	// as PromptTokens counts: the prefix that ends with the last block of
	// the last message is the whole prompt.
	Tokens int64
}

// cachePrefix is a prompt prefix the request asks to cache.
type cachePrefix struct {
	key    string
	tokens int64
}

// LastUser returns the last user message, or a zero Message.
func (r *Request) LastUser() chat.Message {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == chat.RoleUser {
			return r.Messages[i]
		}
	}
	return chat.Message{}
}

// LastUserText joins the text blocks and tool result contents of the last
// user message.
func (r *Request) LastUserText() string {
	var parts []string
	for _, b := range r.LastUser().Content {
		switch b.Type {
		case chat.BlockText:
			parts = append(parts, b.Text)
		case chat.BlockToolResult:
			parts = append(parts, b.Content)
		}
	}
	return strings.Join(parts, "\n")
}

// JSON decodes the raw body into generic JSON values, for assertions on the
// exact wire shape.
func (r *Request) JSON() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		return nil
	}
	return m
}

// Reply is a scripted answer to one request: a successful answer made of
// Blocks, an HTTP error, or a stream that fails part-way.
type Reply struct {
	// Blocks is the answer's content: text and tool_use blocks.
	Blocks []chat.Block
	// StopReason defaults to tool_use when Blocks hold a tool call and
	// end_turn otherwise.
	StopReason chat.StopReason
	Usage      chat.Usage
	// Model is the model name in the answer; empty echoes the request's.
	Model string

	// Status, when 400 or more, answers with that HTTP status and an error
	// body made from Error (or from the status when Error is nil).
	Status int
	// Header holds extra response headers, e.g. retry-after.
	Header http.Header
	// Error is the error body of a Status answer. With a successful status
	// it is sent as an SSE error event after FaultAfter events instead, or
	// as the JSON body when JSON is set.
	Error *APIError
	// Body, with a Status answer, is sent as text/html in place of the
	// error body: the error page of a proxy or a load balancer.
	Body string
	// JSON answers with a JSON body, as if the request had not asked for
	// a stream: a server or proxy that ignores "stream": true. With Error,
	// the body is the error object, with a successful status.
	JSON bool

	// Events replaces the generated SSE events, e.g. to send malformed
	// frames. For OpenAI, an Event's Name is usually empty.
	Events []Event
	// FaultAfter is how many events go out before a fault (Error with a
	// successful status, Cut or Abort) or a Stall: zero means half of
	// them, a negative number none.
	FaultAfter int
	// Cut ends the stream cleanly after FaultAfter events, before its final
	// event.
	Cut bool
	// Abort drops the connection after FaultAfter events, without ending
	// the chunked body.
	Abort bool
	// Stall, when not nil, pauses the stream after FaultAfter events until
	// it is closed (or the client goes away); then the stream goes on.
	Stall <-chan struct{}

	// Delay holds the response headers back this long.
	Delay time.Duration
	// Hold, when not nil, holds the response headers back until it is
	// closed (or the client goes away).
	Hold <-chan struct{}
	// ChunkSize is how many characters of text or tool input go in one
	// delta; zero means 8.
	ChunkSize int
}

// APIError is an error body: {"type":"error","error":{"type","message"}}
// for Anthropic, {"error":{"message","type","param","code"}} for OpenAI
// and Responses. Sent mid-stream, it is an error event for Anthropic, a
// data line holding the error body for OpenAI, and a response.failed
// event whose response.error is {"code","message","type","param"} (code
// defaulting to the type) for Responses.
type APIError struct {
	Type    string
	Message string
	// Code is OpenAI's error code; empty sends null.
	Code string
	// Param is OpenAI's param, the request field at fault; empty sends
	// null.
	Param string
}

// Event is one server-sent event.
type Event struct {
	// Name is the event: field; empty sends none.
	Name string
	// Data is the data: field, on one line.
	Data string
}

// Answer returns a successful reply with blocks.
func Answer(blocks ...chat.Block) Reply { return Reply{Blocks: blocks} }

// TextAnswer returns a successful reply holding one text block.
func TextAnswer(text string) Reply { return Answer(chat.Text(text)) }

// ToolUse returns a tool_use block. input is its JSON arguments, sent
// as-is, so a test can send malformed JSON.
func ToolUse(id, name, input string) chat.Block {
	return chat.Block{Type: chat.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(input)}
}

// ErrorReply returns an HTTP error reply. errType may be empty to use the
// one the status implies.
func ErrorReply(status int, errType, message string) Reply {
	if errType == "" {
		errType = errorTypeFor(status)
	}
	return Reply{Status: status, Error: &APIError{Type: errType, Message: message}}
}

// Overloaded returns a 529 overloaded_error reply; retryAfter, when not
// empty, is sent as the retry-after header.
func Overloaded(retryAfter string) Reply {
	r := ErrorReply(529, "overloaded_error", "Overloaded")
	if retryAfter != "" {
		r.Header = http.Header{"Retry-After": {retryAfter}}
	}
	return r
}

// RateLimited returns a 429 rate_limit_error reply with a retry-after
// header when retryAfter is not empty.
func RateLimited(retryAfter string) Reply {
	r := ErrorReply(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
	if retryAfter != "" {
		r.Header = http.Header{"Retry-After": {retryAfter}}
	}
	return r
}

func errorTypeFor(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	switch {
	case r.Method != http.MethodPost:
		s.writeError(w, http.StatusMethodNotAllowed, &APIError{Type: "invalid_request_error", Message: "method not allowed"})
		return
	case s.wire == WireAnthropic && strings.HasSuffix(r.URL.Path, "/v1/messages/count_tokens"):
		n := int64(len(body)/4 + 1)
		if req := (&Request{Body: body}); parseAnthropic(req) == nil {
			n = req.Tokens
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"input_tokens":%d}`, n)
		return
	case s.wire == WireAnthropic && strings.HasSuffix(r.URL.Path, "/v1/messages"):
	case s.wire == WireOpenAI && strings.HasSuffix(r.URL.Path, "/chat/completions"):
	case s.wire == WireResponses && strings.HasSuffix(r.URL.Path, "/responses"):
	default:
		s.writeError(w, http.StatusNotFound, &APIError{Type: "not_found_error", Message: "no route for " + r.URL.Path})
		return
	}

	req := &Request{At: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body,
		Purpose: r.Header.Get("X-Vigil-Purpose")}
	var perr error
	switch s.wire {
	case WireAnthropic:
		perr = parseAnthropic(req)
	case WireResponses:
		perr = parseResponses(req)
	default:
		perr = parseOpenAI(req)
	}

	s.mu.Lock()
	req.N = len(s.reqs) + 1
	s.reqs = append(s.reqs, req)
	if window := s.window; perr == nil && window > 0 && req.Tokens > window {
		req.OverWindow = true
		s.mu.Unlock()
		s.writeError(w, http.StatusBadRequest, s.overWindow(req.Tokens, window))
		return
	}
	reply, ok := s.pick(req)
	if ok && perr == nil && reply.Status < 400 {
		reply.Usage = s.usage(req, reply)
	}
	if perr != nil {
		ok = false
		s.misses = append(s.misses, fmt.Sprintf("request %d: unparseable body: %v", req.N, perr))
	} else if !ok {
		s.misses = append(s.misses, fmt.Sprintf("no scripted reply for request %d (last user message %q)", req.N, req.LastUserText()))
	}
	s.mu.Unlock()
	if !ok {
		s.writeError(w, http.StatusBadRequest, &APIError{Type: "invalid_request_error", Message: fmt.Sprintf("providertest: no scripted reply for request %d", req.N)})
		return
	}

	if !s.wait(r, reply) {
		return
	}
	for k, vs := range reply.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if reply.Status >= 400 && reply.Body != "" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(reply.Status)
		io.WriteString(w, reply.Body)
		return
	}
	if reply.Status >= 400 {
		e := reply.Error
		if e == nil {
			e = &APIError{Type: errorTypeFor(reply.Status), Message: http.StatusText(reply.Status)}
		}
		s.writeError(w, reply.Status, e)
		return
	}
	if reply.JSON && reply.Error != nil {
		s.writeError(w, http.StatusOK, reply.Error)
		return
	}
	if !req.Stream || reply.JSON {
		if reply.Cut || reply.Abort {
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Content-Type", "application/json")
		switch s.wire {
		case WireAnthropic:
			w.Write(anthropicMessage(req, reply))
		case WireResponses:
			w.Write(responsesJSON(req, reply))
		default:
			w.Write(openAICompletion(req, reply))
		}
		return
	}
	s.stream(w, r, req, reply, s.events(req, reply))
}

// events are the SSE events that stream reply to req.
func (s *Server) events(req *Request, reply Reply) []Event {
	switch {
	case reply.Events != nil:
		return reply.Events
	case s.wire == WireAnthropic:
		return anthropicEvents(req, reply)
	case s.wire == WireResponses:
		return responsesEvents(req, reply)
	default:
		return openAIEvents(req, reply)
	}
}

// overWindow is the API's error for a prompt of tokens over a window.
func (s *Server) overWindow(tokens, window int64) *APIError {
	if s.wire == WireAnthropic {
		return &APIError{Type: "invalid_request_error", Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, window)}
	}
	if s.wire == WireResponses {
		return &APIError{
			Type:    "invalid_request_error",
			Message: "Your input exceeds the context window of this model. Please adjust your input and try again.",
			Param:   "input",
			Code:    "context_length_exceeded",
		}
	}
	return &APIError{
		Type:    "invalid_request_error",
		Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, tokens),
		Param:   "messages",
		Code:    "context_length_exceeded",
	}
}

// usage is the usage a successful reply reports: its own when it scripts
// one, else the counted one. The prompt cache takes the request's prefixes
// either way. s.mu is held.
func (s *Server) usage(req *Request, reply Reply) chat.Usage {
	var read, longest int64
	for _, p := range req.prefixes {
		if n, ok := s.cache[p.key]; ok {
			read = max(read, n)
		}
		longest = max(longest, p.tokens)
	}
	for _, p := range req.prefixes {
		s.cache[p.key] = p.tokens
	}
	if reply.Usage != (chat.Usage{}) {
		return reply.Usage
	}
	write := max(0, longest-read)
	return chat.Usage{
		InputTokens:      max(0, req.Tokens-read-write),
		CacheReadTokens:  read,
		CacheWriteTokens: write,
		OutputTokens:     chat.EstimateTokens([]chat.Message{{Role: chat.RoleAssistant, Content: reply.Blocks}}),
	}
}

// pick finds the reply for req. s.mu is held.
func (s *Server) pick(req *Request) (Reply, bool) {
	for _, r := range s.rules {
		if len(r.replies) > 0 && r.match(req) {
			reply := r.replies[0]
			r.replies = r.replies[1:]
			return reply, true
		}
	}
	if s.fallback != nil {
		return s.fallback(req)
	}
	return Reply{}, false
}

// wait sits out the reply's Delay and Hold. It reports false when the
// client or the server went away first.
func (s *Server) wait(r *http.Request, reply Reply) bool {
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false
		case <-s.done:
			return false
		}
	}
	if reply.Hold != nil {
		select {
		case <-reply.Hold:
		case <-r.Context().Done():
			return false
		case <-s.done:
			return false
		}
	}
	return true
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, req *Request, reply Reply, events []Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set(s.requestIDHeader(), "req_fake")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)

	fault := reply.Cut || reply.Abort || reply.Error != nil
	n := len(events)
	if fault || reply.Stall != nil {
		switch {
		case reply.FaultAfter < 0:
			n = 0
		case reply.FaultAfter == 0:
			n = len(events) / 2
		case reply.FaultAfter < len(events):
			n = reply.FaultAfter
		}
	}
	for _, ev := range events[:n] {
		writeEvent(w, ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if reply.Stall != nil && !fault {
		select {
		case <-reply.Stall:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
		for _, ev := range events[n:] {
			writeEvent(w, ev)
		}
	}
	switch {
	case reply.Abort:
		panic(http.ErrAbortHandler)
	case reply.Error != nil:
		writeEvent(w, s.errorEvent(req, reply.Error, n))
	}
	if flusher != nil {
		flusher.Flush()
	}
}

// requestIDHeader is the response header that carries the request id:
// request-id from Anthropic, x-request-id from OpenAI (both of its APIs).
func (s *Server) requestIDHeader() string {
	if s.wire == WireOpenAI {
		return "x-request-id"
	}
	return "request-id"
}

func writeEvent(w io.Writer, ev Event) {
	var b bytes.Buffer
	if ev.Name != "" {
		b.WriteString("event: " + ev.Name + "\n")
	}
	b.WriteString("data: " + ev.Data + "\n\n")
	w.Write(b.Bytes())
}

// errorEvent is the event that ends a stream of req with e, after n
// events.
func (s *Server) errorEvent(req *Request, e *APIError, n int) Event {
	switch s.wire {
	case WireAnthropic:
		return Event{Name: "error", Data: string(anthropicErrorBody(e))}
	case WireResponses:
		return responsesFailed(req, e, n)
	}
	return Event{Data: string(openAIErrorBody(e))}
}

func (s *Server) writeError(w http.ResponseWriter, status int, e *APIError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(s.requestIDHeader(), "req_fake")
	w.WriteHeader(status)
	if s.wire == WireAnthropic {
		w.Write(anthropicErrorBody(e))
	} else {
		w.Write(openAIErrorBody(e))
	}
}

// stopReason returns the reply's stop reason or the one its blocks imply.
func (r Reply) stopReason() chat.StopReason {
	if r.StopReason != "" {
		return r.StopReason
	}
	for _, b := range r.Blocks {
		if b.Type == chat.BlockToolUse {
			return chat.StopToolUse
		}
	}
	return chat.StopEndTurn
}

func (r Reply) chunk() int {
	if r.ChunkSize > 0 {
		return r.ChunkSize
	}
	return 8
}

// chunks splits s into pieces of at most n runes; an empty s gives none.
func chunks(s string, n int) []string {
	var out []string
	rs := []rune(s)
	for len(rs) > 0 {
		k := min(n, len(rs))
		out = append(out, string(rs[:k]))
		rs = rs[k:]
	}
	return out
}

// mustJSON encodes v as the APIs do: compact, with <, > and & as they are.
func mustJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// mergeRoles merges consecutive messages of the same role.
func mergeRoles(msgs []chat.Message) []chat.Message {
	var out []chat.Message
	for _, m := range msgs {
		if n := len(out); n > 0 && out[n-1].Role == m.Role {
			out[n-1].Content = append(out[n-1].Content, m.Content...)
			continue
		}
		out = append(out, chat.Message{Role: m.Role, Content: append([]chat.Block(nil), m.Content...)})
	}
	return out
}
