// Package textcheck finds and cleans text that no store can keep: NUL
// bytes, which PostgreSQL refuses in text and jsonb, and invalid UTF-8,
// which encoding/json would silently replace, so that what a session holds
// in memory would differ from what it stored.
//
// Check is for input from outside (API requests): it names the first bad
// field so the caller can refuse the request. Clean is for outcomes vigil
// must keep whatever they hold (a command's output, a model's reply): it
// replaces each bad byte with U+FFFD before the outcome is stepped, so the
// state and the store agree.
//
// Both walk a value by reflection: strings, byte slices that hold JSON
// (json.RawMessage), and every exported field, element, map key and value
// below them. Unexported fields are not looked at. Clean text, the common
// case, costs one walk that allocates nothing (but one key and one value
// per map); field paths are only built for a value that has a problem.
package textcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Problem says what is wrong with one field's text.
type Problem struct {
	// Field is the path of the field, by JSON name: "text", "dirs[1]",
	// "input.command".
	Field string
	// Offset is the byte offset of the first bad byte in the field's text
	// (in the JSON text, for a JSON field).
	Offset int
	// NUL is true for a NUL byte, false for invalid UTF-8.
	NUL bool
}

// Error implements error.
func (p *Problem) Error() string {
	// Worded as the server's edge check words it.
	what := "invalid UTF-8"
	if p.NUL {
		what = "contains a NUL byte"
	}
	field := p.Field
	if field == "" {
		field = "text"
	}
	return fmt.Sprintf("%s: %s at offset %d", field, what, p.Offset)
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// Check returns a *Problem for the first string in v that holds a NUL byte
// or invalid UTF-8, or nil when all of v's text is clean.
func Check(v any) error {
	if v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	if !bad(rv) {
		return nil
	}
	// Walk again, naming the fields on the way, to find the first problem.
	if p := check(rv, ""); p != nil {
		return p
	}
	return nil
}

// bad reports whether any text in v holds a NUL byte or invalid UTF-8: it
// walks v as check does, in the same order and over the same fields, but
// builds no path, and allocates nothing but a key and a value per map.
func bad(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return badString(v.String())
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && bad(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			// The field is exported when it can be read as an interface:
			// v itself never comes from an unexported field, so the
			// read-only flag that Field sets is the field's own.
			if f := v.Field(i); f.CanInterface() && bad(f) {
				return true
			}
		}
	case reflect.Slice:
		t := v.Type()
		if t == rawMessageType {
			b := v.Bytes()
			return badBytes(b) || nulEscape(b) >= 0
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return false // raw bytes are not text
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if bad(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		if v.Len() == 0 {
			return false
		}
		// One key and one value to copy each entry into: Key and Value
		// would allocate a copy per entry.
		t := v.Type()
		k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
		var it reflect.MapIter
		it.Reset(v)
		for it.Next() {
			k.SetIterKey(&it)
			e.SetIterValue(&it)
			if bad(k) || bad(e) {
				return true
			}
		}
	}
	return false
}

// badString reports whether s holds a NUL byte or invalid UTF-8.
func badString(s string) bool {
	return strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)
}

// badBytes is badString for bytes.
func badBytes(b []byte) bool {
	return bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b)
}

// String returns the problem with one string, or nil.
func String(field, s string) error {
	if p := checkString(field, s); p != nil {
		return p
	}
	return nil
}

func check(v reflect.Value, path string) *Problem {
	switch v.Kind() {
	case reflect.String:
		return checkString(path, v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return check(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			p := path
			if !f.Anonymous {
				p = join(path, fieldName(f))
			}
			if pr := check(v.Field(i), p); pr != nil {
				return pr
			}
		}
	case reflect.Slice:
		if v.Type() == rawMessageType {
			return checkJSON(path, v.Bytes())
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // raw bytes are not text
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if pr := check(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); pr != nil {
				return pr
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			k := fmt.Sprint(it.Key().Interface())
			if pr := check(it.Key(), join(path, "(key)")); pr != nil {
				return pr
			}
			if pr := check(it.Value(), join(path, k)); pr != nil {
				return pr
			}
		}
	}
	return nil
}

func checkString(path, s string) *Problem {
	if i := strings.IndexByte(s, 0); i >= 0 {
		if j := firstInvalid(s[:i]); j >= 0 {
			return &Problem{Field: path, Offset: j}
		}
		return &Problem{Field: path, Offset: i, NUL: true}
	}
	if j := firstInvalid(s); j >= 0 {
		return &Problem{Field: path, Offset: j}
	}
	return nil
}

// checkJSON checks JSON text: its bytes, and the \u0000 escape that decodes
// to a NUL byte.
func checkJSON(path string, b []byte) *Problem {
	if p := checkString(path, string(b)); p != nil {
		return p
	}
	if i := nulEscape(b); i >= 0 {
		return &Problem{Field: path, Offset: i, NUL: true}
	}
	return nil
}

// nulEscape returns the offset of the first \u0000 escape in JSON text, or
// -1. A backslash that is itself escaped does not start one.
func nulEscape(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return -1
		}
		i += j
		if i+1 < len(b) && b[i+1] == 'u' && bytes.HasPrefix(b[i+2:], []byte("0000")) {
			return i
		}
		i += 2 // the backslash and the escaped character, a backslash included
	}
	return -1
}

func firstInvalid(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
		}
	}
	return -1
}

// Clean returns v with every NUL byte and invalid UTF-8 sequence in its
// text replaced by U+FFFD, and whether anything was replaced. When nothing
// was, v itself is returned; otherwise a copy (v is not modified). JSON text
// with a \u0000 escape is decoded, cleaned and encoded again.
func Clean[T any](v T) (T, bool) {
	if !bad(reflect.ValueOf(any(v))) {
		return v, false
	}
	return cleaned(v), true
}

// cleaned is Clean's copy. It is a function of its own so that v moves to
// the heap only when something is replaced.
func cleaned[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	c := reflect.New(rv.Type()).Elem()
	c.Set(clean(rv))
	return c.Interface().(T)
}

// clean returns a cleaned copy of v (v itself where it is clean).
func clean(v reflect.Value) reflect.Value {
	if !bad(v) {
		return v
	}
	switch v.Kind() {
	case reflect.String:
		c := reflect.New(v.Type()).Elem()
		c.SetString(CleanString(v.String()))
		return c
	case reflect.Pointer:
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(clean(v.Elem()))
		return c
	case reflect.Interface:
		c := reflect.New(v.Type()).Elem()
		c.Set(clean(v.Elem()))
		return c
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				c.Field(i).Set(clean(v.Field(i)))
			}
		}
		return c
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			c := reflect.New(v.Type()).Elem()
			c.SetBytes(cleanJSON(v.Bytes()))
			return c
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(clean(v.Index(i)))
		}
		return c
	case reflect.Array:
		c := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			c.Index(i).Set(clean(v.Index(i)))
		}
		return c
	case reflect.Map:
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			c.SetMapIndex(clean(it.Key()), clean(it.Value()))
		}
		return c
	}
	return v
}

// CleanString replaces NUL bytes and invalid UTF-8 in s with U+FFFD.
func CleanString(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// cleanJSON cleans JSON text: it is decoded, its strings cleaned and it is
// encoded again. Bytes that are not JSON are cleaned as text.
func cleanJSON(b []byte) []byte {
	text := []byte(CleanString(string(b)))
	var x any
	if err := json.Unmarshal(text, &x); err == nil {
		if out, err := json.Marshal(cleanAny(x)); err == nil {
			return out
		}
	}
	// Not JSON: the escapes are replaced as text.
	for i := nulEscape(text); i >= 0; i = nulEscape(text) {
		text = append(text[:i:i], append([]byte(`\ufffd`), text[i+6:]...)...)
	}
	return text
}

func cleanAny(x any) any {
	switch x := x.(type) {
	case string:
		return CleanString(x)
	case []any:
		for i := range x {
			x[i] = cleanAny(x[i])
		}
		return x
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, v := range x {
			m[CleanString(k)] = cleanAny(v)
		}
		return m
	}
	return x
}

func fieldName(f reflect.StructField) string {
	if tag, ok := f.Tag.Lookup("json"); ok {
		if name, _, _ := strings.Cut(tag, ","); name != "" && name != "-" {
			return name
		}
	}
	return strings.ToLower(f.Name[:1]) + f.Name[1:]
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
