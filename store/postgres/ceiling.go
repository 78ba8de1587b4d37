package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigilrun/vigil/store"
)

// Sizes of the ceiling measurement: rows carry ceilingRowBytes of data,
// about a stored event; a batched transaction inserts ceilingTxRows rows
// in INSERTs of ceilingStmtRows rows each.
const (
	ceilingRowBytes = 256
	ceilingTxRows   = 1000
	ceilingStmtRows = 100
)

// MeasureCeiling measures what the server behind dsn does for a Store
// opened on it: the same driver (pgx) and the same connection settings as
// Open, on one connection and a scratch table shaped like the events table
// (created in the database dsn names, dropped when done). For budget it
// commits single-row transactions one after the other (BEGIN, one INSERT,
// COMMIT), then for budget again inserts rows in transactions of 1000 rows
// (multi-row INSERTs of 100). Rows carry 256 bytes of data. opts gives
// the connection's timeouts and keepalives, as for Open; its pool size
// does not matter to one connection.
func MeasureCeiling(ctx context.Context, dsn string, opts *Options, budget time.Duration) (store.Ceiling, error) {
	if budget <= 0 {
		budget = time.Second
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling: %w", err)
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "vigil"
	}
	if opts == nil {
		opts = &Options{}
	}
	configure(&cfg.ConnConfig.Config, opts)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: %w", cfg.ConnConfig.Host, mapErr(err))
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: connect: %w", cfg.ConnConfig.Host, mapErr(err))
	}
	defer conn.Release()
	table := fmt.Sprintf("vigil_ceiling_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, `CREATE TABLE `+table+` (
		global  BIGINT PRIMARY KEY,
		session TEXT   NOT NULL,
		seq     BIGINT NOT NULL,
		at      BIGINT,
		type    TEXT   NOT NULL,
		data    BYTEA  NOT NULL,
		UNIQUE (session, seq)
	)`); err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: create table: %w", cfg.ConnConfig.Host, mapErr(err))
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+table) }()
	c, err := ceilingMeasure(ctx, conn.Conn(), table, budget)
	if err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: %w", cfg.ConnConfig.Host, mapErr(err))
	}
	return c, nil
}

func ceilingMeasure(ctx context.Context, conn *pgx.Conn, table string, budget time.Duration) (store.Ceiling, error) {
	c := store.Ceiling{RowBytes: ceilingRowBytes}
	data := ceilingData()
	seq := int64(0)
	one := `INSERT INTO ` + table + ` (global, session, seq, at, type, data) VALUES ($1, $2, $3, $4, $5, $6)`
	var times []time.Duration
	start := time.Now()
	for time.Since(start) < budget {
		seq++
		t0 := time.Now()
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, one, seq, "ceiling", seq, time.Now().UnixNano(), "CeilingRow", data)
			return err
		}); err != nil {
			return c, fmt.Errorf("single-row commit: %w", err)
		}
		times = append(times, time.Since(t0))
		c.Commits++
	}
	c.CommitsPerSec = float64(c.Commits) / time.Since(start).Seconds()
	c.SetCommitTimes(times)

	var values strings.Builder
	for i := range ceilingStmtRows {
		if i > 0 {
			values.WriteString(", ")
		}
		fmt.Fprintf(&values, "($%d, $%d, $%d, $%d, $%d, $%d)", 6*i+1, 6*i+2, 6*i+3, 6*i+4, 6*i+5, 6*i+6)
	}
	many := `INSERT INTO ` + table + ` (global, session, seq, at, type, data) VALUES ` + values.String()
	args := make([]any, 0, 6*ceilingStmtRows)
	start = time.Now()
	for time.Since(start) < budget {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for range ceilingTxRows / ceilingStmtRows {
				args = args[:0]
				at := time.Now().UnixNano()
				for range ceilingStmtRows {
					seq++
					args = append(args, seq, "ceiling", seq, at, "CeilingRow", data)
				}
				if _, err := tx.Exec(ctx, many, args...); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return c, fmt.Errorf("batched insert: %w", err)
		}
		c.Rows += ceilingTxRows
	}
	c.RowsPerSec = float64(c.Rows) / time.Since(start).Seconds()
	return c, nil
}

// ceilingData is a row's data: JSON of about the size of an event.
func ceilingData() []byte {
	b := []byte(`{"agent":"a1","run":1,"text":"`)
	for len(b) < ceilingRowBytes-2 {
		b = append(b, "abcdefghijklmnopqrstuvwxyz0123456789"[len(b)%36])
	}
	return append(b, `"}`...)
}
