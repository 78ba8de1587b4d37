//go:build seedbugs

package core

import (
	"testing"

	"github.com/vigilrun/vigil/chat"
)

// newSeededHarness is newHarness for a core with a seed bug put back.
func newSeededHarness(t *testing.T, cfg Config, bug Bug) *harness {
	t.Helper()
	c, err := NewSeeded(cfg, bug)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, c: c, s: NewState(), calls: map[CallID]CallModel{}}
	h.step(CreateSession{Session: Session{ID: "s1", Permissions: Permissions{Mode: PermBypass}}})
	return h
}

// The injected bug consumes items a failed run took: the check that every
// notification reaches an accepted round catches it (see the simulator);
// here, the core without the bug keeps it.
func TestConsumedByFailedRunBug(t *testing.T) {
	h := newSeededHarness(t, Config{}, Bug(bugConsumedByFailedRun))
	key := backgroundNote(h)
	h.fail("main", "boom", FailTransient)
	if n := h.s.Note(key); n.DeliveredRun == 0 || len(h.s.Agents[MainAgent].Inbox) != 0 {
		t.Fatalf("the bug did not consume the notification: %+v", n)
	}
}

func TestNewSeeded(t *testing.T) {
	if _, err := NewSeeded(Config{}, "no-such-bug"); err == nil {
		t.Fatal("NewSeeded took an unknown bug")
	}
	c, err := NewSeeded(Config{}, "")
	if err != nil || c.seed.bug != "" {
		t.Fatalf("an empty bug is not the correct core: %v %q", err, c.seed.bug)
	}
	seen := map[Bug]bool{}
	for _, b := range Bugs {
		if seen[b] {
			t.Fatalf("%s is listed twice", b)
		}
		seen[b] = true
		if c, err := NewSeeded(Config{}, b); err != nil || c.seed.bug != seedBug(b) {
			t.Fatalf("NewSeeded(%s): %v", b, err)
		}
	}
}

// The notified-flag bug writes a run's notification in a later step,
// behind the agent's flag; its own event sets the flag, and a replay
// rebuilds it.
func TestNotifiedFlagBugDefersTheNote(t *testing.T) {
	h := newSeededHarness(t, Config{}, Bug(bugNotifiedFlag))
	var fin []Finalize
	h.onEffect = func(e Effect) {
		if f, ok := e.(Finalize); ok {
			fin = append(fin, f)
		}
	}
	key := NoteKey{Task: "t1", Run: 1}
	h.step(UserPrompt{Text: "start a worker"})
	h.answer("main", use("u1", "Agent", map[string]any{"prompt": "work", "name": "w1", "run_in_background": true}))
	h.answer("main", chat.Text("waiting for w1"))
	h.answer("w1", chat.Text("w1 result"))
	if h.s.Note(key) != nil || len(fin) != 1 {
		t.Fatalf("the bug wrote the notification in the step that ended the run (finalize effects: %v)", fin)
	}
	h.step(FinalizeRun(fin[0]))
	w1 := h.s.Agent("w1")
	if h.s.Note(key) == nil || !w1.seed.notified {
		t.Fatalf("FinalizeRun did not write the notification and set the flag: %v", w1.seed)
	}
	if !Replay(h.events).Agents[w1.ID].seed.notified {
		t.Fatal("a replay lost the flag")
	}
}
