package core

import (
	"testing"

	"github.com/vigilrun/vigil/chat"
)

func TestCallerSpawnAndAck(t *testing.T) {
	h := &harness{t: t, c: New(Config{}), s: NewState(), calls: map[CallID]CallModel{}}
	h.step(CreateSession{Session: Session{ID: "s1", Owner: "key-1"}, Driver: DriverCaller, MainName: "caller"})
	out := h.step(SpawnAgent{Name: "w1", Prompt: "work"})
	if out.Agent == "" || out.Task != "t1" {
		t.Fatalf("spawn output: %+v", out)
	}
	h.answer("w1", chat.Text("result one"))
	caller := h.s.Agents[MainAgent]
	if caller.Run != nil || len(caller.Inbox) != 1 {
		t.Fatalf("the caller ran or has no notification: run %v inbox %d", caller.Run, len(caller.Inbox))
	}
	if st := Status(h.s); len(st) != 1 || st[0].ClearsOn == "" {
		t.Fatalf("status: %+v", st)
	}
	// A message from the caller to its worker resumes it.
	m := h.step(UserMessage{To: "w1", Text: "more"}).Msg
	if m.Outcome != OutcomeResumed {
		t.Fatalf("outcome %s", m.Outcome)
	}
	h.answer("w1", chat.Text("result two"))
	ids := []ItemID{caller.Inbox[0].ID, caller.Inbox[1].ID}
	h.step(CallerAck{Agent: MainAgent, Items: ids})
	if len(caller.Inbox) != 0 || len(caller.Runs) != 1 {
		t.Fatalf("after ack: inbox %d runs %d", len(caller.Inbox), len(caller.Runs))
	}
	for _, k := range []NoteKey{{Task: "t1", Run: 1}, {Task: "t1", Run: 2}} {
		if n := h.s.Note(k); n == nil || n.DeliveredRun != 1 {
			t.Fatalf("note %s not delivered: %+v", k, n)
		}
	}
	h.step(CallerAck{Agent: MainAgent, Items: ids}) // twice is harmless
	if len(caller.Runs) != 1 {
		t.Fatal("a repeated ack made a run")
	}
}
