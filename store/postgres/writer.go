package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vigilrun/vigil/store"
)

// Bounds of a group: how many appends and how many bytes of step data one
// transaction carries at most, and how long the writer waits for callers of
// its previous group to append again (see loop).
const (
	maxGroup      = 512
	maxGroupBytes = 32 << 20
	maxWait       = time.Millisecond
)

// job is one append queued to the writer.
type job struct {
	ctx  context.Context
	p    *store.EventAppendParams
	data []byte    // the step's records, encoded; nil when there are none
	prep *prepared // the projection, converted

	// Set by the writer, afresh at every attempt.
	res  *store.AppendResult
	dups []dupNote
	err  error
	done chan struct{}
}

// dupNote is a duplicate notification of a job: its index among the job's
// notes, to report them in the job's order.
type dupNote struct {
	index int
	key   string
}

func (j *job) finish(err error) {
	j.err = err
	close(j.done)
}

// writer is the goroutine that commits appends, with the one connection it
// owns.
type writer struct {
	s    *Store
	cfg  *pgx.ConnConfig
	conn *pgx.Conn // nil until connected, and after it was lost

	// hook, when set (by tests), is called with the transaction open and
	// the group's leases locked, between the two round trips.
	hook atomic.Pointer[func()]
}

// write queues j to the writer and waits for its answer. The writer runs
// j's statements with a context of its own, cancelled only when every
// caller of a group gave up, so that one caller's deadline cannot break
// the others' transaction.
func (s *Store) write(j *job) error {
	if err := j.ctx.Err(); err != nil {
		return err
	}
	j.done = make(chan struct{})
	s.jobs <- j
	<-j.done
	return j.err
}

// loop is the writer goroutine: it takes every queued append (those that
// arrived while the previous group was committing) and commits them as one
// group, until Close closes the queue.
//
// When the previous group answered more callers than have queued, it waits
// a little for them (at most a quarter of the previous group's commit, and
// maxWait): callers appending in a loop come back at once, and a group of
// the first one alone would cost a whole commit. A writer whose previous
// group was one append never waits, so an idle store adds no latency.
func (w *writer) loop(jobs <-chan *job, done chan<- struct{}) {
	defer close(done)
	defer w.disconnect()
	group := make([]*job, 0, maxGroup)
	expect := 0            // callers the previous group answered
	var took time.Duration // how long the previous group took
	for {
		j, ok := <-jobs
		if !ok {
			return
		}
		group = append(group[:0], j)
		size := len(j.data)
		var timer *time.Timer
		for open := true; open && len(group) < maxGroup && size < maxGroupBytes; {
			if len(group) >= expect {
				select {
				case j, open = <-jobs:
				default:
					j = nil
				}
			} else {
				if timer == nil {
					timer = time.NewTimer(min(maxWait, took/4))
				}
				select {
				case j, open = <-jobs:
				case <-timer.C:
					j, expect = nil, 0 // take what has queued
					continue
				}
			}
			if j == nil {
				break
			}
			group = append(group, j)
			size += len(j.data)
		}
		if timer != nil {
			timer.Stop()
		}
		start := time.Now()
		w.run(group)
		took, expect = time.Since(start), len(group)
		clear(group)
	}
}

// run commits a group and answers each of its jobs.
func (w *writer) run(group []*job) {
	pending := make([]*job, 0, len(group))
	for _, j := range group {
		if err := j.ctx.Err(); err != nil {
			j.finish(err)
			continue
		}
		pending = append(pending, j)
	}
	w.commit(pending)
}

// commit runs jobs in one transaction, again after a lost connection or a
// deadlock, and answers them. When a statement of the group fails on data
// of some job (a value the database refuses), the group is split in halves
// committed one after the other, down to the job at fault, which alone gets
// the error: the others are not lost.
func (w *writer) commit(jobs []*job) {
	for attempt := 1; len(jobs) > 0; attempt++ {
		err := w.attempt(jobs)
		if err == nil {
			for _, j := range jobs {
				j.finish(j.err)
			}
			return
		}
		if !errors.Is(err, errUnknownOutcome) && retryable(err) && attempt < retries {
			w.s.log.Warn("postgres: group transaction failed before commit; retrying", "appends", len(jobs), "attempt", attempt, "err", err)
			// The callers that gave up meanwhile wrote nothing.
			jobs = slices.DeleteFunc(jobs, func(j *job) bool {
				if err := j.ctx.Err(); err != nil {
					j.finish(err)
					return true
				}
				return false
			})
			continue
		}
		if len(jobs) > 1 && dataError(err) {
			w.s.log.Warn("postgres: a write broke its group's transaction; splitting the group", "appends", len(jobs), "err", err)
			half := len(jobs) / 2
			w.commit(jobs[:half])
			w.commit(jobs[half:])
			return
		}
		var pe *pgconn.PgError
		if len(jobs) == 1 && errors.As(err, &pe) && pe.Code == "23505" {
			err = fmt.Errorf("%s: %w", pe.Message, store.ErrConflict)
		}
		err = mapErr(err)
		for _, j := range jobs {
			j.finish(err)
		}
		return
	}
}

// dataError reports whether err is the database refusing a value or a
// constraint (the fault of one job's data) rather than the database
// failing (full, read-only, gone), which every job would meet.
func dataError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "54000" || pe.Code[:2] == "22" || pe.Code[:2] == "23"
}

// attempt runs jobs in one transaction. A nil error means it committed
// (each job's err then says whether it was refused: fenced, conflict, or
// refused text; a refused job wrote nothing). An error means nothing was
// committed, or, matching errUnknownOutcome, that the outcome is unknown.
func (w *writer) attempt(jobs []*job) (err error) {
	ctx, cancel := groupContext(jobs)
	defer cancel()
	for _, j := range jobs {
		j.res, j.dups, j.err = &store.AppendResult{}, nil, nil
	}
	if err := w.connect(ctx); err != nil {
		return err
	}
	conn := w.conn
	inTx := false
	defer func() {
		if err == nil || !inTx {
			return
		}
		if errors.Is(err, errUnknownOutcome) || lost(err) || conn.IsClosed() {
			w.disconnect()
			return
		}
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			w.disconnect()
		}
	}()

	// Round trip 1: begin, lock the leases of the group's sessions (in
	// session order, as every writer does, so that groups of several nodes
	// cannot deadlock), then read where each session's log ends. The read
	// is its own statement, so its snapshot is taken after the locks were
	// granted: it sees every append committed before.
	sessions := make([]string, 0, len(jobs))
	for _, j := range jobs {
		sessions = append(sessions, j.p.Session)
	}
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	inTx = true
	epochs, lasts, busy, err := checkRead(ctx, conn, sessions, false)
	if err != nil && lockTimeout(err) && len(sessions) > 1 {
		// Another transaction holds the lease of some session of the
		// group (longer than lock_timeout): the appends of those
		// sessions fail, the others go on. The locked rows are told by
		// locking again, skipping them.
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
		epochs, lasts, busy, err = checkRead(ctx, conn, sessions, true)
		if err == nil {
			w.s.log.Warn("postgres: leases locked by another transaction past lock_timeout; their appends fail",
				"sessions", slices.Sorted(maps.Keys(busy)), "appends", len(jobs))
		}
	}
	if err != nil {
		return err
	}

	// The checks, in queue order: a refused job stages nothing.
	g := newGroup()
	for _, j := range jobs {
		if busy[j.p.Session] {
			j.err = fmt.Errorf("lease of %s locked by another transaction: %w", j.p.Session, store.ErrUnavailable)
			continue
		}
		if err := g.check(j, epochs, lasts); err != nil {
			j.err = err
			continue
		}
		g.stage(j)
	}

	if hook := w.hook.Load(); hook != nil {
		(*hook)()
	}

	// Round trip 2: the projection upserts, then the steps with the
	// group's globals, taken from event_counter, the notification, and
	// COMMIT, in one pipelined batch: event_counter's row is locked only
	// while the server runs the end of that batch, never while it waits
	// for this client.
	committed, err := g.flush(ctx, conn)
	if err != nil {
		return err
	}
	inTx = false
	if !committed {
		return errors.New("commit: server answered ROLLBACK")
	}
	w.s.commits.Add(1)
	w.s.appends.Add(g.appends)
	w.s.rows.Add(g.rows)
	w.s.tables.Add(g.tables)
	g.answer()
	if g.total > 0 {
		w.s.watch.Signal()
	}
	return nil
}

// groupContext returns the context a group's statements run with: it is
// cancelled once every job's caller has given up.
func groupContext(jobs []*job) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(jobs)))
	stops := make([]func() bool, 0, len(jobs))
	for _, j := range jobs {
		stops = append(stops, context.AfterFunc(j.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// connect makes sure the writer has a connection.
func (w *writer) connect(ctx context.Context) error {
	if w.conn != nil && !w.conn.IsClosed() {
		return nil
	}
	w.disconnect()
	conn, err := pgx.ConnectConfig(ctx, w.cfg)
	if err != nil {
		return err
	}
	w.conn = conn
	w.s.writerPID.Store(conn.PgConn().PID())
	return nil
}

func (w *writer) disconnect() {
	if w.conn != nil {
		w.s.writerPID.Store(0)
		_ = w.conn.Close(context.Background())
		w.conn = nil
	}
}

// checkRead begins the group's transaction, locks the leases of sessions
// and reads their epochs (absent: no lease) and the last sequence of their
// logs, in one round trip. With skipLocked it skips the leases another
// transaction has locked instead of waiting for them, and reports them in
// busy.
func checkRead(ctx context.Context, conn *pgx.Conn, sessions []string, skipLocked bool) (epochs, lasts map[string]int64, busy map[string]bool, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if skipLocked {
		b.Queue(`SELECT session, epoch FROM leases WHERE session = ANY($1::text[]) ORDER BY session FOR UPDATE SKIP LOCKED`, sessions)
		// Read after the locks: the rows that exist, locked or not.
		b.Queue(`SELECT session FROM leases WHERE session = ANY($1::text[])`, sessions)
	} else {
		b.Queue(`SELECT session, epoch FROM leases WHERE session = ANY($1::text[]) ORDER BY session FOR UPDATE`, sessions)
	}
	b.Queue(`SELECT u.session, COALESCE((SELECT s.last FROM steps s WHERE s.session = u.session ORDER BY s.seq DESC LIMIT 1), 0)
		FROM unnest($1::text[]) AS u (session)`, sessions)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, nil, err
	}
	epochs = make(map[string]int64, len(sessions))
	lasts = make(map[string]int64, len(sessions))
	read := func(m map[string]int64) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var session string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&session, &n}, func() error {
			m[session] = n
			return nil
		})
		return err
	}
	if err := read(epochs); err != nil {
		return nil, nil, nil, err
	}
	if skipLocked {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, nil, err
		}
		var session string
		_, err = pgx.ForEachRow(rows, []any{&session}, func() error {
			if _, ok := epochs[session]; !ok {
				if busy == nil {
					busy = map[string]bool{}
				}
				busy[session] = true
			}
			return nil
		})
		if err != nil {
			return nil, nil, nil, err
		}
	}
	if err := read(lasts); err != nil {
		return nil, nil, nil, err
	}
	return epochs, lasts, busy, br.Close()
}

// lockTimeout reports whether err is the server giving up a lock wait
// (lock_timeout).
func lockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}
