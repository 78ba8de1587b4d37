package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil/store/internal/textlist"

	"github.com/vigilrun/vigil/internal/steps"
	"github.com/vigilrun/vigil/store"
)

// enc converts times for storage, as unix nanoseconds (NULL for the zero
// time), remembering the first time out of that range.
type enc struct{ err error }

func (e *enc) time(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		if e.err == nil {
			e.err = fmt.Errorf("time %v out of storable range", t)
		}
		return nil
	}
	return t.UnixNano()
}

// lines encodes a list of one-line texts for a text column
// (textlist.Encode), remembering the first error.
func (e *enc) lines(v []string) string {
	s, err := textlist.Encode(v)
	if err != nil && e.err == nil {
		e.err = err
	}
	return s
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// LeaseAcquire implements store.Store.
func (s *Store) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*store.Lease, error) {
	var l *store.Lease
	var e enc
	now, expires := e.time(p.Now), e.time(p.Now.Add(p.TTL))
	if e.err != nil {
		return nil, fmt.Errorf("acquire lease of %s: %w", p.Session, e.err)
	}
	err := s.write(ctx, "acquire lease of "+p.Session, func(w *writer) error {
		l = nil
		// The holder before, read in the same transaction as the upsert
		// (the writer's): who it was and whether it released the lease.
		var prev string
		var prevExp sql.NullInt64
		err := w.scan(`SELECT owner, expires FROM leases WHERE session = ?`, []any{p.Session}, &prev, &prevExp)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var epoch int64
		err = w.scan(`INSERT INTO leases (session, owner, epoch, expires) VALUES (?, ?, 1, ?)
			ON CONFLICT (session) DO UPDATE SET owner = excluded.owner, epoch = leases.epoch + 1, expires = excluded.expires
			WHERE leases.owner = excluded.owner OR leases.expires <= ? OR (? <> '' AND leases.owner = ?)
			RETURNING epoch`, []any{p.Session, p.Owner, expires, now, p.Steal, p.Steal}, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return &store.LeaseHeldError{Session: p.Session, Owner: prev, Expires: fromNanos(prevExp)}
		}
		if err != nil {
			return err
		}
		w.g.count("leases", 1)
		l = &store.Lease{Session: p.Session, Owner: p.Owner, Epoch: epoch, Expires: p.Now.Add(p.TTL),
			Previous: prev, Released: prevExp.Valid && prevExp.Int64 == releasedMark}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LeaseAcquireMany implements store.Store: per 500 sessions, one read of
// their leases and one upsert, all in one transaction.
func (s *Store) LeaseAcquireMany(ctx context.Context, p *store.LeaseAcquireManyParams) (*store.LeaseAcquireManyResult, error) {
	var e enc
	now, expires := e.time(p.Now), e.time(p.Now.Add(p.TTL))
	if e.err != nil {
		return nil, fmt.Errorf("acquire leases for %s: %w", p.Owner, e.err)
	}
	sessions := p.Distinct()
	var res *store.LeaseAcquireManyResult
	err := s.write(ctx, fmt.Sprintf("acquire %d leases for %s", len(sessions), p.Owner), func(w *writer) error {
		res = &store.LeaseAcquireManyResult{}
		for chunk := range slices.Chunk(sessions, renewChunk) {
			// The holders before, read in the writer's transaction.
			type holder struct {
				owner   string
				expires sql.NullInt64
			}
			prev := make(map[string]holder, len(chunk))
			args := make([]any, 0, 3*len(chunk)+1)
			for _, sess := range chunk {
				args = append(args, sess)
			}
			q := w.cachedQuery("leases", "holders", len(chunk), func() string {
				return "SELECT session, owner, expires FROM leases WHERE session IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ") + ")"
			})
			if err := w.query(q, args, func(rows *sql.Rows) error {
				var sess string
				var h holder
				if err := rows.Scan(&sess, &h.owner, &h.expires); err != nil {
					return err
				}
				prev[sess] = h
				return nil
			}); err != nil {
				return err
			}
			args = args[:0]
			for _, sess := range chunk {
				args = append(args, sess, p.Owner, expires)
			}
			args = append(args, now)
			q = w.cachedQuery("leases", "acquire", len(chunk), func() string {
				return strings.ReplaceAll(valuesQuery("INSERT INTO leases (session, owner, expires, epoch) VALUES ", 3, len(chunk)), "?)", "?, 1)") +
					` ON CONFLICT (session) DO UPDATE SET owner = excluded.owner, epoch = leases.epoch + 1, expires = excluded.expires
					WHERE leases.owner = excluded.owner OR leases.expires <= ? RETURNING session, epoch`
			})
			granted := make(map[string]bool, len(chunk))
			if err := w.query(q, args, func(rows *sql.Rows) error {
				var sess string
				var epoch int64
				if err := rows.Scan(&sess, &epoch); err != nil {
					return err
				}
				granted[sess] = true
				h := prev[sess]
				res.Leases = append(res.Leases, store.Lease{Session: sess, Owner: p.Owner, Epoch: epoch, Expires: p.Now.Add(p.TTL),
					Previous: h.owner, Released: h.expires.Valid && h.expires.Int64 == releasedMark})
				return nil
			}); err != nil {
				return err
			}
			w.g.count("leases", int64(len(granted)))
			for _, sess := range chunk {
				if !granted[sess] {
					h := prev[sess]
					res.Held = append(res.Held, store.LeaseHeldError{Session: sess, Owner: h.owner, Expires: fromNanos(h.expires)})
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// renewChunk bounds the leases one renewal statement carries (two
// variables each, well under SQLite's limit).
const renewChunk = 500

// LeaseRenew implements store.Store: one UPDATE per 500 leases, all in one
// transaction.
func (s *Store) LeaseRenew(ctx context.Context, p *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	var e enc
	expires := e.time(p.Now.Add(p.TTL))
	if e.err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", p.Owner, e.err)
	}
	var res *store.LeaseRenewResult
	err := s.write(ctx, fmt.Sprintf("renew %d leases of %s", len(p.Leases), p.Owner), func(w *writer) error {
		res = &store.LeaseRenewResult{Expires: p.Now.Add(p.TTL)}
		renewed := make(map[string]bool, len(p.Leases))
		for chunk := range slices.Chunk(p.Leases, renewChunk) {
			q := renewQuery(len(chunk))
			args := make([]any, 0, 3+2*len(chunk))
			args = append(args, expires, p.Owner, releasedMark)
			for _, ref := range chunk {
				args = append(args, ref.Session, ref.Epoch)
			}
			if err := w.query(q, args, func(rows *sql.Rows) error {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				renewed[id] = true
				w.g.count("leases", 1)
				return nil
			}); err != nil {
				return err
			}
		}
		for _, ref := range p.Leases {
			if renewed[ref.Session] {
				res.Renewed = append(res.Renewed, ref.Session)
			} else {
				res.Lost = append(res.Lost, ref.Session)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func renewQuery(n int) string {
	return valuesQuery(`UPDATE leases SET expires = ? WHERE owner = ? AND expires <> ? AND (session, epoch) IN (VALUES `, 2, n) + `) RETURNING session`
}

// releasedMark is the expiry of a released lease: expired for every
// clock, and told apart from a lease that ran out. The row keeps its
// owner, so the next LeaseAcquire reports who released it.
const releasedMark = int64(math.MinInt64)

// LeaseRelease implements store.Store: one UPDATE per 500 leases, all in
// one transaction.
func (s *Store) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	if len(p.Leases) == 0 {
		return nil
	}
	return s.write(ctx, fmt.Sprintf("release %d leases of %s", len(p.Leases), p.Owner), func(w *writer) error {
		for chunk := range slices.Chunk(p.Leases, renewChunk) {
			args := make([]any, 0, 2+2*len(chunk))
			args = append(args, releasedMark, p.Owner)
			for _, ref := range chunk {
				args = append(args, ref.Session, ref.Epoch)
			}
			if _, err := w.exec(releaseQuery(len(chunk)), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

func releaseQuery(n int) string {
	return valuesQuery(`UPDATE leases SET expires = ? WHERE owner = ? AND (session, epoch) IN (VALUES `, 2, n) + `)`
}

// fence fails with ErrFenced unless epoch is the session's lease epoch; a
// session that never had a lease cannot be written.
func (w *writer) fence(session string, epoch int64) error {
	var current int64
	err := w.scan(`SELECT epoch FROM leases WHERE session = ?`, []any{session}, &current)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if current == 0 {
		return fmt.Errorf("no lease on the session: %w", store.ErrFenced)
	}
	if current != epoch {
		return fmt.Errorf("epoch %d, lease epoch %d: %w", epoch, current, store.ErrFenced)
	}
	return nil
}

// EventAppend implements store.Store. The step is one row of the steps
// table (internal/steps' format), and its projection rows are written with
// the group's, once per key.
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	var data []byte
	if len(p.Records) > 0 {
		var err error
		if data, err = steps.Encode(nil, p.Records); err != nil {
			return nil, fmt.Errorf("append %s: %w", p.Session, err)
		}
	}
	var res *store.AppendResult
	err := s.write(ctx, "append "+p.Session, func(w *writer) error {
		res = &store.AppendResult{}
		g := w.g
		var epoch, stored sql.NullInt64
		if err := w.scan(`SELECT (SELECT epoch FROM leases WHERE session = ?1), (SELECT MAX(last) FROM steps WHERE session = ?1)`,
			[]any{p.Session}, &epoch, &stored); err != nil {
			return err
		}
		if epoch.Int64 == 0 {
			return fmt.Errorf("no lease on the session: %w", store.ErrFenced)
		}
		if epoch.Int64 != p.Epoch {
			return fmt.Errorf("epoch %d, lease epoch %d: %w", p.Epoch, epoch.Int64, store.ErrFenced)
		}
		last := stored.Int64
		if l, ok := g.last[p.Session]; ok {
			last = l
		}
		for i, r := range p.Records {
			if r.Seq != last+int64(i)+1 {
				return fmt.Errorf("seq %d after %d: %w", r.Seq, last+int64(i), store.ErrConflict)
			}
		}
		if n := int64(len(p.Records)); n > 0 {
			if g.next == 0 {
				var top int64
				if err := w.scan(`SELECT COALESCE(MAX(glast), 0) FROM steps`, nil, &top); err != nil {
					return err
				}
				g.next = top + 1
			}
			first := g.next
			g.next += n
			g.last[p.Session] = last + n
			g.steps = append(g.steps, []any{first + n - 1, p.Session, last + 1, last + n, data})
			for k := range n {
				res.Globals = append(res.Globals, first+k)
			}
		}
		g.appends++
		if p.Projection != nil {
			return g.stage(p.Session, p.Projection, res)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(res.DuplicateNotes) > 0 {
		s.log.Warn("sqlite: notification written twice; the second write was a no-op",
			"session", p.Session, "notes", res.DuplicateNotes, "reason", "duplicate-notification")
	}
	return res, nil
}

// SnapshotSave implements store.Store.
func (s *Store) SnapshotSave(ctx context.Context, p *store.SnapshotSaveParams) error {
	return s.write(ctx, "save snapshot of "+p.Session, func(w *writer) error {
		if err := w.fence(p.Session, p.Epoch); err != nil {
			return err
		}
		data := p.Data
		if data == nil {
			data = []byte{}
		}
		_, err := w.exec(`INSERT INTO snapshots (session, seq, data) VALUES (?, ?, ?)
			ON CONFLICT (session) DO UPDATE SET seq = excluded.seq, data = excluded.data WHERE excluded.seq >= snapshots.seq`,
			p.Session, p.Seq, data)
		return err
	})
}

// reads is the read pool with its queries prepared once, on each of its
// connections as they come (database/sql's Stmt): preparing a query at
// each call was 8% of Open's CPU with 10,000 sessions to take over.
type reads struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func (r *reads) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.stmts[q]; ok {
		return st, nil
	}
	st, err := r.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if r.stmts == nil {
		r.stmts = map[string]*sql.Stmt{}
	}
	r.stmts[q] = st
	return st, nil
}

// QueryContext runs the prepared query q.
func (r *reads) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := r.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext runs the prepared query q for one row.
func (r *reads) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := r.stmt(ctx, q)
	if err != nil {
		return r.db.QueryRowContext(ctx, q, args...) // fails alike, and says why
	}
	return st.QueryRowContext(ctx, args...)
}

// BeginTx starts a read transaction.
func (r *reads) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return r.db.BeginTx(ctx, opts)
}

// close closes the prepared statements.
func (r *reads) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, st := range r.stmts {
		errs = append(errs, st.Close())
	}
	clear(r.stmts)
	return errors.Join(errs...)
}

// read runs fn on the read pool while the store is open.
func (s *Store) read(ctx context.Context, what string, fn func(db *reads) error) error {
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := fn(s.reads); err != nil && !errors.Is(err, errEnough) {
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
	return nil
}

// querier runs queries: the read pool, or a Reader's database.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// query runs q and calls scan for each row.
func query(ctx context.Context, db querier, q string, args []any, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q, args...)
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

// kept returns a BLOB scanned into a sql.RawBytes as a slice its caller
// keeps. Both drivers give each BLOB value a new Go slice (modernc.org/sqlite
// copies SQLite's bytes into make([]byte, n) in conn.columnBlob,
// github.com/mattn/go-sqlite3 uses C.GoBytes), which database/sql hands to
// a RawBytes as it is and forgets at the next row. Keeping it saves the
// copy database/sql makes for a *[]byte: the snapshot of a session of a
// million events is 130 MB, and that copy (its memory new to the process,
// page by page) took 13% of the CPU of its takeovers in a profile.
// TestBlobsAreKept checks this of the build's driver. A nil or empty
// value gives nil.
func kept(b sql.RawBytes) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func limit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// EventList implements store.Store.
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	var out []store.Record
	err := s.read(ctx, "list events of "+p.Session, func(db *reads) error {
		return query(ctx, db, `SELECT glast, seq, last, data FROM steps WHERE session = ? AND last > ? ORDER BY last`,
			[]any{p.Session, p.AfterSeq}, func(rows *sql.Rows) error {
				var err error
				out, err = scanStep(rows, out, p.Session, func(r store.Record) bool { return r.Seq > p.AfterSeq })
				if err == nil && p.Limit > 0 && len(out) >= p.Limit {
					out = out[:p.Limit]
					return errEnough
				}
				return err
			})
	})
	return out, err
}

// errEnough ends a query whose caller has the rows it wants.
var errEnough = errors.New("enough rows")

// scanStep decodes a step row (glast, seq, last, data) and appends the
// records keep accepts to out.
func scanStep(rows *sql.Rows, out []store.Record, session string, keep func(store.Record) bool) ([]store.Record, error) {
	var glast, seq, last int64
	var data sql.RawBytes
	var sess string
	dest := []any{&glast, &seq, &last, &data}
	if session == "" {
		dest = append(dest, &sess)
	} else {
		sess = session
	}
	if err := rows.Scan(dest...); err != nil {
		return out, err
	}
	from := len(out)
	out, err := steps.Decode(out, sess, seq, glast-(last-seq), kept(data))
	if err != nil {
		return out, err
	}
	if n := len(out) - from; int64(n) != last-seq+1 {
		return out, fmt.Errorf("step %s#%d: %d records, want %d: %w", sess, seq, n, last-seq+1, steps.ErrCorrupt)
	}
	kept := from
	for _, r := range out[from:] {
		if keep(r) {
			out[kept] = r
			kept++
		}
	}
	return out[:kept], nil
}

// EventListAll implements store.Store.
func (s *Store) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	var out []store.Record
	err := s.read(ctx, "list events", func(db *reads) error {
		return query(ctx, db, `SELECT glast, seq, last, data, session FROM steps WHERE glast > ? ORDER BY glast`,
			[]any{p.AfterGlobal}, func(rows *sql.Rows) error {
				var err error
				out, err = scanStep(rows, out, "", func(r store.Record) bool { return r.Global > p.AfterGlobal })
				if err == nil && p.Limit > 0 && len(out) >= p.Limit {
					out = out[:p.Limit]
					return errEnough
				}
				return err
			})
	})
	return out, err
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context, session string) (int64, error) {
	var n int64
	err := s.read(ctx, "last seq of "+session, func(db *reads) error {
		return db.QueryRowContext(ctx, `SELECT COALESCE(MAX(last), 0) FROM steps WHERE session = ?`, session).Scan(&n)
	})
	return n, err
}

// SnapshotLoad implements store.Store.
func (s *Store) SnapshotLoad(ctx context.Context, session string) (*store.Snapshot, error) {
	snap := &store.Snapshot{Session: session}
	err := s.read(ctx, "load snapshot of "+session, func(db *reads) error {
		found := false
		err := query(ctx, db, `SELECT seq, data FROM snapshots WHERE session = ?`, []any{session}, func(rows *sql.Rows) error {
			var data sql.RawBytes
			if err := rows.Scan(&snap.Seq, &data); err != nil {
				return err
			}
			found, snap.Data = true, kept(data)
			return nil
		})
		if err == nil && !found {
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// TailLoadMany implements store.Store: SnapshotLoad and EventList of
// each session, under one entry (a read here is in-process, with no round
// trip to save).
func (s *Store) TailLoadMany(ctx context.Context, p *store.TailLoadManyParams) ([]store.Tail, error) {
	ids := p.Distinct()
	var out []store.Tail
	err := s.read(ctx, "load tails", func(db *reads) error {
		out = make([]store.Tail, 0, len(ids))
		left := p.MaxBytes // bytes left to read, when p.MaxBytes > 0
		for i, id := range ids {
			t := store.Tail{Session: id, Complete: true}
			snap := store.Snapshot{Session: id}
			size, found := 0, false
			// The data is read only when it fits.
			err := query(ctx, db, `SELECT seq, length(data), CASE WHEN ? OR length(data) <= ? THEN data END FROM snapshots WHERE session = ?`,
				[]any{p.MaxBytes <= 0 || i == 0, left, id}, func(rows *sql.Rows) error {
					var data sql.RawBytes
					if err := rows.Scan(&snap.Seq, &size, &data); err != nil {
						return err
					}
					found, snap.Data = true, kept(data)
					return nil
				})
			switch {
			case err != nil:
				return fmt.Errorf("snapshot of %s: %w", id, err)
			case found && snap.Data == nil && size > 0:
				return nil // it does not fit
			case found:
				t.Snapshot = &snap
				left -= size
			}
			after, cut := snap.Seq, false
			err = query(ctx, db, `SELECT glast, seq, last, data FROM steps WHERE session = ? AND last > ? ORDER BY last`,
				[]any{id, after}, func(rows *sql.Rows) error {
					from := len(t.Records)
					var err error
					t.Records, err = scanStep(rows, t.Records, id, func(r store.Record) bool { return r.Seq > after })
					if err != nil {
						return err
					}
					if p.MaxBytes > 0 {
						// A step counts by its records' data, as in
						// the memory store (PostgreSQL counts a step
						// as it is stored).
						n := 0
						for _, r := range t.Records[from:] {
							n += len(r.Data)
						}
						if left -= n; left < 0 {
							t.Records, t.Complete, cut = t.Records[:from], false, true
							return errEnough
						}
					}
					if p.Limit > 0 && len(t.Records) > p.Limit {
						t.Records, t.Complete = t.Records[:p.Limit], false
						return errEnough
					}
					return nil
				})
			if err != nil && !errors.Is(err, errEnough) {
				return fmt.Errorf("events of %s: %w", id, err)
			}
			out = append(out, t)
			if cut {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

const sessionCols = `id, title, owner, provider, model, cwd, closed, created, updated, last_seq, input_tokens, output_tokens, needs_you`

type scanner interface{ Scan(dest ...any) error }

func scanSession(sc scanner) (store.SessionRow, error) {
	var r store.SessionRow
	var created, updated sql.NullInt64
	var needs string
	err := sc.Scan(&r.ID, &r.Title, &r.Owner, &r.Provider, &r.Model, &r.Cwd, &r.Closed, &created, &updated,
		&r.LastSeq, &r.InputTokens, &r.OutputTokens, &needs)
	r.Created, r.Updated = fromNanos(created), fromNanos(updated)
	if err == nil {
		if r.NeedsYou, err = textlist.Decode(needs); err != nil {
			err = fmt.Errorf("session %s: needs_you: %w", r.ID, err)
		}
	}
	return r, err
}

// SessionList implements store.Store.
func (s *Store) SessionList(ctx context.Context, p *store.SessionListParams) ([]store.SessionRow, error) {
	var out []store.SessionRow
	err := s.read(ctx, "list sessions", func(db *reads) error {
		return query(ctx, db, `SELECT `+sessionCols+` FROM sessions
			WHERE (? = '' OR owner = ?) AND (? = 0 OR closed = 0) ORDER BY created DESC, id DESC`,
			[]any{p.Owner, p.Owner, p.Open}, func(rows *sql.Rows) error {
				r, err := scanSession(rows)
				out = append(out, r)
				return err
			})
	})
	return out, err
}

// SessionGet implements store.Store.
func (s *Store) SessionGet(ctx context.Context, session string) (*store.SessionRow, error) {
	var r store.SessionRow
	err := s.read(ctx, "get session "+session, func(db *reads) error {
		var err error
		r, err = scanSession(db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, session))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// RunList implements store.Store.
func (s *Store) RunList(ctx context.Context, session string) ([]store.RunRow, error) {
	var out []store.RunRow
	err := s.read(ctx, "list runs of "+session, func(db *reads) error {
		return query(ctx, db, `SELECT agent, seq, kind, status, started, ended, reply, error, input_tokens, output_tokens
			FROM runs WHERE session = ? ORDER BY agent, seq`, []any{session}, func(rows *sql.Rows) error {
			r := store.RunRow{Session: session}
			var started, ended sql.NullInt64
			if err := rows.Scan(&r.Agent, &r.Seq, &r.Kind, &r.Status, &started, &ended, &r.Reply, &r.Error,
				&r.InputTokens, &r.OutputTokens); err != nil {
				return err
			}
			r.Started, r.Ended = fromNanos(started), fromNanos(ended)
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// TaskList implements store.Store.
func (s *Store) TaskList(ctx context.Context, session string) ([]store.TaskRow, error) {
	var out []store.TaskRow
	err := s.read(ctx, "list tasks of "+session, func(db *reads) error {
		return query(ctx, db, `SELECT id, kind, owner, agent, status, command, started, ended, exit_code
			FROM tasks WHERE session = ? ORDER BY ord`, []any{session}, func(rows *sql.Rows) error {
			t := store.TaskRow{Session: session}
			var started, ended, exit sql.NullInt64
			if err := rows.Scan(&t.ID, &t.Kind, &t.Owner, &t.Agent, &t.Status, &t.Command, &started, &ended, &exit); err != nil {
				return err
			}
			t.Started, t.Ended = fromNanos(started), fromNanos(ended)
			if exit.Valid {
				code := int(exit.Int64)
				t.Exit = &code
			}
			out = append(out, t)
			return nil
		})
	})
	return out, err
}

// NoteList implements store.Store.
func (s *Store) NoteList(ctx context.Context, session string) ([]store.NoteRow, error) {
	var out []store.NoteRow
	err := s.read(ctx, "list notes of "+session, func(db *reads) error {
		return query(ctx, db, `SELECT task, run, owner, status, delivery, delivered_run, dropped, written
			FROM notes WHERE session = ? ORDER BY ord`, []any{session}, func(rows *sql.Rows) error {
			n := store.NoteRow{Session: session}
			var written sql.NullInt64
			if err := rows.Scan(&n.Task, &n.Run, &n.Owner, &n.Status, &n.Delivery, &n.DeliveredRun, &n.Dropped, &written); err != nil {
				return err
			}
			n.Written = fromNanos(written)
			out = append(out, n)
			return nil
		})
	})
	return out, err
}

// AgentList returns a session's agent rows in creation order. It is not
// part of store.Store; storetest checks it through storetest.AgentLister.
func (s *Store) AgentList(ctx context.Context, session string) ([]store.AgentRow, error) {
	var out []store.AgentRow
	err := s.read(ctx, "list agents of "+session, func(db *reads) error {
		return query(ctx, db, `SELECT id, name, owner, task, state, runs, inbox, input_tokens, output_tokens
			FROM agents WHERE session = ? ORDER BY ord`, []any{session}, func(rows *sql.Rows) error {
			a := store.AgentRow{Session: session}
			if err := rows.Scan(&a.ID, &a.Name, &a.Owner, &a.Task, &a.State, &a.Runs, &a.Inbox, &a.InputTokens, &a.OutputTokens); err != nil {
				return err
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// ItemList returns the items that wait in a session's inboxes, in
// enqueue order. It is not
// part of store.Store; storetest checks it through storetest.ItemLister.
func (s *Store) ItemList(ctx context.Context, session string) ([]store.ItemRow, error) {
	var out []store.ItemRow
	err := s.read(ctx, "list items of "+session, func(db *reads) error {
		return query(ctx, db, `SELECT id, agent, kind, priority, sender, enqueued
			FROM items WHERE session = ? ORDER BY ord`, []any{session}, func(rows *sql.Rows) error {
			it := store.ItemRow{Session: session}
			var enqueued sql.NullInt64
			if err := rows.Scan(&it.ID, &it.Agent, &it.Kind, &it.Priority, &it.From, &enqueued); err != nil {
				return err
			}
			it.Enqueued = fromNanos(enqueued)
			out = append(out, it)
			return nil
		})
	})
	return out, err
}
