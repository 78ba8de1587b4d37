package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

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

// ceilingSchema is shaped like the events table: an AUTOINCREMENT key and
// a unique (session, seq) index, so that a row costs what an event does.
const ceilingSchema = `CREATE TABLE IF NOT EXISTS ceiling (
	global  INTEGER PRIMARY KEY AUTOINCREMENT,
	session TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	at      INTEGER,
	type    TEXT    NOT NULL,
	data    BLOB    NOT NULL,
	UNIQUE (session, seq)
)`

// MeasureCeiling measures what the disk does for a Store opened with opts:
// the same driver and the same connection settings as Open (WAL,
// synchronous, busy timeout), on a scratch database at path, which it
// creates and removes (with its -wal and -shm files) when done; put it
// beside the store's file to measure the same disk. For budget it commits
// single-row transactions one after the other (BEGIN IMMEDIATE, one
// INSERT, COMMIT), then for budget again inserts rows in transactions of
// 1000 rows (multi-row INSERTs of 100). Rows are shaped like events, with
// 256 bytes of data.
func MeasureCeiling(ctx context.Context, path string, opts *Options, budget time.Duration) (store.Ceiling, error) {
	if opts == nil {
		opts = &Options{}
	}
	sync := strings.ToUpper(opts.Synchronous)
	switch sync {
	case "":
		sync = "FULL"
	case "FULL", "NORMAL":
	default:
		return store.Ceiling{}, fmt.Errorf("ceiling %s: synchronous %q: want FULL or NORMAL", path, opts.Synchronous)
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	if budget <= 0 {
		budget = time.Second
	}
	if err := createFile(path); err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: %w", path, err)
	}
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
	}()
	// The settings of Open's write connection.
	db := sql.OpenDB(&connector{drv: newDriver(), dsn: path, init: []string{
		fmt.Sprintf("PRAGMA busy_timeout = %d", busy.Milliseconds()),
		"PRAGMA journal_mode = WAL", "PRAGMA synchronous = " + sync, "PRAGMA foreign_keys = OFF",
	}})
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: connect: %w", path, mapErr(err))
	}
	defer conn.Close()
	c, err := ceilingMeasure(ctx, conn, budget)
	if err != nil {
		return store.Ceiling{}, fmt.Errorf("ceiling %s: %w", path, mapErr(err))
	}
	return c, nil
}

func ceilingMeasure(ctx context.Context, conn *sql.Conn, budget time.Duration) (store.Ceiling, error) {
	c := store.Ceiling{RowBytes: ceilingRowBytes}
	if _, err := conn.ExecContext(ctx, ceilingSchema); err != nil {
		return c, fmt.Errorf("create table: %w", err)
	}
	data := ceilingData()
	seq := int64(0)
	one, err := conn.PrepareContext(ctx, `INSERT INTO ceiling (session, seq, at, type, data) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return c, fmt.Errorf("prepare: %w", err)
	}
	defer one.Close()
	tx := func(fn func() error) error {
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := fn(); err != nil {
			_, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			return errors.Join(err, rerr)
		}
		if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}

	var times []time.Duration
	start := time.Now()
	for time.Since(start) < budget {
		seq++
		t0 := time.Now()
		if err := tx(func() error {
			_, err := one.ExecContext(ctx, "ceiling", seq, time.Now().UnixNano(), "CeilingRow", data)
			return err
		}); err != nil {
			return c, fmt.Errorf("single-row commit: %w", err)
		}
		times = append(times, time.Since(t0))
		c.Commits++
	}
	c.CommitsPerSec = float64(c.Commits) / time.Since(start).Seconds()
	c.SetCommitTimes(times)

	q := `INSERT INTO ceiling (session, seq, at, type, data) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", ceilingStmtRows), ", ")
	many, err := conn.PrepareContext(ctx, q)
	if err != nil {
		return c, fmt.Errorf("prepare: %w", err)
	}
	defer many.Close()
	args := make([]any, 0, 5*ceilingStmtRows)
	start = time.Now()
	for time.Since(start) < budget {
		if err := tx(func() error {
			for range ceilingTxRows / ceilingStmtRows {
				args = args[:0]
				at := time.Now().UnixNano()
				for range ceilingStmtRows {
					seq++
					args = append(args, "ceiling", seq, at, "CeilingRow", data)
				}
				if _, err := many.ExecContext(ctx, args...); err != nil {
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
