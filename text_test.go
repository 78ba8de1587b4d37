package vigil

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

// A scenario whose outcomes hold text no store keeps as it is: a reply with
// a NUL byte and a command that prints NUL and invalid UTF-8.
const nulScenario = `
name: nul
agents:
  main:
    turns:
      - say: "reply with a NUL: a\0b"
        tools:
          - Bash: {command: "printf 'x\\000y\\377z'"}
      - say: "the command ran"
      - say: "answered: {{.Input}}"
`

// A NUL byte or invalid UTF-8 in a request is refused with an error naming
// the field, and an outcome that holds them is kept with U+FFFD in their
// place: on SQLite and PostgreSQL alike, the session goes on.
func TestTextNoStoreKeeps(t *testing.T) {
	sc, err := script.Parse([]byte(nulScenario))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"sqlite", func(t *testing.T) store.Store {
			st, err := sqlite.Open(context.Background(), t.TempDir()+"/vigil.db", nil)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"postgres", func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pgtest.Fresh(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			t.Cleanup(func() { st.Close() })
			rt := openWith(t, st, sc, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			_, err = rt.CreateSession(ctx, &SessionParams{Title: "a\x00b", Cwd: t.TempDir()})
			wantInvalid(t, "a title with a NUL", err, "title: contains a NUL byte at offset 1")
			_, err = rt.CreateSession(ctx, &SessionParams{Prompt: "go\xff", Cwd: t.TempDir()})
			wantInvalid(t, "a prompt with invalid UTF-8", err, "prompt: invalid UTF-8 at offset 2")

			sess, err := rt.CreateSession(ctx, &SessionParams{Title: "nul", Prompt: "go", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
			if err != nil {
				t.Fatal(err)
			}
			id := sess.ID
			must(t, rt.WaitQuiescent(ctx, id))
			_, err = rt.Prompt(ctx, id, &PromptParams{Text: "a\x00b"})
			wantInvalid(t, "a prompt with a NUL", err, "text: contains a NUL byte at offset 1")
			_, err = rt.Message(ctx, id, &MessageParams{To: "main", Text: "\xc3", Priority: PriorityNext})
			wantInvalid(t, "a message with invalid UTF-8", err, "text: invalid UTF-8 at offset 0")
			if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "still there?"}); err != nil {
				t.Fatalf("a good prompt after the refused ones: %v", err)
			}
			must(t, rt.WaitQuiescent(ctx, id))

			var tr bytes.Buffer
			must(t, rt.Transcript(ctx, &tr, &TranscriptParams{Session: id, Agent: "main"}))
			for _, want := range []string{"a\uFFFDb", "x\uFFFDy\uFFFDz", "answered: still there?"} {
				if !strings.Contains(tr.String(), want) {
					t.Errorf("transcript lacks %q:\n%s", want, tr.String())
				}
			}
			// What the store rebuilds is what the runtime holds.
			stored, err := loadState(ctx, st, string(id))
			must(t, err)
			live, err := rt.State(ctx, id)
			must(t, err)
			if stored.Seq != live.Seq {
				t.Fatalf("store seq %d, runtime seq %d", stored.Seq, live.Seq)
			}
		})
	}
}

func wantInvalid(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s: %v; want an invalid error saying %q", what, err, msg)
	}
}

// refusingStore refuses, with store.ErrRefused, every append whose data
// holds a marker: a write no retry can make succeed.
type refusingStore struct {
	*memstore.Store
	marker  []byte
	refused int
}

func (s *refusingStore) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	for _, r := range p.Records {
		if bytes.Contains(r.Data, s.marker) {
			s.refused++
			return nil, fmt.Errorf("append: %w: value too long", store.ErrRefused)
		}
	}
	return s.Store.EventAppend(ctx, p)
}

// A commit the store refuses for good is not retried forever (before, the
// session retried the same append every 200 ms, across restarts, and every
// later prompt got 503). A tool result the store refuses becomes an error
// result and the run goes on; a model reply it refuses is a failed call,
// retried within the agent's retry budget and then blocked with the reason.
func TestRefusedCommitDoesNotJam(t *testing.T) {
	run := func(t *testing.T, scenario string) (*Runtime, *refusingStore, SessionID) {
		sc, err := script.Parse([]byte(scenario))
		if err != nil {
			t.Fatal(err)
		}
		st := &refusingStore{Store: memstore.New(), marker: []byte("UNSTORABLE")}
		rt := openWith(t, st, sc, nil)
		sess, err := rt.CreateSession(context.Background(), &SessionParams{Prompt: "go", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		id := sess.ID
		must(t, rt.WaitQuiescent(context.Background(), id))
		return rt, st, id
	}
	t.Run("tool result", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rt, st, id := run(t, `
name: refused-tool
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "echo UNSTOR''ABLE"}
      - say: "went on after the tool"
      - say: "answered: {{.Input}}"
`)
			// Once in its batch, once alone; then its failure is stored.
			if st.refused != 2 {
				t.Fatalf("the refused append was tried %d times, want twice", st.refused)
			}
			var tr bytes.Buffer
			must(t, rt.Transcript(context.Background(), &tr, &TranscriptParams{Session: id, Agent: "main"}))
			for _, want := range []string{"vigil could not store this outcome", "went on after the tool"} {
				if !strings.Contains(tr.String(), want) {
					t.Fatalf("transcript lacks %q:\n%s", want, tr.String())
				}
			}
			if _, err := rt.Prompt(context.Background(), id, &PromptParams{Text: "next"}); err != nil {
				t.Fatalf("a prompt after the refusal: %v", err)
			}
			must(t, rt.WaitQuiescent(context.Background(), id))
		})
	})
	t.Run("model reply", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rt, st, id := run(t, `
name: refused-reply
agents:
  main:
    turns:
      - say: "UNSTORABLE reply"
`)
			s, err := rt.State(context.Background(), id)
			must(t, err)
			main := s.Agents[core.MainAgent]
			if main.Blocked == nil || !strings.Contains(main.Blocked.Reason, "could not store") {
				t.Fatalf("main after replies the store refuses: state %s, blocked %+v; want blocked with the reason", main.State, main.Blocked)
			}
			if st.refused < 2 || st.refused > 10 {
				t.Fatalf("the refused reply was tried %d times; want at most 2 per attempt of the retry budget (5), not forever", st.refused)
			}
			t.Logf("a reply the store refuses: %d attempts, then blocked: %s", st.refused, main.Blocked.Reason)
		})
	})
}
