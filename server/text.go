package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Text no store can keep, or encoding/json would silently change, is
// refused at the edge with a 400 naming the field: a NUL byte (PostgreSQL
// refuses it in text and jsonb), invalid UTF-8 and an unpaired UTF-16
// surrogate escape (both decoded to U+FFFD, so what the session holds would
// differ from what was sent).

// textProblem says what is wrong with the text of one field.
func textProblem(field, what string, offset int) *apiError {
	return badRequest("%s: %s at offset %d", field, what, offset)
}

// checkText checks one string: a path parameter, a query value, a header.
func checkText(field, s string) *apiError {
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			return textProblem(field, "contains a NUL byte", i)
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return textProblem(field, "invalid UTF-8", i)
		}
		i += n
	}
	return nil
}

// checkJSONText checks every string of a JSON document, keys included, and
// names the first bad one by its path ("text", "permissions.allow[2]"). It
// reads the raw text, before decoding hides what it replaced, so no field
// can be missed, whatever the request type holds. Text that is not JSON is
// left to the decoder.
func checkJSONText(b []byte) *apiError {
	type frame struct {
		object  bool
		key     string
		index   int
		wantKey bool
	}
	var stack []frame
	path := func(last string) string {
		var sb strings.Builder
		for _, f := range stack {
			if f.object {
				if sb.Len() > 0 {
					sb.WriteByte('.')
				}
				sb.WriteString(f.key)
			} else {
				sb.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		if last != "" {
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(last)
		}
		if sb.Len() == 0 {
			return "(body)"
		}
		return sb.String()
	}
	for i := 0; i < len(b); {
		switch b[i] {
		case '{':
			stack = append(stack, frame{object: true, wantKey: true})
			i++
		case '[':
			stack = append(stack, frame{})
			i++
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			i++
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].object {
					stack[n-1].wantKey = true
				} else {
					stack[n-1].index++
				}
			}
			i++
		case '"':
			end, what, at := scanJSONString(b, i)
			isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].wantKey
			if isKey {
				top := &stack[len(stack)-1]
				top.wantKey = false
				var k string
				if what != "" || json.Unmarshal(b[i:end], &k) != nil {
					k = strconv.Quote(string(b[i+1 : max(i+1, end-1)]))
				}
				top.key = k
				if what != "" {
					return textProblem(path("")+" (a key)", what, at)
				}
			} else if what != "" {
				return textProblem(path(""), what, at)
			}
			i = end
		default:
			i++
		}
	}
	return nil
}

// scanJSONString reads the JSON string starting at b[start] (a quote). It
// returns the offset after it and the first problem of its decoded text
// with the offset there, or "".
func scanJSONString(b []byte, start int) (end int, what string, at int) {
	off := 0 // in the decoded text
	i := start + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, "", 0
		case c == '\\':
			if i+1 >= len(b) {
				return len(b), "", 0
			}
			if b[i+1] != 'u' {
				i += 2
				off++
				continue
			}
			u, ok := hex4(b, i+2)
			if !ok {
				return len(b), "", 0 // not JSON: the decoder says so
			}
			switch {
			case u == 0:
				return skipString(b, i), "contains a NUL byte", off
			case utf16.IsSurrogate(rune(u)):
				if u < 0xdc00 && i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					if lo, ok := hex4(b, i+8); ok && lo >= 0xdc00 && lo <= 0xdfff {
						i += 12
						off += 4
						continue
					}
				}
				return skipString(b, i), fmt.Sprintf(`an unpaired UTF-16 surrogate (\u%04x)`, u), off
			}
			i += 6
			off += utf8.RuneLen(rune(u))
		case c == 0:
			return skipString(b, i), "contains a NUL byte", off
		case c < utf8.RuneSelf:
			i++
			off++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return skipString(b, i), "invalid UTF-8", off
			}
			i += n
			off += n
		}
	}
	return len(b), "", 0
}

// skipString returns the offset after the JSON string that b[i] is in.
func skipString(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return len(b)
}

func hex4(b []byte, i int) (uint16, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return uint16(n), err == nil
}

// checkRequestText checks the text of a request that reaches the runtime
// outside its body: the query (which must also parse) and vigil's own
// headers (Vigil-*).
func checkRequestText(r *http.Request) *apiError {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("query %q: %v", r.URL.RawQuery, err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if e := checkText("query parameter "+strconv.QuoteToASCII(k), k); e != nil {
			return e
		}
		for _, v := range q[k] {
			if e := checkText("?"+k, v); e != nil {
				return e
			}
		}
	}
	for k, vs := range r.Header {
		if !strings.HasPrefix(k, "Vigil-") {
			continue
		}
		for _, v := range vs {
			if e := checkText("header "+k, v); e != nil {
				return e
			}
		}
	}
	return nil
}
