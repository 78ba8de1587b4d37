package tool

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/tool/toolinfo"
)

// wantParams is the contract vigil's core relies on: every tool, its
// parameters, and which are required.
var wantParams = map[string]struct{ all, required []string }{
	"Agent":          {[]string{"description", "prompt", "name", "model", "run_in_background", "budget_tokens", "budget_rounds", "budget_seconds", "budget_usd"}, []string{"description", "prompt"}},
	"SendMessage":    {[]string{"to", "message", "priority"}, []string{"to", "message"}},
	"Bash":           {[]string{"command", "timeout", "description", "run_in_background"}, []string{"command"}},
	"TaskOutput":     {[]string{"task_id", "block", "timeout", "offset", "limit"}, []string{"task_id"}},
	"TaskStop":       {[]string{"task_id"}, []string{"task_id"}},
	"ListAgents":     {nil, nil},
	"ScheduleWakeup": {[]string{"prompt", "delay_seconds", "at"}, []string{"prompt"}},
	"Read":           {[]string{"file_path", "offset", "limit"}, []string{"file_path"}},
	"Write":          {[]string{"file_path", "content"}, []string{"file_path", "content"}},
	"Edit":           {[]string{"file_path", "old_string", "new_string", "replace_all"}, []string{"file_path", "old_string", "new_string"}},
	"Glob":           {[]string{"pattern", "path"}, []string{"pattern"}},
	"Grep": {[]string{"pattern", "path", "glob", "output_mode", "case_insensitive", "context", "head_limit"},
		[]string{"pattern"}},
}

type schemaProp struct {
	Type        string   `json:"type"`
	Description string   `json:"description"`
	Enum        []string `json:"enum"`
	Format      string   `json:"format"`
	Default     any      `json:"default"`
	Minimum     *float64 `json:"minimum"`
	Maximum     *float64 `json:"maximum"`
}

type schemaDoc struct {
	Type                 string                `json:"type"`
	Properties           map[string]schemaProp `json:"properties"`
	Required             []string              `json:"required"`
	AdditionalProperties *bool                 `json:"additionalProperties"`
}

func parseSchema(t *testing.T, name string) schemaDoc {
	t.Helper()
	s, ok := Spec(name)
	if !ok {
		t.Fatalf("Spec(%q) not found", name)
	}
	if !json.Valid(s.InputSchema) {
		t.Fatalf("%s: schema is not valid JSON: %s", name, s.InputSchema)
	}
	var doc schemaDoc
	dec := json.NewDecoder(strings.NewReader(string(s.InputSchema)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: decode schema: %v", name, err)
	}
	return doc
}

func TestSpecsListExactlyTheContractParameters(t *testing.T) {
	all := Specs()
	if len(all) != len(wantParams) {
		t.Fatalf("Specs() has %d tools, want %d", len(all), len(wantParams))
	}
	for _, s := range all {
		want, ok := wantParams[s.Name]
		if !ok {
			t.Errorf("unexpected tool %q", s.Name)
			continue
		}
		if len(s.Description) < 40 {
			t.Errorf("%s: description too short: %q", s.Name, s.Description)
		}
		doc := parseSchema(t, s.Name)
		if doc.Type != "object" {
			t.Errorf("%s: type %q, want object", s.Name, doc.Type)
		}
		if doc.AdditionalProperties == nil || *doc.AdditionalProperties {
			t.Errorf("%s: additionalProperties must be false", s.Name)
		}
		got := slices.Sorted(maps.Keys(doc.Properties))
		if w := slices.Sorted(slices.Values(want.all)); !slices.Equal(got, w) {
			t.Errorf("%s: properties %v, want %v", s.Name, got, w)
		}
		if !slices.Equal(doc.Required, want.required) && !(len(doc.Required) == 0 && len(want.required) == 0) {
			t.Errorf("%s: required %v, want %v", s.Name, doc.Required, want.required)
		}
		if doc.Required == nil {
			t.Errorf("%s: required must be listed, even when empty", s.Name)
		}
		for pn, p := range doc.Properties {
			if !slices.Contains([]string{"string", "integer", "number", "boolean"}, p.Type) {
				t.Errorf("%s.%s: type %q", s.Name, pn, p.Type)
			}
			if p.Description == "" {
				t.Errorf("%s.%s: no description", s.Name, pn)
			}
		}
	}
}

func TestSpecsKeepDeclaredPropertyOrder(t *testing.T) {
	s, _ := Spec("Edit")
	raw := string(s.InputSchema)
	last := -1
	for _, p := range wantParams["Edit"].all {
		i := strings.Index(raw, `"`+p+`":`)
		if i < last {
			t.Fatalf("property %s out of order in %s", p, raw)
		}
		last = i
	}
}

func TestSpecDefaultsEnumsAndBounds(t *testing.T) {
	type check struct {
		tool, param string
		typ         string
		def         any
		enum        []string
		max         float64
	}
	for _, c := range []check{
		{tool: "Agent", param: "run_in_background", typ: "boolean", def: false},
		{tool: "SendMessage", param: "priority", typ: "string", def: "next", enum: []string{"now", "next", "later"}},
		{tool: "Bash", param: "timeout", typ: "integer", def: 120000.0, max: 600000},
		{tool: "TaskOutput", param: "block", typ: "boolean", def: false},
		{tool: "TaskOutput", param: "timeout", typ: "integer", def: 30000.0},
		{tool: "Read", param: "limit", typ: "integer", def: 2000.0},
		{tool: "Read", param: "offset", typ: "integer"},
		{tool: "ScheduleWakeup", param: "delay_seconds", typ: "integer"},
		{tool: "ScheduleWakeup", param: "at", typ: "string"},
		{tool: "Edit", param: "replace_all", typ: "boolean", def: false},
		{tool: "Grep", param: "output_mode", typ: "string", def: "files_with_matches",
			enum: []string{"content", "files_with_matches", "count"}},
		{tool: "Grep", param: "case_insensitive", typ: "boolean", def: false},
		{tool: "Grep", param: "context", typ: "integer"},
		{tool: "Grep", param: "head_limit", typ: "integer"},
	} {
		p := parseSchema(t, c.tool).Properties[c.param]
		if p.Type != c.typ {
			t.Errorf("%s.%s: type %q, want %q", c.tool, c.param, p.Type, c.typ)
		}
		if p.Default != c.def {
			t.Errorf("%s.%s: default %v, want %v", c.tool, c.param, p.Default, c.def)
		}
		if !slices.Equal(p.Enum, c.enum) {
			t.Errorf("%s.%s: enum %v, want %v", c.tool, c.param, p.Enum, c.enum)
		}
		if c.max != 0 && (p.Maximum == nil || *p.Maximum != c.max) {
			t.Errorf("%s.%s: maximum %v, want %v", c.tool, c.param, p.Maximum, c.max)
		}
	}
}

// Every default must pass the tool's own validation.
func TestSpecDefaultsAreValid(t *testing.T) {
	for _, d := range defs {
		for _, p := range d.params {
			if p.def == nil {
				continue
			}
			in := map[string]any{p.name: p.def}
			for _, q := range d.params {
				if q.required && q.name != p.name {
					in[q.name] = "x"
				}
			}
			if d.name == "ScheduleWakeup" {
				in["delay_seconds"] = 1
			}
			raw, _ := json.Marshal(in)
			if err := Validate(d.name, raw); err != nil {
				t.Errorf("%s.%s default %v: %v", d.name, p.name, p.def, err)
			}
		}
	}
}

func TestSpecsByName(t *testing.T) {
	got := Specs("Read", "NoSuchTool", "Grep")
	if len(got) != 2 || got[0].Name != "Read" || got[1].Name != "Grep" {
		t.Fatalf("Specs(Read, NoSuchTool, Grep) = %v", got)
	}
	if _, ok := Spec("NoSuchTool"); ok {
		t.Fatal("Spec(NoSuchTool) found")
	}
	// The result is a copy: changing it does not change the next one.
	s, _ := Spec("Read")
	s.InputSchema[0] = 'X'
	if again, _ := Spec("Read"); again.InputSchema[0] != '{' {
		t.Fatal("Spec returned shared schema bytes")
	}
}

// The specifications are of the tools toolinfo says vigil offers, in its
// order; a tool that can start background work takes run_in_background.
func TestSpecsAreTheOfferedTools(t *testing.T) {
	var got []string
	for _, s := range Specs() {
		got = append(got, s.Name)
		_, bg := parseSchema(t, s.Name).Properties["run_in_background"]
		if want := toolinfo.Of(s.Name).Background; bg != want {
			t.Errorf("%s: run_in_background %v, toolinfo says background %v", s.Name, bg, want)
		}
	}
	if want := toolinfo.Offered(); !slices.Equal(got, want) {
		t.Fatalf("Specs() are %v, toolinfo offers %v", got, want)
	}
}

func TestReadOnlyAndEdits(t *testing.T) {
	readOnly := []string{"Read", "Glob", "Grep", "TaskOutput", "ListAgents"}
	edits := []string{"Write", "Edit"}
	for name := range wantParams {
		if got, want := ReadOnly(name), slices.Contains(readOnly, name); got != want {
			t.Errorf("ReadOnly(%s) = %v, want %v", name, got, want)
		}
		if got, want := Edits(name), slices.Contains(edits, name); got != want {
			t.Errorf("Edits(%s) = %v, want %v", name, got, want)
		}
	}
	if ReadOnly("nope") || Edits("nope") {
		t.Error("unknown tool reported read-only or editing")
	}
}

// Specs gives the same specifications as Spec, in the order of defs, and
// a slice of the caller's own.
func TestSpecsMatchSpec(t *testing.T) {
	all := Specs()
	for i, d := range defs {
		s, ok := Spec(d.name)
		if !ok || all[i].Name != d.name || all[i].Description != s.Description || string(all[i].InputSchema) != string(s.InputSchema) {
			t.Fatalf("Specs()[%d] = %+v, Spec(%s) = %+v", i, all[i], d.name, s)
		}
		if string(s.InputSchema) != string(d.schema()) {
			t.Fatalf("%s: rendered schema differs from its def", d.name)
		}
		if cap(all[i].InputSchema) != len(all[i].InputSchema) {
			t.Fatalf("%s: shared schema has room to append into", d.name)
		}
	}
	all[0] = all[1]
	if again := Specs(); again[0].Name != defs[0].name || again[1].Name != defs[1].name {
		t.Fatal("changing a Specs result changed the next one")
	}
	if got := Specs("Grep", "Read"); len(got) != 2 || got[0].Name != "Grep" || got[1].Description != defs[slices.IndexFunc(defs, func(d def) bool { return d.name == "Read" })].desc {
		t.Fatalf("Specs(Grep, Read) = %v", got)
	}
}

// BenchmarkSpecs is what the runtime pays for the tools of every model
// call: one slice, no rendering, no copy of the schemas.
func BenchmarkSpecs(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if len(Specs()) != len(defs) {
			b.Fatal("wrong count")
		}
	}
}
