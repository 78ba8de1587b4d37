// Package postgres is vigil's store for several nodes: store.Store on
// PostgreSQL through pgx. It passes store/storetest.
//
// Each write is one transaction. An append locks the session's lease row
// (SELECT ... FOR UPDATE) and compares the epoch (fencing), checks the
// sequence, upserts the projection rows and inserts the events, so a node
// that lost its lease cannot write, and a lease is not taken over while an
// append of the old owner is in flight. Notes are inserted with ON CONFLICT
// DO NOTHING; the keys that existed are reported in
// store.AppendResult.DuplicateNotes.
//
// Global order: a sequence would hand Global 10 to one transaction and 11 to
// another that commits first, and a reader following EventListAll by
// AfterGlobal would pass 11 and never see 10. Instead, the events insert
// takes its Globals from the one row of event_counter (UPDATE ... RETURNING)
// as the transaction's last statement; the row lock is held until commit,
// so appends commit in Global order and every committed Global is visible
// before a higher one. The cost: appends from all sessions serialise on that
// row for the duration of their commit: about 1.2-1.6k steps/s from 8
// sessions on a local server, where a plain sequence (which breaks the
// order) gave about 2.9k (see bench_test.go).
//
// A lost connection (server restart, pg_terminate_backend) resets the pool
// and retries the transaction when it had not reached COMMIT (then the
// server rolled it back); when the connection is lost during COMMIT the
// outcome is unknown and the error matches store.ErrUnavailable: read the
// log (LastSeq) before writing again.
//
// The schema is embedded (migrations/NNNN_name.sql) and migrated at Open
// inside a transaction holding an advisory lock, so nodes starting together
// do not race. Use a database (or a search_path schema) of vigil's own.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigilrun/vigil/store"
)

// Options tunes a Store; nil or zero fields mean the defaults.
type Options struct {
	// MaxConns is the pool size; default pgxpool's (max(4, NumCPU)).
	MaxConns int32
	// Logger receives warnings: reconnects, duplicate notifications. Nil
	// discards.
	Logger *slog.Logger
}

// Store is a store.Store in a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	// mu is held for reading by every call in progress and for writing by
	// Close.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// retries bounds how often a transaction is run again after its connection
// was lost before COMMIT.
const retries = 3

// migrationLock is the advisory lock key held while migrating ("vigil" in
// ASCII).
const migrationLock = 0x766967696c

// Open connects to the database at dsn (a URL or key=value string), migrates
// its schema and returns the store.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "vigil"
	}
	s := &Store{log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", cfg.ConnConfig.Host, mapErr(err))
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("open postgres %s: migrate: %w", cfg.ConnConfig.Host, mapErr(err))
	}
	return s, nil
}

//go:embed migrations/*.sql
var migrations embed.FS

func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INT NOT NULL)`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&current); err != nil {
			return err
		}
		newest := 0
		for _, name := range names {
			base := strings.TrimPrefix(name, "migrations/")
			version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
			if err != nil {
				return fmt.Errorf("migration %s: bad version: %w", base, err)
			}
			newest = max(newest, version)
			if version <= current {
				continue
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			// No arguments: the simple protocol, which runs several statements.
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("%s: %w", base, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, version); err != nil {
				return err
			}
			s.log.Info("postgres: migrated", "version", version)
		}
		if current > newest {
			return fmt.Errorf("schema version %d is newer than this program's %d", current, newest)
		}
		return nil
	})
}

// Close closes the pool after the calls in progress; later calls return
// store.ErrClosed. Safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.pool.Close()
	})
	return nil
}

// enter starts a call: it fails when the store is closed; otherwise the
// caller must call s.mu.RUnlock when done.
func (s *Store) enter(what string) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fmt.Errorf("%s: %w", what, store.ErrClosed)
	}
	return nil
}

// errUnknownOutcome marks a connection lost during COMMIT.
var errUnknownOutcome = errors.New("connection lost during commit; the write may or may not be stored")

// tx runs fn in a transaction and commits it. A transaction whose
// connection was lost before COMMIT is run again on a new connection.
func (s *Store) tx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	for attempt := 1; ; attempt++ {
		err := s.once(ctx, fn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errUnknownOutcome) && retryable(err) && attempt < retries && ctx.Err() == nil {
			s.log.Warn("postgres: transaction failed before commit; retrying", "op", what, "attempt", attempt, "err", err)
			if lost(err) {
				s.pool.Reset()
			}
			continue
		}
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
}

func (s *Store) once(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		if lost(err) {
			return fmt.Errorf("%w: %w", errUnknownOutcome, err)
		}
		return err
	}
	return nil
}

// read runs a read, again after a lost connection.
func (s *Store) read(ctx context.Context, what string, fn func() error) error {
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if lost(err) && attempt < retries && ctx.Err() == nil {
			s.log.Warn("postgres: read lost its connection; retrying", "op", what, "attempt", attempt, "err", err)
			s.pool.Reset()
			continue
		}
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
}

// lost reports whether err means the connection to the server is gone.
func lost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// retryable reports whether a transaction that failed with err can simply
// run again: its connection was lost, or the server chose it as a deadlock
// or serialisation victim.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01") {
		return true
	}
	return lost(err)
}

// mapErr wraps err with the store error it means, keeping err in the chain.
func mapErr(err error) error {
	for _, sentinel := range []error{store.ErrFenced, store.ErrConflict, store.ErrLeaseHeld, store.ErrNotFound,
		store.ErrFull, store.ErrReadOnly, store.ErrUnavailable, store.ErrClosed, store.ErrRefused, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53100": // disk_full
			return fmt.Errorf("%w: %w", store.ErrFull, err)
		case "25006", "42501": // read_only_sql_transaction, insufficient_privilege
			return fmt.Errorf("%w: %w", store.ErrReadOnly, err)
		case "53300", "57P03": // too_many_connections, cannot_connect_now
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		case "54000": // program_limit_exceeded: a value too big to store
			return fmt.Errorf("%w: %w", store.ErrRefused, err)
		}
		switch pe.Code[:2] {
		case "22", "23": // data exception (a NUL byte, bad encoding), integrity constraint
			return fmt.Errorf("%w: %w", store.ErrRefused, err)
		}
	}
	if errors.Is(err, errUnknownOutcome) || lost(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
