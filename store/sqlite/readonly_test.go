//go:build unix

package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

const readOnlyChildEnv = "VIGIL_SQLITE_READONLY_DIR"

// TestReadOnly makes the database file and its directory read-only: Open
// fails with ErrReadOnly; after the modes are restored, appends go on with
// nothing lost. Root ignores file modes, so as root the test re-runs itself
// as uid/gid 65534 (nobody).
func TestReadOnly(t *testing.T) {
	if dir := os.Getenv(readOnlyChildEnv); dir != "" {
		readOnly(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		readOnly(t, t.TempDir())
		return
	}
	top, err := os.MkdirTemp("", "vigil-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	data := filepath.Join(top, "data")
	bin := filepath.Join(top, "sqlite.test")
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestReadOnly$", "-test.v")
	cmd.Env = append(os.Environ(), readOnlyChildEnv+"="+data, "TMPDIR="+data, "HOME="+data)
	cmd.Dir = data
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 65534:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestReadOnly")) {
		t.Fatal("the child did not run the test")
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func readOnly(t *testing.T, top string) {
	ctx := context.Background()
	dir := filepath.Join(top, "db")
	path := filepath.Join(dir, "vigil.db")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(seq int64) []store.Record {
		return []store.Record{{Seq: seq, At: now.Add(time.Duration(seq)), Type: "t", Data: fmt.Appendf(nil, `{"seq":%d}`, seq)}}
	}
	appendAll := func(s *Store, epoch int64, from, to int64) {
		t.Helper()
		for seq := from; seq <= to; seq++ {
			if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s", Epoch: epoch, Records: rec(seq)}); err != nil {
				t.Fatalf("append %d: %v", seq, err)
			}
		}
	}
	chmod := func(file, d os.FileMode) {
		t.Helper()
		if err := os.Chmod(path, file); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { chmod(0o600, 0o700) })

	s, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "a", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(s, l.Epoch, 1, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name      string
		file, dir os.FileMode
	}{{"file and directory", 0o400, 0o500}, {"file", 0o400, 0o700}, {"directory", 0o600, 0o500}} {
		chmod(c.file, c.dir)
		s, err := Open(ctx, path, nil)
		if err == nil {
			_ = s.Close()
			t.Fatalf("read-only %s: open succeeded", c.name)
		}
		if !errors.Is(err, store.ErrReadOnly) {
			t.Fatalf("read-only %s: open: %v, want ErrReadOnly", c.name, err)
		}
		t.Logf("read-only %s: %v", c.name, err)
		chmod(0o600, 0o700)
	}

	s, err = Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err = s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s", Owner: "b", TTL: time.Minute, Now: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(s, l.Epoch, 6, 8)
	got, err := s.EventList(ctx, &store.EventListParams{Session: "s"})
	if err != nil || len(got) != 8 {
		t.Fatalf("after restoring the modes: %d events, %v", len(got), err)
	}
	for i, r := range got {
		if r.Seq != int64(i)+1 || string(r.Data) != string(rec(r.Seq)[0].Data) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
}
