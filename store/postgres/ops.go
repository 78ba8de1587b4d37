package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vigilrun/vigil/store/internal/textlist"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/internal/steps"
	"github.com/vigilrun/vigil/store"
)

// enc converts times for storage, as unix nanoseconds (NULL for the zero
// time), remembering the first time out of that range.
type enc struct{ err error }

// lines encodes a list of one-line texts for a text column
// (textlist.Encode), remembering the first error.
func (e *enc) lines(v []string) string {
	s, err := textlist.Encode(v)
	if err != nil && e.err == nil {
		e.err = err
	}
	return s
}

func (e *enc) time(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		if e.err == nil {
			e.err = fmt.Errorf("time %v out of storable range", t)
		}
		return nil
	}
	n := t.UnixNano()
	return &n
}

func fromNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// LeaseAcquire implements store.Store.
func (s *Store) LeaseAcquire(ctx context.Context, p *store.LeaseAcquireParams) (*store.Lease, error) {
	var e enc
	now, expires := e.time(p.Now), e.time(p.Now.Add(p.TTL))
	if e.err != nil {
		return nil, fmt.Errorf("acquire lease of %s: %w", p.Session, e.err)
	}
	var l *store.Lease
	// One statement, which holds the row's lock only while it runs; run
	// again after a lost connection (acquiring a lease one holds already
	// is granting it again).
	err := s.write1(ctx, "acquire lease of "+p.Session, func() error {
		l = nil
		var epoch int64
		// prev is the row as the statement's snapshot holds it: the holder
		// before (who, and whether it released the lease).
		var prev *string
		var prevExp *int64
		err := s.pool.QueryRow(ctx, `WITH prev AS (SELECT owner, expires FROM leases WHERE session = $1)
			INSERT INTO leases (session, owner, epoch, expires) VALUES ($1, $2, 1, $3)
			ON CONFLICT (session) DO UPDATE SET owner = excluded.owner, epoch = leases.epoch + 1, expires = excluded.expires
			WHERE leases.owner = excluded.owner OR leases.expires <= $4 OR ($5 <> '' AND leases.owner = $5)
			RETURNING epoch, (SELECT owner FROM prev), (SELECT expires FROM prev)`, p.Session, p.Owner, expires, now, p.Steal).Scan(&epoch, &prev, &prevExp)
		if errors.Is(err, pgx.ErrNoRows) {
			var owner string
			var exp *int64
			if err := s.pool.QueryRow(ctx, `SELECT owner, expires FROM leases WHERE session = $1`, p.Session).Scan(&owner, &exp); err != nil {
				return err
			}
			return &store.LeaseHeldError{Session: p.Session, Owner: owner, Expires: fromNanos(exp)}
		}
		if err != nil {
			return err
		}
		l = &store.Lease{Session: p.Session, Owner: p.Owner, Epoch: epoch, Expires: p.Now.Add(p.TTL)}
		if prev != nil {
			l.Previous = *prev
		}
		l.Released = prevExp != nil && *prevExp == releasedMark
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LeaseAcquireMany implements store.Store: one upsert of every lease, in
// session order (the order LeaseRenew locks them in), and one read of the
// holders of those it could not take.
func (s *Store) LeaseAcquireMany(ctx context.Context, p *store.LeaseAcquireManyParams) (*store.LeaseAcquireManyResult, error) {
	var e enc
	now, expires := e.time(p.Now), e.time(p.Now.Add(p.TTL))
	if e.err != nil {
		return nil, fmt.Errorf("acquire leases for %s: %w", p.Owner, e.err)
	}
	sessions := p.Distinct()
	var res *store.LeaseAcquireManyResult
	err := s.write1(ctx, fmt.Sprintf("acquire %d leases for %s", len(sessions), p.Owner), func() error {
		res = &store.LeaseAcquireManyResult{}
		if len(sessions) == 0 {
			return nil
		}
		granted := make(map[string]bool, len(sessions))
		// The previous owners are joined to what the upsert returns, not
		// looked up row by row: with 256 sessions the server took 14-24 ms
		// that way, 4-5 ms this one.
		err := s.collect(ctx, `WITH prev AS (SELECT session, owner, expires FROM leases WHERE session = ANY($1::text[])),
			up AS (INSERT INTO leases (session, owner, epoch, expires) SELECT r.session, $2, 1, $3 FROM unnest($1::text[]) AS r (session) ORDER BY r.session
				ON CONFLICT (session) DO UPDATE SET owner = excluded.owner, epoch = leases.epoch + 1, expires = excluded.expires
				WHERE leases.owner = excluded.owner OR leases.expires <= $4
				RETURNING leases.session, leases.epoch)
			SELECT up.session, up.epoch, prev.owner, prev.expires FROM up LEFT JOIN prev USING (session)`,
			[]any{sessions, p.Owner, expires, now}, func(rows pgx.Rows) error {
				var l store.Lease
				var prev *string
				var prevExp *int64
				if err := rows.Scan(&l.Session, &l.Epoch, &prev, &prevExp); err != nil {
					return err
				}
				l.Owner, l.Expires = p.Owner, p.Now.Add(p.TTL)
				if prev != nil {
					l.Previous = *prev
				}
				l.Released = prevExp != nil && *prevExp == releasedMark
				granted[l.Session] = true
				res.Leases = append(res.Leases, l)
				return nil
			})
		if err != nil || len(granted) == len(sessions) {
			return err
		}
		var held []string
		for _, sess := range sessions {
			if !granted[sess] {
				held = append(held, sess)
			}
		}
		return s.collect(ctx, `SELECT session, owner, expires FROM leases WHERE session = ANY($1::text[])`, []any{held}, func(rows pgx.Rows) error {
			var h store.LeaseHeldError
			var exp *int64
			if err := rows.Scan(&h.Session, &h.Owner, &exp); err != nil {
				return err
			}
			h.Expires = fromNanos(exp)
			res.Held = append(res.Held, h)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// LeaseRenew implements store.Store: one UPDATE for all the leases.
func (s *Store) LeaseRenew(ctx context.Context, p *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	var e enc
	expires := e.time(p.Now.Add(p.TTL))
	if e.err != nil {
		return nil, fmt.Errorf("renew leases of %s: %w", p.Owner, e.err)
	}
	sessions, epochs := make([]string, len(p.Leases)), make([]int64, len(p.Leases))
	for i, ref := range p.Leases {
		sessions[i], epochs[i] = ref.Session, ref.Epoch
	}
	var res *store.LeaseRenewResult
	err := s.write1(ctx, fmt.Sprintf("renew %d leases of %s", len(p.Leases), p.Owner), func() error {
		res = &store.LeaseRenewResult{Expires: p.Now.Add(p.TTL)}
		// One statement. The rows are locked in session order, as the
		// writer locks a group's leases, so that a renewal and a group
		// cannot deadlock.
		rows, err := s.pool.Query(ctx, `WITH held AS (
				SELECT l.session FROM leases l JOIN unnest($3::text[], $4::bigint[]) AS r (session, epoch)
					ON l.session = r.session AND l.epoch = r.epoch
				WHERE l.owner = $2 AND l.expires <> $5 ORDER BY l.session FOR UPDATE OF l)
			UPDATE leases SET expires = $1 FROM held WHERE leases.session = held.session
			RETURNING leases.session`, expires, p.Owner, sessions, epochs, releasedMark)
		if err != nil {
			return err
		}
		renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		got := make(map[string]bool, len(renewed))
		for _, id := range renewed {
			got[id] = true
		}
		for _, ref := range p.Leases {
			if got[ref.Session] {
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

// releasedMark is the expiry of a released lease: expired for every
// clock, and told apart from a lease that ran out. The row keeps its
// owner, so the next LeaseAcquire reports who released it.
const releasedMark = int64(math.MinInt64)

// LeaseRelease implements store.Store: one UPDATE for all the leases.
func (s *Store) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	if len(p.Leases) == 0 {
		return nil
	}
	sessions, epochs := make([]string, len(p.Leases)), make([]int64, len(p.Leases))
	for i, ref := range p.Leases {
		sessions[i], epochs[i] = ref.Session, ref.Epoch
	}
	return s.write1(ctx, fmt.Sprintf("release %d leases of %s", len(p.Leases), p.Owner), func() error {
		// One statement. The rows are locked in session order, as the
		// writer and the renewal lock them, so that a release and a group
		// cannot deadlock.
		_, err := s.pool.Exec(ctx, `WITH held AS (
				SELECT l.session FROM leases l JOIN unnest($3::text[], $4::bigint[]) AS r (session, epoch)
					ON l.session = r.session AND l.epoch = r.epoch
				WHERE l.owner = $2 ORDER BY l.session FOR UPDATE OF l)
			UPDATE leases SET expires = $1 FROM held WHERE leases.session = held.session`,
			releasedMark, p.Owner, sessions, epochs)
		return err
	})
}

// EventAppend implements store.Store: the append is queued to the writer,
// which commits it with the others queued meanwhile (see the package doc).
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	what := "append " + p.Session
	if err := s.enter(what); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var c textCheck
	if c.check("session id", p.Session); c.err != nil {
		return nil, fmt.Errorf("%s: %w", what, c.err)
	}
	j := &job{ctx: ctx, p: p}
	if len(p.Records) > 0 {
		var err error
		if j.data, err = steps.Encode(nil, p.Records); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	prep, err := prepare(p.Session, p.Projection)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	j.prep = prep
	if err := s.write(j); err != nil {
		return nil, fmt.Errorf("%s: %w", what, mapErr(err))
	}
	if len(j.res.DuplicateNotes) > 0 {
		s.log.Warn("postgres: notification written twice; the second write was a no-op",
			"session", p.Session, "notes", j.res.DuplicateNotes, "reason", "duplicate-notification")
	}
	return j.res, nil
}

// saveSnapshot saves a snapshot if $4 is the session's lease epoch, in
// one statement that locks the lease row while it runs; it returns the
// epoch (NULL: no lease).
const saveSnapshot = `WITH l AS (SELECT epoch FROM leases WHERE session = $1 FOR UPDATE),
	ins AS (INSERT INTO snapshots (session, seq, data) SELECT $1, $2, $3 FROM l WHERE l.epoch = $4
		ON CONFLICT (session) DO UPDATE SET seq = excluded.seq, data = excluded.data WHERE excluded.seq >= snapshots.seq)
	SELECT (SELECT epoch FROM l)`

// SnapshotSave implements store.Store: one statement, fenced like an
// append (see saveSnapshot).
func (s *Store) SnapshotSave(ctx context.Context, p *store.SnapshotSaveParams) error {
	data := p.Data
	if data == nil {
		data = []byte{}
	}
	return s.write1(ctx, "save snapshot of "+p.Session, func() error {
		var current *int64
		if err := s.pool.QueryRow(ctx, saveSnapshot, p.Session, p.Seq, data, p.Epoch).Scan(&current); err != nil {
			return err
		}
		if current == nil {
			return fmt.Errorf("no lease on the session: %w", store.ErrFenced)
		}
		if *current != p.Epoch {
			return fmt.Errorf("epoch %d, lease epoch %d: %w", p.Epoch, *current, store.ErrFenced)
		}
		return nil
	})
}

// collect runs q and calls scan for each row.
func (s *Store) collect(ctx context.Context, q string, args []any, scan func(pgx.Rows) error) error {
	rows, err := s.pool.Query(ctx, q, args...)
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

func limit(n int) *int64 {
	if n <= 0 {
		return nil // LIMIT NULL: no limit
	}
	l := int64(n)
	return &l
}

// Reading steps back. A step holds one or more records; a page reads the
// steps that hold a record after the cursor and keeps the records after
// it. A session's page starts at the step holding AfterSeq+1 (the one with
// the highest seq not above it), found in the primary key, so a reader at
// the end of a long log reads no step before it. With a limit, the steps
// read are the fewest that hold Limit records after the cursor: a window
// sums the records of the steps before each.
const (
	listSteps = `SELECT seq, global, data FROM steps
		WHERE session = $1 AND seq >= COALESCE((SELECT max(seq) FROM steps WHERE session = $1 AND seq <= $2 + 1), 0) AND last > $2
		ORDER BY seq`
	// $3 is the limit, in records.
	listStepsLimit = `SELECT seq, global, data FROM (
		SELECT seq, global, data, sum(last - greatest(seq, $2 + 1) + 1) OVER (ORDER BY seq) - (last - greatest(seq, $2 + 1) + 1) AS before
		FROM (SELECT seq, last, global, data FROM steps
			WHERE session = $1 AND seq >= COALESCE((SELECT max(seq) FROM steps WHERE session = $1 AND seq <= $2 + 1), 0) AND last > $2
			ORDER BY seq LIMIT $3) AS page
	) AS counted WHERE before < $3 ORDER BY seq`
	listAllSteps = `SELECT session, seq, global, data FROM steps WHERE glast > $1 ORDER BY glast`
	// $2 is the limit, in records.
	listAllStepsLimit = `SELECT session, seq, global, data FROM (
		SELECT session, seq, global, glast, data, sum(glast - greatest(global, $1 + 1) + 1) OVER (ORDER BY glast) - (glast - greatest(global, $1 + 1) + 1) AS before
		FROM (SELECT session, seq, global, glast, data FROM steps WHERE glast > $1 ORDER BY glast LIMIT $2) AS page
	) AS counted WHERE before < $2 ORDER BY glast`
)

// EventList implements store.Store.
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	var out []store.Record
	err := s.read(ctx, "list events of "+p.Session, func() error {
		out = nil
		q, args := listSteps, []any{p.Session, p.AfterSeq}
		if p.Limit > 0 {
			q, args = listStepsLimit, append(args, int64(p.Limit))
		}
		return s.collect(ctx, q, args, func(rows pgx.Rows) error {
			var seq, global int64
			var data []byte
			if err := rows.Scan(&seq, &global, &data); err != nil {
				return err
			}
			from := len(out)
			var err error
			if out, err = steps.Decode(out, p.Session, seq, global, data); err != nil {
				return err
			}
			if seq <= p.AfterSeq {
				// The first step read may begin at or before the cursor.
				out = append(out[:from], out[from+int(p.AfterSeq-seq)+1:]...)
			}
			return nil
		})
	})
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, err
}

// EventListAll implements store.Store.
func (s *Store) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	var out []store.Record
	err := s.read(ctx, "list events", func() error {
		var err error
		out, err = listAll(ctx, s.pool, p)
		return err
	})
	return out, err
}

// querier runs a query: a pool, or one connection (Reader).
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// listAll reads the records after p.AfterGlobal, in global order, at most
// p.Limit of them (0: all).
func listAll(ctx context.Context, db querier, p *store.EventListAllParams) ([]store.Record, error) {
	var out []store.Record
	q, args := listAllSteps, []any{p.AfterGlobal}
	if p.Limit > 0 {
		q, args = listAllStepsLimit, append(args, int64(p.Limit))
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var session string
		var seq, global int64
		var data []byte
		if err := rows.Scan(&session, &seq, &global, &data); err != nil {
			return nil, err
		}
		from := len(out)
		if out, err = steps.Decode(out, session, seq, global, data); err != nil {
			return nil, err
		}
		if global <= p.AfterGlobal {
			// The first step read may begin at or before the cursor.
			out = append(out[:from], out[from+int(p.AfterGlobal-global)+1:]...)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context, session string) (int64, error) {
	var n int64
	err := s.read(ctx, "last seq of "+session, func() error {
		n = 0
		err := s.pool.QueryRow(ctx, `SELECT last FROM steps WHERE session = $1 ORDER BY seq DESC LIMIT 1`, session).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return n, err
}

// SnapshotLoad implements store.Store.
func (s *Store) SnapshotLoad(ctx context.Context, session string) (*store.Snapshot, error) {
	snap := &store.Snapshot{Session: session}
	err := s.read(ctx, "load snapshot of "+session, func() error {
		err := s.pool.QueryRow(ctx, `SELECT seq, data FROM snapshots WHERE session = $1`, session).Scan(&snap.Seq, &snap.Data)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// tailSteps reads, for each session of $1 after the sequence at the same
// place in $2, its steps as listSteps does, at most $3 of them a session
// (NULL: all), in the order of $1; a step's data only while the steps'
// data before it come to less than $4 bytes (NULL: no bound).
const tailSteps = `SELECT n, seq, global, fits, CASE WHEN fits THEN data END FROM (
	SELECT n, seq, global, data, $4::bigint IS NULL OR sum(octet_length(data)) OVER (ORDER BY n, seq) - octet_length(data) < $4 AS fits
	FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS w(s, a, n)
	CROSS JOIN LATERAL (SELECT seq, global, data FROM steps
		WHERE session = w.s AND seq >= COALESCE((SELECT max(seq) FROM steps WHERE session = w.s AND seq <= w.a + 1), 0) AND last > w.a
		ORDER BY seq LIMIT $3) AS st
	) AS counted ORDER BY n, seq`

// TailLoadMany implements store.Store in three statements, whatever the
// number of sessions: the sizes of their snapshots, the snapshots that
// fit, their steps after them.
func (s *Store) TailLoadMany(ctx context.Context, p *store.TailLoadManyParams) ([]store.Tail, error) {
	all := p.Distinct()
	var out []store.Tail
	err := s.read(ctx, "load tails", func() error {
		ids := all
		at := make(map[string]int, len(ids))
		for i, id := range ids {
			at[id] = i
		}
		size := make([]int64, len(ids))
		err := s.collect(ctx, `SELECT session, octet_length(data) FROM snapshots WHERE session = ANY($1)`, []any{ids}, func(rows pgx.Rows) error {
			var id string
			var n int64
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			size[at[id]] = n
			return nil
		})
		if err != nil {
			return fmt.Errorf("snapshot sizes: %w", err)
		}
		left := int64(p.MaxBytes) // bytes left to read, when p.MaxBytes > 0
		for i := range ids {
			if p.MaxBytes > 0 && i > 0 && size[i] > left {
				ids = ids[:i]
				break
			}
			left -= size[i]
		}
		out = make([]store.Tail, len(ids))
		for i, id := range ids {
			out[i] = store.Tail{Session: id, Complete: true}
		}
		err = s.collect(ctx, `SELECT session, seq, data FROM snapshots WHERE session = ANY($1)`, []any{ids}, func(rows pgx.Rows) error {
			snap := &store.Snapshot{}
			if err := rows.Scan(&snap.Session, &snap.Seq, &snap.Data); err != nil {
				return err
			}
			out[at[snap.Session]].Snapshot = snap
			return nil
		})
		if err != nil {
			return fmt.Errorf("snapshots: %w", err)
		}
		after := make([]int64, len(ids))
		for i, t := range out {
			if t.Snapshot != nil {
				after[i] = t.Snapshot.Seq
			}
		}
		var budget *int64
		if p.MaxBytes > 0 {
			budget = &left
		}
		read := make([]int, len(ids)) // steps read of each session
		cut := len(ids)               // the session the budget cut
		err = s.collect(ctx, tailSteps, []any{ids, after, limit(p.Limit), budget}, func(rows pgx.Rows) error {
			var n, seq, global int64
			var fits bool
			var data []byte
			if err := rows.Scan(&n, &seq, &global, &fits, &data); err != nil {
				return err
			}
			i := int(n - 1)
			if i > cut {
				return nil
			}
			t := &out[i]
			if !fits {
				t.Complete, cut = false, i
				return nil
			}
			from := len(t.Records)
			var err error
			if t.Records, err = steps.Decode(t.Records, t.Session, seq, global, data); err != nil {
				return err
			}
			if seq <= after[i] {
				// The first step read may begin at or before the snapshot.
				t.Records = append(t.Records[:from], t.Records[from+int(after[i]-seq)+1:]...)
			}
			read[i]++
			return nil
		})
		if err != nil {
			return fmt.Errorf("steps: %w", err)
		}
		out = out[:min(cut+1, len(out))]
		for i := range out {
			t := &out[i]
			if p.Limit > 0 && (read[i] == p.Limit || len(t.Records) > p.Limit) {
				// Limit steps hold Limit records at least: there may be
				// more after them.
				t.Records, t.Complete = t.Records[:min(len(t.Records), p.Limit)], false
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

func scanSession(row pgx.Row) (store.SessionRow, error) {
	var r store.SessionRow
	var created, updated *int64
	var needs string
	err := row.Scan(&r.ID, &r.Title, &r.Owner, &r.Provider, &r.Model, &r.Cwd, &r.Closed, &created, &updated,
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
	err := s.read(ctx, "list sessions", func() error {
		out = nil
		return s.collect(ctx, `SELECT `+sessionCols+` FROM sessions
			WHERE ($1 = '' OR owner = $1) AND (NOT $2 OR NOT closed) ORDER BY created DESC NULLS LAST, id COLLATE "C" DESC`,
			[]any{p.Owner, p.Open}, func(rows pgx.Rows) error {
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
	err := s.read(ctx, "get session "+session, func() error {
		var err error
		r, err = scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, session))
		if errors.Is(err, pgx.ErrNoRows) {
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
	err := s.read(ctx, "list runs of "+session, func() error {
		out = nil
		return s.collect(ctx, `SELECT agent, seq, kind, status, started, ended, reply, error, input_tokens, output_tokens
			FROM runs WHERE session = $1 ORDER BY agent COLLATE "C", seq`, []any{session}, func(rows pgx.Rows) error {
			r := store.RunRow{Session: session}
			var started, ended *int64
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
	err := s.read(ctx, "list tasks of "+session, func() error {
		out = nil
		return s.collect(ctx, `SELECT id, kind, owner, agent, status, command, started, ended, exit_code
			FROM tasks WHERE session = $1 ORDER BY ord`, []any{session}, func(rows pgx.Rows) error {
			t := store.TaskRow{Session: session}
			var started, ended, exit *int64
			if err := rows.Scan(&t.ID, &t.Kind, &t.Owner, &t.Agent, &t.Status, &t.Command, &started, &ended, &exit); err != nil {
				return err
			}
			t.Started, t.Ended = fromNanos(started), fromNanos(ended)
			if exit != nil {
				code := int(*exit)
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
	err := s.read(ctx, "list notes of "+session, func() error {
		out = nil
		return s.collect(ctx, `SELECT task, run, owner, status, delivery, delivered_run, dropped, written
			FROM notes WHERE session = $1 ORDER BY ord`, []any{session}, func(rows pgx.Rows) error {
			n := store.NoteRow{Session: session}
			var written *int64
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
	err := s.read(ctx, "list agents of "+session, func() error {
		out = nil
		return s.collect(ctx, `SELECT id, name, owner, task, state, runs, inbox, input_tokens, output_tokens
			FROM agents WHERE session = $1 ORDER BY ord`, []any{session}, func(rows pgx.Rows) error {
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
	err := s.read(ctx, "list items of "+session, func() error {
		out = nil
		return s.collect(ctx, `SELECT id, agent, kind, priority, sender, enqueued
			FROM items WHERE session = $1 ORDER BY ord`, []any{session}, func(rows pgx.Rows) error {
			it := store.ItemRow{Session: session}
			var enqueued *int64
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
