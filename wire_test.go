package vigil

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/openai"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// playScript makes a fake model server answer every request as the
// scenario's scripted model would, telling agents apart by the
// X-Vigil-Agent header. Delays are scaled down tenfold.
func playScript(t *testing.T, srv *providertest.Server, path string) {
	t.Helper()
	sc, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := script.New(sc, nil)
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		resp, delay, err := p.Answer(&provider.Request{AgentName: r.Header.Get("X-Vigil-Agent"), CallID: r.Header.Get("X-Vigil-Call"), Messages: r.Messages})
		if err != nil {
			t.Errorf("script: %v", err)
			return providertest.Reply{}, false
		}
		return providertest.Reply{Blocks: resp.Content, StopReason: resp.StopReason, Usage: resp.Usage, Delay: delay / 10}, true
	})
}

func runOverWire(t *testing.T, name string, p provider.Provider, srv *providertest.Server) {
	t.Helper()
	rt, err := Open(context.Background(), Options{
		Store: memstore.New(), Providers: map[string]provider.Provider{name: p}, DefaultProvider: name,
		DataDir: t.TempDir(), Node: "test", Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := rt.CreateSession(ctx, SessionParams{Prompt: "Build the release", Permissions: core.Permissions{Mode: core.PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, string(sess.ID)); err != nil {
		t.Fatal(err)
	}
	s, _ := rt.State(ctx, string(sess.ID))
	checkDelivered(t, s)
	var replies []string
	for _, n := range notes(s) {
		replies = append(replies, n.Reply)
	}
	all := strings.Join(replies, "\n")
	if len(replies) != 5 || !strings.Contains(all, "tests added") || !strings.Contains(all, "changelog written") {
		t.Fatalf("notifications over the wire:\n%s", all)
	}
	if len(srv.Requests()) < 8 {
		t.Fatalf("the fake model served %d requests", len(srv.Requests()))
	}
	for _, r := range srv.Requests() {
		if r.Header.Get("X-Vigil-Agent") == "" || len(r.Tools) == 0 {
			t.Fatalf("request %d lacks the agent header or the tools", r.N)
		}
	}
}

// The coordinator scenario end to end over the Anthropic Messages API wire
// format: the fake server plays the model's side.
func TestCoordinatorOverAnthropicWire(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	playScript(t, srv, "examples/coordinator.yaml")
	runOverWire(t, "anthropic", anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL()}), srv)
}

// The same over the OpenAI Chat Completions wire format.
func TestCoordinatorOverOpenAIWire(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	playScript(t, srv, "examples/coordinator.yaml")
	runOverWire(t, "openai", openai.New(openai.Options{BaseURL: srv.BaseURL(), Model: "m"}), srv)
}
