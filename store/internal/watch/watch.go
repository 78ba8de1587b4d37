// Package watch keeps the channels of a store's Watch calls (store.Watcher)
// for every backend.
package watch

import (
	"context"
	"sync"
)

// Set is the channels of Watch calls in progress. Signal wakes every
// one without blocking (a buffer of one coalesces); a channel is closed
// when its context ends or at Close. The zero Set is ready to use.
type Set struct {
	mu     sync.Mutex
	chans  map[chan struct{}]func() bool // the channel and its context's AfterFunc stop
	closed bool
}

// Add registers a channel until ctx ends; false when closed.
func (w *Set) Add(ctx context.Context) (<-chan struct{}, bool) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, false
	}
	if w.chans == nil {
		w.chans = map[chan struct{}]func() bool{}
	}
	w.chans[ch] = context.AfterFunc(ctx, func() { w.remove(ch) })
	return ch, true
}

func (w *Set) remove(ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.chans[ch]; ok {
		delete(w.chans, ch)
		close(ch)
	}
}

// Signal wakes every watcher.
func (w *Set) Signal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Close closes every channel; later adds fail.
func (w *Set) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for ch, stop := range w.chans {
		stop()
		close(ch)
	}
	clear(w.chans)
}
