package server

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
)

// eventsSession streams one session's events; the SSE id is the event's
// Seq.
func (s *Server) eventsSession(w http.ResponseWriter, r *http.Request) error {
	p, err := s.streamParams(r)
	if err != nil {
		return err
	}
	p.Session = sid(r)
	sub, err := s.rt.Subscribe(r.Context(), p)
	if err != nil {
		return err
	}
	defer sub.Close()
	s.stream(w, r, sub, true)
	return nil
}

// eventsAll streams every session's events; the SSE id is the event's
// Global position.
func (s *Server) eventsAll(w http.ResponseWriter, r *http.Request) error {
	p, err := s.streamParams(r)
	if err != nil {
		return err
	}
	sub, err := s.rt.Subscribe(r.Context(), p)
	if err != nil {
		return err
	}
	defer sub.Close()
	s.stream(w, r, sub, false)
	return nil
}

// streamParams is where a stream starts: after the Last-Event-ID header of
// a reconnecting client, else after the ?after= query (0: from the
// beginning), else at the current end of the stream: a new client gets
// what commits from now on, not the whole history.
func (s *Server) streamParams(r *http.Request) (*vigil.SubscribeParams, error) {
	p := &vigil.SubscribeParams{CutBehind: true, Buffer: s.opts.StreamBuffer}
	v, from := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if strings.TrimSpace(v) == "" {
		v, from = r.URL.Query().Get("after"), "after"
	}
	v = strings.TrimSpace(v)
	if v == "" {
		p.FromNow = true
		return p, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, badRequest("%s=%q: want an event id >= 0", from, v)
	}
	p.After = n
	return p, nil
}

// CutEvent is the data of the vigil.cut event that ends a stream early: a
// client that read slower than events commit (reason "behind"), a store
// read that failed ("store") or a server shutting down ("shutdown"). The
// client reconnects with Last-Event-ID: ResumeAfter, and misses nothing.
type CutEvent struct {
	Reason      string `json:"reason"`
	Message     string `json:"message"`
	ResumeAfter int64  `json:"resume_after"`
}

// stream writes the subscription as Server-Sent Events until the client
// goes away, the server shuts down or the subscription ends. It starts with
// the id the stream starts after (an event-less frame: a client's
// Last-Event-ID is right even before the first event). Each batch of events
// is flushed as it is written, each write bounded by
// Options.StreamWriteTimeout; an idle stream gets a comment heartbeat.
// With bySeq an event's id is its Seq (a session's stream), else its
// Global. Each event's frame is rendered once, for every client of either
// stream (frameCache). A live event (vigil.Event.Live, "text.delta") is a
// frame with no id: line, so that a client's Last-Event-ID stays that of
// the last committed event.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *vigil.Subscription, bySeq bool) {
	s.streams.Add(1)
	defer s.streams.Done()
	s.frames.open()
	defer s.frames.close()
	sw := newStreamWriter(w, s.opts.StreamWriteTimeout)
	defer sw.extend()
	rc := http.NewResponseController(sw)
	h := sw.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	sw.WriteHeader(http.StatusOK)
	s.metrics.sseClients.Inc()
	defer s.metrics.sseClients.Dec()
	last := sub.Start
	// id is where the stream stands after e: a live event (no id: line)
	// leaves it where it was.
	id := func(e vigil.Event) int64 {
		switch {
		case e.Live:
			return last
		case bySeq:
			return e.Seq
		}
		return e.Global
	}
	var buf bytes.Buffer
	buf.WriteString(": vigil event stream\nretry: 2000\nid: ")
	buf.WriteString(strconv.FormatInt(last, 10))
	buf.WriteString("\n\n")
	if !s.flush(sw, rc, &buf) {
		return
	}
	// ended writes why the subscription ended, if it was cut short.
	ended := func() {
		err := sub.Err()
		if err == nil {
			return // the session stopped here, or the runtime closed
		}
		c := CutEvent{Reason: "store", Message: "reading the stored events failed: " + err.Error(), ResumeAfter: last}
		if errors.Is(err, vigil.ErrBehind) {
			c.Reason, c.Message = "behind", "this client reads slower than events commit: "+err.Error()
		}
		s.writeCut(&buf, c)
		s.flush(sw, rc, &buf)
	}
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.stopping:
			s.writeCut(&buf, CutEvent{Reason: "shutdown", Message: "the server is shutting down", ResumeAfter: last})
			s.flush(sw, rc, &buf)
			return
		case <-beat.C:
			buf.WriteString(": heartbeat\n\n")
			if !s.flush(sw, rc, &buf) {
				return
			}
		case rec, ok := <-sub.C:
			if !ok {
				ended()
				return
			}
			last = id(rec)
			s.frames.write(&buf, rec, bySeq)
			n := 1
			// Write what else is ready in the same flush.
		more:
			for buf.Len() < 64<<10 {
				select {
				case rec, ok := <-sub.C:
					if !ok {
						if s.flush(sw, rc, &buf) {
							s.metrics.sseEvents.Add(float64(n))
							ended()
						}
						return
					}
					last = id(rec)
					s.frames.write(&buf, rec, bySeq)
					n++
				default:
					break more
				}
			}
			if !s.flush(sw, rc, &buf) {
				return
			}
			s.metrics.sseEvents.Add(float64(n))
		}
	}
}

// writeCut encodes the vigil.cut event; it has no id, being no stored
// event.
func (s *Server) writeCut(buf *bytes.Buffer, c CutEvent) {
	s.metrics.sseCuts.WithLabelValues(c.Reason).Inc()
	b, _ := marshal(c)
	buf.WriteString("event: vigil.cut\ndata: ")
	buf.Write(bytes.TrimSpace(b))
	buf.WriteString("\n\n")
}

// flush writes buf to the client and flushes; false when the client is
// gone. A buffer grown large by a big event is let go.
func (s *Server) flush(w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer) bool {
	defer func() {
		buf.Reset()
		if buf.Cap() > 256<<10 {
			*buf = bytes.Buffer{}
		}
	}()
	if _, err := w.Write(buf.Bytes()); err != nil {
		return false
	}
	return rc.Flush() == nil
}
