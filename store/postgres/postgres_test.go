package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/storetest"
)

const defaultTestDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// adminDSN is the server the tests create their databases on.
func adminDSN() string {
	if dsn := os.Getenv("VIGIL_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return defaultTestDSN
}

// redact hides a password in a URL DSN.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return dsn
}

// withDatabase returns dsn pointing at database name.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name
}

// testDB creates a database of the test's own and returns its DSN; it is
// dropped when the test ends. Without a reachable server the test is
// skipped, loudly, or fails when VIGIL_TEST_STRICT=1.
func testDB(t testing.TB) string {
	t.Helper()
	admin := adminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		msg := fmt.Sprintf("SKIP: PostgreSQL not reachable at %s (%v); set VIGIL_TEST_POSTGRES", redact(admin), err)
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "vigil_test_" + hex.EncodeToString(b[:])
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
	return withDatabase(admin, name)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func openTest(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, &Options{
		MaxConns: 8,
		Logger:   slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, testDB(t)) })
}

// TestMigrateTwice opens a migrated database again, and two stores at once.
func TestMigrateTwice(t *testing.T) {
	dsn := testDB(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			s, err := Open(context.Background(), dsn, nil)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s := openTest(t, dsn)
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM schema_version`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("schema_version rows: %d, %v", n, err)
	}
}
