// Package tool defines the tools vigil offers to models and executes the file
// tools (Read, Write, Edit, Glob, Grep) inside a confined Workspace.
//
// Specs and Spec give each tool's name, description and JSON Schema (draft
// 2020-12 vocabulary, an object with additionalProperties false). Validate
// checks a tool call's input against that schema, plus the rules a schema
// cannot say; the Workspace runs the same checks before it touches a file.
// The agent and task tools (Agent, SendMessage, Bash, TaskOutput, TaskStop,
// ListAgents, ScheduleWakeup) are specified here but executed by vigil's
// runtime.
package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/tool/toolinfo"
)

// kind is the JSON type of a tool parameter.
type kind string

const (
	kindString  kind = "string"
	kindInteger kind = "integer"
	kindBoolean kind = "boolean"
	kindNumber  kind = "number"
)

// param is one property of a tool's input object.
type param struct {
	name     string
	kind     kind
	desc     string
	required bool
	enum     []string
	def      any    // default value, shown in the schema; nil for none
	min, max *int64 // inclusive bounds of an integer
	format   string // JSON Schema format of a string
}

// def is one tool: what the model sees, and the checks a schema cannot say.
type def struct {
	name   string
	desc   string
	params []param
	// check runs after the input matched the schema.
	check func(in args) error
}

func bound(n int64) *int64 { return &n }

// The limits tools share.
const (
	bashDefaultTimeoutMS   = 120000
	bashMaxTimeoutMS       = 600000
	outputDefaultTimeoutMS = 30000
	readDefaultLimit       = 2000
	maxLineRunes           = 2000
	globMaxResults         = 1000
)

// defs lists every tool in the order Specs returns them.
var defs = []def{
	{
		name: "Agent",
		desc: "Launch a subagent to carry out a task on its own. The subagent starts with no view of this " +
			"conversation: the prompt must hold everything it needs (goal, context, files, constraints, the " +
			"form of the answer you want).\n\n" +
			"By default the call is foreground: it returns when the subagent's run ends, with the subagent's " +
			"final reply as the result. With run_in_background: true the call returns at once with the " +
			"subagent's agent id and task id, and you keep working; each time a run of that subagent ends, a " +
			"<task-notification> carrying its status and reply arrives in your conversation. Do not poll for it.\n\n" +
			"A subagent keeps its transcript after a run ends: address it with SendMessage (by id or by name) to " +
			"give it follow-up work, and it resumes. Use ListAgents to see agents and their states, TaskStop to " +
			"stop one.",
		params: []param{
			{name: "description", kind: kindString, required: true,
				desc: "A short (3 to 5 words) description of the task, shown in status lists and notifications."},
			{name: "prompt", kind: kindString, required: true,
				desc: "The complete task for the subagent, self-contained."},
			{name: "name", kind: kindString,
				desc: "A name for the subagent, unique in this session. Other agents can address it by this name " +
					"in SendMessage's to field, as well as by its agent id."},
			{name: "model", kind: kindString,
				desc: "The model the subagent runs on. Default: the model of the agent that launches it."},
			{name: "run_in_background", kind: kindBoolean, def: false,
				desc: "false (default): wait for the subagent's run to end and return its reply. true: return its " +
					"agent id and task id at once; a <task-notification> arrives each time one of its runs ends."},
			{name: "budget_tokens", kind: kindInteger, min: bound(1),
				desc: "Bound the subagent's tree (it and the subagents it starts) to this many tokens, input and output. " +
					"A budget can only be lowered: it never exceeds what your own tree has left. When it is spent, the " +
					"subagent's run ends budget_exceeded and you are notified."},
			{name: "budget_rounds", kind: kindInteger, min: bound(1),
				desc: "Bound the subagent's tree to this many model rounds."},
			{name: "budget_seconds", kind: kindInteger, min: bound(1),
				desc: "Bound the subagent's tree to this much run time, in seconds."},
			{name: "budget_usd", kind: kindNumber, min: bound(0),
				desc: "Bound the subagent's tree to this cost in US dollars (models with a known price)."},
		},
	},
	{
		name: "SendMessage",
		desc: "Send a message to another agent of this session: a subagent (by agent id or name) or the main " +
			"agent (\"main\"). The result says what happened, always one of:\n" +
			"- joined: the agent is running and its current turn sees the message at its next model round;\n" +
			"- queued-behind-stop: the agent is finishing its current run, which will not see the message; its " +
			"next run answers it (you get a notification for each run);\n" +
			"- resumed: the agent was idle, and a new run started to answer the message;\n" +
			"- rejected: the message was not delivered (no such agent, agent closed, limits), with the reason;\n" +
			"- pending: the agent's model round is in flight, and its answer decides: if the run goes on, the " +
			"message joins it; if that round was its last, the next run answers. The result names both runs. " +
			"You never wait for another agent's model: the call returns at once.\n" +
			"Replies of a subagent you own arrive as <task-notification>s when its runs end.",
		params: []param{
			{name: "to", kind: kindString, required: true,
				desc: "The recipient: an agent id, an agent name, or \"main\" for the main agent."},
			{name: "message", kind: kindString, required: true,
				desc: "The message, self-contained: the recipient may not know what you are looking at."},
			{name: "priority", kind: kindString, enum: []string{"now", "next", "later"}, def: "next",
				desc: "now: interrupt the recipient's current model round. next (default): join its running turn " +
					"at the next model round. later: wait until its current turn ends."},
		},
	},
	{
		name: "Bash",
		desc: "Run a shell command with bash in the working directory and return its output (stdout and " +
			"stderr) and exit code. The working directory persists between calls; shell variables do not.\n\n" +
			"A foreground command is killed when its timeout passes. With run_in_background: true the call " +
			"returns a task id at once; read the output with TaskOutput, stop it with TaskStop, and a " +
			"<task-notification> with the exit code and the tail of the output arrives when it exits.\n\n" +
			"Prefer Read, Write, Edit, Glob and Grep to cat, sed, echo redirection, find and grep.",
		params: []param{
			{name: "command", kind: kindString, required: true,
				desc: "The command to run."},
			{name: "timeout", kind: kindInteger, def: bashDefaultTimeoutMS, min: bound(1), max: bound(bashMaxTimeoutMS),
				desc: "Timeout in milliseconds for a foreground command. Default 120000 (2 minutes), at most 600000 (10 minutes)."},
			{name: "description", kind: kindString,
				desc: "What the command does, in 5 to 10 words, shown to the user."},
			{name: "run_in_background", kind: kindBoolean, def: false,
				desc: "true: start the command as a background task and return its task id at once."},
		},
	},
	{
		name: "TaskOutput",
		desc: "Read the output of a background task (a background Bash command or a background subagent) and " +
			"its status. With block: true, wait until the task ends or the timeout passes. You are notified " +
			"when a task ends, so blocking is only needed when you have nothing else to do.",
		params: []param{
			{name: "task_id", kind: kindString, required: true,
				desc: "The id of the task, as returned when it started."},
			{name: "block", kind: kindBoolean, def: false,
				desc: "true: wait for the task to end (or the timeout) before returning. Default false: return at once."},
			{name: "timeout", kind: kindInteger, def: outputDefaultTimeoutMS, min: bound(0), max: bound(bashMaxTimeoutMS),
				desc: "How long to wait with block: true, in milliseconds. Default 30000."},
			{name: "offset", kind: kindInteger, min: bound(0),
				desc: "Byte offset in the task's output to start from. Pass the next offset of a previous " +
					"result to get only new output. Default 0."},
			{name: "limit", kind: kindInteger, min: bound(1),
				desc: "The most bytes of output to return. Default: all (the result may be truncated)."},
		},
	},
	{
		name: "TaskStop",
		desc: "Stop a background task: kill a background Bash command, or cancel a background subagent's " +
			"current run. Its owner is notified that it ended.",
		params: []param{
			{name: "task_id", kind: kindString, required: true,
				desc: "The id of the task to stop."},
		},
	},
	{
		name: "ListAgents",
		desc: "List the agents of this session (the main agent and every subagent) with their id, name, " +
			"owner, state (idle, running, waiting, closed), background tasks and pending messages.",
	},
	{
		name: "ScheduleWakeup",
		desc: "Schedule a prompt to be delivered to you later, as a timer item in your inbox: after " +
			"delay_seconds, or at a given time. Give exactly one of delay_seconds and at. Use it to check back " +
			"on something instead of waiting or polling.",
		params: []param{
			{name: "prompt", kind: kindString, required: true,
				desc: "The text delivered to you when the timer fires: say what to check or do."},
			{name: "delay_seconds", kind: kindInteger, min: bound(0),
				desc: "Seconds from now until the wakeup. Give this or at, not both."},
			{name: "at", kind: kindString, format: "date-time",
				desc: "The time of the wakeup, RFC 3339 (e.g. 2026-01-02T15:04:05Z). Give this or delay_seconds, not both."},
		},
		check: checkWakeup,
	},
	{
		name: "Read",
		desc: "Read a text file of the workspace. The result numbers lines like cat -n: the line number, a " +
			"tab, then the line. By default it returns up to 2000 lines from the start; use offset and limit " +
			"for long files. Lines longer than 2000 characters are cut. Binary files are refused. Use Glob " +
			"or Grep to find files, Bash to list directories.",
		params: []param{
			{name: "file_path", kind: kindString, required: true,
				desc: "The file to read: absolute, or relative to the working directory."},
			{name: "offset", kind: kindInteger, min: bound(1),
				desc: "The 1-based line number to start reading at. Default 1."},
			{name: "limit", kind: kindInteger, def: readDefaultLimit, min: bound(1),
				desc: "The most lines to return. Default 2000."},
		},
	},
	{
		name: "Write",
		desc: "Write a file of the workspace, replacing it if it exists. Missing parent directories are " +
			"created. The write is atomic: readers see the old content or the new, never a mix. Prefer Edit " +
			"to change part of an existing file; Read a file before you overwrite it.",
		params: []param{
			{name: "file_path", kind: kindString, required: true,
				desc: "The file to write: absolute, or relative to the working directory."},
			{name: "content", kind: kindString, required: true,
				desc: "The complete new content of the file."},
		},
	},
	{
		name: "Edit",
		desc: "Replace text in a file of the workspace. old_string must occur exactly once in the file, " +
			"unless replace_all is true; give enough surrounding lines to make it unique. Match the file's " +
			"text exactly, indentation included, without the line-number prefix Read adds.",
		params: []param{
			{name: "file_path", kind: kindString, required: true,
				desc: "The file to edit: absolute, or relative to the working directory."},
			{name: "old_string", kind: kindString, required: true,
				desc: "The exact text to replace. Must not be empty."},
			{name: "new_string", kind: kindString, required: true,
				desc: "The text to put in its place. Must differ from old_string."},
			{name: "replace_all", kind: kindBoolean, def: false,
				desc: "true: replace every occurrence of old_string. Default false: old_string must occur exactly once."},
		},
	},
	{
		name: "Glob",
		desc: "Find files by name pattern. Patterns use / as separator; * matches within one path segment, " +
			"** matches any number of segments, ? one character, [abc] a class, {a,b} alternatives: " +
			"\"**/*.go\", \"src/**/*.{ts,tsx}\". Returns matching file paths (relative to the working directory " +
			"when inside it), most recently modified first, at most 1000. .git directories are skipped.",
		params: []param{
			{name: "pattern", kind: kindString, required: true,
				desc: "The pattern to match file paths against, relative to path."},
			{name: "path", kind: kindString,
				desc: "The directory to search in. Default: the working directory."},
		},
	},
	{
		name: "Grep",
		desc: "Search file contents with a regular expression (Go RE2 syntax: no backreferences or " +
			"lookaround). Searches a file, or every text file under a directory (binary files and .git " +
			"directories are skipped).\n\n" +
			"output_mode files_with_matches (default) lists the files that match; content shows matching " +
			"lines as path:line:text (context lines as path-line-text); count shows path:count.",
		params: []param{
			{name: "pattern", kind: kindString, required: true,
				desc: "The regular expression to search for (Go RE2 syntax)."},
			{name: "path", kind: kindString,
				desc: "The file or directory to search. Default: the working directory."},
			{name: "glob", kind: kindString,
				desc: "Only search files whose name matches this glob, e.g. \"*.go\" or \"*.{ts,tsx}\". A glob " +
					"with a / is matched against the path relative to path, and may use **."},
			{name: "output_mode", kind: kindString, enum: []string{"content", "files_with_matches", "count"},
				def:  "files_with_matches",
				desc: "content: matching lines; files_with_matches (default): file paths; count: matches per file."},
			{name: "case_insensitive", kind: kindBoolean, def: false,
				desc: "true: match case-insensitively."},
			{name: "context", kind: kindInteger, min: bound(0),
				desc: "Lines of context to show before and after each match (content mode only)."},
			{name: "head_limit", kind: kindInteger, min: bound(1),
				desc: "Return only the first N output lines (content), files (files_with_matches) or entries (count)."},
		},
	},
}

// rendered holds every tool's specification, rendered once: the schemas
// are JSON text built with encoding/json, which no call needs again.
type rendered struct {
	// all are the specifications in the order of defs.
	all []chat.ToolSpec
	// byName indexes all.
	byName map[string]int
}

// specs are the rendered specifications. It is set once, when the package
// is initialised, and only read after.
var specs = render(defs)

func render(defs []def) rendered {
	r := rendered{all: make([]chat.ToolSpec, len(defs)), byName: make(map[string]int, len(defs))}
	for i, d := range defs {
		schema := d.schema()
		// Shared by every Specs result: capped, so that appending to
		// one copies it rather than writing after it.
		r.all[i] = chat.ToolSpec{Name: d.name, Description: d.desc, InputSchema: schema[:len(schema):len(schema)]}
		r.byName[d.name] = i
	}
	return r
}

func lookup(name string) (*def, bool) {
	for i := range defs {
		if defs[i].name == name {
			return &defs[i], true
		}
	}
	return nil, false
}

// Specs returns the specifications of the named tools, in the order given,
// or of every tool when no name is given. Names that are not tools are left
// out; use Spec to check a name.
//
// The slice is the caller's, but the InputSchema bytes are shared by every
// call (the runtime asks for them at every model call): read them, never
// change them in place. Spec returns a copy that may be changed.
func Specs(names ...string) []chat.ToolSpec {
	if len(names) == 0 {
		return slices.Clone(specs.all)
	}
	out := make([]chat.ToolSpec, 0, len(names))
	for _, n := range names {
		if i, ok := specs.byName[n]; ok {
			out = append(out, specs.all[i])
		}
	}
	return out
}

// Spec returns the specification of the named tool. Its InputSchema is a
// copy: changing it changes no other result.
func Spec(name string) (chat.ToolSpec, bool) {
	i, ok := specs.byName[name]
	if !ok {
		return chat.ToolSpec{}, false
	}
	s := specs.all[i]
	s.InputSchema = bytes.Clone(s.InputSchema)
	return s, true
}

// ReadOnly reports whether the tool only reads: Read, Glob, Grep,
// TaskOutput and ListAgents (see toolinfo).
func ReadOnly(name string) bool {
	t := toolinfo.Of(name)
	return t.Offered && t.ReadOnly
}

// Edits reports whether the tool changes files: Write and Edit (see
// toolinfo).
func Edits(name string) bool {
	t := toolinfo.Of(name)
	return t.Offered && t.Edits()
}

// propSchema is the schema of one property; the field order is the order
// of the JSON keys.
type propSchema struct {
	Type        kind     `json:"type"`
	Description string   `json:"description"`
	Enum        []string `json:"enum,omitempty"`
	Format      string   `json:"format,omitempty"`
	Default     any      `json:"default,omitempty"`
	Minimum     *int64   `json:"minimum,omitempty"`
	Maximum     *int64   `json:"maximum,omitempty"`
}

// objectSchema is a tool's input schema. Properties is pre-rendered to keep
// the parameters in their declared order.
type objectSchema struct {
	Type                 string          `json:"type"`
	Properties           json.RawMessage `json:"properties"`
	Required             []string        `json:"required"`
	AdditionalProperties bool            `json:"additionalProperties"`
}

// schema renders the tool's input schema. Combinators (oneOf, anyOf) are
// not used at the top level, which some providers refuse; cross-field rules
// are stated in descriptions and enforced by check.
func (d *def) schema() json.RawMessage {
	var props bytes.Buffer
	props.WriteByte('{')
	required := []string{}
	for i, p := range d.params {
		if i > 0 {
			props.WriteByte(',')
		}
		k, err := json.Marshal(p.name)
		if err != nil {
			panic(err)
		}
		v, err := json.Marshal(propSchema{
			Type: p.kind, Description: p.desc, Enum: p.enum, Format: p.format,
			Default: p.def, Minimum: p.min, Maximum: p.max,
		})
		if err != nil {
			panic(fmt.Sprintf("tool %s: param %s: %v", d.name, p.name, err))
		}
		props.Write(k)
		props.WriteByte(':')
		props.Write(v)
		if p.required {
			required = append(required, p.name)
		}
	}
	props.WriteByte('}')
	b, err := json.Marshal(objectSchema{
		Type: "object", Properties: props.Bytes(), Required: required, AdditionalProperties: false,
	})
	if err != nil {
		panic(fmt.Sprintf("tool %s: %v", d.name, err))
	}
	return b
}

// paramNames lists the tool's parameter names, for error messages.
func (d *def) paramNames() []string {
	names := make([]string, len(d.params))
	for i, p := range d.params {
		names[i] = p.name
	}
	return names
}

func (d *def) param(name string) (*param, bool) {
	i := slices.IndexFunc(d.params, func(p param) bool { return p.name == name })
	if i < 0 {
		return nil, false
	}
	return &d.params[i], true
}
