// Package pgtest gives tests a PostgreSQL database of their own: created
// on the server VIGIL_TEST_POSTGRES names (default: 127.0.0.1:5432, user
// postgres, database test, trust auth) and dropped when the test ends.
// Without a reachable server the test is skipped with a loud message, or
// fails when VIGIL_TEST_STRICT=1.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultAdmin is the server the tests use when VIGIL_TEST_POSTGRES is
// unset.
const DefaultAdmin = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Admin returns the DSN of the server the tests create their databases on.
func Admin() string {
	if dsn := os.Getenv("VIGIL_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return DefaultAdmin
}

// Redact hides a password in a URL DSN.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return dsn
}

// WithDatabase returns dsn pointing at database name.
func WithDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name
}

// Fresh creates a database of the test's own and returns its DSN; it is
// dropped (WITH FORCE) when the test ends. Without a reachable server the
// test is skipped with a loud message, or fails when VIGIL_TEST_STRICT=1.
func Fresh(t testing.TB) string {
	t.Helper()
	dsn, err := Try(t)
	if err != nil {
		msg := "SKIP: " + err.Error()
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	return dsn
}

// Try is Fresh for a test that goes on without PostgreSQL: it returns an
// error saying why there is no database instead of skipping.
//
// A database is named after this host and process. A fuzz worker is
// stopped without running its cleanups, so each call first drops the
// databases of processes of this host that are gone.
func Try(t testing.TB) (string, error) {
	t.Helper()
	admin := Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("PostgreSQL not reachable at %s (%v); set VIGIL_TEST_POSTGRES", Redact(admin), err)
	}
	defer conn.Close(ctx)
	prefix := "vigil_test_" + hostTag() + "_"
	dropStale(ctx, t, conn, prefix)
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
	return WithDatabase(admin, name), nil
}

// hostTag names this host in database names, in a few hex digits.
func hostTag() string {
	h, _ := os.Hostname()
	sum := sha256.Sum256([]byte(h))
	return hex.EncodeToString(sum[:4])
}

// dropStale drops the test databases named prefix<pid>_… whose process no
// longer runs.
func dropStale(ctx context.Context, t testing.TB, conn *pgx.Conn, prefix string) {
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
