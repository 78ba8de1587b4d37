package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// args is a tool call's arguments, checked against the tool's schema. Its
// values are string, int64 or bool, by the parameter's kind; a parameter
// given as JSON null is treated as absent.
type args struct {
	vals map[string]any
}

func (in args) str(name string) (string, bool) {
	v, ok := in.vals[name].(string)
	return v, ok
}

func (in args) integer(name string) (int64, bool) {
	v, ok := in.vals[name].(int64)
	return v, ok
}

func (in args) boolean(name string) bool {
	v, _ := in.vals[name].(bool)
	return v
}

// Validate checks a call of the named tool: input must be a JSON object
// holding only the tool's parameters, every required one, each of the right
// type and within its enum and bounds, and the cross-field rules (such as
// ScheduleWakeup's exactly one of delay_seconds and at) must hold. An empty
// input counts as {}. The error lists every problem found.
func Validate(name string, input json.RawMessage) error {
	d, ok := lookup(name)
	if !ok {
		return fmt.Errorf("unknown tool %q", name)
	}
	_, err := parseInput(d, input)
	return err
}

func parseInput(d *def, raw json.RawMessage) (args, error) {
	in := args{vals: map[string]any{}}
	fail := func(problems ...string) (args, error) {
		return args{}, fmt.Errorf("invalid %s input: %s", d.name, strings.Join(problems, "; "))
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return fail(fmt.Sprintf("the input must be a JSON object, got %s", jsonType(raw)))
		}
		return fail(fmt.Sprintf("malformed JSON: %v", err))
	}

	var problems []string
	var unknown []string
	for k := range fields {
		if _, ok := d.param(k); !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		takes := "takes no parameters"
		if len(d.params) > 0 {
			takes = "takes " + strings.Join(d.paramNames(), ", ")
		}
		problems = append(problems, fmt.Sprintf("unknown field %s (%s %s)", quoteList(unknown), d.name, takes))
	}
	var missing []string
	for i := range d.params {
		p := &d.params[i]
		v, ok := fields[p.name]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			if p.required {
				missing = append(missing, p.name)
			}
			continue
		}
		val, err := p.parse(v)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		in.vals[p.name] = val
	}
	if len(missing) > 0 {
		word := "field"
		if len(missing) > 1 {
			word = "fields"
		}
		problems = append(problems, fmt.Sprintf("missing required %s %s", word, quoteList(missing)))
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	if d.check != nil {
		if err := d.check(in); err != nil {
			return fail(err.Error())
		}
	}
	return in, nil
}

// parse decodes and checks the value of the parameter.
func (p *param) parse(raw json.RawMessage) (any, error) {
	wrongType := fmt.Errorf("field %q must be %s, got %s", p.name, article(p.kind), jsonType(raw))
	switch p.kind {
	case kindString:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, wrongType
		}
		if len(p.enum) > 0 && !slices.Contains(p.enum, s) {
			return nil, fmt.Errorf("field %q must be one of %s, got %q", p.name, strings.Join(p.enum, ", "), s)
		}
		return s, nil
	case kindBoolean:
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, wrongType
		}
		return b, nil
	case kindInteger:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil || jsonType(raw) != "number" {
			return nil, wrongType
		}
		v, err := n.Int64()
		if err != nil {
			// JSON Schema counts 3.0 as an integer.
			f, ferr := n.Float64()
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) >= math.MaxInt64 {
				return nil, fmt.Errorf("field %q must be an integer, got %s", p.name, n)
			}
			v = int64(f)
		}
		if p.min != nil && v < *p.min {
			return nil, fmt.Errorf("field %q must be at least %d, got %d", p.name, *p.min, v)
		}
		if p.max != nil && v > *p.max {
			return nil, fmt.Errorf("field %q must be at most %d, got %d", p.name, *p.max, v)
		}
		return v, nil
	case kindNumber:
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || jsonType(raw) != "number" {
			return nil, wrongType
		}
		if p.min != nil && f < float64(*p.min) {
			return nil, fmt.Errorf("field %q must be at least %d, got %g", p.name, *p.min, f)
		}
		return f, nil
	}
	return nil, fmt.Errorf("field %q has unsupported kind %q", p.name, p.kind)
}

func checkWakeup(in args) error {
	_, hasDelay := in.integer("delay_seconds")
	at, hasAt := in.str("at")
	switch {
	case hasDelay && hasAt:
		return errors.New("give exactly one of delay_seconds and at, not both")
	case !hasDelay && !hasAt:
		return errors.New("give one of delay_seconds and at")
	case hasAt:
		if _, err := time.Parse(time.RFC3339, at); err != nil {
			return fmt.Errorf("field \"at\" must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", at)
		}
	}
	return nil
}

// jsonType names the JSON type of a raw value.
func jsonType(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func article(k kind) string {
	if k == kindInteger {
		return "an integer"
	}
	return "a " + string(k)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
