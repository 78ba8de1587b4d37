// Package script is a provider that answers from a scenario file instead of
// a model: for tests, demos and reproducing incidents without an API key.
//
// A scenario says, per agent, what the "model" answers at each turn:
//
//	name: coordinator
//	agents:
//	  main:                     # the main agent; subagents by their name
//	    turns:                  # used in order, one per model call
//	      - say: "Starting the workers."
//	        tools:
//	          - Agent: {name: w1, prompt: "Part one.", run_in_background: true}
//	      - say: "Waiting for the workers."
//	    on:                     # used instead when the newest input is of a kind
//	      notification:
//	        - say: "{{.Notification.Agent}} replied: {{.Notification.Result}}"
//	  "*":                      # any agent without its own entry
//	    turns:
//	      - delay: 2s           # wait before answering: a slow final round
//	        say: "done: {{.Input}}"
//
// A turn has say (text), tools (a list of one-key maps: tool name to its
// input), delay (how long the answer takes: its text streams over it as
// text deltas of a few words each, and the tools and the end come after
// the whole delay), and fail ({times: N, kind: overloaded|server|context|auth}:
// the first N requests for it fail so). Strings are Go templates over the request: .Agent,
// .Input (the newest input's text), .Kind (prompt, spawn, message,
// notification, timer, continuation or tool_result), .Notification (.Task,
// .Agent, .Status, .Result, .Key) and .Message (.ID, .From, .Text).
//
// The newest input's kind selects a list of turns: on.<kind> when the agent
// has one, else turns. A request that carries only tool results continues
// the list of the turn that called the tools, and when that list is used
// up falls back to on.tool_result if the agent has one, else to turns. An
// on list used up by new inputs repeats its last turn; when turns is used
// up the agent ends its turn with a note.
//
// Which turn answers is computed from the conversation alone, so a call
// that is issued again after a restart gets the same answer. For the same
// reason a turn whose call was cancelled before it answered (an
// interrupt, a now-priority item) is not used up: the conversation holds
// no answer of it, so the next call gets that turn.
//
// # Context windows and compaction
//
// context_window (tokens), on the scenario or on an agent (the agent's
// wins), makes the "model" refuse a prompt that is too large, as the
// Anthropic API does: HTTP 400 "prompt is too long: N tokens > M maximum",
// which provider.FailureOf classifies as core.FailContext. The prompt is
// counted as chat.EstimateTokens of the messages plus a token per four
// bytes of the system prompt; every answer reports that count as its input
// usage, so a caller can watch the context grow. The provider implements
// provider.Windowed: ContextWindow reports the scenario's window. An
// agent's window is enforced but not reported: it plays a model whose
// window is smaller than the caller was told, to exercise recovery from
// the refusal.
//
//	name: long
//	context_window: 8000        # the window the caller is told
//	agents:
//	  main:
//	    context_window: 4000    # smaller than the caller thinks
//	    turns: [...]
//
// A request with Purpose provider.PurposeCompact (a compaction: summarise
// the conversation) uses no turn of the script, whatever the agent: it is
// answered at once, with end_turn, by a deterministic summary of the
// request's messages — "Summary of the earlier conversation (N messages): "
// and the first line of each text block, about 300 tokens at most — and a
// last line <script-state>{...}</script-state> that records how many turns
// of each list the summarised conversation used. A later request whose
// messages (or system prompt) hold that line continues the script from
// there, so replacing older turns by the summary neither replays nor skips
// a turn, provided the cut falls at the start of a round (the older part
// ends with an answered turn). The window applies to compaction requests
// too.
package script

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
)

// Scenario is a parsed scenario file.
type Scenario struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description"`
	// ContextWindow is the context window of every agent's "model" in
	// tokens; zero means none (no prompt is too long).
	ContextWindow int               `yaml:"context_window" json:"context_window"`
	Agents        map[string]*Agent `yaml:"agents" json:"agents"`
}

// Agent is the script of one agent.
type Agent struct {
	// Turns answer in order.
	Turns []Turn `yaml:"turns" json:"turns"`
	// On holds turns used, in order, when the newest input is of a kind:
	// prompt, spawn, message, notification, timer or continuation, and
	// tool_result for tool results once the list that called the tools is
	// used up. When a kind's list is used up its last turn repeats.
	On map[string][]Turn `yaml:"on" json:"on"`
	// ContextWindow, when not zero, replaces the scenario's context window
	// for this agent.
	ContextWindow int `yaml:"context_window" json:"context_window"`
}

// Turn is one scripted model answer.
type Turn struct {
	Say   string           `yaml:"say" json:"say"`
	Tools []map[string]any `yaml:"tools" json:"tools"`
	Delay Duration         `yaml:"delay" json:"delay"`
	// Fail makes the first attempts at this turn fail, as a provider
	// would after its own retries.
	Fail *Fail `yaml:"fail" json:"fail"`
}

// Fail is a scripted failure: the first Times requests that would get a
// turn (for the same conversation) fail with Kind — overloaded, server,
// context (over the context window) or auth — before it answers. The
// count lives in the provider, so a new process fails anew.
type Fail struct {
	Times int    `yaml:"times" json:"times"`
	Kind  string `yaml:"kind" json:"kind"`
}

// failKinds maps a scripted failure kind to the provider error it stands
// for.
var failKinds = map[string]struct {
	kind provider.ErrorKind
	msg  string
}{
	"overloaded": {provider.ErrOverloaded, "overloaded_error: Overloaded (scripted)"},
	"server":     {provider.ErrServer, "api_error: Internal server error (scripted)"},
	"context":    {provider.ErrBadRequest, "invalid_request_error: prompt is too long (scripted)"},
	"auth":       {provider.ErrAuth, "authentication_error: invalid x-api-key (scripted)"},
}

// Duration is a time.Duration written as "1.5s" in a scenario.
type Duration time.Duration

// UnmarshalYAML parses a duration such as "250ms".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: delay %q: %w", n.Line, n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON parses a duration such as "250ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

var kinds = map[string]bool{"prompt": true, "spawn": true, "message": true, "notification": true, "timer": true, "continuation": true, "tool_result": true}

// Load reads and validates a scenario file (YAML or JSON).
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	sc, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return sc, nil
}

// Parse parses and validates a scenario.
func Parse(b []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if len(sc.Agents) == 0 {
		return nil, fmt.Errorf("no agents: a scenario needs at least agents.main")
	}
	if sc.ContextWindow < 0 {
		return nil, fmt.Errorf("context_window: %d is negative", sc.ContextWindow)
	}
	for name, a := range sc.Agents {
		if a == nil {
			return nil, fmt.Errorf("agent %s: empty", name)
		}
		if a.ContextWindow < 0 {
			return nil, fmt.Errorf("agent %s: context_window: %d is negative", name, a.ContextWindow)
		}
		check := func(where string, ts []Turn) error {
			for i, t := range ts {
				for _, m := range t.Tools {
					if len(m) != 1 {
						return fmt.Errorf("agent %s %s turn %d: each tool is a map with one key, the tool's name", name, where, i+1)
					}
				}
				if f := t.Fail; f != nil {
					if _, ok := failKinds[f.Kind]; !ok || f.Times < 1 {
						return fmt.Errorf("agent %s %s turn %d: fail needs times >= 1 and kind overloaded, server, context or auth", name, where, i+1)
					}
				}
				if err := parseTemplates(t); err != nil {
					return fmt.Errorf("agent %s %s turn %d: %w", name, where, i+1, err)
				}
			}
			return nil
		}
		if err := check("turns", a.Turns); err != nil {
			return nil, err
		}
		for k, ts := range a.On {
			if !kinds[k] {
				return nil, fmt.Errorf("agent %s: unknown input kind %q under on (want prompt, spawn, message, notification, timer, continuation or tool_result)", name, k)
			}
			if err := check("on."+k, ts); err != nil {
				return nil, err
			}
		}
	}
	return &sc, nil
}

func parseTemplates(t Turn) error {
	if _, err := template.New("say").Parse(t.Say); err != nil {
		return err
	}
	for _, m := range t.Tools {
		if _, err := renderValue(m, Data{}); err != nil && strings.Contains(err.Error(), "parse") {
			return err
		}
	}
	return nil
}

// renderValue renders the templates in every string of a decoded value.
func renderValue(v any, d Data) (any, error) {
	switch v := v.(type) {
	case string:
		return render(v, d)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			r, err := renderValue(x, d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			r, err := renderValue(x, d)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return v, nil
	}
}

// Provider answers model calls from a scenario.
type Provider struct {
	sc     *Scenario
	logger *slog.Logger
	sleep  func(ctx context.Context, d time.Duration) error
	mu     sync.Mutex
	// failed counts the scripted failures served, by conversation.
	failed map[string]int
}

// Options configures a Provider; nil means defaults.
type Options struct {
	Logger *slog.Logger
	// Sleep waits out a turn's delay; the default uses a timer and honours
	// ctx.
	Sleep func(ctx context.Context, d time.Duration) error
}

// New returns a provider playing sc.
func New(sc *Scenario, opts *Options) *Provider {
	p := &Provider{sc: sc, logger: slog.New(slog.DiscardHandler), sleep: sleepCtx, failed: map[string]int{}}
	if opts != nil {
		if opts.Logger != nil {
			p.logger = opts.Logger
		}
		if opts.Sleep != nil {
			p.sleep = opts.Sleep
		}
	}
	return p
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ provider.Windowed = (*Provider)(nil)

// Name implements provider.Provider.
func (p *Provider) Name() string { return "script" }

// ContextWindow implements provider.Windowed: the scenario's
// context_window, zero when it sets none. model is not consulted: the
// scripted model is the same whatever its name. An agent's own
// context_window is enforced but not reported, so a scenario can play a
// model whose window is smaller than the caller was told.
func (p *Provider) ContextWindow(model string) int { return p.sc.ContextWindow }

// agent is the script of the agent named name: its own entry, else "*",
// else nil.
func (p *Provider) agent(name string) *Agent {
	if a := p.sc.Agents[name]; a != nil {
		return a
	}
	return p.sc.Agents["*"]
}

// window is the context window that applies to agent's requests, zero for
// none.
func (p *Provider) window(agent string) int {
	if a := p.agent(agent); a != nil && a.ContextWindow > 0 {
		return a.ContextWindow
	}
	return p.sc.ContextWindow
}

// promptTokens is the scripted model's count of a request's prompt:
// chat.EstimateTokens of its messages plus a token per four bytes of the
// system prompt. Tools are not counted.
func promptTokens(req *provider.Request) int64 {
	return chat.EstimateTokens(req.Messages) + int64(len(req.System)/4)
}

// Stream implements provider.Provider.
func (p *Provider) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	return func(yield func(provider.Event, error) bool) {
		resp, delay, err := p.Answer(req)
		if err != nil {
			yield(provider.Event{}, err)
			return
		}
		// The text streams in word groups over the turn's delay: each
		// group after its share of it, the tools and the end after the
		// whole.
		var parts []string
		for _, b := range resp.Content {
			if b.Type == chat.BlockText {
				parts = append(parts, chunks(b.Text)...)
			}
		}
		pause := delay
		if len(parts) > 0 {
			pause = delay / time.Duration(len(parts))
		}
		wait := func(d time.Duration) bool {
			if err := p.sleep(ctx, d); err != nil {
				yield(provider.Event{}, &provider.Error{Provider: "script", Kind: provider.ErrCanceled, Message: err.Error()})
				return false
			}
			return true
		}
		if len(parts) == 0 && !wait(delay) {
			return
		}
		waited := time.Duration(0)
		for _, b := range resp.Content {
			if b.Type == chat.BlockText {
				for _, c := range chunks(b.Text) {
					if !wait(pause) {
						return
					}
					waited += pause
					if !yield(provider.Event{Type: provider.EventText, Text: c}, nil) {
						return
					}
				}
			} else {
				b.Input = append(json.RawMessage(nil), b.Input...) // the event's block is the caller's
				if !yield(provider.Event{Type: provider.EventToolUse, Block: &b}, nil) {
					return
				}
			}
		}
		if rest := delay - waited; rest > 0 && !wait(rest) {
			return
		}
		yield(provider.Event{Type: provider.EventDone, Response: resp}, nil)
	}
}

// chunkWords is how many words a streamed text delta holds at most.
const chunkWords = 3

// chunks cuts text into the deltas the scripted model streams it as:
// groups of up to three words, each with the spaces after it, so that
// they join to text again. Text without a word is one chunk; empty text
// none.
func chunks(text string) []string {
	var out []string
	start, words, inWord := 0, 0, false
	for i, r := range text {
		space := unicode.IsSpace(r)
		switch {
		case !space && !inWord:
			if words == chunkWords {
				out = append(out, text[start:i])
				start, words = i, 0
			}
			words++
			inWord = true
		case space:
			inWord = false
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// Answer computes the scripted answer to req and the delay before it. A
// prompt over the agent's context window fails with the Anthropic API's
// error; a compaction request gets a summary (see the package doc).
func (p *Provider) Answer(req *provider.Request) (*chat.Response, time.Duration, error) {
	tokens := promptTokens(req)
	if w := p.window(req.AgentName); w > 0 && tokens > int64(w) {
		return nil, 0, &provider.Error{
			Provider: "script", Kind: provider.ErrBadRequest, Status: 400, Attempts: 1,
			Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, w),
		}
	}
	if req.Purpose == provider.PurposeCompact {
		return p.compact(req, tokens), 0, nil
	}
	a := p.agent(req.AgentName)
	if a == nil {
		p.logger.Warn("script has no entry for agent; answering with an end of turn", "agent", req.AgentName)
		return endTurn(fmt.Sprintf("(script %q has no entry for agent %s)", p.sc.Name, req.AgentName), tokens), 0, nil
	}
	turn, ok := pickTurn(a, req.System, req.Messages)
	if !ok {
		p.logger.Warn("script has no turn left for agent; answering with an end of turn", "agent", req.AgentName)
		return endTurn(fmt.Sprintf("(script %q: no turn left for %s)", p.sc.Name, req.AgentName), tokens), 0, nil
	}
	if f := turn.Fail; f != nil {
		if err := p.scriptedFailure(req, f); err != nil {
			return nil, 0, err
		}
	}
	data := templateData(req)
	text, err := render(turn.Say, data)
	if err != nil {
		return nil, 0, &provider.Error{Provider: "script", Kind: provider.ErrScript, Message: fmt.Sprintf("agent %s say: %v", req.AgentName, err)}
	}
	resp := &chat.Response{StopReason: chat.StopEndTurn, Usage: chat.Usage{InputTokens: tokens}}
	if text != "" {
		resp.Content = append(resp.Content, chat.Text(text))
	}
	for i, m := range turn.Tools {
		for name, input := range m {
			rendered, err := renderValue(input, data)
			if err != nil {
				return nil, 0, &provider.Error{Provider: "script", Kind: provider.ErrScript, Message: fmt.Sprintf("agent %s tool %s: %v", req.AgentName, name, err)}
			}
			if rendered == nil {
				rendered = map[string]any{}
			}
			b, err := json.Marshal(rendered)
			if err != nil {
				return nil, 0, &provider.Error{Provider: "script", Kind: provider.ErrScript, Message: fmt.Sprintf("agent %s tool %s: %v", req.AgentName, name, err)}
			}
			resp.Content = append(resp.Content, chat.Block{
				Type: chat.BlockToolUse, ID: fmt.Sprintf("toolu_%s_%d", req.CallID, i), Name: name, Input: b,
			})
			resp.StopReason = chat.StopToolUse
		}
	}
	resp.Usage.OutputTokens = outputTokens(resp.Content)
	return resp, time.Duration(turn.Delay), nil
}

// scriptedFailure counts one more request for the turn and returns its
// failure while the turn's count is not used up.
func (p *Provider) scriptedFailure(req *provider.Request, f *Fail) error {
	key := fmt.Sprintf("%s/%d", req.AgentName, len(req.Messages))
	if n := len(req.Messages); n > 0 {
		key += "/" + req.Messages[n-1].PlainText()
	}
	p.mu.Lock()
	p.failed[key]++
	n := p.failed[key]
	p.mu.Unlock()
	if n > f.Times {
		return nil
	}
	k := failKinds[f.Kind]
	return &provider.Error{Provider: "script", Kind: k.kind, Message: fmt.Sprintf("%s, %d of %d", k.msg, n, f.Times), Attempts: 1}
}

// endTurn is an answer of text alone to a prompt of tokens.
func endTurn(text string, tokens int64) *chat.Response {
	content := []chat.Block{chat.Text(text)}
	return &chat.Response{Content: content, StopReason: chat.StopEndTurn, Usage: chat.Usage{InputTokens: tokens, OutputTokens: outputTokens(content)}}
}

// outputTokens counts an answer's content as chat.EstimateTokens would in
// the next prompt.
func outputTokens(content []chat.Block) int64 {
	return chat.EstimateTokens([]chat.Message{{Role: chat.RoleAssistant, Content: content}})
}

// Limits of a compaction summary: the first line of a block gets at most
// summaryLineBytes, the whole summary at most summaryBytes (about 300
// tokens) before its state line.
const (
	summaryLineBytes = 160
	summaryBytes     = 1200
)

// compact answers a compaction request: a summary of the conversation and
// the script's place in it, computed from the conversation alone.
func (p *Provider) compact(req *provider.Request, tokens int64) *chat.Response {
	var lines []string
	for _, m := range req.Messages {
		for _, b := range m.Content {
			if b.Type != chat.BlockText {
				continue
			}
			line, _, _ := strings.Cut(strings.TrimSpace(b.Text), "\n")
			if line = provider.Truncate(line, summaryLineBytes); line != "" {
				lines = append(lines, string(m.Role)+": "+line)
			}
		}
	}
	text := fmt.Sprintf("Summary of the earlier conversation (%d messages): %s", len(req.Messages), strings.Join(lines, " / "))
	text = provider.Truncate(text, summaryBytes)
	st := place{Used: map[string]int{}}
	if a := p.agent(req.AgentName); a != nil {
		st, _, _ = walk(a, req.System, req.Messages)
	}
	b, err := json.Marshal(st)
	if err != nil {
		panic(err) // a map of strings to ints always encodes
	}
	text += "\n" + stateOpen + string(b) + stateClose
	return endTurn(text, tokens)
}

// The line of a compaction summary that records the script's place.
const (
	stateOpen  = "<script-state>"
	stateClose = "</script-state>"
)

// place is how far a conversation got through an agent's script: the
// turns it used from each list ("" for turns, else the on kind) and the
// list of its last answered turn.
type place struct {
	Used map[string]int `json:"used"`
	Last string         `json:"last"`
}

// placeIn reads the last state line in s.
func placeIn(s string) (place, bool) {
	i := strings.LastIndex(s, stateOpen)
	if i < 0 {
		return place{}, false
	}
	rest := s[i+len(stateOpen):]
	j := strings.Index(rest, stateClose)
	if j < 0 {
		return place{}, false
	}
	var st place
	if json.Unmarshal([]byte(rest[:j]), &st) != nil {
		return place{}, false
	}
	if st.Used == nil {
		st.Used = map[string]int{}
	}
	return st, true
}

// messagePlace reads a state line from m's text blocks.
func messagePlace(m chat.Message) (place, bool) {
	var st place
	found := false
	for _, b := range m.Content {
		if b.Type == chat.BlockText {
			if s, ok := placeIn(b.Text); ok {
				st, found = s, true
			}
		}
	}
	return st, found
}

// pickTurn replays the conversation to find which turns were used, then
// picks the one for the newest input.
//
// The newest input's kind selects a list: on.<kind> when the agent has it,
// else turns. A request that carries only tool results continues the list
// of the turn that called the tools while that list has turns left, and
// falls back to turns after. Lists are used in order; an on list used up by
// new inputs repeats its last turn.
func pickTurn(a *Agent, system string, msgs []chat.Message) (Turn, bool) {
	st, list, pending := walk(a, system, msgs)
	if !pending {
		list = st.choose(a, "prompt")
	}
	if list != "" {
		turns := a.On[list]
		return turns[min(st.Used[list], len(turns)-1)], true
	}
	if n := st.Used[""]; n < len(a.Turns) {
		return a.Turns[n], true
	}
	return Turn{}, false
}

// walk replays the conversation for agent a: every assistant message that
// answers an input uses one more turn of the list the input selected, and
// a state line left by a compaction summary (in system, or in a message,
// which is then not an input) restores the place the summarised
// conversation had reached. It returns the place after the last answered
// turn and, when the newest input is not answered yet, the list it
// selects.
func walk(a *Agent, system string, msgs []chat.Message) (st place, list string, pending bool) {
	st, _ = placeIn(system)
	if st.Used == nil {
		st.Used = map[string]int{}
	}
	for _, m := range msgs {
		if s, ok := messagePlace(m); ok {
			st, pending = s, false
			continue
		}
		if m.Role == chat.RoleUser {
			if k := kindOf(m); k != "" {
				list = st.choose(a, k)
				pending = true
			}
			continue
		}
		if pending {
			st.Used[list]++
			st.Last = list
			pending = false
		}
	}
	return st, list, pending
}

// choose names the list that answers an input of kind at this place.
func (st place) choose(a *Agent, kind string) string {
	if kind == "tool_result" {
		if st.Last != "" && st.Used[st.Last] < len(a.On[st.Last]) {
			return st.Last
		}
		if _, ok := a.On["tool_result"]; ok {
			return "tool_result"
		}
		return ""
	}
	return listFor(a, kind)
}

// kindOf classifies a user message by its newest input.
func kindOf(m chat.Message) string {
	kind := ""
	for _, b := range m.Content {
		switch {
		case b.Type == chat.BlockToolResult:
			if kind == "" {
				kind = "tool_result"
			}
		case b.Type == chat.BlockText:
			kind = textKind(b.Text)
		}
	}
	return kind
}

func textKind(s string) string {
	switch {
	case strings.HasPrefix(s, "<task-notification>"):
		return "notification"
	case strings.HasPrefix(s, "<agent-message"):
		return "message"
	case strings.HasPrefix(s, "<scheduled-wakeup"):
		return "timer"
	case strings.HasPrefix(s, "<continuation"):
		return "continuation"
	}
	return "prompt"
}

// Data is what a scenario's templates see.
type Data struct {
	Agent        string
	Call         string
	Kind         string
	Input        string
	Notification NotificationData
	Message      MessageData
}

// NotificationData is the newest notification of a request.
type NotificationData struct {
	Task, Key, Agent, Status, Result, Answered, ExitCode string
}

// MessageData is the newest message of a request.
type MessageData struct {
	ID, From, Text string
}

var msgRe = regexp.MustCompile(`(?s)<agent-message id="([^"]*)" from="([^"]*)"[^>]*>\n(.*)\n</agent-message>`)

// innerTag returns the text between <name> and </name> in s.
func innerTag(s, name string) string {
	open, closing := "<"+name+">", "</"+name+">"
	i := strings.Index(s, open)
	if i < 0 {
		return ""
	}
	rest := s[i+len(open):]
	j := strings.Index(rest, closing)
	if j < 0 {
		return ""
	}
	return rest[:j]
}

func templateData(req *provider.Request) Data {
	d := Data{Agent: req.AgentName, Call: req.CallID}
	if len(req.Messages) == 0 {
		return d
	}
	last := req.Messages[len(req.Messages)-1]
	d.Kind = kindOf(last)
	for _, b := range last.Content {
		switch {
		case b.Type == chat.BlockText:
			d.Input = b.Text
			switch textKind(b.Text) {
			case "notification":
				tags := map[string]string{}
				for _, name := range []string{"task-id", "key", "agent", "status", "result", "answered-messages", "exit-code"} {
					tags[name] = innerTag(b.Text, name)
				}
				agent := tags["agent"]
				if i := strings.Index(agent, " ("); i >= 0 {
					agent = agent[:i]
				}
				d.Notification = NotificationData{
					Task: tags["task-id"], Key: tags["key"], Agent: agent, Status: tags["status"],
					Result: tags["result"], Answered: tags["answered-messages"], ExitCode: tags["exit-code"],
				}
				d.Input = d.Notification.Result
			case "message":
				if m := msgRe.FindStringSubmatch(b.Text); m != nil {
					from := m[2]
					if i := strings.Index(from, " ("); i >= 0 {
						from = from[:i]
					}
					text := strings.TrimPrefix(m[3], core.NotUserInput) // vigil's frame
					d.Message = MessageData{ID: m[1], From: from, Text: text}
					d.Input = text
				}
			}
		case b.Type == chat.BlockToolResult && d.Input == "":
			d.Input = b.Content
		}
	}
	return d
}

func render(src string, d Data) (string, error) {
	if !strings.Contains(src, "{{") {
		return src, nil
	}
	t, err := template.New("t").Option("missingkey=error").Parse(src)
	if err != nil {
		return "", fmt.Errorf("parse template %q: %w", src, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

// listFor names the list of turns that answers an input kind: "" for the
// ordered turns, or the kind when the agent has turns on it.
func listFor(a *Agent, kind string) string {
	if kind != "" && len(a.On[kind]) > 0 {
		return kind
	}
	return ""
}
