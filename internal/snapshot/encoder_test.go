package snapshot

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// TestEncoder: an Encoder kept across a state's changes makes the same
// snapshots as EncodeSized, as messages are appended, a transcript is cut
// (as a retry cuts it: a new slice, new blocks for the message it cuts)
// and an agent goes. An Encoder that took a section for the same one by
// its roles and lengths alone writes stale bytes after a cut and is
// caught.
func TestEncoder(t *testing.T) {
	e := NewEncoderSized(3, 2)
	if bad := encoderMismatch(e); bad != "" {
		t.Fatal(bad)
	}
	loose := NewEncoderSized(3, 2)
	loose.same = rolesAndLengths
	if encoderMismatch(loose) == "" {
		t.Fatal("an Encoder that compares sections by their roles and lengths alone went unnoticed")
	}
}

// rolesAndLengths is the injected bug: sections taken for the same by
// their messages' roles and numbers of blocks.
func rolesAndLengths(a, b []chat.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Role != b[i].Role || len(a[i].Content) != len(b[i].Content) {
			return false
		}
	}
	return true
}

// encoderMismatch changes a state step by step and returns where e's
// snapshot first differs from EncodeSized's, or "".
func encoderMismatch(e *Encoder) string {
	msg := func(role chat.Role, text string) chat.Message {
		return chat.Message{Role: role, Content: []chat.Block{chat.Text(text)}}
	}
	// turns returns n messages to follow from others, users' and the
	// assistant's in turn.
	turns := func(prefix string, from, n int) []chat.Message {
		var out []chat.Message
		for i := range n {
			role := chat.RoleUser
			if (from+i)%2 == 1 {
				role = chat.RoleAssistant
			}
			out = append(out, msg(role, fmt.Sprintf("%s %d", prefix, i)))
		}
		return out
	}
	s := core.NewState()
	s.Session.ID = "s1"
	s.Agents["a0"] = &core.Agent{ID: "a0", Name: "main", Transcript: turns("main", 0, 7)}
	s.Agents["a1"] = &core.Agent{ID: "a1", Name: "w1", Transcript: turns("w1", 0, 4)}
	s.Order = []core.AgentID{"a0", "a1"}
	check := func(what string) string {
		got, err := e.Encode(s)
		if err != nil {
			return what + ": " + err.Error()
		}
		want, err := EncodeSized(s, 3, 2)
		if err != nil {
			return what + ": " + err.Error()
		}
		if !bytes.Equal(got, want) {
			return fmt.Sprintf("%s: the Encoder's snapshot differs from the state's (%d bytes against %d)", what, len(got), len(want))
		}
		return ""
	}
	a0 := s.Agents["a0"]
	steps := []struct {
		what   string
		change func()
	}{
		{"first", func() {}},
		{"appended", func() { a0.Transcript = append(a0.Transcript, turns("more", len(a0.Transcript), 5)...) }},
		{"unchanged", func() {}},
		// A cut at a section's start, and new messages of the same roles
		// and lengths where the cut ones were.
		{"cut and appended again", func() {
			a0.Transcript = append(slices.Clone(a0.Transcript[:3]), turns("again", 3, 6)...)
		}},
		// A cut inside a message: its blocks are new ones.
		{"cut inside a message", func() {
			m := a0.Transcript[4]
			m.Content = slices.Clone(m.Content[:1])
			m.Content[0].Text = "cut"
			a0.Transcript = append(slices.Clone(a0.Transcript[:4]), m)
		}},
		{"an agent gone", func() { delete(s.Agents, "a1"); s.Order = s.Order[:1] }},
	}
	for _, st := range steps {
		st.change()
		if bad := check(st.what); bad != "" {
			return bad
		}
	}
	if e.kept() == 0 {
		return "the Encoder kept nothing of a transcript of full sections"
	}
	return ""
}
