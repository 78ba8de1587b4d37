package providertest

import (
	"context"
	"errors"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// Result is everything one call of Provider.Stream produced, as Drain
// collects it.
type Result struct {
	// Events are all the events, EventDone included, in order.
	Events []provider.Event
	// Text joins the EventText deltas since the last EventRetry (the
	// output before a retry is void), and Deltas counts them.
	Text   string
	Deltas int
	// Tools are the EventToolUse blocks since the last EventRetry.
	Tools []chat.Block
	// Retries are the EventRetry announcements.
	Retries []provider.Retry
	// Response is the EventDone's response, nil when the call failed.
	Response *chat.Response
	// Err is the error the stream ended with, or a description of how it
	// broke its contract: events after its end, or an end without
	// EventDone or an error.
	Err error
}

// Drain calls p.Stream and reads the whole stream.
func Drain(ctx context.Context, p provider.Provider, req *provider.Request) Result {
	var r Result
	done := false
	for ev, err := range p.Stream(ctx, req) {
		if done {
			r.Err = errors.New("stream went on after its end")
			return r
		}
		if err != nil {
			r.Err, done = err, true
			continue
		}
		r.Events = append(r.Events, ev)
		switch ev.Type {
		case provider.EventText:
			r.Text += ev.Text
			r.Deltas++
		case provider.EventToolUse:
			if ev.Block != nil {
				r.Tools = append(r.Tools, *ev.Block)
			}
		case provider.EventRetry:
			if ev.Retry != nil {
				r.Retries = append(r.Retries, *ev.Retry)
			}
			r.Text, r.Deltas, r.Tools = "", 0, nil
		case provider.EventDone:
			r.Response, done = ev.Response, true
		}
	}
	if !done {
		r.Err = errors.New("stream ended without EventDone or an error")
	}
	return r
}

// ErrorOf returns err as a *provider.Error, failing the test when it is
// not one.
func ErrorOf(t testing.TB, err error) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want a *provider.Error", err, err)
	}
	return pe
}

// ResponseText is the plain text of a response, "<no response>" for nil.
func ResponseText(r *chat.Response) string {
	if r == nil {
		return "<no response>"
	}
	return chat.Message{Content: r.Content}.PlainText()
}
