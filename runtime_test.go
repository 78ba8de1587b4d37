package vigil

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// testLogger fails nothing but shows warnings in -v output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func openScript(t *testing.T, path string) (*Runtime, *memstore.Store) {
	t.Helper()
	sc, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	return openWith(t, st, sc, nil), st
}

// openWith opens a runtime on st whose default provider plays sc; tune,
// when set, changes the options first. The runtime closes with the test.
func openWith(t *testing.T, st store.Store, sc *script.Scenario, tune func(*Options)) *Runtime {
	t.Helper()
	opts := Options{
		Store: st, Providers: map[string]provider.Provider{"script": script.New(sc, nil)}, DefaultProvider: "script",
		DataDir: t.TempDir(), Node: "test", Logger: testLogger(t),
	}
	if tune != nil {
		tune(&opts)
	}
	rt, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func notes(s *core.State) []*core.Note {
	var out []*core.Note
	for _, k := range s.NoteOrder {
		out = append(out, s.Note(k))
	}
	return out
}

// checkDelivered asserts that every notification of the session was
// delivered exactly once and every message answered.
func checkDelivered(t *testing.T, s *core.State) {
	t.Helper()
	for _, n := range notes(s) {
		if n.DeliveredRun == 0 && n.Dropped == "" {
			t.Errorf("notification %s to %s was not delivered", n.Key, n.Owner)
		}
	}
	for id, m := range s.Msgs {
		if m.Outcome == core.OutcomeRejected {
			continue
		}
		if m.AnsweredBy == 0 {
			t.Errorf("message %s (%s) to %s was not answered", id, m.Outcome, m.To)
		}
	}
	if !s.Quiescent() {
		t.Errorf("session not quiescent")
	}
}

func TestCoordinatorScenario(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, _ := openScript(t, "internal/examples/coordinator.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		s, err := rt.State(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkDelivered(t, s)
		// Three stop notifications and two answers to the messages.
		var got []string
		for _, n := range notes(s) {
			got = append(got, fmt.Sprintf("%s %s %q", n.Key, n.Status, n.Reply))
		}
		if len(got) != 5 {
			t.Fatalf("notifications:\n%s", strings.Join(got, "\n"))
		}
		for _, want := range []string{"tests added", "changelog written"} {
			if !strings.Contains(strings.Join(got, "\n"), want) {
				t.Errorf("no notification carries %q:\n%s", want, strings.Join(got, "\n"))
			}
		}
		for _, m := range s.Msgs {
			if m.Outcome != core.OutcomeQueuedBehindStop {
				t.Errorf("message %s to %s: %s, want queued-behind-stop (sent inside the final round)", m.ID, m.To, m.Outcome)
			}
		}
		main := s.Agents[core.MainAgent]
		if last := main.Runs[len(main.Runs)-1]; !strings.Contains(last.Reply, "reported") {
			t.Errorf("main's last reply = %q", last.Reply)
		}
		_ = time.Second
	})
}

func TestTranscriptJSONL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, _ := openScript(t, "internal/examples/coordinator.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		var b strings.Builder
		must(t, rt.Transcript(ctx, &b, &TranscriptParams{Session: sess.ID, Agent: "w2"}))
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		var ops []string
		for _, l := range lines {
			var x struct {
				Type, Operation, Kind, Agent, Content string
				At                                    time.Time `json:"timestamp"`
			}
			if err := json.Unmarshal([]byte(l), &x); err != nil {
				t.Fatalf("bad line %q: %v", l, err)
			}
			if x.Agent != "a2" || x.At.IsZero() {
				t.Fatalf("line of another agent or without a time: %s", l)
			}
			ops = append(ops, x.Type+":"+x.Operation+":"+x.Kind)
		}
		got := strings.Join(ops, " ")
		for _, want := range []string{
			"queue-operation:enqueue:spawn", "queue-operation:dequeue:spawn", "run:start:spawn", "assistant::", "run:end:",
			"queue-operation:enqueue:message", "queue-operation:dequeue:message", "message::",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("transcript lacks %s:\n%s", want, got)
			}
		}
	})
}
