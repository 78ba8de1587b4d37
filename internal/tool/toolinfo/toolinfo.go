// Package toolinfo is vigil's one table of what it knows about each tool,
// by name: which only read, which read or edit files (and so name a path
// that permission rules match), which can start background work, which are
// safe to run again after a crash, and which act only on vigil's own state.
// The permission rules (internal/permission), the tool specifications and
// the workspace (internal/tool) and the core read these facts here; none
// keeps a list of its own. It is pure: no I/O.
package toolinfo

// Files says what a tool does with the files it names.
type Files uint8

// What a tool does with files.
const (
	NoFiles    Files = iota // it names no file
	ReadsFiles              // it reads the files it names
	EditsFiles              // it writes the files it names
)

// Info is what vigil knows about one tool.
type Info struct {
	Name string
	// Offered: vigil offers the tool to the models it runs (tool.Specs)
	// and runs it itself. A tool that is not offered is a provider
	// process's own (Claude Code's MultiEdit, NotebookEdit), which vigil
	// only judges when the process asks.
	Offered bool
	// Orchestration: the tool acts only on vigil's own state (agents,
	// messages, tasks, timers); the core decides it.
	Orchestration bool
	// ReadOnly: the tool only reads, files or vigil's state.
	ReadOnly bool
	// Files says what the tool does with the files it names; a tool that
	// names one has a path that rules match as a path.
	Files Files
	// DenyCoversFiles: a deny rule on this tool also covers every other
	// tool that does the same with files (a deny on Read covers Glob and
	// Grep; one on Write, Edit or MultiEdit every tool that edits).
	DenyCoversFiles bool
	// Background: a call may start background work that outlives it (a
	// task: run_in_background).
	Background bool
	// Reissue: executing the same call again has the same effect, so it is
	// issued again after a crash that interrupted it.
	Reissue bool
}

// table lists every tool vigil knows, vigil's own in the order it offers
// them.
var table = []Info{
	{Name: "Agent", Offered: true, Orchestration: true, Background: true},
	{Name: "SendMessage", Offered: true, Orchestration: true},
	{Name: "Bash", Offered: true, Background: true},
	{Name: "TaskOutput", Offered: true, Orchestration: true, ReadOnly: true, Reissue: true},
	{Name: "TaskStop", Offered: true, Orchestration: true},
	{Name: "ListAgents", Offered: true, Orchestration: true, ReadOnly: true, Reissue: true},
	{Name: "ScheduleWakeup", Offered: true, Orchestration: true},
	{Name: "Read", Offered: true, ReadOnly: true, Files: ReadsFiles, DenyCoversFiles: true, Reissue: true},
	{Name: "Write", Offered: true, Files: EditsFiles, DenyCoversFiles: true, Reissue: true},
	{Name: "Edit", Offered: true, Files: EditsFiles, DenyCoversFiles: true},
	{Name: "Glob", Offered: true, ReadOnly: true, Files: ReadsFiles, Reissue: true},
	{Name: "Grep", Offered: true, ReadOnly: true, Files: ReadsFiles, Reissue: true},
	// A provider process's own file tools.
	{Name: "MultiEdit", Files: EditsFiles, DenyCoversFiles: true},
	{Name: "NotebookEdit", Files: EditsFiles},
}

var byName = func() map[string]Info {
	m := make(map[string]Info, len(table))
	for _, t := range table {
		m[t.Name] = t
	}
	return m
}()

// Of returns what vigil knows about the named tool; for a tool it does not
// know (an MCP tool, a misspelling), the zero Info with only Name set: no
// fact holds.
func Of(name string) Info {
	if t, ok := byName[name]; ok {
		return t
	}
	return Info{Name: name}
}

// Known reports whether vigil knows the named tool.
func Known(name string) bool {
	_, ok := byName[name]
	return ok
}

// All returns every tool vigil knows, vigil's own first, in the order it
// offers them.
func All() []Info { return append([]Info(nil), table...) }

// Offered returns the names of the tools vigil offers, in order.
func Offered() []string {
	var out []string
	for _, t := range table {
		if t.Offered {
			out = append(out, t.Name)
		}
	}
	return out
}

// FileTool reports whether the tool names a file: its path is matched by
// rules as a path.
func (t Info) FileTool() bool { return t.Files != NoFiles }

// Edits reports whether the tool writes the files it names.
func (t Info) Edits() bool { return t.Files == EditsFiles }
