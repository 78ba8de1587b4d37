package vigil

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
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
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	s, _ := rt.State(ctx, sess.ID)
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
	playScript(t, srv, "internal/examples/coordinator.yaml")
	runOverWire(t, "anthropic", anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL()}), srv)
}

// The same over the OpenAI Chat Completions wire format.
func TestCoordinatorOverOpenAIWire(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	playScript(t, srv, "internal/examples/coordinator.yaml")
	runOverWire(t, "openai", openai.New(openai.Options{BaseURL: srv.BaseURL(), Model: "m"}), srv)
}

// failingWire is the fake model of TestFailedRunsOver*Wire: it answers
// while phase is wireAccept and refuses every request otherwise, as the
// phase says.
type failingWire struct {
	phase    atomic.Int32
	mu       sync.Mutex
	accepted []*providertest.Request
}

const (
	wireAccept = iota
	wireContext
	wireAuth
	wireOverloaded
)

func (f *failingWire) reply(r *providertest.Request) (providertest.Reply, bool) {
	switch f.phase.Load() {
	case wireContext:
		return providertest.ErrorReply(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"), true
	case wireAuth:
		return providertest.ErrorReply(401, "authentication_error", "invalid x-api-key"), true
	case wireOverloaded:
		return providertest.Overloaded(""), true
	}
	f.mu.Lock()
	f.accepted = append(f.accepted, r)
	f.mu.Unlock()
	last := r.LastUser()
	switch {
	case len(last.Content) > 0 && last.Content[0].Type == chat.BlockToolResult:
		// The commands run: from now on the model's side is down.
		f.phase.Store(wireContext)
		return providertest.TextAnswer("MAIN: started"), true
	case strings.Contains(r.LastUserText(), "start two commands"):
		return providertest.Answer(
			providertest.ToolUse("", "Bash", `{"command":"echo ONE","run_in_background":true}`),
			providertest.ToolUse("", "Bash", `{"command":"sleep 0.3; echo TWO","run_in_background":true}`),
		), true
	}
	return providertest.TextAnswer("MAIN: got them"), true
}

// failedRunsOverWire: a session's model refuses every request — over the
// context window, then the key, then overloaded past the adapter's and
// vigil's retries — while two background commands notify. Each refusal
// gives the notifications back, the status names why at every point, and
// when the model answers again each notification reaches exactly one
// accepted request; nothing counts delivered before that.
func failedRunsOverWire(t *testing.T, name string, p provider.Provider, srv *providertest.Server) {
	fw := &failingWire{}
	srv.Fallback(fw.reply)
	rt, err := Open(context.Background(), Options{
		Store: memstore.New(), Providers: map[string]provider.Provider{name: p}, DefaultProvider: name,
		DataDir: t.TempDir(), Node: "test", Logger: testLogger(t),
		Core: core.Config{RetryBase: time.Millisecond, RetryMaxDelay: 10 * time.Millisecond, RetryAttempts: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "start two commands", Permissions: Permissions{Mode: PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID
	sub, err := rt.Subscribe(ctx, &SubscribeParams{Session: id})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// waitFor reads the session's events until cond holds of the state.
	waitFor := func(what string, cond func(*core.State) bool) *core.State {
		t.Helper()
		for {
			s, err := rt.State(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if cond(s) {
				return s
			}
			select {
			case _, ok := <-sub.C:
				if !ok {
					t.Fatalf("the event stream ended waiting for %s", what)
				}
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
		}
	}
	notesIn := func(s *core.State) int {
		n := 0
		for _, it := range s.Agents[core.MainAgent].Inbox {
			if it.Note != nil {
				n++
			}
		}
		return n
	}
	// checkOwed: both notifications wait in main's inbox, none counts
	// delivered, and the status names the block and its reason.
	checkOwed := func(s *core.State, reason string) {
		t.Helper()
		for _, n := range notes(s) {
			if n.DeliveredRun != 0 {
				t.Fatalf("notification %s counted delivered to run %d, which failed", n.Key, n.DeliveredRun)
			}
		}
		st := core.Status(s)
		if len(st) != 1 || !strings.Contains(st[0].Reason, "2 notifications not yet seen by the model") || !strings.Contains(st[0].Reason, reason) {
			t.Fatalf("status does not say why: %+v", st)
		}
	}
	blockedSince := 0
	blockedAgain := func(s *core.State) bool {
		main := s.Agents[core.MainAgent]
		return main.Blocked != nil && main.Blocked.Run > blockedSince && notesIn(s) == 2 && len(s.NoteOrder) == 2
	}

	// Each refusal in turn; a person's retry moves on to the next.
	var s *core.State
	for i, step := range []struct {
		phase  int32
		what   string
		reason string
		kind   core.FailureKind
	}{
		{wireContext, "the context-window block", "prompt is too long", core.FailContext},
		{wireAuth, "the auth block", "invalid x-api-key", core.FailAuth},
		{wireOverloaded, "the block after the last retry", "gave up after 3 attempts", core.FailTransient},
	} {
		if i > 0 {
			fw.phase.Store(step.phase)
			if err := rt.RetryAgent(ctx, id, &AgentActionParams{Agent: "main", By: "test"}); err != nil {
				t.Fatal(err)
			}
		}
		s = waitFor(step.what, blockedAgain)
		checkOwed(s, step.reason)
		b := s.Agents[core.MainAgent].Blocked
		if b.Kind != step.kind {
			t.Fatalf("%s: blocked as %s, want %s", step.what, b.Kind, step.kind)
		}
		blockedSince = b.Run
	}
	// Every backoff of the session, from its log.
	var retries []core.Retry
	all, err := rt.Subscribe(ctx, &SubscribeParams{Session: id})
	if err != nil {
		t.Fatal(err)
	}
	for rec := range all.C {
		if e, err := DecodeEvent(rec); err == nil {
			if b, ok := e.Body.(*core.RetryScheduled); ok {
				retries = append(retries, b.Retry)
			}
		}
		if rec.Seq >= s.Seq {
			break
		}
	}
	all.Close()
	if len(retries) != 2 || retries[0].Attempt != 2 || retries[1].Attempt != 3 || !strings.Contains(retries[1].Reason, "overloaded") {
		t.Fatalf("backoffs: %+v", retries)
	}

	fw.phase.Store(wireAccept)
	if err := rt.RetryAgent(ctx, id, &AgentActionParams{Agent: "main", By: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, id); err != nil {
		t.Fatal(err)
	}
	s, _ = rt.State(ctx, id)
	checkDelivered(t, s)
	main := s.Agents[core.MainAgent]
	for _, n := range notes(s) {
		key := "<key>" + n.Key.String() + "</key>"
		if n.DeliveredRun != len(main.Runs) {
			t.Errorf("notification %s delivered to run %d, want the accepted run %d", n.Key, n.DeliveredRun, len(main.Runs))
		}
		first := 0
		for _, r := range fw.accepted {
			var all strings.Builder
			for _, m := range r.Messages {
				for _, b := range m.Content {
					all.WriteString(b.Text)
				}
			}
			if c := strings.Count(all.String(), key); c > 1 {
				t.Errorf("accepted request %d holds notification %s %d times", r.N, n.Key, c)
			}
			if strings.Contains(r.LastUserText(), key) {
				first++
			}
		}
		if first != 1 {
			t.Errorf("notification %s reached %d accepted requests as new, want 1", n.Key, first)
		}
	}
}

// Failing runs over the Anthropic Messages API wire format.
func TestFailedRunsOverAnthropicWire(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	retry := provider.RetryPolicy{MaxAttempts: 2, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	failedRunsOverWire(t, "anthropic", anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL(), Retry: retry}), srv)
}

// The same over the OpenAI Chat Completions wire format.
func TestFailedRunsOverOpenAIWire(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	retry := provider.RetryPolicy{MaxAttempts: 2, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	failedRunsOverWire(t, "openai", openai.New(openai.Options{BaseURL: srv.BaseURL(), Model: "m", Retry: retry}), srv)
}
