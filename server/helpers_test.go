package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	admin := os.Getenv("VIGIL_TEST_POSTGRES")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		msg := fmt.Sprintf("SKIP: PostgreSQL not reachable at %s (%v); set VIGIL_TEST_POSTGRES; the PostgreSQL half of %s does not run", redactDSN(admin), err, t.Name())
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Log(msg)
		return nil
	}
	defer conn.Close(ctx)
	// A fuzz worker is stopped without running its cleanups: its database
	// names its host and process, and the next run drops those of
	// processes of this host that are gone.
	prefix := "vigil_server_test_" + hostTag() + "_"
	dropStaleDatabases(ctx, t, conn, prefix)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("%s%d_%s", prefix, os.Getpid(), hex.EncodeToString(b[:]))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("VIGIL_TEST_POSTGRES: %v", err)
	}
	u.Path = "/" + name
	st, err := postgres.Open(context.Background(), u.String(), &postgres.Options{
		MaxConns: 8,
		Logger:   slog.New(slog.NewTextHandler(logWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("open PostgreSQL: %v", err)
	}
	return st
}

// hostTag names this machine in a database name.
func hostTag() string {
	h, _ := os.Hostname()
	sum := sha256.Sum256([]byte(h))
	return hex.EncodeToString(sum[:4])
}

// dropStaleDatabases drops the test databases named prefix<pid>_… whose
// process no longer runs.
func dropStaleDatabases(ctx context.Context, t testing.TB, conn *pgx.Conn, prefix string) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", prefix)
	if err != nil {
		t.Logf("list stale test databases: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Logf("list stale test databases: %v", err)
		return
	}
	for _, name := range names {
		pid, _, _ := strings.Cut(strings.TrimPrefix(name, prefix), "_")
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // still running
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop stale test database %s: %v", name, err)
		}
	}
}

func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return dsn
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
