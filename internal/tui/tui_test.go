package tui

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/vigilrun/vigil"
)

func TestDiffLines(t *testing.T) {
	got := diffLines("a\nb\nc\nd\n", "a\nb\nX\nd\n")
	want := []string{"  a", "  b", "- c", "+ X", "  d"}
	if !slices.Equal(got, want) {
		t.Errorf("diff = %q, want %q", got, want)
	}
	// A write is all added lines.
	if got := diffLines("", "one\ntwo\n"); !slices.Equal(got, []string{"+ one", "+ two"}) {
		t.Errorf("write diff = %q", got)
	}
}

func TestFold(t *testing.T) {
	var lines []string
	for i := range 100 {
		lines = append(lines, strings.Repeat("x", i%7))
	}
	got := fold(strings.Join(lines, "\n"), 2, 3)
	if len(got) != 6 || got[2] != "… 95 lines folded …" {
		t.Errorf("fold = %q", got)
	}
	if got := fold("a\nb\nc", 2, 3); len(got) != 3 {
		t.Errorf("a short output is folded: %q", got)
	}
}

func TestCompletion(t *testing.T) {
	for in, want := range map[string]string{
		"/ho":   "/hold ",
		"/s":    "/s", // /stop, /sessions, /session, /side
		"/ses":  "/session",
		"/qu":   "/quit ",
		"/zz":   "/zz",
		"hello": "hello",
	} {
		if got := completeInput(in); got != want {
			t.Errorf("completeInput(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSideShowsWhy(t *testing.T) {
	b := []byte(`{"session":{"id":"s1"},"agents":[
		{"id":"a0","name":"main","state":"waiting","depth":0,"inbox":[{"id":"i3","kind":"notification","priority":"next","text":"part one is done"}],
		 "why":{"kind":"approval","text":"waiting for approval p2 (Bash: rm -rf build)","needs_you":true}},
		{"id":"a1","name":"w1","state":"running","depth":1,"run":{"seq":1,"round":1,"call":{"id":"c1","round":1,"state":"in-flight"}}}],
		"status":[{"agent":"a0","name":"main","items":1,"draining":false,"reason":"approval p2 pending"}]}`)
	d, err := decodeDetail(b)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(sideLines(d, []string{"← notification t1#1 from w1 (completed): done"}, 80, time.Now()), "\n")
	for _, want := range []string{
		"main waiting · waiting for approval p2 (Bash: rm -rf build)",
		"  w1 running · model call in-flight", // no why from the server: made from the run
		"t1#1 from w1 (completed): done",
		"main next notification: part one is done",
		"main not draining: approval p2 pending",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("side pane lacks %q:\n%s", want, got)
		}
	}
}

// TestEventsShowOnceAndLiveTextClears feeds events as the stream gives
// them: an event seen twice shows once, a gap is reported, and live text
// goes when its round's model.ended commits.
func TestEventsShowOnceAndLiveTextClears(t *testing.T) {
	m := newModel(context.Background(), Options{})
	ev := func(seq int64, typ, data string) vigil.Event {
		return vigil.Event{Session: "s1", Seq: seq, At: time.Now(), Type: typ, Data: json.RawMessage(data)}
	}
	m.onLive(liveDelta{Agent: "a0", Name: "main", Text: "Hello, "})
	m.onLive(liveDelta{Agent: "a0", Name: "main", Text: "world"})
	if l := m.live["a0"]; l == nil || l.text != "Hello, world" {
		t.Fatalf("live text = %+v", l)
	}
	m.onEvent(ev(1, "transcript.appended", `{"agent":"a0","message":{"role":"assistant","content":[{"type":"text","text":"Hello, world"}]}}`))
	m.onEvent(ev(2, "model.ended", `{"agent":"a0","call":"c1","outcome":"completed","usage":{}}`))
	if len(m.live) != 0 || len(m.liveList) != 0 {
		t.Errorf("live text stays after model.ended: %+v", m.live)
	}
	m.onEvent(ev(1, "transcript.appended", `{"agent":"a0","message":{"role":"assistant","content":[{"type":"text","text":"Hello, world"}]}}`))
	m.onEvent(ev(5, "model.ended", `{"agent":"a0","call":"c2","outcome":"completed","usage":{}}`))
	if m.gaps != 2 {
		t.Errorf("gaps = %d, want 2 (events 3 and 4)", m.gaps)
	}
	var texts int
	for _, e := range m.entries {
		if e.kind == entryText && e.text == "Hello, world" {
			texts++
		}
	}
	if texts != 1 {
		t.Errorf("the committed text shows %d times, want 1", texts)
	}
}

// fakeAPI serves a session whose event stream breaks once.
type fakeAPI struct {
	afters chan int64
}

func (f *fakeAPI) Do(ctx context.Context, method, path string, body any) ([]byte, error) {
	return []byte(`{"session":{"id":"s1"},"seq":4,"agents":[]}`), nil
}

func (f *fakeAPI) Stream(ctx context.Context, path string, after int64, fn func([]byte) bool) error {
	f.afters <- after
	frame := func(seq int64) []byte {
		return []byte(`{"session":"s1","seq":` + string(rune('0'+seq)) + `,"type":"run.started","data":{}}`)
	}
	if after == 0 {
		fn(frame(1))
		fn(frame(2))
		fn([]byte(`{"session":"s1","seq":0,"type":"text.delta","live":true,"data":{"agent":"a0","text":"hi"}}`))
		fn(frame(3))
		return context.DeadlineExceeded // the connection drops
	}
	fn(frame(3)) // a server may send again what the client saw
	fn(frame(4))
	<-ctx.Done()
	return ctx.Err()
}

// TestFollowReconnectsAfterTheLastEvent: after the stream drops, the
// client reads the session again and asks for the events after the last
// one it saw, and shows none twice.
func TestFollowReconnectsAfterTheLastEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := &fakeAPI{afters: make(chan int64, 4)}
	msgs := make(chan any, 100)
	go follow(ctx, api, "s1", 0, 1, func(v any) { msgs <- v })
	if a := <-api.afters; a != 0 {
		t.Fatalf("first connection after %d, want 0", a)
	}
	if a := <-api.afters; a != 3 {
		t.Fatalf("reconnected after %d, want 3 (the last event seen)", a)
	}
	var seqs []int64
	var downs, ups, lives int
	for len(seqs) < 4 {
		switch m := (<-msgs).(type) {
		case eventMsg:
			seqs = append(seqs, m.ev.Seq)
		case liveMsg:
			lives++
		case connMsg:
			if m.up {
				ups++
			} else {
				downs++
			}
		}
	}
	if !slices.Equal(seqs, []int64{1, 2, 3, 4}) || downs != 1 || ups != 2 || lives != 1 {
		t.Errorf("events %v, %d down, %d up, %d live; want [1 2 3 4], 1, 2, 1", seqs, downs, ups, lives)
	}
}

// TestTypedWordsAreText: characters that arrive together are text, even
// when they spell a key's name ("up", "left", "end"): the input's key
// bindings do not eat them.
func TestTypedWordsAreText(t *testing.T) {
	m := newModel(context.Background(), Options{})
	for _, chunk := range []string{"clean", " ", "up", " the ", "left", " end", " home"} {
		m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(chunk)})
	}
	if got, want := m.input.Value(), "clean up the left end home"; got != want {
		t.Fatalf("the input holds %q, want %q", got, want)
	}
}

// TestConversationFollowsItsEnd: the conversation stays at its end as it
// grows and as the panes around it change height (a permission request
// showing takes two lines), until the user scrolls up; it follows again
// once they scroll back down.
func TestConversationFollowsItsEnd(t *testing.T) {
	m := newModel(context.Background(), Options{})
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	for i := range 60 {
		m.note("line %d", i)
	}
	m.sync()
	if !m.conv.AtBottom() {
		t.Fatal("the conversation does not start at its end")
	}
	m.d = &detail{SessionDetail: vigil.SessionDetail{Approvals: []vigil.Approval{{ID: "p1", Agent: vigil.MainAgent, Tool: "Bash"}}}}
	m.note("the approval's line")
	m.sync()
	if !m.conv.AtBottom() {
		t.Fatal("a permission request's lines moved the conversation off its end")
	}
	m.Update(tea.KeyMsg{Type: tea.KeyPgUp})
	m.note("a line while scrolled up")
	m.sync()
	if m.conv.AtBottom() {
		t.Fatal("the conversation jumped to its end while the user read above it")
	}
	for range 10 {
		m.Update(tea.KeyMsg{Type: tea.KeyPgDown})
	}
	m.d = nil
	m.note("a line after scrolling back")
	m.sync()
	if !m.conv.AtBottom() {
		t.Fatal("the conversation does not follow its end after scrolling back down")
	}
}

// TestCompleteArguments: Tab completes an agent's name after @, /cancel
// and /retry, a running task's id after /stop, and a waiting request's id
// after /approve, from the session the client shows.
func TestCompleteArguments(t *testing.T) {
	m := newModel(context.Background(), Options{})
	m.d = &detail{SessionDetail: vigil.SessionDetail{
		Agents:    []vigil.Agent{{ID: vigil.MainAgent, Name: "main"}, {ID: "a1", Name: "writer"}, {ID: "a2", Name: "worker"}},
		Tasks:     []vigil.Task{{ID: "t1", Ended: time.Now()}, {ID: "t2"}, {ID: "t12"}},
		Approvals: []vigil.Approval{{ID: "p3"}},
	}}
	for in, want := range map[string]string{
		"@wr":        "@writer ",
		"@w":         "@w", // writer, worker
		"@main hi":   "@main hi",
		"/cancel wo": "/cancel worker ",
		"/retry m":   "/retry main ",
		"/stop t":    "/stop t", // t2, t12; t1 has ended
		"/stop t2":   "/stop t2 ",
		"/stop t1":   "/stop t12 ",
		"/approve ":  "/approve p3 ",
		"/ho":        "/hold ",
		"plain text": "plain text",
	} {
		m.input.SetValue(in)
		m.complete()
		if got := m.input.Value(); got != want {
			t.Errorf("Tab on %q: %q, want %q", in, got, want)
		}
	}
	m.input.SetValue("@w")
	if h := m.hintLines(); len(h) != 1 || !strings.Contains(h[0], "@writer  @worker") {
		t.Errorf("the hint for @w: %q", h)
	}
}

// TestSideTasks: the side pane's tasks are the running ones, with their
// elapsed time and output tail, and those that ended within a minute; a
// subagent between runs (idle) is left to the agent tree.
func TestSideTasks(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d := &detail{SessionDetail: vigil.SessionDetail{Tasks: []vigil.Task{
		{ID: "t1", Status: vigil.TaskIdle, Description: "part one", Started: now.Add(-time.Hour)},
		{ID: "t2", Status: vigil.TaskRunning, Command: "make test", Started: now.Add(-125 * time.Second), OutputTail: "ok  pkg/a\nok  pkg/b\n"},
		{ID: "t3", Status: vigil.TaskCompleted, Command: "make lint", Started: now.Add(-20 * time.Second), Ended: now.Add(-10 * time.Second)},
		{ID: "t4", Status: vigil.TaskFailed, Command: "make old", Started: now.Add(-5 * time.Minute), Ended: now.Add(-2 * time.Minute)},
	}}}
	got := strings.Join(sideLines(d, nil, 60, now), "\n")
	for _, want := range []string{"TASKS", "t2 running 2m05s make test", "│ ok  pkg/b", "t3 completed 10s make lint"} {
		if !strings.Contains(got, want) {
			t.Errorf("the side pane lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"t1 ", "t4 "} {
		if strings.Contains(got, not) {
			t.Errorf("the side pane lists %q:\n%s", not, got)
		}
	}
}
