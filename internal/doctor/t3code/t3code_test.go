package t3code

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/doctor"
	"github.com/vigilrun/vigil/internal/doctor/t3code/t3test"
)

func build(t *testing.T, parts ...t3test.Part) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "statev2.sqlite")
	if err := t3test.Build(context.Background(), path, parts...); err != nil {
		t.Fatal(err)
	}
	return path
}

// dirState hashes every file of a directory, so that a test sees any file
// written, created or removed.
func dirState(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(b)
	}
	return out
}

func scan(t *testing.T, path string) doctor.Report {
	t.Helper()
	dir := filepath.Dir(path)
	before := dirState(t, dir)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Scan(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	after := dirState(t, dir)
	if len(before) != len(after) {
		t.Fatalf("reading changed the directory's files: %d before, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("reading changed %s", k)
		}
	}
	if fi2, err := os.Stat(path); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("reading touched the database: %v", err)
	}
	return rep
}

func kinds(rep doctor.Report) []doctor.Kind {
	var out []doctor.Kind
	for _, f := range rep.Findings {
		out = append(out, f.Kind)
	}
	return out
}

func text(t *testing.T, rep doctor.Report) string {
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestHealthy finds nothing in a healthy thread, including a user prompt
// held by restart recovery and a subagent running in a live session.
func TestHealthy(t *testing.T) {
	rep := scan(t, build(t, t3test.Healthy))
	if len(rep.Findings) != 0 || len(rep.Warnings) != 0 || rep.Sessions != 1 {
		t.Fatalf("healthy:\n%s", text(t, rep))
	}
}

// TestHeldContinuation finds seed 002's held wake run, and nothing in the
// healthy thread beside it.
func TestHeldContinuation(t *testing.T) {
	rep := scan(t, build(t, t3test.Healthy, t3test.HeldContinuation))
	t.Logf("%s", text(t, rep))
	if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.HeldContinuation}) || rep.Sessions != 2 {
		t.Fatalf("findings %v", got)
	}
	f := rep.Findings[0]
	if f.Session != t3test.HeldThread || f.Item != "run:"+t3test.HeldThread+":32" {
		t.Fatalf("session %s item %s", f.Session, f.Item)
	}
	if !strings.Contains(f.Summary, "wake turns stopped being recorded") || !strings.Contains(f.Summary, "Background task completed.") {
		t.Fatalf("summary %q", f.Summary)
	}
	if want := time.Date(2026, 10, 15, 19, 57, 57, 26e6, time.UTC); !f.Start.Equal(want) {
		t.Fatalf("start %s, want %s", f.Start, want)
	}
	// From the hold to the last run's end.
	if want := time.Date(2026, 10, 15, 22, 52, 10, 0, time.UTC).Sub(f.Start); f.Stall != want {
		t.Fatalf("stall %s, want %s", f.Stall, want)
	}
	var events bool
	for _, e := range f.Evidence {
		if strings.HasPrefix(e.Row, "orchestration_v2_events") && strings.Contains(e.Text, "subagent.updated") {
			events = true
		}
	}
	if !events {
		t.Fatalf("no evidence of the events recorded after the hold:\n%s", text(t, rep))
	}
}

// TestStuckSubagents finds both subagents left running, recovers the
// delegated task's reply, and leaves the completed one and the healthy
// thread alone.
func TestStuckSubagents(t *testing.T) {
	rep := scan(t, build(t, t3test.Healthy, t3test.StuckSubagents))
	t.Logf("%s", text(t, rep))
	if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.StuckSubagent, doctor.StuckSubagent}) {
		t.Fatalf("findings %v", got)
	}
	byItem := map[string]doctor.Finding{}
	for _, f := range rep.Findings {
		byItem[f.Item] = f
	}
	native := byItem["node:provider:claudeAgent:native-item:task%3Aac1d42bf0362bfc4c"]
	if !strings.Contains(native.Summary, "provider session provider-session:9c2e4b17 is stopped") {
		t.Fatalf("native subagent: %q", native.Summary)
	}
	task := byItem["node:app:delegated-task:9c2e4b17:1"]
	if !strings.Contains(task.Summary, "has no live run") || !strings.Contains(task.Recovered, "Docs migrated: 14 pages moved") {
		t.Fatalf("delegated task: %q / %q", task.Summary, task.Recovered)
	}
}

// TestWhileT3Writes reads a database whose write-ahead log holds commits a
// live T3 server has not checkpointed: they are read, through mode=ro.
func TestWhileT3Writes(t *testing.T) {
	path := build(t, t3test.Healthy)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	for _, q := range []string{
		"PRAGMA wal_autocheckpoint = 0",
		`UPDATE orchestration_v2_projection_provider_sessions SET status = 'stopped', updated_at = '2026-10-15T10:00:00.000Z'`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("no write-ahead log: %v", err)
	}
	rep, err := Scan(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The live subagent's session stopped in the uncheckpointed commit.
	if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.StuckSubagent}) {
		t.Fatalf("findings %v:\n%s", got, text(t, rep))
	}
}

func TestNotT3(t *testing.T) {
	ctx := context.Background()
	if _, err := Scan(ctx, filepath.Join(t.TempDir(), "missing.sqlite"), Options{}); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("missing file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "other.sqlite")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE x (y)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Scan(ctx, path, Options{}); err == nil || !strings.Contains(err.Error(), "not a T3 Code statev2.sqlite") {
		t.Fatalf("other database: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestDefaultPath(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if got := DefaultPath(get, "/home/u"); got != "/home/u/.t3/userdata/statev2.sqlite" {
		t.Fatal(got)
	}
	env["T3CODE_HOME"] = "/srv/t3"
	if got := DefaultPath(get, "/home/u"); got != "/srv/t3/userdata/statev2.sqlite" {
		t.Fatal(got)
	}
}

// TestReadOnlyConnection checks that the connection doctor reads with
// cannot write, even once query_only is turned off: the file is open
// read-only.
func TestReadOnlyConnection(t *testing.T) {
	path := build(t, t3test.Healthy)
	db, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE doctor_was_here (x)"); err == nil {
		t.Fatal("a write went through query_only")
	}
	if _, err := db.ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, "CREATE TABLE doctor_was_here (x)")
	if err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("a write on the read-only file: %v", err)
	}
}
