// Package steps packs the records of one appended step into one stored
// value, so a store writes one log row per step instead of one per event.
// The format is versioned; it holds each record's time, type and body.
// The session, the first record's sequence and its global position are the
// row's own columns: the records of a step are contiguous in both.
package steps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vigilrun/vigil/store"
)

// version is the format's first byte.
const version = 1

// Encode appends recs, in the step format, to dst. Records must belong to
// one session with contiguous sequences (the caller checked); only their
// times, types and bodies are kept.
func Encode(dst []byte, recs []store.Record) ([]byte, error) {
	// One allocation for the whole step: grown by appends, a step's value
	// was copied log2(size) times (a fifth of the bytes a busy node
	// allocated).
	size := 1 + binary.MaxVarintLen64
	for _, r := range recs {
		size += 1 + 3*binary.MaxVarintLen64 + len(r.Type) + len(r.Data)
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	for _, r := range recs {
		if r.At.IsZero() {
			dst = append(dst, 0)
		} else {
			if r.At.Before(time.Unix(0, math.MinInt64)) || r.At.After(time.Unix(0, math.MaxInt64)) {
				return nil, fmt.Errorf("record %d: time %v out of storable range", r.Seq, r.At)
			}
			dst = append(dst, 1)
			dst = binary.AppendVarint(dst, r.At.UnixNano())
		}
		dst = binary.AppendUvarint(dst, uint64(len(r.Type)))
		dst = append(dst, r.Type...)
		dst = binary.AppendUvarint(dst, uint64(len(r.Data)))
		dst = append(dst, r.Data...)
	}
	return dst, nil
}

// ErrCorrupt: a stored step does not decode.
var ErrCorrupt = errors.New("stored step is corrupt")

// Count returns how many records a stored step holds.
func Count(data []byte) (int, error) {
	if len(data) < 1 || data[0] != version {
		return 0, fmt.Errorf("%w: unknown format", ErrCorrupt)
	}
	n, k := binary.Uvarint(data[1:])
	if k <= 0 || n > uint64(len(data)) {
		return 0, fmt.Errorf("%w: bad record count", ErrCorrupt)
	}
	return int(n), nil
}

// Decode appends the records of a step stored for session, whose first
// record has sequence seq and global position global, to out. The records'
// bodies alias data.
func Decode(out []store.Record, session string, seq, global int64, data []byte) ([]store.Record, error) {
	n, err := Count(data)
	if err != nil {
		return out, fmt.Errorf("step %s#%d: %w", session, seq, err)
	}
	_, k := binary.Uvarint(data[1:])
	p := data[1+k:]
	bad := func(what string) ([]store.Record, error) {
		return out, fmt.Errorf("step %s#%d: %w: %s", session, seq, ErrCorrupt, what)
	}
	for i := range n {
		r := store.Record{Session: session, Seq: seq + int64(i), Global: global + int64(i)}
		if len(p) < 1 {
			return bad("truncated")
		}
		switch p[0] {
		case 0:
			p = p[1:]
		case 1:
			ns, k := binary.Varint(p[1:])
			if k <= 0 {
				return bad("bad time")
			}
			r.At = time.Unix(0, ns).UTC()
			p = p[1+k:]
		default:
			return bad("bad time flag")
		}
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return bad("bad type")
		}
		r.Type = string(p[k : k+int(l)])
		p = p[k+int(l):]
		l, k = binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return bad("bad body")
		}
		r.Data = p[k : k+int(l) : k+int(l)]
		p = p[k+int(l):]
		out = append(out, r)
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return out, nil
}
