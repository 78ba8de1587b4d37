package vigil

import (
	"context"
	"sync"

	"github.com/vigilrun/vigil/store"
)

// fanout delivers committed records to live listeners without blocking the
// actor: a listener that falls behind is cut off and catches up from the
// store.
type fanout struct {
	mu     sync.Mutex
	subs   map[*listener]struct{}
	closed bool
}

type listener struct {
	ch  chan store.Record
	cut bool // fell behind and was cut off
}

func newFanout() *fanout { return &fanout{subs: map[*listener]struct{}{}} }

func (f *fanout) add(buf int) *listener {
	l := &listener{ch: make(chan store.Record, buf)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(l.ch)
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
		close(l.ch)
	}
}

func (f *fanout) publish(recs []store.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for l := range f.subs {
		for _, r := range recs {
			select {
			case l.ch <- r:
				continue
			default:
			}
			l.cut = true
			delete(f.subs, l)
			close(l.ch)
			break
		}
	}
}

func (f *fanout) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for l := range f.subs {
		delete(f.subs, l)
		close(l.ch)
	}
}

func (a *actor) publish(recs []store.Record) {
	a.subs.publish(recs)
	a.rt.allSubs.publish(recs)
}

// Subscription is a stream of committed events: first those after the
// requested position, read from the store, then live ones, in order, none
// twice. C is closed when the context ends or the session stops.
type Subscription struct {
	C      <-chan store.Record
	cancel context.CancelFunc
	done   chan struct{}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
}

// Subscribe streams a session's events with Seq > after.
func (r *Runtime) Subscribe(ctx context.Context, session string, after int64) (*Subscription, error) {
	a, err := r.actor(session)
	if err != nil {
		if _, gerr := r.st.SessionGet(ctx, session); gerr != nil {
			return nil, err
		}
		a = nil // a closed or foreign session: its stored events only
	}
	var f *fanout
	if a != nil {
		f = a.subs
	}
	return r.stream(ctx, f, func(ctx context.Context, last int64) ([]store.Record, error) {
		return r.st.EventList(ctx, &store.EventListParams{Session: session, AfterSeq: last, Limit: 1000})
	}, func(rec store.Record) int64 { return rec.Seq }, after, true), nil
}

// SubscribeAll streams every session's events with Global > after.
func (r *Runtime) SubscribeAll(ctx context.Context, after int64) *Subscription {
	return r.stream(ctx, r.allSubs, func(ctx context.Context, last int64) ([]store.Record, error) {
		return r.st.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: last, Limit: 1000})
	}, func(rec store.Record) int64 { return rec.Global }, after, false)
}

// stream replays from the store, then follows live records; whenever it
// sees a gap (or was cut off for falling behind) it reads the store again.
func (r *Runtime) stream(ctx context.Context, f *fanout, read func(context.Context, int64) ([]store.Record, error),
	pos func(store.Record) int64, after int64, contiguous bool) *Subscription {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan store.Record, 64)
	s := &Subscription{C: out, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(out)
		last := after
		send := func(rec store.Record) bool {
			select {
			case out <- rec:
				last = pos(rec)
				return true
			case <-ctx.Done():
				return false
			}
		}
		catchUp := func() bool {
			for {
				recs, err := read(ctx, last)
				if err != nil {
					if ctx.Err() == nil {
						r.log.Warn("event stream: store read failed; ending the stream", "err", err)
					}
					return false
				}
				for _, rec := range recs {
					if !send(rec) {
						return false
					}
				}
				if len(recs) < 1000 {
					return true
				}
			}
		}
		for {
			var l *listener
			if f != nil {
				l = f.add(1024)
			}
			if !catchUp() {
				if l != nil {
					f.remove(l)
				}
				return
			}
			if l == nil {
				<-ctx.Done() // nothing live: the session is not running here
				return
			}
			cut := false
		live:
			for {
				select {
				case <-ctx.Done():
					f.remove(l)
					return
				case rec, ok := <-l.ch:
					if !ok {
						cut = l.cut
						break live
					}
					p := pos(rec)
					if p <= last {
						continue
					}
					if (contiguous && p != last+1) || (!contiguous && p > last+1) {
						// A gap: read the store up to this record.
						if !catchUp() {
							f.remove(l)
							return
						}
						if p <= last {
							continue
						}
					}
					if !send(rec) {
						f.remove(l)
						return
					}
				}
			}
			if !cut {
				catchUp()
				return // the session stopped
			}
		}
	}()
	return s
}
