package chat

import "testing"

func TestPlainText(t *testing.T) {
	use := Block{Type: BlockToolUse, ID: "u1", Name: "Bash", Text: "not text"}
	for _, tc := range []struct {
		content []Block
		want    string
	}{
		{nil, ""},
		{[]Block{use}, ""},
		{[]Block{Text("one")}, "one"},
		{[]Block{use, Text("one"), ToolResult("u1", "r", false)}, "one"},
		{[]Block{Text("a"), use, Text("b")}, "a\nb"},
		{[]Block{Text(""), Text("b")}, "b"},
		{[]Block{Text("a"), Text(""), Text("c")}, "a\n\nc"},
	} {
		if got := (Message{Content: tc.content}).PlainText(); got != tc.want {
			t.Errorf("PlainText(%+v) = %q, want %q", tc.content, got, tc.want)
		}
	}
}
