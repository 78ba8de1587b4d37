package vigilstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	msqlite "modernc.org/sqlite"

	"github.com/vigilrun/vigil/internal/steps"
	"github.com/vigilrun/vigil/store"
)

// SQLite reads the log of a vigil SQLite store (the vigil.db of a data
// directory) without writing to it.
type SQLite struct {
	path string
	db   *sql.DB
}

// OpenSQLite opens the vigil store at path read-only. When the file has a
// write-ahead log beside it (a vigil has it open, or stopped without a
// checkpoint) it is opened with mode=ro, so that the log's commits are read
// and nothing is written to the database; when it has none, with
// immutable=1 as well, so that SQLite creates no -wal or -shm file either.
// No lease is taken and no migration is run.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open vigil store %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open vigil store: %w", err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("open vigil store %s: is a directory", path)
	}
	q := url.Values{"mode": {"ro"}}
	if _, err := os.Stat(abs + "-wal"); errors.Is(err, fs.ErrNotExist) {
		q.Set("immutable", "1")
	}
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
	db := sql.OpenDB(roConnector{dsn: dsn})
	db.SetMaxOpenConns(1)
	s := &SQLite{path: path, db: db}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'steps'`).Scan(&n); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open vigil store %s: %w", path, err)
	}
	if n == 0 {
		_ = db.Close()
		return nil, fmt.Errorf("open vigil store %s: no steps table (not a vigil store, or one of schema version 1 that a vigil of this version has not opened yet)", path)
	}
	return s, nil
}

// roConnector opens read-only connections of modernc.org/sqlite's driver
// (its own value, not the one registered with database/sql).
type roConnector struct{ dsn string }

// Connect implements driver.Connector.
func (c roConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := (&msqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	if ex, ok := conn.(driver.ExecerContext); ok {
		if _, err := ex.ExecContext(ctx, "PRAGMA query_only = 1", nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("query_only: %w", err)
		}
	}
	return conn, nil
}

// Driver implements driver.Connector.
func (c roConnector) Driver() driver.Driver { return &msqlite.Driver{} }

// EventListAll implements Source: the records with Global > AfterGlobal in
// global order, at most Limit (0: all) of them.
func (s *SQLite) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT glast, seq, last, data, session FROM steps WHERE glast > ? ORDER BY glast`, p.AfterGlobal)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", s.path, err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		var glast, seq, last int64
		var data []byte
		var session string
		if err := rows.Scan(&glast, &seq, &last, &data, &session); err != nil {
			return nil, fmt.Errorf("list events of %s: %w", s.path, err)
		}
		if out, err = decodeStep(out, session, seq, last, glast, data, p); err != nil {
			return nil, fmt.Errorf("list events of %s: %w", s.path, err)
		}
		if p.Limit > 0 && len(out) >= p.Limit {
			return out[:p.Limit], nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of %s: %w", s.path, err)
	}
	return out, nil
}

// Close closes the database. Safe to call twice.
func (s *SQLite) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s.path, err)
	}
	return nil
}

// decodeStep appends the records of one stored step that come after
// p.AfterGlobal.
func decodeStep(out []store.Record, session string, seq, last, glast int64, data []byte, p *store.EventListAllParams) ([]store.Record, error) {
	recs, err := steps.Decode(nil, session, seq, glast-(last-seq), data)
	if err != nil {
		return out, err
	}
	if int64(len(recs)) != last-seq+1 {
		return out, fmt.Errorf("step %s#%d: %d records, want %d: %w", session, seq, len(recs), last-seq+1, steps.ErrCorrupt)
	}
	for _, r := range recs {
		if r.Global > p.AfterGlobal {
			r.Data = append([]byte(nil), r.Data...)
			out = append(out, r)
		}
	}
	return out, nil
}

// Postgres reads the log of a vigil PostgreSQL store without writing to
// it: the connection sets default_transaction_read_only, so the server
// refuses any write.
type Postgres struct {
	name string
	conn *pgx.Conn
}

// OpenPostgres connects to the vigil store at dsn (a postgres:// URL)
// read-only. No lease is taken and no migration is run.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open vigil store: %w", err)
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.RuntimeParams["application_name"] = "vigil doctor"
	name := Redact(dsn)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open vigil store %s: %w", name, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('steps') IS NOT NULL`).Scan(&ok); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("open vigil store %s: %w", name, err)
	}
	if !ok {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("open vigil store %s: no steps table (not a vigil store, or one that a vigil of this version has not opened yet)", name)
	}
	return &Postgres{name: name, conn: conn}, nil
}

// Redact hides the password of a URL DSN.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "postgres"
}

// Name is the store's URL with any password hidden.
func (s *Postgres) Name() string { return s.name }

// EventListAll implements Source.
func (s *Postgres) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	rows, err := s.conn.Query(ctx, `SELECT glast, seq, last, data, session FROM steps WHERE glast > $1 ORDER BY glast`, p.AfterGlobal)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", s.name, err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		var glast, seq, last int64
		var data []byte
		var session string
		if err := rows.Scan(&glast, &seq, &last, &data, &session); err != nil {
			return nil, fmt.Errorf("list events of %s: %w", s.name, err)
		}
		if out, err = decodeStep(out, session, seq, last, glast, data, p); err != nil {
			return nil, fmt.Errorf("list events of %s: %w", s.name, err)
		}
		if p.Limit > 0 && len(out) >= p.Limit {
			return out[:p.Limit], nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of %s: %w", s.name, err)
	}
	return out, nil
}

// Close closes the connection.
func (s *Postgres) Close(ctx context.Context) error {
	if err := s.conn.Close(ctx); err != nil {
		return fmt.Errorf("close %s: %w", s.name, err)
	}
	return nil
}
