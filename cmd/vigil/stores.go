package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

// open opens the chosen store: PostgreSQL for --db postgres://..., memory
// for --memory, else SQLite at <data>/vigil.db. It returns the store, the
// data directory (task outputs, the API token), the lease owner name ("" for
// the runtime's default) and a function that closes the store.
func (f *storeFlags) open(ctx context.Context, e *env, logger *slog.Logger) (store.Store, string, string, func(), error) {
	dir, err := f.dataDir(e)
	if err != nil {
		return nil, "", "", nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", "", nil, fmt.Errorf("data directory: %w", err)
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		logger.Warn("the data directory can be read by other users; sessions and task output are private (chmod 700 it)", "dir", dir, "mode", fi.Mode().Perm().String())
	}
	db := f.db
	if db == "" {
		db = e.getenv("VIGIL_DB")
	}
	switch {
	case f.memory:
		st := memstore.New()
		return st, dir, "", func() { st.Close() }, nil
	case strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://"):
		st, err := postgres.Open(ctx, db, &postgres.Options{Logger: logger})
		if err != nil {
			return nil, "", "", nil, fmt.Errorf("open PostgreSQL store: %w", err)
		}
		return st, dir, "", func() { st.Close() }, nil
	case db != "":
		return nil, "", "", nil, fmt.Errorf("--db %q: want a postgres:// URL (SQLite lives in the data directory)", db)
	}
	path := filepath.Join(dir, "vigil.db")
	st, err := sqlite.Open(ctx, path, &sqlite.Options{Logger: logger})
	if err != nil {
		return nil, "", "", nil, fmt.Errorf("open SQLite store %s: %w", path, err)
	}
	return st, dir, "", func() { st.Close() }, nil
}
