package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
)

// BenchmarkSSEFanout measures events per second delivered to 100
// concurrent event-stream clients of one session: b.N events are committed
// (messages to a missing agent, one event each, from 4 senders), and the
// clock stops when every client has read all of them. A client that falls
// behind is cut (vigil.cut) and reconnects with Last-Event-ID, as a
// browser's EventSource does; the reconnections are reported.
//
//	go test -run '^$' -bench SSEFanout -benchtime 20000x ./server/
func BenchmarkSSEFanout(b *testing.B) {
	const clients, senders = 100, 4
	h := newHarness(b)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	startSeq, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	target := startSeq + int64(b.N)

	var ready, done sync.WaitGroup
	var reconnects atomic.Int64
	errs := make(chan error, clients)
	for range clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			errs <- readUntil(h.ts.URL+"/api/sessions/"+id+"/events", startSeq, target, ready.Done, &reconnects)
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
	b.ReportMetric(float64(reconnects.Load()), "reconnects")
}

// readUntil reads an event stream after from until it has seen the event
// with id target, checking the ids run without a gap or a repeat. When the
// server cuts the stream (vigil.cut) it reconnects after the last id it
// read, counting the reconnection. connected is called once the first
// stream is open.
func readUntil(url string, from, target int64, connected func(), reconnects *atomic.Int64) error {
	next := from + 1
	first := true
	for {
		err := readStream(url, next-1, target, &next, func() {
			if first {
				first = false
				connected()
			}
		})
		if first {
			connected()
		}
		if err != errCut {
			return err
		}
		reconnects.Add(1)
	}
}

// errCut: the server ended the stream with vigil.cut.
var errCut = errors.New("cut")

// readStream reads one connection of an event stream from after, advancing
// *next; it returns nil at target, errCut when the server cuts it.
func readStream(url string, after, target int64, next *int64, connected func()) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	connected()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for *next <= target {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("stream ended at %d of %d without vigil.cut: %w", *next-1, target, err)
		}
		if bytes.HasPrefix(line, []byte("event: vigil.cut")) {
			return errCut
		}
		if !bytes.HasPrefix(line, []byte("id: ")) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(line[4:])), 10, 64)
		if err == nil && n == after && *next == after+1 {
			continue // the stream's first frame: the position it starts after
		}
		if err != nil || n != *next {
			return fmt.Errorf("event id %q, want %d", line, *next)
		}
		*next++
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
