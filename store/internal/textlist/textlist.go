// Package textlist holds the encodings the SQL stores share for values that
// have no column type of their own.
package textlist

import (
	"encoding/json"
	"fmt"
)

// Encode encodes a list of one-line texts for a text column: a JSON array
// (which escapes what PostgreSQL's text refuses, a NUL byte), or "" for
// none.
func Encode(v []string) (string, error) {
	if len(v) == 0 {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %q: %w", v, err)
	}
	return string(b), nil
}

// Decode decodes what Encode encoded.
func Decode(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("decode %q: %w", s, err)
	}
	return v, nil
}
