// Package postgres is vigil's store for several nodes: store.Store on
// PostgreSQL through pgx. It passes store/storetest.
//
// # The log
//
// The log holds one row per appended step, not one per event: table steps,
// keyed by (session, seq), whose data column holds the step's records in
// internal/steps' format (shared with store/sqlite). A step's records have
// contiguous sequences seq..last and contiguous globals global..glast;
// EventList reads the steps holding records after AfterSeq and drops the
// ones before, EventListAll does the same by glast.
//
// # Writes: group commit
//
// One writer goroutine per Store, owning one connection of its own,
// commits every append. It takes every append queued while its previous
// transaction was committing (and, when that one carried several, waits a
// little for those callers to come back: see writer.loop) and commits them
// as one group, in one transaction and one fsync, in three round trips:
//
//  1. BEGIN; lock the lease rows of all the group's sessions (SELECT ...
//     FOR UPDATE, in session order); read where each session's log ends.
//  2. Run every append's fence (its epoch is the lease's) and sequence
//     checks, in queue order, in Go: a refused append (ErrFenced,
//     ErrConflict, or text PostgreSQL cannot hold: ErrRefused) stages
//     nothing, so no savepoint is needed. Then, in one pipelined batch,
//     one multi-row statement (unnest of column arrays) per projection
//     table for the whole group, the rows of a key coalesced to the last
//     one and unchanged rows left alone; the notes, inserted with ON
//     CONFLICT DO NOTHING RETURNING, which tells the keys that existed
//     (store.AppendResult.DuplicateNotes); and last, all the group's steps
//     in one INSERT that takes the group's globals from event_counter.
//  3. COMMIT.
//
// The lease rows stay locked until the commit, so a node that lost its
// lease cannot write, and a lease is not taken over while an append of the
// old owner is in flight. A statement that fails on one append's data (a
// constraint, a value too big) breaks the group: the group is split in
// halves committed one after the other, down to the append at fault, which
// alone gets the error. LeaseRenew locks its rows in the same session
// order, so a renewal and a group cannot deadlock. Lease calls and
// snapshots are transactions of their own on the pool (they are rare:
// one renewal per node per few seconds, one snapshot per 5000 events).
//
// # Global order
//
// Record.Global is a store-wide order in which every committed global is
// visible before any higher one: a reader following EventListAll by
// AfterGlobal never skips a record that commits later. A sequence would
// break it (one transaction takes 10, another 11 and commits first, and a
// reader passes 11 before 10 exists). Instead a group takes its globals
// from the single row of event_counter (UPDATE ... RETURNING), once per
// group, in its last statement before COMMIT, and holds that row's lock
// until its commit is done. PostgreSQL makes a transaction visible before
// it releases its locks, so the next group, of this node or any other,
// gets higher globals only once every lower one is visible. Several nodes
// serialise on that row for the length of one commit per group, not per
// append: one writer per node, and a node's group grows while another
// node's commits.
//
// # Connections lost
//
// A lost connection (server restart, pg_terminate_backend) is retried on a
// new connection when the transaction had not reached COMMIT (then the
// server rolled it back); when the connection is lost during COMMIT the
// outcome is unknown and every append of the group fails with an error
// matching store.ErrUnavailable: read the log (LastSeq) before writing
// again. The writer runs its statements with a context of its own,
// cancelled only when every caller of the group has given up.
//
// # Schema
//
// The schema is embedded (migrations/NNNN_name.sql) and migrated at Open
// inside a transaction holding an advisory lock, so nodes starting together
// do not race. Version 2 moves a version 1 database's events into steps,
// one step per event. Use a database (or a search_path schema) of vigil's
// own.
//
// # Figures
//
// bench_test.go measures each lever. Medians of 3 to 8 alternating runs
// of -benchtime 2s or 3s against the previous store (one events row per
// event, one transaction per append) on a 2 vCPU VM shared with other
// work (load 8 to 13), PostgreSQL 15 on the same host, fsync on:
//
//	                                     before          after
//	notifications, 8 sessions            391/s           1,075/s   7.8 steps/commit
//	notifications, 100 sessions          484/s           8,090/s    71 steps/commit
//	notifications, 2 nodes x 50          401/s           9,397/s    35 steps/commit
//	append 6x300 B, 8 sessions           325/s             880/s   7.7 steps/commit
//	append, 1 session (latency)          5.2 ms           5.1 ms
//	rows per notification step           6.3              4.0 (step, session, run, note)
//	rows per 6-event step               10.2              4.1
//	WAL per notification step          2.1 kB           1.75 kB
//	lease renewal under load, worst     497 ms            58 ms
//
// The rates move by a factor of two from run to run on that machine;
// steps/commit, rows and WAL per step do not.
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
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigilrun/vigil/store"
)

// Options tunes a Store; nil or zero fields mean the defaults.
type Options struct {
	// MaxConns is the size of the pool that reads, lease calls and
	// snapshots use; default pgxpool's (max(4, NumCPU)). The writer has one
	// connection of its own besides.
	MaxConns int32
	// Logger receives warnings: reconnects, duplicate notifications. Nil
	// discards.
	Logger *slog.Logger
}

// Store is a store.Store in a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	// w commits the appends queued to jobs; done is closed when it has
	// stopped.
	w    *writer
	jobs chan *job
	done chan struct{}

	commits, appends, rows atomic.Int64

	// mu is held for reading by every call in progress and for writing by
	// Close.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.StatsReader = (*Store)(nil)
)

// Stats implements store.StatsReader: the writer's commits, the appends
// they carried and the rows they inserted or updated. Lease and snapshot
// writes are not counted.
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Appends: s.appends.Load(), Rows: s.rows.Load()}
}

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
	s.w = &writer{s: s, cfg: cfg.ConnConfig.Copy()}
	s.jobs, s.done = make(chan *job, maxGroup), make(chan struct{})
	go s.w.loop(s.jobs, s.done)
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
		close(s.jobs)
		s.mu.Unlock()
		<-s.done
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
