// Package sqlite is vigil's embedded store: one SQLite file in WAL mode, no
// server to install. It implements store.Store and passes store/storetest.
//
// # Writes
//
// One writer goroutine owns the only write connection. EventAppend,
// SnapshotSave and the lease calls queue a job to it; it takes every job
// queued (group commit) and runs them in one BEGIN IMMEDIATE transaction,
// commits once (one fsync for many steps), and then answers each caller.
// Each job checks before it writes: an append reads its session's lease
// epoch and last sequence in one query, so a fenced or conflicting append
// is refused having written nothing, and no savepoint per job is needed.
// An append stages its step and projection rows in the group; at the end
// of the transaction the group's steps are inserted in one multi-row
// statement and each projection table is upserted once per key (the last
// row of a key wins), in multi-row statements that leave a row whose
// values would not change alone (not written, not counted in Stats). A job whose failure breaks
// the transaction (a full disk, an I/O error) is answered with its error
// and the others are run again in a new transaction; when writing the
// staged rows fails, the group's jobs are committed one by one, so the
// failure is only its own job's. Fencing, the sequence check, the step and
// the projection rows of an append are one transaction. Reads use a pool
// of read-only connections and see committed data only.
//
// # The log
//
// A step is one row of the steps table, whatever its number of events: its
// records in internal/steps' format, the sequences seq..last, and glast,
// the Global of its last record (the first's is glast-(last-seq)). The
// writer gives each step the Globals after the largest glast stored, under
// SQLite's single write lock, so commit order is Global order and a reader
// following EventListAll by AfterGlobal never skips a record. Schema
// version 2 moved the version 1 events table (a row per event) into steps.
//
// # Several nodes
//
// Table nodes holds the heartbeats of the processes sharing the file
// (NodeBeat) and outputs saves tasks' output in chunks of 256 KiB. Watch
// tells of this Store's own commits of events only; another Store or
// process on the same file is not heard.
//
// # Files
//
// The database file is created with mode 0600 (SQLite gives the -wal and
// -shm files the same mode) and a missing directory with mode 0700. The
// schema is embedded (migrations/NNNN_name.sql) and migrated at Open under
// the write lock; schema_version records the version. Two Store values (or
// processes) may open the same file: SQLite's file locks serialise their
// writes (BusyTimeout, then retries), leases fence them like two nodes. Do
// not open one file from two different SQLite builds in one process (say
// both drivers below): each would keep its own POSIX locks and break the
// other's.
//
// # Driver
//
// The default build uses modernc.org/sqlite (pure Go, no cgo: cross-compiles
// and static binaries work); -tags vigil_mattn selects
// github.com/mattn/go-sqlite3 (cgo). The choice is behind driver_*.go.
// Measured with bench_test.go (2 vCPU VM, ext4, median of 3 runs of
// -benchtime 2s; steps of 6 events of ~300 bytes plus projection rows from 8
// concurrent sessions):
//
//	                          modernc          mattn (cgo)
//	append, FULL              289 µs  3.5k/s   202 µs  5.0k/s
//	append, NORMAL            276 µs  3.6k/s   185 µs  5.4k/s
//	append, 1 session, FULL   451 µs  2.2k/s   408 µs  2.5k/s
//	notifications, FULL       203 µs  4.9k/s   182 µs  5.5k/s
//	replay 100k events        233 ms  429k/s   223 ms  449k/s
//
// mattn is 10-45% faster at writing and level at reading. modernc stays the
// default: a step follows a model call of hundreds of milliseconds, so 3.5k
// durable steps a second is far beyond what a node needs, and a cgo-free
// build (cross-compiling, static binaries, no C toolchain) is worth more
// than the difference.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/internal/rowcount"
	"github.com/vigilrun/vigil/store/internal/watch"
)

// Options tunes a Store; nil or zero fields mean the defaults.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "FULL" or "NORMAL".
	//
	// The default is FULL: every commit is fsynced before EventAppend
	// returns, so an acknowledged step survives a power loss or a kernel
	// crash, which rule 8 (write first, then act) needs: the step's effects
	// start once the append returns. NORMAL (in WAL mode) survives a
	// process crash but may lose the last commits on power loss. Group
	// commit shares one fsync among all concurrent appends (about 4 steps
	// a commit with 8 busy sessions), which keeps FULL's cost low: 3.5k
	// against 3.6k steps/s with NORMAL, 2.2k against 2.7k from a single
	// session (see the package doc).
	Synchronous string
	// BusyTimeout is how long a write waits for another connection's write
	// lock (another Store or process on the same file) before SQLITE_BUSY;
	// the writer then retries twice more. Default 5s.
	BusyTimeout time.Duration
	// GroupCommitWindow is how long the writer waits, after taking a job,
	// for more to join its transaction. The default, 0, waits for nothing:
	// the group is whatever queued while the previous commit was syncing,
	// which already batches under load without adding latency when idle.
	GroupCommitWindow time.Duration
	// ReadConns is the size of the read pool. Default max(4, GOMAXPROCS).
	ReadConns int
	// Logger receives warnings: retries, broken groups, duplicate
	// notifications. Nil discards.
	Logger *slog.Logger
}

// maxGroup bounds the jobs in one transaction.
const maxGroup = 256

// Store is a store.Store in one SQLite file.
type Store struct {
	path   string
	sync   string
	window time.Duration
	busy   time.Duration
	log    *slog.Logger

	wdb   *sql.DB // the one write connection
	w     *writer
	rdb   *sql.DB // read pool
	reads *reads  // rdb with its statements

	// mu is held for reading by every call in progress and for writing by
	// Close, which therefore waits for them.
	mu     sync.RWMutex
	closed bool
	jobs   chan *job
	done   chan struct{} // closed when the writer goroutine ends

	closeOnce sync.Once
	closeErr  error

	// commits counts committed groups; appends, rows and tables what they
	// held.
	commits atomic.Int64
	appends atomic.Int64
	rows    atomic.Int64
	tables  rowcount.Tables

	// watch are the Watch channels, woken after commits of events.
	watch watch.Set
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.StatsReader = (*Store)(nil)
	_ store.Watcher     = (*Store)(nil)
)

// Stats implements store.StatsReader: the writer's commits, the appends
// they carried and the rows its transactions inserted, updated or deleted,
// lease, snapshot, node and output rows among them (the writer commits
// those too).
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Appends: s.appends.Load(), Rows: s.rows.Load(), Tables: s.tables.Read()}
}

// Open opens (creating it if needed) the database at path, migrates its
// schema and starts the writer. A read-only file or directory gives an error
// matching store.ErrReadOnly.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	s := &Store{
		path: path, sync: strings.ToUpper(opts.Synchronous), window: opts.GroupCommitWindow,
		busy: opts.BusyTimeout, log: opts.Logger,
		jobs: make(chan *job, maxGroup), done: make(chan struct{}),
	}
	switch s.sync {
	case "":
		s.sync = "FULL"
	case "FULL", "NORMAL":
	default:
		return nil, fmt.Errorf("open %s: synchronous %q: want FULL or NORMAL", path, opts.Synchronous)
	}
	if s.busy <= 0 {
		s.busy = 5 * time.Second
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	readConns := opts.ReadConns
	if readConns <= 0 {
		readConns = max(4, runtime.GOMAXPROCS(0))
	}
	if err := createFile(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}

	drv := newDriver()
	busyMS := fmt.Sprintf("PRAGMA busy_timeout = %d", s.busy.Milliseconds())
	s.wdb = sql.OpenDB(&connector{drv: drv, dsn: path, init: []string{
		busyMS, "PRAGMA journal_mode = WAL", "PRAGMA synchronous = " + s.sync, "PRAGMA foreign_keys = OFF",
	}})
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		_ = s.wdb.Close()
		return nil, fmt.Errorf("open %s: %w", path, s.openErr(err))
	}
	s.w = &writer{conn: conn, stmts: map[string]prepared{}, queries: map[queryKey]string{}}
	fail := func(what string, err error) (*Store, error) {
		_ = s.w.close()
		_ = s.wdb.Close()
		return nil, fmt.Errorf("open %s: %s: %w", path, what, s.openErr(err))
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fail("journal mode", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fail("journal mode", fmt.Errorf("WAL not available (mode %q)", mode))
	}
	if err := s.migrate(ctx); err != nil {
		return fail("migrate", err)
	}

	s.rdb = sql.OpenDB(&connector{drv: drv, dsn: path, init: []string{busyMS, "PRAGMA query_only = 1"}})
	s.rdb.SetMaxOpenConns(readConns)
	s.rdb.SetMaxIdleConns(readConns)
	if err := s.rdb.PingContext(ctx); err != nil {
		_ = s.rdb.Close()
		return fail("read pool", err)
	}
	s.reads = &reads{db: s.rdb}
	go s.loop()
	return s, nil
}

// createFile creates the database file (mode 0600) and its directory (mode
// 0700) when missing, narrows an existing file others could read to its
// owner, and checks that it can be written.
func createFile(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return osErr(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return osErr(err)
	}
	defer f.Close()
	// An existing file others can read is narrowed: sessions hold the
	// users' conversations.
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(fi.Mode().Perm() &^ 0o077); err != nil {
			return osErr(err)
		}
	}
	return nil
}

// openErr maps an error of opening the database; SQLite cannot open a
// database whose directory it cannot write (for the -wal and -shm files).
func (s *Store) openErr(err error) error {
	err = mapErr(err)
	if errors.Is(err, store.ErrReadOnly) {
		return err
	}
	if code, ok := errorCode(err); ok && code&0xff == codeCantOpen {
		f, perr := os.CreateTemp(filepath.Dir(s.path), ".vigil-probe-*")
		if perr != nil {
			return fmt.Errorf("%w (%w)", osErr(perr), err)
		}
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	return err
}

// connector opens connections of one driver and runs init on each.
type connector struct {
	drv  driver.Driver
	dsn  string
	init []string
}

// Connect implements driver.Connector.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("sqlite driver cannot exec")
	}
	for _, q := range c.init {
		if _, err := ex.ExecContext(ctx, q, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return conn, nil
}

// Driver implements driver.Connector.
func (c *connector) Driver() driver.Driver { return c.drv }

// Close stops the writer after the jobs already queued, and closes the
// database. Calls in progress finish first; later calls return
// store.ErrClosed. Safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.jobs)
		s.mu.Unlock()
		<-s.done
		s.watch.Close()
		s.closeErr = errors.Join(s.reads.close(), s.rdb.Close(), s.w.close(), s.wdb.Close())
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close %s: %w", s.path, s.closeErr)
		}
	})
	return s.closeErr
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

// SQLite result codes (primary, the low byte of an extended code).
const (
	codePerm       = 3
	codeBusy       = 5
	codeLocked     = 6
	codeReadOnly   = 8
	codeIOErr      = 10
	codeFull       = 13
	codeCantOpen   = 14
	codeAuth       = 23
	codeTooBig     = 18
	codeConstraint = 19
	codeMismatch   = 20
)

// mapErr wraps err with the store error it means, keeping err in the chain.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{store.ErrFenced, store.ErrConflict, store.ErrLeaseHeld, store.ErrNotFound,
		store.ErrFull, store.ErrReadOnly, store.ErrUnavailable, store.ErrClosed, store.ErrRefused} {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	if code, ok := errorCode(err); ok {
		switch code & 0xff {
		case codeFull, codeIOErr:
			return fmt.Errorf("%w: %w", store.ErrFull, err)
		case codeReadOnly, codePerm, codeAuth:
			return fmt.Errorf("%w: %w", store.ErrReadOnly, err)
		case codeBusy, codeLocked:
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		case codeTooBig, codeConstraint, codeMismatch:
			return fmt.Errorf("%w: %w", store.ErrRefused, err)
		}
		return err
	}
	return osErr(err)
}

// osErr maps an operating system error.
func osErr(err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: %w", store.ErrReadOnly, err)
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w", store.ErrFull, err)
	}
	return err
}
