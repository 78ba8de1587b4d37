package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
)

// BenchmarkSSEFanout measures events per second delivered to 100
// concurrent event-stream clients of one session: b.N events are committed
// (messages to a missing agent, one event each, from 4 senders), and the
// clock stops when every client has read all of them.
//
//	go test -run '^$' -bench SSEFanout -benchtime 20000x ./server/
func BenchmarkSSEFanout(b *testing.B) {
	const clients, senders = 100, 4
	// A buffer that holds the whole run: a client that falls behind is
	// not cut (it would reconnect; that is measured by the SSE tests).
	h := newHarness(b, func(o *Options) { o.StreamBuffer = 1 << 30 })
	id := h.create(CreateSessionRequest{Provider: "echo"})
	startSeq, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	target := startSeq + int64(b.N)

	var ready, done sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			errs <- readUntil(h.ts.URL+"/api/sessions/"+id+"/events", startSeq, target, ready.Done)
		}()
	}
	ready.Wait() // every client is connected and has replayed the history

	b.ResetTimer()
	start := time.Now()
	var send sync.WaitGroup
	for s := range senders {
		send.Add(1)
		go func() {
			defer send.Done()
			for i := s; i < b.N; i += senders {
				m, err := h.rt.Message(context.Background(), vigil.SessionID(id), &vigil.MessageParams{To: "ghost", Text: "x"})
				if err != nil || m.Outcome != vigil.OutcomeRejected {
					b.Errorf("message: %v %v", m, err)
					return
				}
			}
		}()
	}
	send.Wait()
	done.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	if last, _ := h.st.LastSeq(context.Background(), id); last != target {
		b.Fatalf("the session holds %d events, want %d", last, target)
	}
	b.ReportMetric(float64(clients)*float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
}

// readUntil reads an event stream after from until it has seen the event
// with id target, checking the ids run without a gap. connected is called
// once the stream is caught up to from.
func readUntil(url string, from, target int64, connected func()) error {
	req, err := http.NewRequest("GET", url+"?after="+strconv.FormatInt(from, 10), nil)
	if err != nil {
		connected()
		return err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		connected()
		return err
	}
	defer resp.Body.Close()
	connected()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	next := from + 1
	var last []byte
	for next <= target {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("stream ended at %d of %d (last line %q): %w", next-1, target, last, err)
		}
		last = append(last[:0], line...)
		if !bytes.HasPrefix(line, []byte("id: ")) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(line[4:])), 10, 64)
		if err == nil && n == from && next == from+1 {
			continue // the stream's first frame: the position it starts after
		}
		if err != nil || n != next {
			return fmt.Errorf("event id %q, want %d", line, next)
		}
		next++
	}
	return nil
}

// BenchmarkPostPrompt measures the latency of POST .../prompts through the
// real HTTP stack, one request at a time, and reports p50 and p99. Each
// prompt starts or joins a run of the echo provider, so the session works
// while the requests come in; a fresh session takes over every 500
// prompts to keep transcripts short.
//
//	go test -run '^$' -bench PostPrompt -benchtime 5000x ./server/
func BenchmarkPostPrompt(b *testing.B) {
	h := newHarness(b)
	client := h.ts.Client()
	body := []byte(`{"text":"hello","priority":"next"}`)
	lat := make([]time.Duration, 0, b.N)
	var url string
	b.ResetTimer()
	for i := range b.N {
		if i%500 == 0 {
			b.StopTimer()
			url = h.ts.URL + "/api/sessions/" + h.create(CreateSessionRequest{Provider: "echo"}) + "/prompts"
			b.StartTimer()
		}
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var buf [256]byte
		n, _ := resp.Body.Read(buf[:])
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("status %d: %s", resp.StatusCode, buf[:n])
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkGetSession measures GET /api/sessions/{id} of a session with a
// hundred ended runs and its transcript, through the real HTTP stack, one
// request at a time: the copy out of the session's state and its
// encoding. It reports p50 and p99.
//
//	go test -run '^$' -bench GetSession -benchtime 3000x ./server/
func BenchmarkGetSession(b *testing.B) {
	h := newHarness(b)
	client := h.ts.Client()
	id := h.create(CreateSessionRequest{Provider: "echo"})
	for range 100 {
		h.must("POST", "/api/sessions/"+id+"/prompts", PromptRequest{Text: "hello"}, http.StatusAccepted, nil)
		h.quiet(id)
	}
	url := h.ts.URL + "/api/sessions/" + id
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
