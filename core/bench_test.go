package core

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// notifyLoad drives the core through the workload of bench.Notifications
// for one session, without a runtime: the main agent starts ten background
// workers and answers every notification with a message to its worker,
// which answers at once, until n messages were sent. Model calls
// answer in the order they were issued, one step each, as the runtime's
// effect outcomes come back. It returns the events the steps emitted.
type notifyLoad struct {
	c   *Core
	s   *State
	now time.Time
	// queue holds the model calls in flight, oldest first.
	queue []CallModel
	// sent counts the messages main sent; n is how many it sends.
	sent, n int
	// events counts the events the steps emitted.
	events int
	// encode, when set, sees every event, as the runtime's commit does.
	encode func(Event)
}

const notifyWorkers = 10

func (l *notifyLoad) step(tb testing.TB, in Input) {
	l.now = l.now.Add(time.Millisecond)
	out := l.c.Step(l.s, l.now, in)
	if out.Err != nil {
		tb.Fatalf("%T: %v", in, out.Err)
	}
	l.events += len(out.Events)
	if l.encode != nil {
		for _, e := range out.Events {
			l.encode(e)
		}
	}
	for _, e := range out.Effects {
		if c, ok := e.(CallModel); ok {
			l.queue = append(l.queue, c)
		}
	}
}

// answer is the fake model: O(1) in the length of the conversation.
func (l *notifyLoad) answer(c CallModel) chat.Response {
	if !c.IsMain {
		return chat.Response{Content: []chat.Block{chat.Text("ok")}, StopReason: chat.StopEndTurn}
	}
	if len(c.Messages) == 1 {
		var blocks []chat.Block
		for i := range notifyWorkers {
			// Prompts of their own: the core refuses a second task with
			// the same prompt (duplicate-dispatch), as it does nine of the
			// ten workers bench.Notifications starts, all with prompt "x".
			blocks = append(blocks, benchUse("s"+strconv.Itoa(i), "Agent", `{"prompt":"x`+strconv.Itoa(i)+`","name":"w`+strconv.Itoa(i)+`","run_in_background":true}`))
		}
		return chat.Response{Content: blocks, StopReason: chat.StopToolUse}
	}
	var blocks []chat.Block
	for i, b := range c.Messages[len(c.Messages)-1].Content {
		if !strings.HasPrefix(b.Text, "<task-notification>") || l.sent >= l.n {
			continue
		}
		_, rest, _ := strings.Cut(b.Text, "<agent>")
		name, _, _ := strings.Cut(rest, " ")
		blocks = append(blocks, benchUse("m"+strconv.Itoa(len(c.Messages))+"-"+strconv.Itoa(i), "SendMessage", `{"to":"`+name+`","message":"again"}`))
		l.sent++
	}
	if len(blocks) == 0 {
		return chat.Response{Content: []chat.Block{chat.Text("waiting")}, StopReason: chat.StopEndTurn}
	}
	return chat.Response{Content: blocks, StopReason: chat.StopToolUse}
}

func benchUse(id, name, input string) chat.Block {
	return chat.Block{Type: chat.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(input)}
}

// run creates the session and steps it until no model call is in flight.
func (l *notifyLoad) run(tb testing.TB) {
	l.c, l.s = New(Config{}), NewState()
	l.now = time.Unix(1_800_000_000, 0).UTC()
	l.step(tb, CreateSession{Session: Session{ID: "s1", Permissions: Permissions{Mode: PermBypass}}})
	l.step(tb, UserPrompt{Text: "go"})
	for len(l.queue) > 0 {
		c := l.queue[0]
		l.queue = l.queue[1:]
		l.step(tb, ModelResponded{Agent: c.Agent, Call: c.Call, Response: l.answer(c)})
	}
}

// delivered counts the notifications main was given.
func delivered(s *State) int {
	n := 0
	for _, note := range s.Notes {
		if note.DeliveredRun > 0 {
			n++
		}
	}
	return n
}

// The workload ends with every notification delivered: the benchmarks
// below measure what they claim.
func TestNotifyLoadDelivers(t *testing.T) {
	l := &notifyLoad{n: 100}
	l.run(t)
	if got := delivered(l.s); got < l.n {
		t.Fatalf("%d notifications delivered, want at least %d", got, l.n)
	}
}

// BenchmarkStepNotifications is the core's share of the runtime's cost of
// a notification (bench.Notifications on one session): the steps from a
// worker's answer to main's message that resumes it.
func BenchmarkStepNotifications(b *testing.B) {
	benchNotify(b, nil)
}

// BenchmarkStepNotificationsEncoded adds the encoding of every event body,
// as the runtime's commit does it before the append.
func BenchmarkStepNotificationsEncoded(b *testing.B) {
	benchNotify(b, func(e Event) {
		if _, err := json.Marshal(e.Body); err != nil {
			b.Fatal(err)
		}
	})
}

func benchNotify(b *testing.B, encode func(Event)) {
	const n = 400
	b.ReportAllocs()
	notes, events := 0, 0
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		l := &notifyLoad{n: n, encode: encode}
		l.run(b)
		notes += delivered(l.s)
		events += l.events
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(notes), "ns/notification")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(notes), "allocs/notification")
	b.ReportMetric(float64(events)/float64(notes), "events/notification")
}
