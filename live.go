package vigil

import (
	"encoding/json"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// LiveTextType is the type of a live event that carries a model's text
// while its round is in flight (Event.Live); its data is a TextDelta.
const LiveTextType = "text.delta"

// TextDelta is the data of a live "text.delta" event: a piece of what an
// agent's model says in one call, in order. Join the texts of a call's
// deltas for its text so far; the committed "model.ended" event of the
// call (or any committed event that ends the agent's run) replaces it.
type TextDelta struct {
	Agent AgentID `json:"agent"`
	// Name is the agent's name ("main" for the main agent).
	Name string `json:"name"`
	// Run and Call are the run and the model call the text belongs to.
	Run  int    `json:"run"`
	Call string `json:"call"`
	// Text is the delta: the text that follows what came before.
	Text string `json:"text"`
	// Dropped says live text of this call was dropped before this event
	// for this subscriber, which read too slowly: the live text it holds
	// is incomplete, and only the committed event has all of it. Its Text
	// is empty.
	Dropped bool `json:"dropped,omitempty"`
	// Reset says the provider retries the call: the text streamed so far
	// is void, and the call's text starts again after this event. Its
	// Text is empty.
	Reset bool `json:"reset,omitempty"`
}

const (
	// liveShare is the part of a subscription's buffer
	// (SubscribeParams.Buffer) that its live events may hold: live text
	// beyond it is dropped for that subscriber.
	liveShare = 4
	// minLiveBytes is the least a subscription queues of live events.
	minLiveBytes = 16 << 10
	// maxStale bounds the calls a subscription remembers to have skipped
	// live text of.
	maxStale = 64
)

// queued is one entry of a listener's queue: a committed record, or a
// live event (live not nil) with the positions its fanout had published
// when it came (seq, global): a subscriber already sent an event past
// them gets the live event too late, and skips it.
type queued struct {
	rec         store.Record
	live        *Event
	delta       *TextDelta // live's data, decoded
	seq, global int64
}

// key names the call a live entry belongs to.
func (q *queued) key() string { return string(q.delta.Agent) + "/" + q.delta.Call }

// size is what a live entry holds in memory.
func (q *queued) size() int64 {
	return int64(len(q.live.Data)+len(q.live.Session)) + recordOverhead
}

// marker is the live event that tells a subscriber live text of q's call
// was dropped (TextDelta.Dropped).
func (q *queued) marker() queued {
	d := *q.delta
	d.Text, d.Dropped, d.Reset = "", true, false
	ev := *q.live
	ev.Data = mustJSON(d)
	return queued{live: &ev, delta: &d, seq: q.seq, global: q.global}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("vigil: encode live event: " + err.Error()) // plain fields: cannot fail
	}
	return b
}

// liveBytes is how many bytes of live events a subscription with buffer
// bytes for committed ones queues.
func liveBytes(buffer int64) int64 { return max(buffer/liveShare, minLiveBytes) }

// publishLive hands a live event to every listener of f without waiting:
// a listener whose live queue is full drops it. It returns how many
// listeners dropped it, and how many of them began to drop this call's
// text (each is told, TextDelta.Dropped).
func (f *fanout) publishLive(q queued) (dropped, began int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q.seq, q.global = f.lastSeq, f.last
	for l := range f.subs {
		switch l.offerLive(q) {
		case liveDropped:
			dropped++
		case liveBegan:
			dropped++
			began++
		}
	}
	return dropped, began
}

// What offerLive did with a live event.
const (
	liveQueued  = iota
	liveDropped // dropped; the listener was told before
	liveBegan   // dropped; the listener is told (a marker is queued)
)

// offerLive queues a live event unless the listener's live events hold
// its share of bytes already. The first event of a call it drops queues
// a marker instead (TextDelta.Dropped), once until the subscriber takes
// its queue.
func (l *listener) offerLive(q queued) int {
	n := q.size()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return liveQueued
	}
	k := q.key()
	if l.liveBytes+n > l.liveMax || l.dropping[k] {
		if l.dropping[k] {
			return liveDropped
		}
		if l.dropping == nil {
			l.dropping = map[string]bool{}
		}
		l.dropping[k] = true
		m := q.marker()
		l.queue = append(l.queue, m)
		l.liveBytes += m.size()
		l.signal()
		return liveBegan
	}
	l.queue = append(l.queue, q)
	l.liveBytes += n
	l.signal()
	return liveQueued
}

// liveText streams one model call's text to the session's subscribers.
// It is used by the call's goroutine only, and never waits on a
// subscriber.
type liveText struct {
	a     *actor
	delta TextDelta
	sent  bool // some text was published
	// drops counts the live events subscribers dropped during the call.
	drops int
}

// liveTextOf returns the live text of a model call; nil for a call whose
// text is not an agent's answer (a compaction's summary).
func (a *actor) liveTextOf(ef core.CallModel) *liveText {
	if ef.Purpose != "" {
		return nil
	}
	return &liveText{a: a, delta: TextDelta{Agent: AgentID(ef.Agent), Name: ef.AgentName, Run: ef.Run, Call: string(ef.Call)}}
}

// text publishes a text delta.
func (t *liveText) text(s string) {
	if t == nil || s == "" {
		return
	}
	d := t.delta
	d.Text = s
	t.sent = true
	t.publish(d)
}

// reset publishes that the text so far is void: the provider retries.
func (t *liveText) reset() {
	if t == nil || !t.sent {
		return
	}
	t.sent = false
	d := t.delta
	d.Reset = true
	t.publish(d)
}

func (t *liveText) publish(d TextDelta) {
	a := t.a
	ev := &Event{Session: SessionID(a.id), At: a.rt.clock.Now(), Type: LiveTextType, Data: mustJSON(d), Live: true}
	q := queued{live: ev, delta: &d}
	var dropped, began int
	add := func(d, b int) { dropped, began = dropped+d, began+b }
	if a.rt.cl != nil {
		add(a.rt.cl.feed.publishLive(a.id, q))
	} else {
		add(a.subs.publishLive(q))
	}
	add(a.rt.allSubs.publishLive(q))
	if dropped == 0 {
		return
	}
	t.drops += dropped
	if began > 0 {
		a.rt.log.Warn("live text dropped for subscribers that read too slowly; they are told, and get the text with the call's committed end",
			"session", a.id, "agent", d.Name, "call", d.Call, "subscribers", began, "dropped_in_call", t.drops)
	}
	if o := a.rt.opts.Observer; o != nil {
		for range dropped {
			o.Dropped(SessionID(a.id), "live text of "+d.Name, "subscriber-behind")
		}
	}
}

// publishLive hands a live event of a session to this node's
// subscriptions to it. Live events do not cross nodes: a subscriber on
// another node gets the session's committed events only, through the log.
func (f *feed) publishLive(session core.SessionID, q queued) (dropped, began int) {
	f.mu.Lock()
	fo := f.sessions[SessionID(session)]
	f.mu.Unlock()
	if fo == nil {
		return 0, 0
	}
	return fo.publishLive(q)
}
