package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
)

// TestSlowClients opens 2,000 connections without a token that never send
// their body (1,000) or never finish their headers (1,000), holds them
// all, and checks that /healthz still answers: the first kind is answered
// 401 from its headers and closed, the second is closed to make room under
// the connection cap once it is reached. It logs the figures:
//
//	go test -run TestSlowClients -v ./server/
func TestSlowClients(t *testing.T) {
	const bodyless, headless, maxConns = 1000, 1000, 512
	need := uint64(bodyless+headless+maxConns) + 200
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < need {
		lim.Cur = min(need, lim.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < need {
		msg := "SKIP: the open-file limit is below what 2,000 client connections need"
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatalf("%s: %d < %d", msg, lim.Cur, need)
		}
		t.Skipf("%s: %d < %d", msg, lim.Cur, need)
	}
	h := newHarness(t)
	s := h.serve(nil, func(o *Options) { o.MaxConns = maxConns })

	var waiting []*rawConn
	refused := 0
	for i := range bodyless + headless {
		rc := dialRaw(t, s.addr)
		if i%2 == 0 {
			// Small bodies (which net/http would read to reuse the
			// connection) and large ones.
			length := 1000
			if i%4 == 2 {
				length = 1 << 20
			}
			rc.send(fmt.Sprintf("POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", length))
			waiting = append(waiting, rc)
			continue
		}
		rc.send("POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
	}
	// Every connection is open or was closed by the server; /healthz
	// answers now.
	healthz := func() {
		t.Helper()
		rc := dialRaw(t, s.addr)
		rc.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := rc.response(&http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("healthz with %d slow connections: %v", bodyless+headless, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
	}
	healthz()
	for _, rc := range waiting {
		resp, err := rc.response(&http.Request{Method: "POST"})
		if err != nil {
			t.Fatalf("a body-less request got no answer: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && resp.Close {
			refused++
		}
	}
	healthz()
	open, peak, evicted := s.srv.connStats()
	t.Logf("%d connections without a token: %d never sent their body (%d answered 401 from their headers, connection closed), %d never finished their headers; cap %d: peak %d open, %d closed to make room, %d open now; /healthz answered 200 twice",
		bodyless+headless, bodyless, refused, headless, maxConns, peak, evicted, open)
	if refused != bodyless {
		t.Errorf("%d of %d body-less requests were answered 401 with Connection: close", refused, bodyless)
	}
	if peak > maxConns {
		t.Errorf("%d connections open at once, over the cap of %d", peak, maxConns)
	}
	if evicted == 0 {
		t.Errorf("no connection was closed to make room: the cap was never reached")
	}
}

// TestDefaultMaxConns: without Options.MaxConns the cap is 1024, or half
// the open-file limit when that is lower.
func TestDefaultMaxConns(t *testing.T) {
	want := DefaultMaxConns
	if lim := openFileLimit(); lim > 0 && lim/2 < uint64(want) {
		want = max(16, int(lim/2))
	}
	if got := New(nil, Options{}).opts.MaxConns; got != want {
		t.Errorf("MaxConns %d, want %d (open-file limit %d)", got, want, openFileLimit())
	}
	if got := New(nil, Options{MaxConns: 7}).opts.MaxConns; got != 7 {
		t.Errorf("MaxConns %d, want 7", got)
	}
}

// TestConnCapWaitsForBusy: when every connection is in a request, a new one
// waits for a place instead of closing one that is serving.
func TestConnCapWaitsForBusy(t *testing.T) {
	h := newHarness(t)
	s := h.serve(nil, func(o *Options) { o.MaxConns = 2 })
	// Two event streams hold both places, in their handlers.
	a := openSSE(t, s.base, "/api/events", "")
	b := openSSE(t, s.base, "/api/events", "")
	if _, err := a.br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := b.br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		rc := &rawConn{t: t, c: c, br: bufio.NewReader(c)}
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			got <- -1
			return
		}
		resp, err := rc.response(&http.Request{Method: "GET"})
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	a.close() // frees a place
	if code := <-got; code != 200 {
		t.Fatalf("healthz after a stream ended: %d", code)
	}
	// The other stream was never cut: it still carries the next event.
	// (The closed stream's connection may be closed to make room if the
	// server saw it idle before it saw its end: that one served no one.)
	h.create(CreateSessionRequest{Provider: "echo"})
	if ev, err := b.next(); err != nil || ev.event != "session.created" {
		t.Fatalf("the serving stream after the cap was reached: %+v, %v", ev, err)
	}
	if _, peak, evicted := s.srv.connStats(); evicted > 1 || peak > 2 {
		t.Errorf("peak %d, %d evicted; want at most 2 and at most the closed stream's", peak, evicted)
	}
	b.close()
}
