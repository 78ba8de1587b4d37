package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil/internal/steps"
	"github.com/vigilrun/vigil/store"
)

// job is one write queued to the writer goroutine.
type job struct {
	ctx  context.Context
	what string
	// fn runs inside the group's transaction. It may run more than once
	// (when another job broke the transaction), so it must set its results
	// afresh. It runs its checks before it writes or stages anything: a
	// refusal it returns (store.ErrFenced, ErrConflict, ErrLeaseHeld, or a
	// statement the database refused) must have written nothing, since no
	// savepoint undoes it; any other error breaks the group's transaction.
	fn   func(w *writer) error
	err  error
	done chan struct{}
}

func (j *job) finish(err error) {
	j.err = err
	close(j.done)
}

// writer is the write connection, with its prepared statements. Only the
// writer goroutine (and Open, before it starts) uses it.
//
// Its statements run with a context of their own: cancelling a caller's
// context would interrupt SQLite, which may roll back the whole group's
// transaction.
type writer struct {
	conn    *sql.Conn
	stmts   map[string]prepared
	queries map[queryKey]string
	// g is what the current transaction's jobs staged.
	g *group
}

// prepared is a prepared statement and the table it writes (writtenTable).
type prepared struct {
	st    *sql.Stmt
	table string
}

func (w *writer) stmt(q string) (prepared, error) {
	if p, ok := w.stmts[q]; ok {
		return p, nil
	}
	st, err := w.conn.PrepareContext(context.Background(), q)
	if err != nil {
		return prepared{}, fmt.Errorf("prepare: %w", err)
	}
	p := prepared{st: st, table: writtenTable(q)}
	w.stmts[q] = p
	return p, nil
}

// writtenTable returns the table a statement inserts into, updates or
// deletes from; "other" for any other statement.
func writtenTable(q string) string {
	f := strings.Fields(q)
	var name string
	switch {
	case len(f) >= 3 && (f[0] == "INSERT" && f[1] == "INTO" || f[0] == "DELETE" && f[1] == "FROM"):
		name = f[2]
	case len(f) >= 2 && f[0] == "UPDATE":
		name = f[1]
	}
	if name, _, _ = strings.Cut(name, "("); name == "" {
		return "other"
	}
	return name
}

// exec runs a prepared statement; the rows it changed count in the
// group's rows, as rows of the table it writes.
func (w *writer) exec(q string, args ...any) (sql.Result, error) {
	p, err := w.stmt(q)
	if err != nil {
		return nil, err
	}
	res, err := p.st.ExecContext(context.Background(), args...)
	if err == nil && w.g != nil {
		if n, err := res.RowsAffected(); err == nil {
			w.g.count(p.table, n)
		}
	}
	return res, err
}

// scan runs a query returning at most one row into dest; sql.ErrNoRows
// when there is none.
func (w *writer) scan(q string, args []any, dest ...any) error {
	p, err := w.stmt(q)
	if err != nil {
		return err
	}
	return p.st.QueryRowContext(context.Background(), args...).Scan(dest...)
}

// query runs a prepared query and calls scan for each row.
func (w *writer) query(q string, args []any, scan func(*sql.Rows) error) error {
	p, err := w.stmt(q)
	if err != nil {
		return err
	}
	rows, err := p.st.QueryContext(context.Background(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ctl runs a transaction control statement.
func (w *writer) ctl(q string) error {
	_, err := w.conn.ExecContext(context.Background(), q)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.ToLower(q), err)
	}
	return nil
}

func (w *writer) close() error {
	var errs []error
	for _, p := range w.stmts {
		errs = append(errs, p.st.Close())
	}
	clear(w.stmts)
	return errors.Join(append(errs, w.conn.Close())...)
}

// write queues fn to the writer and waits for its answer.
func (s *Store) write(ctx context.Context, what string, fn func(w *writer) error) error {
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	j := &job{ctx: ctx, what: what, fn: fn, done: make(chan struct{})}
	s.jobs <- j
	<-j.done
	if j.err != nil {
		return fmt.Errorf("%s: %w", what, mapErr(j.err))
	}
	return nil
}

// loop is the writer goroutine: it takes every queued job and runs them as
// one group, until Close closes the queue.
//
// After a group it yields its processor. The callers it answered became
// runnable on this processor, behind the writer; without the yield they
// wait for its next transaction (its statements and fsync, hundreds of
// microseconds) unless another processor is idle to take them. With 100
// busy sessions on two cores (BenchmarkLoad's think variant) a caller's
// wait from its answer to running again was p50 100-140 µs and p99
// 6-8 ms; after the yield 18-20 µs and 2-2.6 ms. The next group is
// larger, not smaller: the answered callers queue their next writes
// meanwhile (100 saturated sessions: 890 commits/s before, 101-119
// after, for as many notifications).
func (s *Store) loop() {
	defer close(s.done)
	group := make([]*job, 0, maxGroup)
	for {
		j, ok := <-s.jobs
		if !ok {
			return
		}
		group = append(group[:0], j)
		if s.window > 0 {
			t := time.NewTimer(s.window)
		wait:
			for len(group) < maxGroup {
				select {
				case j, ok := <-s.jobs:
					if !ok {
						break wait
					}
					group = append(group, j)
				case <-t.C:
					break wait
				}
			}
			t.Stop()
		}
	drain:
		for len(group) < maxGroup {
			select {
			case j, ok := <-s.jobs:
				if !ok {
					break drain
				}
				group = append(group, j)
			default:
				break drain
			}
		}
		s.run(group)
		runtime.Gosched()
	}
}

// run commits a group of jobs and answers each.
func (s *Store) run(group []*job) {
	pending := make([]*job, 0, len(group))
	for _, j := range group {
		if err := j.ctx.Err(); err != nil {
			j.finish(err)
			continue
		}
		pending = append(pending, j)
	}
	for len(pending) > 0 {
		broke, err := s.attempt(pending)
		switch {
		case err != nil:
			for _, j := range pending {
				j.finish(err)
			}
			return
		case broke == -1:
			for _, j := range pending {
				j.finish(j.err)
			}
			return
		case broke == splitGroup:
			s.log.Warn("sqlite: writing a group's rows failed; its writes are committed one by one", "writes", len(pending))
			for _, j := range pending {
				s.run([]*job{j})
			}
			return
		}
		b := pending[broke]
		s.log.Warn("sqlite: a write broke its group's transaction; the others are retried",
			"write", b.what, "err", b.err, "retried", len(pending)-1)
		b.finish(b.err)
		pending = slices.Delete(pending, broke, broke+1)
	}
}

// attempt runs jobs in one transaction, writes what they staged and
// commits. It returns the index of a job whose error broke the transaction
// (then nothing was committed), -1 when it committed, or an error that
// fails every job. When writing the staged rows fails, the jobs are
// committed one by one so that the failure is only its own job's.
func (s *Store) attempt(jobs []*job) (int, error) {
	if err := s.retryBusy("begin", func() error { return s.w.ctl("BEGIN IMMEDIATE") }); err != nil {
		return -1, err
	}
	g := newGroup()
	s.w.g = g
	defer func() { s.w.g = nil }()
	for i, j := range jobs {
		j.err = nil
		rows := g.rows
		if err := j.fn(s.w); err != nil {
			j.err = err
			if logical(err) && g.rows == rows {
				continue
			}
			s.rollback()
			return i, nil
		}
	}
	if err := s.w.flush(g); err != nil {
		s.rollback()
		if len(jobs) > 1 {
			return splitGroup, nil
		}
		jobs[0].err = err
		return 0, nil
	}
	if err := s.retryBusy("commit", func() error { return s.w.ctl("COMMIT") }); err != nil {
		s.rollback()
		return -1, err
	}
	s.commits.Add(1)
	s.appends.Add(g.appends)
	s.rows.Add(g.rows)
	s.tables.Add(g.tables)
	if len(g.steps) > 0 {
		s.watch.Signal()
	}
	return -1, nil
}

// splitGroup is attempt's answer when writing a group's staged rows
// failed: its jobs are then committed one by one.
const splitGroup = -2

// logical reports whether err is a refusal of one job (which wrote
// nothing), decided by the job or by a constraint of the database, rather
// than a failure of the database.
func logical(err error) bool {
	return errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLeaseHeld) ||
		errors.Is(mapErr(err), store.ErrRefused)
}

func (s *Store) rollback() {
	// Fails harmlessly when SQLite already rolled the transaction back.
	_ = s.w.ctl("ROLLBACK")
}

// retryBusy runs fn, again up to twice when SQLite reports the database
// busy after BusyTimeout (another process holds the write lock).
func (s *Store) retryBusy(what string, fn func() error) error {
	var err error
	for attempt := range 3 {
		if err = fn(); err == nil {
			return nil
		}
		if code, ok := errorCode(err); !ok || (code&0xff != codeBusy && code&0xff != codeLocked) {
			return err
		}
		s.log.Warn("sqlite: database busy, retrying", "op", what, "attempt", attempt+1, "path", s.path, "err", err)
	}
	return err
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrate brings the schema to the newest embedded version, in one
// transaction under the write lock (so concurrent opens do not race).
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	type migration struct {
		version int
		name    string
	}
	var all []migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		n, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: bad version: %w", base, err)
		}
		all = append(all, migration{n, name})
	}
	if err := s.retryBusy("migrate", func() error { return s.w.ctl("BEGIN IMMEDIATE") }); err != nil {
		return err
	}
	defer s.rollback()
	conn := s.w.conn
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"); err != nil {
		return err
	}
	var current int
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_version").Scan(&current); err != nil {
		return err
	}
	if newest := all[len(all)-1].version; current > newest {
		return fmt.Errorf("schema version %d is newer than this program's %d", current, newest)
	}
	for _, m := range all {
		if m.version <= current {
			continue
		}
		body, err := migrations.ReadFile(m.name)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if post := afterMigration[m.version]; post != nil {
			if err := post(ctx, conn); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_version (version) VALUES (?)", m.version); err != nil {
			return err
		}
		s.log.Info("sqlite: migrated", "path", s.path, "version", m.version)
	}
	return s.w.ctl("COMMIT")
}

// afterMigration holds the work a migration needs that SQL cannot do, run
// in its transaction after its SQL.
var afterMigration = map[int]func(ctx context.Context, conn *sql.Conn) error{
	2: moveEvents,
}

// moveEvents moves the rows of the version 1 events table into steps, one
// step per event with its global position, and drops the table.
func moveEvents(ctx context.Context, conn *sql.Conn) error {
	ins, err := conn.PrepareContext(ctx, `INSERT INTO steps (glast, session, seq, last, data) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer ins.Close()
	after := int64(0)
	for {
		rows, err := conn.QueryContext(ctx, `SELECT global, session, seq, at, type, data FROM events WHERE global > ? ORDER BY global LIMIT 10000`, after)
		if err != nil {
			return err
		}
		var batch []store.Record
		for rows.Next() {
			var r store.Record
			var at sql.NullInt64
			if err := rows.Scan(&r.Global, &r.Session, &r.Seq, &at, &r.Type, &r.Data); err != nil {
				rows.Close()
				return err
			}
			r.At = fromNanos(at)
			batch = append(batch, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range batch {
			data, err := steps.Encode(nil, []store.Record{r})
			if err != nil {
				return fmt.Errorf("event %s#%d: %w", r.Session, r.Seq, err)
			}
			if _, err := ins.ExecContext(ctx, r.Global, r.Session, r.Seq, r.Seq, data); err != nil {
				return fmt.Errorf("event %s#%d: %w", r.Session, r.Seq, err)
			}
			after = r.Global
		}
		if len(batch) < 10000 {
			break
		}
	}
	_, err = conn.ExecContext(ctx, `DROP TABLE events`)
	return err
}
