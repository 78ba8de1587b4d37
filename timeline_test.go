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
