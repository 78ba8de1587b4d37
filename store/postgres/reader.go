package postgres

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/store"
)

// Reader reads the log of a store without writing to it, for tools that
// inspect a store vigil nodes may be using (vigil doctor). Its connection
// sets default_transaction_read_only, so the server refuses any write; it
// takes no lease and runs no migration.
type Reader struct {
	name string
	conn *pgx.Conn
}

// OpenReader connects to the store at dsn for reading. A database without
// the steps table (not a vigil store, or one no vigil of this version has
// opened yet) is refused.
func OpenReader(ctx context.Context, dsn string) (*Reader, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open store for reading: %w", err)
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "vigil reader"
	}
	name := Redact(dsn)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s for reading: %w", name, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('steps') IS NOT NULL`).Scan(&ok); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("open %s for reading: %w", name, err)
	}
	if !ok {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("open %s for reading: no steps table (not a vigil store, or one that a vigil of this version has not opened yet)", name)
	}
	return &Reader{name: name, conn: conn}, nil
}

// Redact hides the password of a URL DSN; a DSN that is not a URL
// becomes "postgres".
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "postgres"
}

// Name is the store's URL with any password hidden.
func (r *Reader) Name() string { return r.name }

// EventListAll is Store.EventListAll, read in a read-only transaction.
func (r *Reader) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	out, err := listAll(ctx, r.conn, p)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", r.name, err)
	}
	return out, nil
}

// Close closes the connection.
func (r *Reader) Close(ctx context.Context) error {
	if err := r.conn.Close(ctx); err != nil {
		return fmt.Errorf("close %s: %w", r.name, err)
	}
	return nil
}
