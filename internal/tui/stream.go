package tui

import (
	"context"
	"encoding/json"
	"net/url"
	"time"

	"github.com/vigilrun/vigil"
)

// The messages the stream loop sends the program.
type (
	// eventMsg is a committed event of the session.
	eventMsg struct {
		ev  vigil.Event
		gen int
	}
	// liveMsg is a live text delta (never stored, never replayed).
	liveMsg struct {
		d   liveDelta
		gen int
	}
	// connMsg says whether the stream is up; err is why it is not.
	connMsg struct {
		up  bool
		err error
		gen int
	}
	// detailMsg is a fresh view of the session.
	detailMsg struct {
		d   *detail
		err error
		gen int
	}
)

// liveDelta is the data of a live "text.delta" event.
type liveDelta struct {
	Agent string `json:"agent"`
	Name  string `json:"name"`
	Run   int    `json:"run"`
	Call  string `json:"call"`
	Text  string `json:"text"`
	// Dropped: live text before this event was dropped for this client;
	// Reset: the call is retried, the text so far is void.
	Dropped bool `json:"dropped"`
	Reset   bool `json:"reset"`
}

// reconnectWait bounds the wait between attempts to reach the server.
const (
	firstReconnectWait = 200 * time.Millisecond
	maxReconnectWait   = 2 * time.Second
)

// follow reads session's events after the one numbered after, and on any
// loss of the stream reconnects from the last event it saw (the server
// takes it as Last-Event-ID), until ctx ends. Each (re)connection first
// reads the session, so that the view is whole again before the events
// after it arrive.
func follow(ctx context.Context, api API, session string, after int64, gen int, send func(any)) {
	path := "/api/sessions/" + url.PathEscape(session) + "/events"
	last := after
	wait := firstReconnectWait
	for ctx.Err() == nil {
		d, err := fetchDetail(ctx, api, session)
		if err == nil {
			send(detailMsg{d: d, gen: gen})
			send(connMsg{up: true, gen: gen})
			err = api.Stream(ctx, path, last, func(data []byte) bool {
				var ev vigil.Event
				var mark struct {
					Live bool `json:"live"`
				}
				if json.Unmarshal(data, &ev) != nil || json.Unmarshal(data, &mark) != nil {
					return true // not an event: a newer server's frame
				}
				if mark.Live || (ev.Seq == 0 && ev.Type == "text.delta") {
					var ld liveDelta
					if json.Unmarshal(ev.Data, &ld) == nil {
						send(liveMsg{d: ld, gen: gen})
					}
					return true
				}
				if ev.Seq <= last {
					return true // seen before the reconnection
				}
				last = ev.Seq
				wait = firstReconnectWait
				send(eventMsg{ev: ev, gen: gen})
				return true
			})
		}
		if ctx.Err() != nil {
			return
		}
		send(connMsg{up: false, err: err, gen: gen})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(wait*2, maxReconnectWait)
	}
}

// fetchDetail reads a session's detail.
func fetchDetail(ctx context.Context, api API, session string) (*detail, error) {
	b, err := api.Do(ctx, "GET", "/api/sessions/"+url.PathEscape(session), nil)
	if err != nil {
		return nil, err
	}
	return decodeDetail(b)
}
