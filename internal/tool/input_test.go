package tool

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		tool, input string
		want        string // substring of the error; "" for valid
	}{
		{"Read", `{"file_path":"a.go"}`, ""},
		{"Read", `{"file_path":"a.go","offset":null}`, ""},
		{"Read", ` {"file_path":"a.go","limit":10.0} `, ""},
		{"ListAgents", ``, ""},
		{"ListAgents", `null`, ""},
		{"ListAgents", `{}`, ""},
		{"SendMessage", `{"to":"main","message":"hi","priority":"now"}`, ""},
		{"ScheduleWakeup", `{"prompt":"p","delay_seconds":60}`, ""},
		{"ScheduleWakeup", `{"prompt":"p","at":"2026-01-02T15:04:05+01:00"}`, ""},
		{"Bash", `{"command":"ls","timeout":600000,"run_in_background":true}`, ""},

		{"Read", `{"file_path":`, "malformed JSON"},
		{"Read", `{"file_path":"a"} x`, "malformed JSON"},
		{"Read", `[1,2]`, "must be a JSON object, got array"},
		{"Read", `"a.go"`, "must be a JSON object, got string"},
		{"Read", `{}`, `missing required field "file_path"`},
		{"Read", `{"file_path":null}`, `missing required field "file_path"`},
		{"Edit", `{"file_path":"a"}`, `missing required fields "old_string", "new_string"`},
		{"Read", `{"file_path":"a","path":"b"}`, `unknown field "path" (Read takes file_path, offset, limit)`},
		{"ListAgents", `{"all":true}`, `unknown field "all" (ListAgents takes no parameters)`},
		{"Read", `{"file_path":42}`, `field "file_path" must be a string, got number`},
		{"Read", `{"file_path":"a","offset":"3"}`, `field "offset" must be an integer, got string`},
		{"Read", `{"file_path":"a","offset":1.5}`, `field "offset" must be an integer, got 1.5`},
		{"Read", `{"file_path":"a","offset":0}`, `field "offset" must be at least 1, got 0`},
		{"Read", `{"file_path":"a","limit":1e30}`, `field "limit" must be an integer`},
		{"Edit", `{"file_path":"a","old_string":"x","new_string":"y","replace_all":"yes"}`,
			`field "replace_all" must be a boolean, got string`},
		{"Bash", `{"command":"ls","timeout":600001}`, `field "timeout" must be at most 600000, got 600001`},
		{"SendMessage", `{"to":"main","message":"hi","priority":"soon"}`,
			`field "priority" must be one of now, next, later, got "soon"`},
		{"Grep", `{"pattern":"x","output_mode":"lines"}`, `must be one of content, files_with_matches, count`},
		{"ScheduleWakeup", `{"prompt":"p"}`, "give one of delay_seconds and at"},
		{"ScheduleWakeup", `{"prompt":"p","delay_seconds":1,"at":"2026-01-02T15:04:05Z"}`, "not both"},
		{"ScheduleWakeup", `{"prompt":"p","at":"tomorrow"}`, `field "at" must be an RFC 3339 time`},
		{"NoSuchTool", `{}`, `unknown tool "NoSuchTool"`},
	} {
		err := Validate(c.tool, json.RawMessage(c.input))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Validate(%s, %s) = %v, want nil", c.tool, c.input, err)
		case c.want != "" && err == nil:
			t.Errorf("Validate(%s, %s) = nil, want %q", c.tool, c.input, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("Validate(%s, %s) = %q, want it to contain %q", c.tool, c.input, err, c.want)
		}
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	err := Validate("Grep", json.RawMessage(`{"pattern":1,"context":-1,"bogus":true}`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`unknown field "bogus"`, `"pattern" must be a string`, `"context" must be at least 0`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// Malformed input to any file tool is an error result, never a panic, and
// never touches the disk.
func TestExecRejectsMalformedInput(t *testing.T) {
	env := newEnv(t)
	inputs := []string{
		``, `null`, `{`, `[]`, `"x"`, `42`, `true`, `{"file_path":1}`, `{"file_path":"a","bogus":1}`,
		`{"pattern":["*"]}`, `{"file_path":"a","content":null}`, `{"file_path":{"a":1}}`, "\x00",
	}
	for _, name := range []string{"Read", "Write", "Edit", "Glob", "Grep"} {
		for _, in := range inputs {
			out, isErr := env.ws.Exec(context.Background(), name, json.RawMessage(in))
			if !isErr {
				t.Errorf("Exec(%s, %q) = %q, want an error result", name, in, out)
				continue
			}
			if !strings.HasPrefix(out, "invalid "+name+" input: ") {
				t.Errorf("Exec(%s, %q) = %q, want an invalid-input message", name, in, out)
			}
		}
	}
	if _, err := readFile(env.root, "a"); err == nil {
		t.Error("a malformed Write created a file")
	}
}

func TestExecUnknownTool(t *testing.T) {
	env := newEnv(t)
	for _, name := range []string{"Bash", "Agent", "", "read"} {
		out, isErr := env.ws.Exec(context.Background(), name, json.RawMessage(`{}`))
		if !isErr || !strings.Contains(out, "unknown tool") {
			t.Errorf("Exec(%q) = %q, %v; want an unknown tool error", name, out, isErr)
		}
	}
}

func TestExecWithoutRoots(t *testing.T) {
	var ws Workspace
	out, isErr := ws.Exec(context.Background(), "Read", json.RawMessage(`{"file_path":"a"}`))
	if !isErr || !strings.Contains(out, "no roots") {
		t.Fatalf("Exec = %q, %v", out, isErr)
	}
}

func TestExecCancelled(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, isErr := env.ws.Exec(ctx, "Glob", json.RawMessage(`{"pattern":"**"}`))
	if !isErr || !strings.Contains(out, "cancelled") {
		t.Fatalf("Exec = %q, %v", out, isErr)
	}
}
