package sqlite

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/storetest"
)

// testLogger logs to the test at warn and above.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func openTest(t testing.TB, path string, opts *Options) *Store {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		t.Run(sync, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				return openTest(t, filepath.Join(t.TempDir(), "vigil.db"), &Options{Synchronous: sync})
			})
		})
	}
}

// TestConformanceShared runs the checks of two stores on one file.
func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, storetest.Shared{
		Open: func(t *testing.T) (store.Store, store.Store) {
			path := filepath.Join(t.TempDir(), "vigil.db")
			return openTest(t, path, nil), openTest(t, path, nil)
		},
	})
}

// TestFileModes checks that a new database and its directory are private.
func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "vigil.db")
	s := openTest(t, path, nil)
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	_ = s.Close()
}

// The ceiling measures both figures and the single commits' latencies on
// a scratch file it removes.
func TestMeasureCeiling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ceiling.db")
	c, err := MeasureCeiling(context.Background(), path, nil, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckCeiling(t, c)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("scratch file left: %v", err)
	}
}
