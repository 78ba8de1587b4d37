package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigilrun/vigil"
)

const (
	// frameSlots is how many recent events' frames a frameCache holds at
	// most: far more than the live events a client may lag behind
	// (vigil's listener queue), so that every client of a stream finds
	// the frame the first one rendered.
	frameSlots = 4096
	// frameOverhead is what a cached frame costs besides its bytes.
	frameOverhead = 96
)

// frame is one event rendered as Server-Sent Events, for both kinds of
// stream: b holds "id: <global>\n", the body ("event: <type>\ndata:
// <event as JSON>\n\n"), then "id: <seq>\n". The stream of every session
// sends b[:seqAt]; a session's stream sends b[seqAt:], then the body.
// Its bytes are shared by every client: read them only.
type frame struct {
	global, seq int64
	session     vigil.SessionID
	b           []byte
	bodyAt      int
	seqAt       int
}

// of reports whether f is e's frame.
func (f *frame) of(e vigil.Event) bool {
	return f != nil && f.global == e.Global && f.seq == e.Seq && f.session == e.Session
}

// size is what f holds in memory.
func (f *frame) size() int64 { return int64(cap(f.b)) + frameOverhead }

// appendTo appends the frame a stream sends: with bySeq a session's,
// whose id is the event's Seq, else that of every session's, whose id is
// its Global.
func (f *frame) appendTo(buf *bytes.Buffer, bySeq bool) {
	if !bySeq {
		buf.Write(f.b[:f.seqAt])
		return
	}
	buf.Write(f.b[f.seqAt:])
	buf.Write(f.b[f.bodyAt:f.seqAt])
}

// frameCache holds the frames of recent events, so that an event is
// rendered once however many clients stream it. It is direct mapped by
// Global: slot Global mod frameSlots. A hit is a lock-free load; a miss
// renders under the slot's lock, so that clients asking for the same
// event at once render it once. Memory is bounded by max bytes: frames
// are evicted oldest first to make room, and a frame over max/8 is not
// kept. With no stream open it holds no frame.
type frameCache struct {
	log   *slog.Logger
	max   int64
	slots [frameSlots]frameSlot

	mu      sync.Mutex // held to change a slot's frame, and streams
	bytes   int64      // held by the slots' frames
	streams int        // streams open (open, close)

	renders atomic.Int64 // frames rendered, cached or not: for tests
}

// frameSlot is one slot of a frameCache.
type frameSlot struct {
	mu sync.Mutex // held while the slot's frame is rendered
	f  atomic.Pointer[frame]
}

// newFrameCache returns a frameCache that holds up to max bytes of frames.
func newFrameCache(log *slog.Logger, max int64) *frameCache {
	return &frameCache{log: log, max: max}
}

// open counts a stream that writes frames; close ends it. When the last
// one closes the frames are let go: an idle server holds none.
func (c *frameCache) open() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams++
}

func (c *frameCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams--; c.streams > 0 {
		return
	}
	for i := range c.slots {
		c.slots[i].f.Store(nil)
	}
	c.bytes = 0
}

// write appends e's frame for a stream (frame.appendTo), rendering it
// unless a client of either stream already did; a live event's frame has
// no id: line.
func (c *frameCache) write(buf *bytes.Buffer, e vigil.Event, bySeq bool) {
	if e.Live {
		// No id, and not kept: a live event is sent once per client, as
		// it happens.
		c.renders.Add(1)
		buf.Write(appendBody(buf.AvailableBuffer(), e, c.data(e)))
		return
	}
	i := uint64(e.Global) % frameSlots
	sl := &c.slots[i]
	if f := sl.f.Load(); f.of(e) {
		f.appendTo(buf, bySeq)
		return
	}
	if int64(len(e.Data)+len(e.Session)+len(e.Type)+frameOverhead) > c.max/8 {
		// Too large to keep: rendered into the client's buffer.
		c.renders.Add(1)
		id := e.Global
		if bySeq {
			id = e.Seq
		}
		b := append(buf.AvailableBuffer(), "id: "...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '\n')
		buf.Write(appendBody(b, e, c.data(e)))
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	f := sl.f.Load()
	if !f.of(e) {
		f = c.render(e)
		c.put(i, f)
	}
	f.appendTo(buf, bySeq)
}

// put keeps f in slot i, evicting the frame there and, while the frames
// hold more than c.max bytes, those of the slots after it: the oldest,
// Globals growing.
func (c *frameCache) put(i uint64, f *frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.slots[i].f.Swap(f); old != nil {
		c.bytes -= old.size()
	}
	c.bytes += f.size()
	for j := (i + 1) % frameSlots; c.bytes > c.max && j != i; j = (j + 1) % frameSlots {
		if old := c.slots[j].f.Swap(nil); old != nil {
			c.bytes -= old.size()
		}
	}
}

// data is e's data as it is sent: one line of JSON. Data that is not JSON
// is sent as null and logged: the id still advances, so the client's
// position stays right. Data pretty-printed by a store is compacted: an
// SSE data line cannot hold a newline.
func (c *frameCache) data(e vigil.Event) []byte {
	data := []byte(e.Data)
	if !json.Valid(data) {
		c.log.Warn("event stream: stored event data is not JSON; sending null", "session", e.Session, "seq", e.Seq, "type", e.Type)
		return []byte("null")
	}
	if bytes.ContainsAny(data, "\r\n") {
		var b bytes.Buffer
		if json.Compact(&b, data) == nil {
			return b.Bytes()
		}
	}
	return data
}

// render renders e into a frame of its own.
func (c *frameCache) render(e vigil.Event) *frame {
	c.renders.Add(1)
	data := c.data(e)
	f := &frame{global: e.Global, seq: e.Seq, session: e.Session}
	b := make([]byte, 0, len(data)+len(e.Session)+len(e.Type)+2*frameOverhead)
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.Global, 10)
	b = append(b, '\n')
	f.bodyAt = len(b)
	b = appendBody(b, e, data)
	f.seqAt = len(b)
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.Seq, 10)
	f.b = append(b, '\n')
	return f
}

// appendBody appends the body of e's frame, whose data as sent is data:
// its event and data lines and the blank line that ends it.
func appendBody(b []byte, e vigil.Event, data []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, e.Type...)
	// The Event encoded by hand. JSON holds no raw newline, so it is one
	// data line.
	b = append(b, "\ndata: "...)
	b = append(b, `{"session":`...)
	b = appendJSONString(b, string(e.Session))
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"global":`...)
	b = strconv.AppendInt(b, e.Global, 10)
	b = append(b, `,"at":"`...)
	b = e.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":`...)
	b = appendJSONString(b, e.Type)
	if e.Live {
		b = append(b, `,"live":true`...)
	}
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, "}\n\n"...)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
