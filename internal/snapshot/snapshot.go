// Package snapshot encodes a session's state for the store's snapshots.
//
// Decoding the snapshot is most of a long session's recovery. A snapshot
// is therefore cut into sections that decode side by side, one processor
// each: the state without its big parts, then the agents' transcripts in
// chunks of messages, and the messages and notifications maps in chunks
// of entries. Each section is JSON, encoded and decoded with
// github.com/segmentio/encoding/json, which keeps encoding/json's
// semantics and decodes a state about twice as fast (a 1M-event session's
// 122 MB snapshot: 0.92 s of CPU against 1.9 s). On two processors the
// sections cut BenchmarkDecode's time from 104-138 ms to 79-81 ms, the
// fitting of the decoder's slices (fit) included. encoding/gob decodes three times as fast as
// JSON, but it drops a pointer to a zero value (a task's exit code 0 came
// back as none), which the simulator's snapshot check found at once.
//
// A snapshot of an earlier version, the whole state as one JSON object,
// still decodes.
//
// A state must come back from its snapshot as the same state: the
// simulator checks it at every crash (internal/sim), comparing the state
// rebuilt from a snapshot and the rest of the log with the committed one.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/segmentio/encoding/json"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// magic starts a sectioned snapshot; a snapshot of an earlier version is
// a JSON object and starts with '{'.
const magic = "vigil-snapshot/2\n"

// Sizes of the sections: a transcript is cut every chunkMessages messages,
// a map every chunkEntries entries. Small enough that a long session's
// snapshot has sections for every processor, and that an Encoder encodes
// again only the last few hundred messages of a transcript; large enough
// that a short one is a section or two.
const (
	chunkMessages = 256
	chunkEntries  = 16384
)

// Section kinds.
const (
	kindBase       = 1 // the state without its transcripts, messages and notifications
	kindTranscript = 2 // messages of one agent's transcript, from an index
	kindMsgs       = 3 // entries of State.Msgs
	kindNotes      = 4 // entries of State.Notes
	kindEnd        = 0 // the trailer: the number of sections before it
)

// Encode returns s's snapshot.
func Encode(s *core.State) ([]byte, error) {
	return encode(s, chunkMessages, chunkEntries, nil)
}

// EncodeSized is Encode with sections of at most messages transcript
// messages and entries map entries (at least 1 each). The simulator cuts
// small ones, so that its snapshot check covers the joins of the sections.
func EncodeSized(s *core.State, messages, entries int) ([]byte, error) {
	return encode(s, max(messages, 1), max(entries, 1), nil)
}

// Encoder encodes the snapshots of one session's state as it changes,
// each the same as Encode's. It keeps what it encoded of the transcripts'
// full sections, and a section whose messages are those it encoded before
// is written again without encoding it: a long session's snapshot then
// costs its newest messages, its maps and the rest of its state, not its
// whole history. BenchmarkDecode: the snapshot of a 200,000-event session
// took 220 ms to encode, and 130 ms through the Encoder that encoded it
// before.
//
// It relies on a rule the core keeps for the model calls in flight, which
// hold its transcripts: a message appended to a transcript is never
// changed in place, nor its content blocks; a cut gives the agent a new
// slice, and new blocks to the message it cuts. A message is "the same"
// when its role, its blocks' array and their number are. The simulator
// checks the rule through an Encoder kept across a session's steps.
//
// It keeps, per full section, the encoded bytes (about the size of the
// messages' JSON) and a shallow copy of the messages, until it is
// dropped. An Encoder is used by one goroutine at a time.
type Encoder struct {
	messages, entries int
	done              map[core.AgentID][]doneChunk
	// same reports whether two sections hold the same messages
	// (sameMessages; a test puts a wrong one in its place).
	same func(a, b []chat.Message) bool
	// last is the size of the last snapshot: the next one's buffer starts
	// about as large instead of doubling its way there, a copy each time.
	last int
}

// doneChunk is a full transcript section as an Encoder encoded it.
type doneChunk struct {
	msgs []chat.Message // shallow copies of the section's messages
	data []byte
}

// NewEncoder returns an Encoder of Encode's section sizes.
func NewEncoder() *Encoder { return NewEncoderSized(chunkMessages, chunkEntries) }

// NewEncoderSized returns an Encoder of EncodeSized's section sizes.
func NewEncoderSized(messages, entries int) *Encoder {
	return &Encoder{messages: max(messages, 1), entries: max(entries, 1), same: sameMessages}
}

// Encode returns s's snapshot, the same bytes as EncodeSized's.
func (e *Encoder) Encode(s *core.State) ([]byte, error) {
	if e.done == nil {
		e.done = map[core.AgentID][]doneChunk{}
	}
	return encode(s, e.messages, e.entries, e)
}

// kept returns the bytes of encoded sections e keeps.
func (e *Encoder) kept() int {
	n := 0
	for _, cs := range e.done {
		for _, c := range cs {
			n += len(c.data)
		}
	}
	return n
}

// transcript returns the encoded section of agent id's transcript tr from
// from on (a full one, of e.messages messages): what e kept when the
// messages are the same, else encoded now and kept.
func (e *Encoder) transcript(id core.AgentID, from int, tr []chat.Message) ([]byte, error) {
	i := from / e.messages
	cs := e.done[id]
	if i < len(cs) && e.same(cs[i].msgs, tr) {
		return cs[i].data, nil
	}
	b, err := json.Marshal(tr)
	if err != nil {
		return nil, err
	}
	// Sections after a changed one are encoded again: a cut changed them.
	cs = append(cs[:min(i, len(cs))], doneChunk{msgs: slices.Clone(tr), data: b})
	e.done[id] = cs
	return b, nil
}

// prune drops what e kept of agents s no longer has, and of sections
// past the full ones of each transcript.
func (e *Encoder) prune(s *core.State) {
	for id, cs := range e.done {
		a := s.Agents[id]
		if a == nil {
			delete(e.done, id)
			continue
		}
		if full := len(a.Transcript) / e.messages; len(cs) > full {
			e.done[id] = cs[:full]
		}
	}
}

// sameMessages reports whether a and b hold the same messages: the same
// roles and content blocks (the same arrays, of the same lengths).
func sameMessages(a, b []chat.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Role != y.Role || len(x.Content) != len(y.Content) || len(x.Content) > 0 && &x.Content[0] != &y.Content[0] {
			return false
		}
	}
	return true
}

// encode is Encode with the sections' sizes, through enc when not nil.
func encode(s *core.State, messages, entries int, enc *Encoder) ([]byte, error) {
	// The sections, then a trailer: their number, so that a snapshot cut
	// short at a section's end is refused too.
	var out bytes.Buffer
	if enc != nil {
		out.Grow(enc.last + enc.last/8)
	}
	out.WriteString(magic)
	n := 0
	write := func(kind int, key string, from int, b []byte) {
		n++
		out.Write(binary.AppendUvarint(nil, uint64(kind)))
		out.Write(binary.AppendUvarint(nil, uint64(len(key))))
		out.WriteString(key)
		out.Write(binary.AppendUvarint(nil, uint64(from)))
		out.Write(binary.AppendUvarint(nil, uint64(len(b))))
		out.Write(b)
	}
	section := func(kind int, key string, from int, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode state snapshot: %w", err)
		}
		write(kind, key, from, b)
		return nil
	}
	// The base: a shallow copy without the parts that have sections of
	// their own; the state itself is not touched.
	base := *s
	base.Msgs, base.Notes = nil, nil
	base.Agents = make(map[core.AgentID]*core.Agent, len(s.Agents))
	for id, a := range s.Agents {
		c := *a
		c.Transcript = nil
		base.Agents[id] = &c
	}
	if err := section(kindBase, "", 0, &base); err != nil {
		return nil, err
	}
	for _, id := range slices.Sorted(maps.Keys(s.Agents)) {
		tr := s.Agents[id].Transcript
		for from := 0; from < len(tr); from += messages {
			part := tr[from:min(from+messages, len(tr))]
			if enc == nil || len(part) < messages {
				if err := section(kindTranscript, string(id), from, part); err != nil {
					return nil, err
				}
				continue
			}
			b, err := enc.transcript(id, from, part)
			if err != nil {
				return nil, fmt.Errorf("encode state snapshot: %w", err)
			}
			write(kindTranscript, string(id), from, b)
		}
	}
	for i, chunk := range chunks(s.Msgs, entries, func(k core.MsgID) string { return string(k) }) {
		if err := section(kindMsgs, "", i, chunk); err != nil {
			return nil, err
		}
	}
	for i, chunk := range chunks(s.Notes, entries, core.NoteKey.String) {
		if err := section(kindNotes, "", i, chunk); err != nil {
			return nil, err
		}
	}
	out.Write(binary.AppendUvarint(nil, kindEnd))
	out.Write(binary.AppendUvarint(nil, uint64(n)))
	if enc != nil {
		enc.prune(s)
		enc.last = out.Len()
	}
	return out.Bytes(), nil
}

// chunks cuts m into maps of up to n entries, in the order of their keys
// as text: the same state makes the same snapshot.
func chunks[K comparable, V any](m map[K]V, n int, text func(K) string) []map[K]V {
	// Each key's text once: sorting by text(k) made it twice a comparison
	// (a long session's notes: a sixth of its snapshots' CPU).
	type keyed struct {
		k    K
		text string
	}
	keys := make([]keyed, 0, len(m))
	for k := range m {
		keys = append(keys, keyed{k, text(k)})
	}
	slices.SortFunc(keys, func(a, b keyed) int { return strings.Compare(a.text, b.text) })
	var out []map[K]V
	for chunk := range slices.Chunk(keys, n) {
		c := make(map[K]V, len(chunk))
		for _, k := range chunk {
			c[k.k] = m[k.k]
		}
		out = append(out, c)
	}
	return out
}

// section is one section of a snapshot as read.
type section struct {
	kind int
	key  string
	from int
	data []byte

	// What it decoded to.
	state    *core.State
	messages []chat.Message
	msgs     map[core.MsgID]*core.Msg
	notes    map[core.NoteKey]*core.Note
	err      error
}

// Decode decodes a snapshot into s, a new state (core.NewState).
func Decode(data []byte, s *core.State) error {
	if !bytes.HasPrefix(data, []byte(magic)) {
		if err := json.Unmarshal(data, s); err != nil {
			return fmt.Errorf("decode state snapshot: %w", err)
		}
		return nil
	}
	secs, err := split(data[len(magic):])
	if err != nil {
		return fmt.Errorf("decode state snapshot: %w", err)
	}
	if len(secs) == 0 || secs[0].kind != kindBase {
		return errors.New("decode state snapshot: no base section")
	}
	decodeAll(secs)
	base := secs[0]
	if base.err != nil {
		return fmt.Errorf("decode state snapshot: base: %w", base.err)
	}
	*s = *base.state
	if s.Msgs == nil {
		s.Msgs = map[core.MsgID]*core.Msg{}
	}
	if s.Notes == nil {
		s.Notes = map[core.NoteKey]*core.Note{}
	}
	for _, sec := range secs[1:] {
		if sec.err != nil {
			return fmt.Errorf("decode state snapshot: section %d %q at %d: %w", sec.kind, sec.key, sec.from, sec.err)
		}
		switch sec.kind {
		case kindTranscript:
			a := s.Agents[core.AgentID(sec.key)]
			if a == nil || sec.from != len(a.Transcript) {
				return fmt.Errorf("decode state snapshot: transcript of %q at %d does not follow the base or its previous part", sec.key, sec.from)
			}
			if a.Transcript == nil {
				a.Transcript = sec.messages
			} else {
				a.Transcript = append(a.Transcript, sec.messages...)
			}
		case kindMsgs:
			maps.Copy(s.Msgs, sec.msgs)
		case kindNotes:
			maps.Copy(s.Notes, sec.notes)
		default:
			return fmt.Errorf("decode state snapshot: unknown section %d", sec.kind)
		}
	}
	return nil
}

// split reads the sections of b.
func split(b []byte) ([]*section, error) {
	var out []*section
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errors.New("truncated")
		}
		b = b[n:]
		return v, nil
	}
	for {
		var f [3]uint64
		var err error
		if f[0], err = next(); err != nil {
			return nil, err
		}
		if f[0] == kindEnd {
			n, err := next()
			switch {
			case err != nil:
				return nil, err
			case n != uint64(len(out)) || len(b) > 0:
				return nil, fmt.Errorf("%d sections and %d bytes after the trailer, which says %d sections", len(out), len(b), n)
			}
			return out, nil
		}
		if f[1], err = next(); err != nil {
			return nil, err
		}
		if f[1] > uint64(len(b)) {
			return nil, errors.New("truncated section key")
		}
		key := string(b[:f[1]])
		b = b[f[1]:]
		if f[2], err = next(); err != nil {
			return nil, err
		}
		size, err := next()
		if err != nil {
			return nil, err
		}
		if size > uint64(len(b)) || f[0] > 1<<16 || f[2] > 1<<40 {
			return nil, errors.New("truncated section")
		}
		out = append(out, &section{kind: int(f[0]), key: key, from: int(f[2]), data: b[:size]})
		b = b[size:]
	}
}

// decodeAll decodes the sections, one processor each, largest first.
func decodeAll(secs []*section) {
	order := slices.Clone(secs)
	slices.SortStableFunc(order, func(a, b *section) int { return len(b.data) - len(a.data) })
	work := make(chan *section)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(order)) {
		wg.Go(func() {
			for sec := range work {
				sec.decode()
			}
		})
	}
	for _, sec := range order {
		work <- sec
	}
	close(work)
	wg.Wait()
}

func (sec *section) decode() {
	switch sec.kind {
	case kindBase:
		sec.state = core.NewState()
		if sec.err = json.Unmarshal(sec.data, sec.state); sec.err == nil {
			fitState(sec.state)
		}
	case kindTranscript:
		if sec.err = json.Unmarshal(sec.data, &sec.messages); sec.err == nil {
			for i := range sec.messages {
				sec.messages[i].Content = fit(sec.messages[i].Content)
			}
		}
	case kindMsgs:
		sec.err = json.Unmarshal(sec.data, &sec.msgs)
	case kindNotes:
		if sec.err = json.Unmarshal(sec.data, &sec.notes); sec.err == nil {
			for _, n := range sec.notes {
				n.Answered, n.LiveTasks = fit(n.Answered), fit(n.LiveTasks)
			}
		}
	}
}

// fitState fits the slices of a decoded base section (fit): those of the
// state, its session and its agents (with their runs and inbox items).
func fitState(s *core.State) {
	s.Order, s.TaskOrder, s.NoteOrder = fit(s.Order), fit(s.TaskOrder), fit(s.NoteOrder)
	p := &s.Session.Permissions
	s.Session.Dirs, p.Allow, p.Deny = fit(s.Session.Dirs), fit(p.Allow), fit(p.Deny)
	for _, a := range s.Agents {
		a.Inbox, a.Runs, a.Carried = fit(a.Inbox), fit(a.Runs), fit(a.Carried)
		for i := range a.Runs {
			r := &a.Runs[i]
			r.Items, r.Answered, r.Returned = fit(r.Items), fit(r.Answered), fit(r.Returned)
		}
		if r := a.Run; r != nil {
			r.Items, r.Unseen, r.Returned, r.Answered = fit(r.Items), fit(r.Unseen), fit(r.Returned), fit(r.Answered)
			r.Delivered, r.Tools, r.PendingSends = fit(r.Delivered), fit(r.Tools), fit(r.PendingSends)
		}
	}
}

// fit returns s in an array of its length when the decoder gave it more
// room: the decoder starts every slice at ten elements, and a message's
// one content block then held the room of ten (measured: a decoded
// session took 43% more heap than the same session replayed, 145 against
// 84 MB for 10,000 idle sessions).
func fit[T any](s []T) []T {
	if cap(s)-len(s) < 2 {
		return s
	}
	return append(make([]T, 0, len(s)), s...)
}
