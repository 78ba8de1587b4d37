package vigil

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vigilrun/vigil/core"
)

// event makes a session's event of a core body, as a subscription yields
// it.
func event(t *testing.T, seq int64, at time.Time, b core.Body) Event {
	t.Helper()
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return Event{Session: "s1", Seq: seq, Global: seq, At: at, Type: b.Type(), Data: data}
}

// timelineLines are the lines tl tells of evs, formatted from start.
func timelineLines(t *testing.T, tl *Timeline, start time.Time, evs []Event) []string {
	t.Helper()
	var got []string
	for _, e := range evs {
		line, ok, err := tl.Line(e)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, line.Format(start))
		}
	}
	return got
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := start.Add(1500 * time.Millisecond)
	long := strings.Repeat("é", 60) // 120 bytes: cut at 99, inside an é
	evs := []Event{
		event(t, 1, at, &core.RunStarted{Agent: core.MainAgent, Seq: 1, Kind: core.RunKind(core.KindPrompt)}),
		event(t, 2, at, &core.AgentCreated{Agent: core.Agent{ID: "a1", Name: "w1", Owner: core.MainAgent, Task: "t1"}}),
		event(t, 3, at, &core.RunEnded{Agent: "a1", Seq: 1, Status: core.RunCompleted, Reply: long}),
		event(t, 4, at, &core.ItemsSeen{}),
	}
	tl := NewTimeline()
	got := timelineLines(t, tl, start, evs)
	want := []string{
		"  1.500s  main   run 1 started (prompt)",
		"  1.500s  main   started subagent w1 (a1, task t1)",
		"  1.500s  w1     run 1 completed: " + strings.Repeat("é", 49) + "…",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range got {
		if !utf8.ValidString(l) {
			t.Errorf("line %q is not valid UTF-8", l)
		}
	}

	// A timeline that starts mid-stream knows the agents it is told of.
	line, ok, err := NewTimeline(Agent{ID: "a1", Name: "w1"}).Line(evs[2])
	if err != nil || !ok || line.Who != "w1" || line.Seq != 3 || !line.At.Equal(at) {
		t.Errorf("mid-stream line %+v, %v, %v; want w1's", line, ok, err)
	}

	// An event it cannot read is an error, not a line.
	for _, e := range []Event{{Seq: 9, Type: "no.such", Data: []byte("{}")}, {Seq: 9, Type: "run.started", Data: []byte("{")}} {
		if _, ok, err := tl.Line(e); err == nil || ok {
			t.Errorf("%s %s: ok %v, err %v; want an error", e.Type, e.Data, ok, err)
		}
	}
}

// TestTimelineApprovalsHoldsAndOutcomes: the lines every client shares
// for permission requests (what they run, the answer and who asked, a rule
// an "always" answer adds), holds with who and why, a message's outcome
// with the run that answers it, a signalled command, and no line for a run
// that gave nothing back.
func TestTimelineApprovalsHoldsAndOutcomes(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := start.Add(time.Second)
	minus1 := -1
	evs := []Event{
		event(t, 1, at, &core.AgentCreated{Agent: core.Agent{ID: "a1", Name: "w1", Owner: core.MainAgent, Task: "t1"}}),
		event(t, 2, at, &core.ApprovalRequested{Approval: core.Approval{ID: "p1", Agent: "a1", Tool: "Bash", Input: json.RawMessage(`{"command":"rm -rf build"}`), Reason: "mode ask"}}),
		event(t, 3, at, &core.PermissionRuleAdded{Rule: "Bash(rm -rf build)", By: "user", Approval: "p1"}),
		event(t, 4, at, &core.ApprovalResolved{Approval: "p1", Allow: true, By: "user"}),
		event(t, 5, at, &core.HoldSet{By: "alice", Reason: "reviewing the plan"}),
		event(t, 6, at, &core.HoldSet{By: "user"}),
		event(t, 7, at, &core.HoldReleased{By: "user"}),
		event(t, 8, at, &core.MessageSent{Msg: core.Msg{ID: "m1", From: "user", To: "a1", Outcome: core.OutcomeResumed, Run: 2}}),
		event(t, 9, at, &core.ItemsReturned{Agent: "a1", Seq: 2}),
		event(t, 10, at, &core.NotificationWritten{Note: core.Note{Key: core.NoteKey{Task: "t2"}, Owner: core.MainAgent, Kind: core.TaskShell, Status: "stopped", ExitCode: &minus1, Error: "SIGTERM"}}),
		event(t, 11, at, &core.ApprovalRequested{Approval: core.Approval{ID: "p2", Agent: "a1", Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`), Reason: "mode ask"}}),
		event(t, 12, at, &core.ApprovalResolved{Approval: "p2", Allow: true, By: "sdk", Input: json.RawMessage(`{"command":"ls -la"}`)}),
		event(t, 13, at, &core.PermissionModeSet{Mode: core.PermBypass, By: "sdk"}),
	}
	got := timelineLines(t, NewTimeline(), start, evs)
	want := []string{
		"  1.000s  main   started subagent w1 (a1, task t1)",
		"  1.000s  w1     waits for permission p1: Bash rm -rf build (mode ask)",
		"  1.000s  user   allowed from now on: Bash(rm -rf build) (answering p1 always)",
		"  1.000s  w1     permission p1 allowed by user",
		"  1.000s  user   user queue held by alice: reviewing the plan",
		"  1.000s  user   user queue held",
		"  1.000s  user   user queue resumed",
		"  1.000s  user   message m1 → w1: resumed (the agent was idle; run 2 answers)",
		"  1.000s  main   ← notification t2#exit from shell t2 (stopped): SIGTERM",
		"  1.000s  w1     waits for permission p2: Bash ls (mode ask)",
		"  1.000s  w1     permission p2 allowed by sdk, with the input changed to {\"command\":\"ls -la\"}",
		"  1.000s  user   permission mode set to bypass by sdk",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
