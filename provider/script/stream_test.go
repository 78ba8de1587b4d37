package script

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// TestChunks: the deltas are groups of up to three words with the spaces
// after them, and join to the text again.
func TestChunks(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string
	}{
		{"", nil},
		{"   ", []string{"   "}},
		{"one", []string{"one"}},
		{"one two three", []string{"one two three"}},
		{"one two three four", []string{"one two three ", "four"}},
		{"  lead  two\nthree four five six seven ", []string{"  lead  two\nthree ", "four five six ", "seven "}},
		{"héllo wörld ünï cödé", []string{"héllo wörld ünï ", "cödé"}},
	} {
		got := chunks(c.text)
		if !slices.Equal(got, c.want) {
			t.Errorf("chunks(%q) = %q, want %q", c.text, got, c.want)
		}
		if j := strings.Join(got, ""); j != c.text {
			t.Errorf("chunks(%q) join to %q", c.text, j)
		}
	}
}

// TestAnswerStreams: a scripted answer streams as several text deltas, in
// order, each after its share of the turn's delay, and the tools and the
// end after the whole delay.
func TestAnswerStreams(t *testing.T) {
	sc, err := Parse([]byte(`
name: t
agents:
  main:
    turns:
      - delay: 800ms
        say: "one two three four five six seven eight"
        tools:
          - Bash: {command: "true"}
`))
	if err != nil {
		t.Fatal(err)
	}
	var slept []time.Duration
	p := New(sc, &Options{Sleep: func(ctx context.Context, d time.Duration) error {
		slept = append(slept, d)
		return ctx.Err()
	}})
	var kinds []string
	var texts []string
	for ev, err := range p.Stream(context.Background(), &provider.Request{CallID: "c1", AgentName: "main", Messages: []chat.Message{user("go")}}) {
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, string(ev.Type))
		if ev.Type == provider.EventText {
			texts = append(texts, ev.Text)
		}
	}
	if want := []string{"one two three ", "four five six ", "seven eight"}; !slices.Equal(texts, want) {
		t.Errorf("text deltas %q, want %q", texts, want)
	}
	if want := []string{"text", "text", "text", "tool_use", "done"}; !slices.Equal(kinds, want) {
		t.Errorf("events %q, want %q", kinds, want)
	}
	var total time.Duration
	for _, d := range slept {
		total += d
	}
	if total != 800*time.Millisecond || len(slept) < 3 || slept[0] >= 800*time.Millisecond {
		t.Errorf("slept %v: want the delay shared out before the deltas, 800ms in all", slept)
	}
}
