package vigil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/openai"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/store/memstore"
)

// longModel plays a model that works for a long time: main starts five
// background workers (which answer when main is half way) and a
// background command, then reads a file round after round until it has
// done longRounds rounds, messaging a worker on the way. Like a real model it remembers only what the request holds:
// after a compaction it counts its rounds from the summary it wrote, and
// once per compaction it starts again a job the ledger says is running
// (the double dispatch vigil must refuse).
type longModel struct {
	file string
	// half is closed when main has done half its rounds: the workers
	// answer then, so compactions happen while all of them run.
	half     chan struct{}
	halfOnce sync.Once

	mu        sync.Mutex
	refusals  int
	redoes    int
	redone    map[string]bool // the compactions after which a job was started again
	compactAt []time.Time
}

const longRounds = 320

var roundsRe = regexp.MustCompile(`rounds-done=(\d+)`)

// roundsDone counts main's rounds in what a request holds: the count a
// summary carries, plus the answers after it.
func roundsDone(msgs []chat.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == chat.RoleAssistant {
			n++
			continue
		}
		if s := roundsRe.FindStringSubmatch(m.PlainText()); s != nil {
			k, _ := strconv.Atoi(s[1])
			n = k
		}
	}
	return n
}

// redid reports whether the model already started a job again after the
// compaction whose header is first.
func (m *longModel) redid(first string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.redone[regexp.MustCompile(`compaction \d+`).FindString(first)]
}

func (m *longModel) reply(r *providertest.Request) (providertest.Reply, bool) {
	agent := r.Header.Get("X-Vigil-Agent")
	last := r.Messages[len(r.Messages)-1]
	text := last.PlainText()
	for _, b := range last.Content {
		text += b.Content
	}
	if r.Purpose == provider.PurposeCompact {
		m.mu.Lock()
		m.compactAt = append(m.compactAt, time.Now())
		m.mu.Unlock()
		// Every answer in the prompt but the request itself is a round.
		return providertest.TextAnswer(fmt.Sprintf("Summary: reading the file in rounds; rounds-done=%d.", roundsDone(r.Messages))), true
	}
	if agent != "main" {
		if strings.Contains(text, "<agent-message") {
			return providertest.Reply{Blocks: []chat.Block{chat.Text("answered: extra")}, Delay: 20 * time.Millisecond}, true
		}
		return providertest.Reply{Blocks: []chat.Block{chat.Text("result of " + agent)}, Hold: m.half}, true
	}
	if strings.Contains(text, "already has this prompt") || strings.Contains(text, "already runs in the background") {
		m.mu.Lock()
		m.refusals++
		m.mu.Unlock()
	}
	done := roundsDone(r.Messages)
	if done >= longRounds/2 {
		m.halfOnce.Do(func() { close(m.half) })
	}
	first := r.Messages[0].PlainText()
	switch {
	case len(r.Messages) == 1:
		var uses []chat.Block
		for i := 1; i <= 5; i++ {
			uses = append(uses, providertest.ToolUse(fmt.Sprintf("spawn%d", i), "Agent",
				fmt.Sprintf(`{"description":"job %d","prompt":"do job %d","name":"job%d","run_in_background":true}`, i, i, i)))
		}
		uses = append(uses, providertest.ToolUse("bg", "Bash", `{"command":"sleep 0.5; echo built","run_in_background":true}`))
		return providertest.Answer(uses...), true
	case done >= longRounds:
		return providertest.TextAnswer("All rounds done."), true
	case strings.Contains(first, "<task-ledger>") && strings.Contains(first, `state="running`) && !m.redid(first):
		// Just compacted, with a job still running: the model starts it
		// again.
		job := regexp.MustCompile(`name="(job\d)" state="running`).FindStringSubmatch(first)
		if job != nil {
			m.mu.Lock()
			m.redoes++
			m.redone[regexp.MustCompile(`compaction \d+`).FindString(first)] = true
			m.mu.Unlock()
			n := strings.TrimPrefix(job[1], "job")
			return providertest.Answer(providertest.ToolUse(fmt.Sprintf("redo%d", done), "Agent",
				fmt.Sprintf(`{"description":"job %s","prompt":"do job %s","name":"job%s-again","run_in_background":true}`, n, n, n))), true
		}
	case done == 100:
		return providertest.Answer(providertest.ToolUse("msg", "SendMessage", `{"to":"job5","message":"extra"}`)), true
	}
	return providertest.Answer(chat.Text(fmt.Sprintf("Round %d.", done+1)),
		providertest.ToolUse(fmt.Sprintf("read%d", done), "Read", fmt.Sprintf(`{"file_path":%q}`, m.file))), true
}

// longSessionOverWire runs the long session against a fake server with a
// 16k context window. window is what vigil is told of it: 0 leaves only
// the server's refusals to trigger compactions.
func longSessionOverWire(t *testing.T, name string, p provider.Provider, srv *providertest.Server, window int) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte(strings.Repeat("a line of notes that the model reads again and again.\n", 22)), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.SetContextWindow(16000)
	m := &longModel{file: file, redone: map[string]bool{}, half: make(chan struct{})}
	srv.Fallback(m.reply)
	cfg := core.Config{}
	if window > 0 {
		cfg.ContextWindow = func(string, string) int { return window }
	}
	rt, err := Open(context.Background(), Options{
		Store: memstore.New(), Providers: map[string]provider.Provider{name: p}, DefaultProvider: name,
		DataDir: t.TempDir(), Node: "test", Logger: testLogger(t), Core: cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "work through the notes", Cwd: dir, Permissions: Permissions{Mode: PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	s, _ := rt.State(ctx, sess.ID)
	checkDelivered(t, s)
	main := s.Agents[core.MainAgent]
	if main.Runs[0].Status != core.RunCompleted || main.Runs[0].Reply != "All rounds done." {
		t.Fatalf("main's long run: %s %q %s", main.Runs[0].Status, main.Runs[0].Reply, main.Runs[0].Error)
	}
	if main.Runs[0].Calls < longRounds {
		t.Errorf("main's run made %d model calls, want %d rounds or more", main.Runs[0].Calls, longRounds)
	}
	if main.Compacted == nil || main.Compacted.Seq < 3 {
		t.Fatalf("compactions: %+v", main.Compacted)
	}
	// No task was dispatched twice: 5 workers and 1 command; each repeat
	// after a compaction was refused, loudly.
	if len(s.Tasks) != 6 {
		t.Errorf("%d tasks, want 6", len(s.Tasks))
	}
	if m.redoes == 0 || m.refusals != m.redoes || s.Drops["duplicate-dispatch"] != m.redoes {
		t.Errorf("repeats %d, refusals seen %d, duplicate-dispatch drops %d", m.redoes, m.refusals, s.Drops["duplicate-dispatch"])
	}
	// Exactly once: one notification per run and per exit, each delivered.
	if got := len(s.NoteOrder); got != 7 {
		t.Errorf("%d notifications, want 7 (5 workers, 1 answer to the message, 1 command)", got)
	}
	if msg := s.Msgs["m1"]; msg == nil || msg.AnsweredBy == 0 {
		t.Errorf("the message to job5 was not answered: %+v", msg)
	}
	over, compactTokens, compactions := 0, int64(0), 0
	for _, r := range srv.Requests() {
		if r.OverWindow {
			over++
		}
		if r.Purpose == provider.PurposeCompact && !r.OverWindow {
			compactTokens += r.Tokens
			compactions++
		}
	}
	if window == 0 && over == 0 {
		t.Error("no prompt was refused as too long, so no refusal drove a compaction")
	}
	// The compaction cost, as the closing note reports it.
	var took time.Duration
	var started time.Time
	events, err := rt.coreEvents(ctx, sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		switch b := e.Body.(type) {
		case *core.ModelCallStarted:
			if b.Purpose == core.PurposeCompact {
				started = e.At
			}
		case *core.ContextCompacted:
			took += e.At.Sub(started)
		}
	}
	u := main.Tree.Usage
	// Usage is kept by kind: over the Anthropic wire the prompt cache is
	// read (cache_control on the stable prefix), and counted.
	if name == "anthropic" && (u.CacheReadTokens == 0 || u.CacheReadTokens < u.CacheWriteTokens) {
		t.Errorf("cache tokens: read %d, written %d", u.CacheReadTokens, u.CacheWriteTokens)
	}
	t.Logf("%s: %d calls of main, %d compactions (%d refused prompts), %d prompt tokens per compaction, %s per compaction; %d repeats refused; session tokens: input %d, cache read %d, cache write %d, output %d",
		name, main.Runs[0].Calls, compactions, over, compactTokens/int64(max(compactions, 1)), (took / time.Duration(max(compactions, 1))).Round(time.Microsecond), m.refusals,
		u.InputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.OutputTokens)
}

// A session of 320 tool rounds over the Anthropic wire, on a window vigil
// knows: it compacts at the threshold.
func TestLongSessionOverAnthropicWire(t *testing.T) {
	srv := providertest.NewAnthropic(t)
	longSessionOverWire(t, "anthropic", anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL()}), srv, 16000)
}

// The same over the OpenAI wire, on a window vigil does not know: the
// server's context_length_exceeded refusals drive the compactions.
func TestLongSessionOverOpenAIWire(t *testing.T) {
	srv := providertest.NewOpenAI(t)
	longSessionOverWire(t, "openai", openai.New(openai.Options{BaseURL: srv.BaseURL(), Model: "m"}), srv, 0)
}
