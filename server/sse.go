package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/store"
)

// eventsSession streams one session's events; the SSE id is the event's
// Seq.
func (s *Server) eventsSession(w http.ResponseWriter, r *http.Request) error {
	after, err := resumePoint(r)
	if err != nil {
		return err
	}
	sub, err := s.rt.Subscribe(r.Context(), r.PathValue("session"), after)
	if err != nil {
		return err
	}
	defer sub.Close()
	s.stream(w, r, sub, func(rec store.Record) int64 { return rec.Seq })
	return nil
}

// eventsAll streams every session's events; the SSE id is the event's
// Global position.
func (s *Server) eventsAll(w http.ResponseWriter, r *http.Request) error {
	after, err := resumePoint(r)
	if err != nil {
		return err
	}
	sub := s.rt.SubscribeAll(r.Context(), after)
	defer sub.Close()
	s.stream(w, r, sub, func(rec store.Record) int64 { return rec.Global })
	return nil
}

// resumePoint is where a stream starts: after the Last-Event-ID header of
// a reconnecting client, else after the ?after= query, else from the
// beginning.
func resumePoint(r *http.Request) (int64, error) {
	v, from := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if strings.TrimSpace(v) == "" {
		v, from = r.URL.Query().Get("after"), "after"
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s=%q: want an event id >= 0", from, v)
	}
	return n, nil
}

// stream writes the subscription as Server-Sent Events until the client
// goes away, the server shuts down or the subscription ends. Each event is
// flushed as it is written; an idle stream gets a comment heartbeat.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *vigil.Subscription, id func(store.Record) int64) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s.metrics.sseClients.Inc()
	defer s.metrics.sseClients.Dec()
	var buf bytes.Buffer
	buf.WriteString(": vigil event stream\nretry: 2000\n\n")
	if !s.flush(w, rc, &buf) {
		return
	}
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		case <-beat.C:
			buf.WriteString(": heartbeat\n\n")
			if !s.flush(w, rc, &buf) {
				return
			}
		case rec, ok := <-sub.C:
			if !ok {
				return // the session stopped here, or the runtime closed
			}
			s.writeEvent(&buf, rec, id(rec))
			n := 1
			// Write what else is ready in the same flush.
		more:
			for buf.Len() < 64<<10 {
				select {
				case rec, ok := <-sub.C:
					if !ok {
						if s.flush(w, rc, &buf) {
							s.metrics.sseEvents.Add(float64(n))
						}
						return
					}
					s.writeEvent(&buf, rec, id(rec))
					n++
				default:
					break more
				}
			}
			if !s.flush(w, rc, &buf) {
				return
			}
			s.metrics.sseEvents.Add(float64(n))
		}
	}
}

// writeEvent encodes one record as an SSE event. A record whose data is
// not JSON is sent with data null and logged: the id still advances, so the
// client's position stays right.
func (s *Server) writeEvent(buf *bytes.Buffer, rec store.Record, id int64) {
	data := json.RawMessage(rec.Data)
	if !json.Valid(data) {
		s.log.Warn("event stream: stored event data is not JSON; sending null", "session", rec.Session, "seq", rec.Seq, "type", rec.Type)
		data = json.RawMessage("null")
	}
	if bytes.ContainsAny(data, "\r\n") {
		// Pretty-printed by a store: an SSE data line cannot hold it.
		var c bytes.Buffer
		if json.Compact(&c, data) == nil {
			data = c.Bytes()
		}
	}
	buf.WriteString("id: ")
	buf.WriteString(strconv.FormatInt(id, 10))
	buf.WriteString("\nevent: ")
	buf.WriteString(rec.Type)
	buf.WriteString("\ndata: ")
	// The Event encoded by hand, into buf: this runs once per event per
	// client. JSON holds no raw newline, so it is one data line.
	b := buf.AvailableBuffer()
	b = append(b, `{"session":`...)
	b = appendJSONString(b, rec.Session)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, rec.Seq, 10)
	b = append(b, `,"global":`...)
	b = strconv.AppendInt(b, rec.Global, 10)
	b = append(b, `,"at":"`...)
	b = rec.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":`...)
	b = appendJSONString(b, rec.Type)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	b = append(b, "}\n\n"...)
	buf.Write(b)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// flush writes buf to the client and flushes; false when the client is
// gone.
func (s *Server) flush(w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer) bool {
	defer buf.Reset()
	if _, err := w.Write(buf.Bytes()); err != nil {
		return false
	}
	return rc.Flush() == nil
}
