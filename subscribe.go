package vigil

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vigilrun/vigil/store"
)

const (
	// DefaultSubscriptionBuffer is how many bytes of live events a
	// subscription queues for a busy subscriber (SubscribeParams.Buffer).
	DefaultSubscriptionBuffer = 1 << 20
	// listenerQueue caps the records a listener queues, whatever their size.
	listenerQueue = 512
	// subscriptionQueue is the records handed over to the subscriber ahead
	// of its reading.
	subscriptionQueue = 16
	// pageBytes is the size a replay page from the store aims at; pages
	// start at firstPage records and adapt between 1 and maxPage.
	pageBytes = 64 << 10
	firstPage = 16
	maxPage   = 128
	// recordOverhead is what a record costs besides its data.
	recordOverhead = 128
)

// fanout delivers committed records to live listeners without blocking the
// actor: a listener that falls behind is cut off and catches up from the
// store.
type fanout struct {
	mu     sync.Mutex
	subs   map[*listener]struct{}
	closed bool
	last   int64 // the highest Global published
	// lastSeq is the highest Seq published: of a session's fanout, its
	// position.
	lastSeq int64
}

// listener is one subscription's queue of live records, bounded in count
// and in bytes, and of live events (Event.Live), bounded in bytes apart:
// live events never cut a listener off, they are dropped. It holds only
// what is queued: an idle subscriber costs a few words.
type listener struct {
	max     int64         // bytes of records
	liveMax int64         // bytes of live events
	wake    chan struct{} // something was queued, or the listener closed (buffered, 1)

	mu        sync.Mutex
	queue     []queued
	recs      int   // records queued
	bytes     int64 // of the records queued
	liveBytes int64 // of the live events queued
	// dropping holds the calls whose live text is being dropped, each
	// told once (offerLive) until the queue is taken.
	dropping map[string]bool
	closed   bool
	cut      bool // fell behind and was cut off
}

func newFanout() *fanout { return &fanout{subs: map[*listener]struct{}{}} }

// add registers a listener that queues up to maxBytes of records.
func (f *fanout) add(maxBytes int64) *listener {
	l := &listener{max: maxBytes, liveMax: liveBytes(maxBytes), wake: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		l.close(false)
		return l
	}
	f.subs[l] = struct{}{}
	return l
}

func (f *fanout) remove(l *listener) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[l]; ok {
		delete(f.subs, l)
		l.close(false)
	}
}

// lastGlobal is the highest Global published here.
func (f *fanout) lastGlobal() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fanout) publish(recs []store.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range recs {
		f.last = max(f.last, r.Global)
		f.lastSeq = max(f.lastSeq, r.Seq)
	}
	for l := range f.subs {
		if !l.offer(recs) {
			delete(f.subs, l)
			l.close(true)
		}
	}
}

func (f *fanout) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for l := range f.subs {
		delete(f.subs, l)
		l.close(false)
	}
}

// offer queues recs unless that would pass the listener's bounds, by count
// or by bytes; a batch over them is queued when nothing else is.
func (l *listener) offer(recs []store.Record) bool {
	var n int64
	for _, r := range recs {
		n += recordSize(r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return true
	}
	if l.recs > 0 && (l.recs+len(recs) > listenerQueue || l.bytes+n > l.max) {
		return false
	}
	for _, r := range recs {
		l.queue = append(l.queue, queued{rec: r})
	}
	l.recs += len(recs)
	l.bytes += n
	l.signal()
	return true
}

// close ends the listener; cut says it fell behind. What it queued is
// still taken.
func (l *listener) close(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed, l.cut = true, cut
	}
	l.signal()
}

func (l *listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued, or with nothing queued whether the
// listener is closed, and cut.
func (l *listener) take() (batch []queued, closed, cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch, l.queue, l.recs, l.bytes, l.liveBytes = l.queue, nil, 0, 0, 0
	clear(l.dropping)
	if len(batch) == 0 {
		return nil, l.closed, l.cut
	}
	return batch, false, false
}

// wasCut reports whether the listener fell behind and was cut off.
func (l *listener) wasCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// recordSize is what a queued record holds in memory.
func recordSize(r store.Record) int64 {
	return int64(len(r.Data)+len(r.Session)+len(r.Type)) + recordOverhead
}

// publish hands committed records to the live subscriptions. In a
// cluster every subscription follows the log (feed), which this wakes, so
// that each carries every node's events in order.
func (a *actor) publish(recs []store.Record) {
	if a.rt.cl != nil {
		a.rt.cl.feed.wake()
		return
	}
	a.subs.publish(recs)
	a.rt.allSubs.publish(recs)
}

// Subscription is a stream of committed events: first those after the
// requested position, read from the store page by page, then live ones, in
// order, none twice. C is closed when the context ends, the session stops,
// the store fails, or (with SubscribeParams.CutBehind) the subscriber falls
// behind; Err says which.
type Subscription struct {
	C <-chan Event
	// Start is the position the stream starts after: the requested one,
	// or with SubscribeParams.FromNow the end of the stream when it was
	// made.
	Start  int64
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
}

// Err waits for the subscription to end and says why: nil when its context
// ended or the session stopped here, an error wrapping errBehind when the
// subscriber fell behind (SubscribeParams.CutBehind), or the store's error.
func (s *Subscription) Err() error {
	<-s.done
	return wrapErr(s.err)
}

// SubscribeParams chooses a subscription's events and where it starts.
type SubscribeParams struct {
	// Session is the session whose events to stream, by Seq; empty streams
	// every session's events, by Global.
	Session SessionID
	// After is the position to start after (0: from the beginning).
	After int64
	// FromNow starts at the current end of the stream instead of After:
	// only events committed from now on.
	FromNow bool
	// CutBehind ends the subscription with errBehind when its live buffer
	// fills, instead of reading the store again until the subscriber
	// catches up: for an edge that tells its client to reconnect.
	CutBehind bool
	// Buffer bounds the bytes of live events queued for a busy subscriber
	// (DefaultSubscriptionBuffer).
	Buffer int64
}

// Subscribe streams the events p chooses: first those after p.After read
// from the store, then live ones, in order, none twice. Memory is bounded:
// the history is read from the store in pages of about 64 KiB, and at most
// p.Buffer bytes of live events wait for a busy subscriber.
func (r *Runtime) Subscribe(ctx context.Context, p *SubscribeParams) (*Subscription, error) {
	if p == nil {
		p = &SubscribeParams{}
	}
	if p.After < 0 {
		return nil, invalidf("after=%d: want 0 or more", p.After)
	}
	if p.Session != "" {
		sub, err := r.subscribeSession(ctx, p)
		return sub, wrapErr(err)
	}
	l := r.allSubs.add(bufferOf(p))
	after := p.After
	if p.FromNow {
		var err error
		if after, err = r.lastGlobal(ctx); err != nil {
			r.allSubs.remove(l)
			return nil, wrapErr(fmt.Errorf("find the end of the event stream: %w", err))
		}
	}
	return r.subscribeAll(ctx, p, l, after), nil
}

func (r *Runtime) subscribeAll(ctx context.Context, p *SubscribeParams, l *listener, after int64) *Subscription {
	return r.stream(ctx, r.allSubs, l, func(ctx context.Context, last int64, limit int) ([]store.Record, error) {
		return r.st.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: last, Limit: limit})
	}, func(rec store.Record) int64 { return rec.Global }, after, false, p)
}

func (r *Runtime) subscribeSession(ctx context.Context, p *SubscribeParams) (*Subscription, error) {
	session := string(p.Session)
	if r.cl != nil {
		return r.subscribeFeed(ctx, p)
	}
	a, err := r.actor(session)
	if err != nil {
		if _, gerr := r.st.SessionGet(ctx, session); gerr != nil {
			return nil, err
		}
		a = nil // a closed or foreign session: its stored events only
	}
	var f *fanout
	var l *listener
	if a != nil {
		f = a.subs
		l = f.add(bufferOf(p))
	}
	return r.sessionStream(ctx, p, f, l)
}

// subscribeFeed subscribes to a session in a cluster: its stored events,
// then its live ones from the log, whichever node runs it. A closed
// session's stream carries its stored events only.
func (r *Runtime) subscribeFeed(ctx context.Context, p *SubscribeParams) (*Subscription, error) {
	session := string(p.Session)
	row, err := r.st.SessionGet(ctx, session)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("session %s: %w", session, errNoSession)
	case err != nil:
		return nil, fmt.Errorf("session %s: %w: %v", session, errStoreDown, err)
	}
	var f *fanout
	var l *listener
	if !row.Closed {
		f, l = r.cl.feed.listen(p.Session, bufferOf(p))
	}
	return r.sessionStream(ctx, p, f, l)
}

// sessionStream streams a session's events by Seq, the live ones from l
// (registered on f; nil: stored events only).
func (r *Runtime) sessionStream(ctx context.Context, p *SubscribeParams, f *fanout, l *listener) (*Subscription, error) {
	session := string(p.Session)
	after := p.After
	if p.FromNow {
		var err error
		if after, err = r.st.LastSeq(ctx, session); err != nil {
			if l != nil {
				f.remove(l)
			}
			return nil, fmt.Errorf("find the end of session %s's events: %w", session, err)
		}
	}
	return r.stream(ctx, f, l, func(ctx context.Context, last int64, limit int) ([]store.Record, error) {
		return r.st.EventList(ctx, &store.EventListParams{Session: session, AfterSeq: last, Limit: limit})
	}, func(rec store.Record) int64 { return rec.Seq }, after, true, p), nil
}

func bufferOf(p *SubscribeParams) int64 {
	if p.Buffer > 0 {
		return p.Buffer
	}
	return DefaultSubscriptionBuffer
}

// lastGlobal finds the highest Global in the store with a few one-record
// reads: from what this node published, galloping forward while the store
// holds more (other nodes' events), then halving the range.
func (r *Runtime) lastGlobal(ctx context.Context) (int64, error) {
	first := func(after int64) (int64, bool, error) {
		recs, err := r.st.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: after, Limit: 1})
		if err != nil || len(recs) == 0 {
			return 0, false, err
		}
		return recs[0].Global, true, nil
	}
	lo := r.allSubs.lastGlobal() // a Global the store holds, or 0
	hi := lo
	for step := int64(1); ; step *= 2 {
		g, ok, err := first(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break // nothing after hi
		}
		lo, hi = g, g+step
	}
	// lo is held (or 0), nothing is after hi: the end is in [lo, hi].
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		g, ok, err := first(mid - 1)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = g
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

// stream replays from the store, then follows live records from l (already
// registered on f, so that nothing committed after the call is missed);
// whenever it sees a gap it reads the store again. A listener cut off for
// falling behind is replaced and the store read again, or with
// p.CutBehind the subscription ends with errBehind.
func (r *Runtime) stream(ctx context.Context, f *fanout, l *listener, read func(ctx context.Context, last int64, limit int) ([]store.Record, error),
	pos func(store.Record) int64, after int64, contiguous bool, p *SubscribeParams) *Subscription {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan Event, subscriptionQueue)
	s := &Subscription{C: out, Start: after, cancel: cancel, done: make(chan struct{})}
	buffer, cutBehind := bufferOf(p), p.CutBehind
	go func() {
		defer close(s.done)
		defer func() {
			if l != nil {
				f.remove(l)
			}
		}()
		defer close(out)
		last := after
		limit := firstPage
		send := func(rec store.Record) bool {
			select {
			case out <- eventOut(rec):
				last = pos(rec)
				return true
			case <-ctx.Done():
				return false
			}
		}
		// stale holds the calls whose live events came too late and were
		// skipped: the next live event of such a call is preceded by a
		// marker (TextDelta.Dropped).
		var stale map[string]bool
		sendLive := func(q queued) bool {
			at := q.global
			if contiguous {
				at = q.seq
			}
			k := q.key()
			if last > at {
				// An event committed after this one was sent already.
				if len(stale) >= maxStale {
					clear(stale)
				}
				if stale == nil {
					stale = map[string]bool{}
				}
				stale[k] = true
				return true
			}
			if stale[k] && !q.delta.Dropped && !q.delta.Reset {
				delete(stale, k)
				m := q.marker()
				select {
				case out <- *m.live:
				case <-ctx.Done():
					return false
				}
			}
			select {
			case out <- *q.live:
				return true
			case <-ctx.Done():
				return false
			}
		}
		behind := func() {
			s.err = fmt.Errorf("%w: more than %d events or %d bytes of events were waiting for it (it resumes after %d)", errBehind, listenerQueue, buffer, last)
		}
		// catchUp pages through the store until it has sent all it holds.
		catchUp := func() bool {
			for {
				if cutBehind && l != nil && l.wasCut() {
					behind()
					return false
				}
				n := limit
				recs, err := read(ctx, last, n)
				if err != nil {
					if ctx.Err() == nil {
						r.log.Warn("event stream: store read failed; ending the stream", "err", err)
						s.err = fmt.Errorf("read events after %d: %w", last, err)
					}
					return false
				}
				limit = nextPage(n, recs)
				for i := range recs {
					if !send(recs[i]) {
						return false
					}
					recs[i] = store.Record{} // the subscriber holds it now
				}
				if len(recs) < n {
					return true
				}
			}
		}
		for {
			if !catchUp() {
				return
			}
			if l == nil {
				<-ctx.Done() // nothing live: the session is not running here
				return
			}
			cut := false
		live:
			for {
				batch, closed, wasCut := l.take()
				if closed {
					cut = wasCut
					break live
				}
				if len(batch) == 0 {
					select {
					case <-ctx.Done():
						return
					case <-l.wake:
					}
					continue
				}
				for i, q := range batch {
					batch[i] = queued{} // the subscriber holds it now
					if q.live != nil {
						if !sendLive(q) {
							return
						}
						continue
					}
					rec := q.rec
					at := pos(rec)
					if at <= last {
						continue
					}
					if (contiguous && at != last+1) || (!contiguous && at > last+1) {
						// A gap: read the store up to this record.
						if !catchUp() {
							return
						}
						if at <= last {
							continue
						}
					}
					if !send(rec) {
						return
					}
				}
			}
			if !cut {
				catchUp()
				return // the session stopped
			}
			if cutBehind {
				behind()
				return
			}
			l = f.add(buffer)
		}
	}()
	return s
}

// nextPage sizes the next page from the bytes of the last: halved when it
// was over pageBytes, doubled when under a quarter of it.
func nextPage(n int, recs []store.Record) int {
	var size int64
	for _, r := range recs {
		size += recordSize(r)
	}
	switch {
	case size > pageBytes:
		return max(1, n/2)
	case size < pageBytes/4 && len(recs) == n:
		return min(maxPage, n*2)
	}
	return n
}
