package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/vigilrun/vigil/store"
)

// Reader reads the log of a store's file without writing to it, for tools
// that inspect a store another vigil may have open (vigil doctor). It
// creates no file, takes no lease and runs no migration.
type Reader struct {
	path string
	db   *sql.DB
}

// OpenReader opens the store at path for reading. When the file has a
// write-ahead log beside it (a vigil has it open, or stopped without a
// checkpoint) it is opened with mode=ro, so that the log's commits are
// read and nothing is written; when it has none, with immutable=1 as well,
// so that SQLite creates no -wal or -shm file either. Every connection is
// query_only. A file without the steps table (not a store, or one of an
// older schema that no vigil of this version has opened) is refused.
func OpenReader(ctx context.Context, path string) (*Reader, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open %s for reading: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open %s for reading: %w", path, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("open %s for reading: is a directory", path)
	}
	q := url.Values{"mode": {"ro"}}
	if _, err := os.Stat(abs + "-wal"); errors.Is(err, fs.ErrNotExist) {
		q.Set("immutable", "1")
	}
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
	db := sql.OpenDB(&connector{drv: newDriver(), dsn: dsn, init: []string{"PRAGMA query_only = 1"}})
	db.SetMaxOpenConns(1)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'steps'`).Scan(&n); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s for reading: %w", path, mapErr(err))
	}
	if n == 0 {
		_ = db.Close()
		return nil, fmt.Errorf("open %s for reading: no steps table (not a vigil store, or one of schema version 1 that a vigil of this version has not opened yet)", path)
	}
	return &Reader{path: path, db: db}, nil
}

// EventListAll is Store.EventListAll, read from the file as it is.
func (r *Reader) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	var out []store.Record
	err := query(ctx, r.db, `SELECT glast, seq, last, data, session FROM steps WHERE glast > ? ORDER BY glast`,
		[]any{p.AfterGlobal}, func(rows *sql.Rows) error {
			var err error
			out, err = scanStep(rows, out, "", func(rec store.Record) bool { return rec.Global > p.AfterGlobal })
			if err == nil && p.Limit > 0 && len(out) >= p.Limit {
				out = out[:p.Limit]
				return errEnough
			}
			return err
		})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("list events of %s: %w", r.path, mapErr(err))
	}
	return out, nil
}

// Close closes the file. Safe to call twice.
func (r *Reader) Close() error {
	if err := r.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", r.path, err)
	}
	return nil
}
