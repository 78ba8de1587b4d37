package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// sseClientsEnv, set in the environment of a re-run of the test binary,
// makes it an event-stream client process (sseClientsMain) instead of
// running tests: the benchmarks' clients then spend none of the server's
// CPU, which is measured on its own.
const sseClientsEnv = "VIGIL_BENCH_SSE_CLIENTS"

// BenchmarkPromptsUnderSSE measures POST .../prompts through the real HTTP
// stack while 200 clients of /api/events read every event. The clients
// run in a child process (the test binary re-run), so that this process's
// CPU time is the server's (and the 4 posting clients'). b.N prompts are
// posted by 4 senders, one request at a time, each to a session of its
// own that a fresh one takes over every 500 prompts, as in
// BenchmarkPostPrompt (transcripts stay short, inboxes below their 1000
// items); the clock stops when every session is quiescent again.
//
// It reports prompts/s, the POST latency's p50 and p99, the server's CPU
// time per prompt and per event written to a client, and the clients'
// reconnections (a client cut for falling behind resumes with
// Last-Event-ID).
//
//	go test -run '^$' -bench PromptsUnderSSE -benchtime 4000x ./server/
func BenchmarkPromptsUnderSSE(b *testing.B) {
	const clients, senders, perSession = 200, 4, 500
	h := newHarness(b)
	// Every session is made before the clock starts.
	blocks := ((b.N+senders-1)/senders + perSession - 1) / perSession
	sessions := make([][]string, senders)
	for s := range sessions {
		for range blocks {
			sessions[s] = append(sessions[s], h.create(CreateSessionRequest{Provider: "echo"}))
		}
	}
	urls := make([]string, clients)
	for i := range urls {
		urls[i] = h.ts.URL + "/api/events"
	}
	child := startSSEClients(b, urls)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	defer client.CloseIdleConnections()
	body := []byte(`{"text":"hello","priority":"next"}`)
	lats := make([][]time.Duration, senders)
	events0 := counterValue(b, h.metrics.sseEvents)
	cpu0 := processCPU(b)
	b.ResetTimer()
	start := time.Now()
	var send sync.WaitGroup
	for s := range senders {
		send.Add(1)
		go func() {
			defer send.Done()
			for i, sent := s, 0; i < b.N; i, sent = i+senders, sent+1 {
				url := h.ts.URL + "/api/sessions/" + sessions[s][sent/perSession] + "/prompts"
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testToken)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				var buf [256]byte
				n, _ := resp.Body.Read(buf[:])
				resp.Body.Close()
				lats[s] = append(lats[s], time.Since(t0))
				if resp.StatusCode != http.StatusAccepted {
					b.Errorf("status %d: %s", resp.StatusCode, buf[:n])
					return
				}
			}
		}()
	}
	send.Wait()
	for _, id := range slices.Concat(sessions...) {
		h.quiet(id)
	}
	elapsed := time.Since(start)
	cpu := processCPU(b) - cpu0
	events := counterValue(b, h.metrics.sseEvents) - events0
	b.StopTimer()
	read, reconnects := child.stop(b)
	if b.Failed() {
		return
	}
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "prompts/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/prompt")
	if events > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/events, "cpu-ns/event")
	}
	b.ReportMetric(events/float64(b.N), "events/prompt")
	b.ReportMetric(float64(reconnects), "reconnects")
	if read == 0 {
		b.Fatalf("the clients read no event")
	}
}

// counterValue reads a counter.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// processCPU is the user and system CPU time this process has used.
func processCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sseClients is a child process reading event streams (sseClientsMain).
type sseClients struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startSSEClients re-runs the test binary as one client of each of urls
// and returns once every client has read its stream's first frame.
func startSSEClients(t testing.TB, urls []string) *sseClients {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sseClientsEnv+"="+strings.Join(urls, "\n"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the client process: %v", err)
	}
	c := &sseClients{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	line, err := c.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the client process: %q, %v", line, err)
	}
	return c
}

// stop ends the clients and returns the events they read and how often
// they reconnected.
func (c *sseClients) stop(t testing.TB) (events, reconnects int64) {
	t.Helper()
	c.stdin.Close()
	line, err := c.out.ReadString('\n')
	if werr := c.cmd.Wait(); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		t.Fatalf("the client process: %q, %v", line, err)
	}
	if _, err := fmt.Sscanf(line, "events %d reconnects %d\n", &events, &reconnects); err != nil {
		t.Fatalf("the client process said %q: %v", line, err)
	}
	return events, reconnects
}

// sseClientsMain is the client process: it reads each of the event streams
// urls lists (one a line, one client each) until its standard input
// closes, printing "ready" once every client has read its first frame,
// then "events N reconnects M". A client cut by the server (vigil.cut)
// resumes after the last id it read.
func sseClientsMain(urls string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	list := strings.Split(urls, "\n")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(list)}}
	var ready, done sync.WaitGroup
	var events, reconnects atomic.Int64
	errs := make(chan error, len(list))
	for _, url := range list {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			var once sync.Once
			defer once.Do(ready.Done)
			last := int64(-1)
			for {
				n, err := readSSE(ctx, client, url, &last, func() { once.Do(ready.Done) })
				events.Add(n)
				if ctx.Err() != nil {
					return
				}
				if !errors.Is(err, errCut) {
					errs <- fmt.Errorf("%s: %w", url, err)
					return
				}
				reconnects.Add(1)
			}
		}()
	}
	ready.Wait()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	done.Wait()
	close(errs)
	code := 0
	for err := range errs {
		fmt.Fprintln(os.Stderr, "sse client:", err)
		code = 1
	}
	fmt.Printf("events %d reconnects %d\n", events.Load(), reconnects.Load())
	return code
}

// readSSE reads one connection of an event stream after *last (-1: from
// now), advancing *last, and returns the events it read: with errCut when
// the server cut the stream.
func readSSE(ctx context.Context, client *http.Client, url string, last *int64, connected func()) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if *last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var n int64
	first := true
	for {
		line, err := br.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			_, err = br.ReadSlice('\n') // the rest of a long data line
		}
		if err != nil {
			return n, err
		}
		if bytes.HasPrefix(line, []byte("event: vigil.cut")) {
			return n, errCut
		}
		v, ok := bytes.CutPrefix(line, []byte("id: "))
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return n, fmt.Errorf("id %q", line)
		}
		*last = id
		if first {
			first = false
			connected()
			continue // the position the stream starts after
		}
		n++
	}
}
