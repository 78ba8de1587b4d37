// Package pgtest gives tests a PostgreSQL database of their own: created
// on the server VIGIL_TEST_POSTGRES names (default: 127.0.0.1:5432, user
// postgres, database test, trust auth) and dropped when the test ends.
// Without a reachable server the test is skipped with a loud message, or
// fails when VIGIL_TEST_STRICT=1.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
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
// dropped (WITH FORCE) when the test ends.
func Fresh(t testing.TB) string {
	t.Helper()
	admin := Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		msg := fmt.Sprintf("SKIP: PostgreSQL not reachable at %s (%v); set VIGIL_TEST_POSTGRES", Redact(admin), err)
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
	return WithDatabase(admin, name)
}
