package toolinfo

import (
	"slices"
	"testing"
)

// names returns the tools for which fact holds, in the table's order.
func names(fact func(Info) bool) []string {
	var out []string
	for _, t := range All() {
		if fact(t) {
			out = append(out, t.Name)
		}
	}
	return out
}

// The facts the permission rules, the specifications and the core rely on.
func TestFacts(t *testing.T) {
	for _, c := range []struct {
		what string
		fact func(Info) bool
		want []string
	}{
		{"offered", func(t Info) bool { return t.Offered }, []string{"Agent", "SendMessage", "Bash", "TaskOutput", "TaskStop", "ListAgents", "ScheduleWakeup", "Read", "Write", "Edit", "Glob", "Grep"}},
		{"orchestration", func(t Info) bool { return t.Orchestration }, []string{"Agent", "SendMessage", "TaskOutput", "TaskStop", "ListAgents", "ScheduleWakeup"}},
		{"read-only", func(t Info) bool { return t.ReadOnly }, []string{"TaskOutput", "ListAgents", "Read", "Glob", "Grep"}},
		{"reads files", func(t Info) bool { return t.Files == ReadsFiles }, []string{"Read", "Glob", "Grep"}},
		{"edits files", Info.Edits, []string{"Write", "Edit", "MultiEdit", "NotebookEdit"}},
		{"file tool", Info.FileTool, []string{"Read", "Write", "Edit", "Glob", "Grep", "MultiEdit", "NotebookEdit"}},
		{"deny covers its kind", func(t Info) bool { return t.DenyCoversFiles }, []string{"Read", "Write", "Edit", "MultiEdit"}},
		{"background", func(t Info) bool { return t.Background }, []string{"Agent", "Bash"}},
		{"reissue", func(t Info) bool { return t.Reissue }, []string{"TaskOutput", "ListAgents", "Read", "Write", "Glob", "Grep"}},
	} {
		if got := names(c.fact); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
	if got := Offered(); !slices.Equal(got, names(func(t Info) bool { return t.Offered })) {
		t.Errorf("Offered() = %v", got)
	}
}

func TestOf(t *testing.T) {
	for _, tool := range All() {
		if got := Of(tool.Name); got != tool || !Known(tool.Name) {
			t.Errorf("Of(%s) = %+v, want %+v", tool.Name, got, tool)
		}
		if tool.DenyCoversFiles && !tool.FileTool() {
			t.Errorf("%s: a deny rule covers the tools of its kind, but it names no file", tool.Name)
		}
	}
	if got := Of("mcp__x__y"); got != (Info{Name: "mcp__x__y"}) || Known("mcp__x__y") {
		t.Errorf("an unknown tool has facts: %+v", got)
	}
	all := All()
	all[0].ReadOnly = true
	if Of(all[0].Name).ReadOnly {
		t.Error("All shares the table")
	}
}
