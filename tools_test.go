package vigil

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// fakeTools is a ToolSet of one tool, lookup, that records its calls.
type fakeTools struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeTools) Specs() []chat.ToolSpec {
	return []chat.ToolSpec{{Name: "mcp__words__lookup", Description: "Look up a word", InputSchema: json.RawMessage(`{"type":"object"}`)}}
}

func (f *fakeTools) Call(_ context.Context, name string, input json.RawMessage) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+string(input))
	return "the word is PLUM", false
}

// A session's added tools are offered to its model and run when its
// permissions allow them: here an allow rule naming the tool. A name of
// vigil's own, and a session this process does not run, are refused.
func TestSetTools(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	var offered []string
	var mu sync.Mutex
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		mu.Lock()
		offered = offered[:0]
		for _, tl := range r.Tools {
			offered = append(offered, tl.Name)
		}
		mu.Unlock()
		for _, b := range r.LastUser().Content {
			if b.Type == chat.BlockToolResult {
				return providertest.TextAnswer("done: " + b.Content), true
			}
		}
		return providertest.Answer(providertest.ToolUse("", "mcp__words__lookup", `{"key":"secret"}`)), true
	})
	rt := openWith(t, memstore.New(), &script.Scenario{}, func(o *Options) {
		o.Providers = map[string]provider.Provider{"anthropic": anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL()})}
		o.DefaultProvider = "anthropic"
	})
	ctx := context.Background()
	sess, err := rt.CreateSession(ctx, &SessionParams{Permissions: Permissions{Mode: PermAsk, Allow: []string{"mcp__words__lookup"}}})
	if err != nil {
		t.Fatal(err)
	}
	ft := &fakeTools{}
	if err := rt.SetTools(sess.ID, ft); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Prompt(ctx, sess.ID, &PromptParams{Text: "look it up"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	s, err := rt.State(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 1 || main.Runs[0].Reply != "done: the word is PLUM" || len(ft.calls) != 1 || ft.calls[0] != `mcp__words__lookup {"key":"secret"}` {
		t.Fatalf("runs %+v, calls %q", main.Runs, ft.calls)
	}
	mu.Lock()
	if !strings.Contains(strings.Join(offered, " "), "mcp__words__lookup") || !strings.Contains(strings.Join(offered, " "), "Bash") {
		t.Errorf("tools offered: %q", offered)
	}
	mu.Unlock()
	if err := rt.SetTools(sess.ID, bashSet{}); CodeOf(err) != CodeInvalid {
		t.Errorf("a tool named Bash: %v", err)
	}
	if err := rt.SetTools("nope", ft); CodeOf(err) != CodeNotFound {
		t.Errorf("an unknown session: %v", err)
	}
}

type bashSet struct{}

func (bashSet) Specs() []chat.ToolSpec                                       { return []chat.ToolSpec{{Name: "Bash"}} }
func (bashSet) Call(context.Context, string, json.RawMessage) (string, bool) { return "", true }
