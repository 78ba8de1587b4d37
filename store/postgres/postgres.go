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
// as one group, in one transaction and one fsync, in two round trips:
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
//     (store.AppendResult.DuplicateNotes); all the group's steps in one
//     INSERT that takes the group's globals from event_counter; when the
//     group has events, a notification on channel vigil_events (empty
//     payload); and COMMIT.
//
// The lease rows stay locked until the commit, so a node that lost its
// lease cannot write, and a lease is not taken over while an append of the
// old owner is in flight. A statement that fails on one append's data (a
// constraint, a value too big) breaks the group: the group is split in
// halves committed one after the other, down to the append at fault, which
// alone gets the error. LeaseRenew locks its rows in the same session
// order, so a renewal and a group cannot deadlock. Every other write (lease
// calls, snapshots, nodes, outputs) is one statement on the pool, in a
// transaction of its own, run again after a lost connection (each is
// idempotent).
//
// # Global order
//
// Record.Global is a store-wide order in which every committed global is
// visible before any higher one: a reader following EventListAll by
// AfterGlobal never skips a record that commits later (storetest.RunShared
// proves it with writers on two stores). A sequence would break it (one
// transaction takes 10, another 11 and commits first, and a reader passes
// 11 before 10 exists). Instead a group takes its globals from the single
// row of event_counter (UPDATE ... RETURNING), once per group, in the
// batch that commits it, and holds that row's lock until its commit is
// done. PostgreSQL makes a transaction visible before it releases its
// locks, so the next group, of this node or any other, gets higher globals
// only once every lower one is visible. Several nodes serialise on that
// row for the length of the end of one batch per group, not per append:
// one writer per node, and a node's group grows while another node's
// commits.
//
// # No node stalls another
//
// No connection holds a lock while it waits for its client, but for the
// writer between its two round trips, and then only the lease rows of its
// own group's sessions: event_counter's row is taken and released within
// the batch that commits, which the server runs to its end without the
// client, so a node paused (SIGSTOP) or cut off cannot hold up the other
// nodes' appends. Every connection sets lock_timeout (a call waiting
// longer for a row fails with store.ErrUnavailable; a group whose
// sessions include one locked by another transaction that long commits
// the others), statement_timeout and idle_in_transaction_session_timeout
// (the server ends a transaction left waiting for its client, releasing
// its rows), and TCP keepalives of seconds, on both ends, so that a dead
// host's connections and locks go within seconds (see Options). One limit
// remains: the server arms idle_in_transaction_session_timeout only
// between batches, so a node stopped in the middle of writing its commit
// batch (one larger than the socket's send buffer takes in one write)
// keeps its rows until it resumes or its connection dies. Connections
// also turn jit off (the store's statements are short; a DSN that sets
// jit wins).
//
// # Several nodes
//
// Table nodes holds each node's heartbeat (Store.NodeBeat) and outputs a
// task's output in chunks of 256 KiB (a range reads only the chunks it
// overlaps). Store.Watch tells of commits of events: the writer wakes the
// watchers of its own Store at once, and a connection of the Store's own
// listens to vigil_events for the other nodes' commits.
//
// # Connections lost
//
// A lost connection (server restart, pg_terminate_backend, a timeout that
// ended the session) is retried on a new connection when the group's
// transaction had not reached its commit batch (then the server rolled it
// back); when the connection is lost while the commit batch is under way
// the outcome is unknown and every append of the group fails with an error
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
//
// Schema version 3 put COMMIT and pg_notify in the batch of the steps
// (one round trip fewer per group). Same machine, load 3 to 7, one round
// of alternating runs of -benchtime 2s, version 2 against 3:
//
//	                                     v2              v3
//	notifications, 8 sessions            6,023/s         6,237/s   7.7 steps/commit
//	notifications, 100 sessions         16,907/s        17,394/s    63 steps/commit
//	notifications, 2 nodes x 50         19,121/s        22,676/s    31 steps/commit
//	append, 1 session (latency)          1.01 ms         0.85 ms
//	WAL per notification step           1.75 kB         1.76 kB
//
// With a Watch on each of the 2 nodes (BenchmarkDurableNotificationsTwoNodesWatched)
// the rate stays within the noise of the same run without.
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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/internal/rowcount"
	"github.com/vigilrun/vigil/store/internal/watch"
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

	// The server's timeouts on every connection of the Store (the pool,
	// the writer's, the listener's), so that no other node's transaction
	// can hold this one up for long, nor this one hold up another node's:
	// LockTimeout bounds a wait for a row lock (default 5s; the call then
	// fails with an error matching store.ErrUnavailable),
	// StatementTimeout a statement (default 60s), and
	// IdleInTransactionTimeout how long a transaction may wait for its
	// client (a node paused, or cut off, inside a transaction) before the
	// server ends its session and rolls it back (default 10s). Negative
	// disables one. A DSN that sets one itself (lock_timeout=..., or in
	// options=-c ...) wins.
	LockTimeout, StatementTimeout, IdleInTransactionTimeout time.Duration
	// KeepAlive is how long a connection may be silent before TCP
	// keepalive probes start, and the interval between them: after three
	// unanswered probes the connection is dropped, on both ends (the
	// client's dialer, the server's tcp_keepalives_* settings), and data
	// left unacknowledged for four times KeepAlive drops it too
	// (TCP_USER_TIMEOUT, on Linux). Default 5s; negative leaves the
	// system's settings. A DSN's tcp_keepalives_* or tcp_user_timeout win
	// for the server's end.
	KeepAlive time.Duration
}

// Defaults of Options.
const (
	DefaultLockTimeout              = 5 * time.Second
	DefaultStatementTimeout         = 60 * time.Second
	DefaultIdleInTransactionTimeout = 10 * time.Second
	DefaultKeepAlive                = 5 * time.Second
)

// keepAliveProbes is the number of unanswered keepalive probes after which
// a connection is dropped.
const keepAliveProbes = 3

// configure sets the server's timeouts and the TCP keepalives of opts on
// cfg, leaving alone what the DSN set.
func configure(cfg *pgconn.Config, opts *Options) {
	set := func(name, value string) {
		if _, ok := cfg.RuntimeParams[name]; ok || strings.Contains(cfg.RuntimeParams["options"], name) {
			return
		}
		cfg.RuntimeParams[name] = value
	}
	timeout := func(name string, d, def time.Duration) {
		switch {
		case d == 0:
			d = def
		case d < 0:
			d = 0 // no timeout
		}
		set(name, strconv.FormatInt(d.Milliseconds(), 10))
	}
	timeout("lock_timeout", opts.LockTimeout, DefaultLockTimeout)
	timeout("statement_timeout", opts.StatementTimeout, DefaultStatementTimeout)
	timeout("idle_in_transaction_session_timeout", opts.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)
	// The store's statements are short, and JIT compilation only slows
	// them: the server compiles a statement whose estimated cost passes
	// jit_above_cost, which TailLoadMany's did for 256 sessions, taking
	// 200 ms of what was 7 ms.
	set("jit", "off")
	ka := opts.KeepAlive
	if ka == 0 {
		ka = DefaultKeepAlive
	}
	if ka < 0 {
		return
	}
	secs := strconv.FormatInt(max(1, int64(ka/time.Second)), 10)
	set("tcp_keepalives_idle", secs)
	set("tcp_keepalives_interval", secs)
	set("tcp_keepalives_count", strconv.Itoa(keepAliveProbes))
	set("tcp_user_timeout", strconv.FormatInt((4*ka).Milliseconds(), 10))
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: ka, Interval: ka, Count: keepAliveProbes},
		Control:         userTimeout(4 * ka),
	}
	cfg.DialFunc = d.DialContext
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
	tables                 rowcount.Tables

	// watch are the Watch channels. The writer wakes them after its
	// commits of events, the listener (started by the first Watch) at
	// notifications of other processes' commits; writerPID is the
	// writer's backend, whose notifications the listener skips.
	watch       watch.Set
	writerPID   atomic.Uint32
	listenCfg   *pgx.ConnConfig
	listenCtx   context.Context
	stopListen  context.CancelFunc
	listenOnce  sync.Once
	listenReady chan struct{} // closed after the listener's first attempt
	listenDone  chan struct{} // closed when the listener has stopped

	// mu is held for reading by every call in progress and for writing by
	// Close.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.StatsReader = (*Store)(nil)
	_ store.Watcher     = (*Store)(nil)
)

// Stats implements store.StatsReader: the writer's commits, the appends
// they carried and the rows they inserted, updated or deleted, event_counter's
// row once per group among them. Lease and snapshot writes are not counted.
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Appends: s.appends.Load(), Rows: s.rows.Load(), Tables: s.tables.Read()}
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
	configure(&cfg.ConnConfig.Config, opts)
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
	s.listenCfg = cfg.ConnConfig.Copy()
	s.listenCtx, s.stopListen = context.WithCancel(context.Background())
	s.listenDone = make(chan struct{})
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
		// A migration may take long (version 2 rewrites the log), and a
		// node starting meanwhile waits for it.
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0`); err != nil {
			return err
		}
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

// Close closes the pool and the listener after the calls in progress, and
// the Watch channels; later calls return store.ErrClosed. Safe to call
// twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.jobs)
		s.mu.Unlock()
		s.stopListen()
		s.listenOnce.Do(func() { close(s.listenDone) }) // never started
		<-s.listenDone
		s.watch.Close()
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
		// 25P03 and 57P05: the server ended an idle session (in a
		// transaction, or out of one).
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" ||
			pe.Code == "25P03" || pe.Code == "57P05"
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
		case "55P03", "57014": // lock_not_available (lock_timeout), query_canceled (statement_timeout)
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
