package bench

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
)

// SendRound is how long the recipient's model round takes in SendLatency.
const SendRound = 100 * time.Millisecond

// slowWorker answers the main agent at once and every other agent after
// SendRound, telling main when a worker round is in flight.
type slowWorker struct {
	main     func(req *provider.Request) chat.Response
	inFlight chan struct{}
}

// Name implements provider.Provider.
func (m *slowWorker) Name() string { return "bench" }

// Stream implements provider.Provider.
func (m *slowWorker) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	return func(yield func(provider.Event, error) bool) {
		if req.AgentName == "main" {
			resp := m.main(req)
			yield(provider.Event{Type: provider.EventDone, Response: &resp}, nil)
			return
		}
		select {
		case m.inFlight <- struct{}{}:
		default:
		}
		select {
		case <-time.After(SendRound):
		case <-ctx.Done():
			yield(provider.Event{}, ctx.Err())
			return
		}
		resp := chat.Response{Content: []chat.Block{chat.Text("noted")}, StopReason: chat.StopEndTurn}
		yield(provider.Event{Type: provider.EventDone, Response: &resp}, nil)
	}
}

// SendLatency measures, N times, how long a SendMessage keeps its sender
// waiting when the recipient's model round is in flight: from the
// sender's model returning the SendMessage call to the sender's next model
// request, which carries the call's result. Each recipient round takes
// SendRound; the sender sends only while one is in flight.
func SendLatency(ctx context.Context, cfg Config) (Stats, error) {
	var mu sync.Mutex
	var samples []time.Duration
	var sent time.Time
	n := 0
	m := &slowWorker{inFlight: make(chan struct{}, 1)}
	m.main = func(req *provider.Request) chat.Response {
		mu.Lock()
		defer mu.Unlock()
		if !sent.IsZero() && strings.Contains(lastResult(req), "message_id") {
			samples = append(samples, time.Since(sent))
			sent = time.Time{}
			n++
		}
		switch {
		case len(req.Messages) == 1:
			return chat.Response{Content: []chat.Block{toolUse("a0", "Agent", map[string]any{
				"prompt": "take notes", "name": "worker", "run_in_background": true,
			})}, StopReason: chat.StopToolUse}
		case n >= cfg.N || !strings.Contains(lastResult(req), "message_id") && !strings.Contains(lastResult(req), "worker"):
			return chat.Response{Content: []chat.Block{chat.Text("done")}, StopReason: chat.StopEndTurn}
		}
		// Send while a worker round is in flight.
		mu.Unlock()
		select {
		case <-m.inFlight:
		case <-ctx.Done():
		}
		mu.Lock()
		sent = time.Now()
		return chat.Response{Content: []chat.Block{toolUse(fmt.Sprintf("s%d", n), "SendMessage", map[string]any{
			"to": "worker", "message": fmt.Sprintf("note %d", n),
		})}, StopReason: chat.StopToolUse}
	}
	if err := runSession(ctx, cfg, m, ""); err != nil {
		return Stats{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(samples) < cfg.N {
		return Summarize(samples), fmt.Errorf("send latency: %d of %d sends measured", len(samples), cfg.N)
	}
	return Summarize(samples), nil
}

// lastResult returns the tool results of the request's last message.
func lastResult(req *provider.Request) string {
	if len(req.Messages) == 0 {
		return ""
	}
	var b strings.Builder
	for _, c := range req.Messages[len(req.Messages)-1].Content {
		b.WriteString(c.Content)
		b.WriteString(c.Text)
	}
	return b.String()
}
