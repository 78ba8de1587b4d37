package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

// served is a Server of the harness's runtime run by Serve on a loopback
// listener: the timeouts and the connection cap apply, as in vigil serve.
type served struct {
	srv  *Server
	addr string // host:port
	base string // http://host:port
}

// serve runs a second Server over h's runtime with Serve; wrap, when set,
// wraps the listener. It stops when the test ends.
func (h *harness) serve(wrap func(net.Listener) net.Listener, edit ...func(*Options)) *served {
	h.t.Helper()
	opts := Options{Token: testToken, Logger: h.srv.log, Metrics: NewMetrics()}
	for _, f := range edit {
		f(&opts)
	}
	srv := New(h.rt, opts)
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		h.t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Logf("serve: %v", err)
		}
	})
	return &served{srv: srv, addr: addr, base: "http://" + addr}
}

// rawConn is a TCP connection that speaks HTTP by hand, for requests no
// client would send.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes s as it is.
func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := rc.c.Write([]byte(s)); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// response reads one response. The deadline is a guard against a hang,
// far above any timeout the tests set; nothing is measured by it.
func (rc *rawConn) response(req *http.Request) (*http.Response, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	return http.ReadResponse(rc.br, req)
}

// closedByServer reports whether the server closed the connection: a read
// gets EOF or a reset rather than data.
func (rc *rawConn) closedByServer() bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var b [1]byte
	_, err := rc.br.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// sqliteStore opens a SQLite store in the test's directory (synchronous
// NORMAL: the tests need no power-loss durability).
func sqliteStore(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "vigil.db"), &sqlite.Options{
		Synchronous: "NORMAL",
		Logger:      slog.New(slog.NewTextHandler(logWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("open SQLite: %v", err)
	}
	return st
}

// postgresStore opens a PostgreSQL store on a database of the test's own,
// dropped at its end. Without a reachable server it returns nil after
// saying so loudly, or fails the test when VIGIL_TEST_STRICT=1.
func postgresStore(t testing.TB) store.Store {
	t.Helper()
	dsn, err := pgtest.Try(t)
	if err != nil {
		msg := fmt.Sprintf("SKIP: %v; the PostgreSQL half of %s does not run", err, t.Name())
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Log(msg)
		return nil
	}
	st, err := postgres.Open(context.Background(), dsn, &postgres.Options{
		MaxConns: 8,
		Logger:   slog.New(slog.NewTextHandler(logWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("open PostgreSQL: %v", err)
	}
	return st
}

// procStatus returns a field of /proc/self/status in kB (VmRSS, VmHWM), or
// -1.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// logWriter is where a test's logs go: its own log, or for a fuzz target's
// shared setup (which may not log once fuzzing starts) standard error.
func logWriter(t testing.TB) io.Writer {
	if _, ok := t.(*testing.F); ok {
		return os.Stderr
	}
	return tWriter{t}
}
