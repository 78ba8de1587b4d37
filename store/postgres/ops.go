package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vigilrun/vigil/store"
)

// enc converts times for storage, as unix nanoseconds (NULL for the zero
// time), remembering the first time out of that range.
type enc struct{ err error }

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
	err := s.tx(ctx, "acquire lease of "+p.Session, func(tx pgx.Tx) error {
		l = nil
		var epoch int64
		err := tx.QueryRow(ctx, `INSERT INTO leases (session, owner, epoch, expires) VALUES ($1, $2, 1, $3)
			ON CONFLICT (session) DO UPDATE SET owner = excluded.owner, epoch = leases.epoch + 1, expires = excluded.expires
			WHERE leases.owner = excluded.owner OR leases.expires <= $4 OR ($5 <> '' AND leases.owner = $5)
			RETURNING epoch`, p.Session, p.Owner, expires, now, p.Steal).Scan(&epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			var owner string
			var exp *int64
			if err := tx.QueryRow(ctx, `SELECT owner, expires FROM leases WHERE session = $1`, p.Session).Scan(&owner, &exp); err != nil {
				return err
			}
			return &store.LeaseHeldError{Session: p.Session, Owner: owner, Expires: fromNanos(exp)}
		}
		if err != nil {
			return err
		}
		l = &store.Lease{Session: p.Session, Owner: p.Owner, Epoch: epoch, Expires: p.Now.Add(p.TTL)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
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
	err := s.tx(ctx, fmt.Sprintf("renew %d leases of %s", len(p.Leases), p.Owner), func(tx pgx.Tx) error {
		res = &store.LeaseRenewResult{Expires: p.Now.Add(p.TTL)}
		rows, err := tx.Query(ctx, `UPDATE leases SET expires = $1
			FROM unnest($3::text[], $4::bigint[]) AS r (session, epoch)
			WHERE leases.session = r.session AND leases.epoch = r.epoch AND leases.owner = $2
			RETURNING leases.session`, expires, p.Owner, sessions, epochs)
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

// LeaseRelease implements store.Store.
func (s *Store) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	return s.tx(ctx, "release lease of "+p.Session, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE leases SET owner = '', expires = $1 WHERE session = $2 AND owner = $3 AND epoch = $4`,
			int64(math.MinInt64), p.Session, p.Owner, p.Epoch)
		return err
	})
}

// fence locks the session's lease row until the end of tx and fails with
// ErrFenced unless epoch is its epoch (0 for a session that never had a
// lease).
func fence(ctx context.Context, tx pgx.Tx, session string, epoch int64) error {
	var current int64
	err := tx.QueryRow(ctx, `SELECT epoch FROM leases WHERE session = $1 FOR UPDATE`, session).Scan(&current)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
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

// EventAppend implements store.Store.
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	var e enc
	n := len(p.Records)
	seqs, ats, types, datas := make([]int64, n), make([]*int64, n), make([]string, n), make([][]byte, n)
	for i, r := range p.Records {
		seqs[i], ats[i], types[i], datas[i] = r.Seq, e.time(r.At), r.Type, r.Data
		if datas[i] == nil {
			datas[i] = []byte{}
		}
	}
	if e.err != nil {
		return nil, fmt.Errorf("append %s: %w", p.Session, e.err)
	}
	var res *store.AppendResult
	err := s.tx(ctx, "append "+p.Session, func(tx pgx.Tx) error {
		res = &store.AppendResult{}
		if err := fence(ctx, tx, p.Session, p.Epoch); err != nil {
			return err
		}
		var last int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session = $1`, p.Session).Scan(&last); err != nil {
			return err
		}
		for i, r := range p.Records {
			if r.Seq != last+int64(i)+1 {
				return fmt.Errorf("seq %d after %d: %w", r.Seq, last+int64(i), store.ErrConflict)
			}
		}
		b := &pgx.Batch{}
		var notes []store.NoteRow
		if p.Projection != nil {
			notes = project(b, p.Session, p.Projection, &e)
			if e.err != nil {
				return e.err
			}
		}
		if n > 0 {
			// Last: the counter row stays locked until commit.
			b.Queue(`WITH c AS (UPDATE event_counter SET last = last + $2 RETURNING last)
				INSERT INTO events (global, session, seq, at, type, data)
				SELECT c.last - $2 + r.ord, $1, r.seq, r.at, r.type, r.data
				FROM c, unnest($3::bigint[], $4::bigint[], $5::text[], $6::bytea[]) WITH ORDINALITY AS r (seq, at, type, data, ord)
				RETURNING (SELECT last FROM c)`,
				p.Session, int64(n), seqs, ats, types, datas)
		}
		if b.Len() == 0 {
			return nil
		}
		br := tx.SendBatch(ctx, b)
		for i := range b.Len() {
			if n > 0 && i == b.Len()-1 {
				// The events insert: its Globals run from the counter's
				// last value back.
				var top int64
				if err := br.QueryRow().Scan(&top); err != nil {
					_ = br.Close()
					var pe *pgconn.PgError
					if errors.As(err, &pe) && pe.Code == "23505" {
						return fmt.Errorf("%s: %w", pe.Message, store.ErrConflict)
					}
					return err
				}
				for k := range n {
					res.Globals = append(res.Globals, top-int64(n)+int64(k)+1)
				}
				break
			}
			tag, err := br.Exec()
			if err != nil {
				_ = br.Close()
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "23505" {
					return fmt.Errorf("%s: %w", pe.Message, store.ErrConflict)
				}
				return err
			}
			if i < len(notes) && notes[i].New && tag.RowsAffected() == 0 {
				res.DuplicateNotes = append(res.DuplicateNotes, notes[i].Key())
			}
		}
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	if len(res.DuplicateNotes) > 0 {
		s.log.Warn("postgres: notification written twice; the second write was a no-op",
			"session", p.Session, "notes", res.DuplicateNotes, "reason", "duplicate-notification")
	}
	return res, nil
}

// project queues a step's upserts, notes first; it returns the notes in
// queue order.
func project(b *pgx.Batch, session string, pr *store.Projection, e *enc) []store.NoteRow {
	for _, n := range pr.Notes {
		if n.New {
			b.Queue(`INSERT INTO notes (session, task, run, owner, status, delivery, delivered_run, dropped, written)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (session, task, run) DO NOTHING`,
				session, n.Task, n.Run, n.Owner, n.Status, n.Delivery, n.DeliveredRun, n.Dropped, e.time(n.Written))
			continue
		}
		b.Queue(`UPDATE notes SET owner = $1, status = $2, delivery = $3, delivered_run = $4, dropped = $5, written = $6
			WHERE session = $7 AND task = $8 AND run = $9`,
			n.Owner, n.Status, n.Delivery, n.DeliveredRun, n.Dropped, e.time(n.Written), session, n.Task, n.Run)
	}
	if r := pr.Session; r != nil {
		b.Queue(`INSERT INTO sessions (id, title, owner, provider, model, cwd, closed, created, updated, last_seq, input_tokens, output_tokens)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (id) DO UPDATE SET title = excluded.title, owner = excluded.owner, provider = excluded.provider,
				model = excluded.model, cwd = excluded.cwd, closed = excluded.closed, created = excluded.created,
				updated = excluded.updated, last_seq = excluded.last_seq, input_tokens = excluded.input_tokens,
				output_tokens = excluded.output_tokens`,
			session, r.Title, r.Owner, r.Provider, r.Model, r.Cwd, r.Closed, e.time(r.Created), e.time(r.Updated),
			r.LastSeq, r.InputTokens, r.OutputTokens)
	}
	for _, a := range pr.Agents {
		b.Queue(`INSERT INTO agents (session, id, name, owner, task, state, runs, inbox, input_tokens, output_tokens)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (session, id) DO UPDATE SET name = excluded.name, owner = excluded.owner, task = excluded.task,
				state = excluded.state, runs = excluded.runs, inbox = excluded.inbox,
				input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens`,
			session, a.ID, a.Name, a.Owner, a.Task, a.State, a.Runs, a.Inbox, a.InputTokens, a.OutputTokens)
	}
	for _, r := range pr.Runs {
		b.Queue(`INSERT INTO runs (session, agent, seq, kind, status, started, ended, reply, error, input_tokens, output_tokens)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (session, agent, seq) DO UPDATE SET kind = excluded.kind, status = excluded.status,
				started = excluded.started, ended = excluded.ended, reply = excluded.reply, error = excluded.error,
				input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens`,
			session, r.Agent, r.Seq, r.Kind, r.Status, e.time(r.Started), e.time(r.Ended), r.Reply, r.Error,
			r.InputTokens, r.OutputTokens)
	}
	for _, t := range pr.Tasks {
		var exit *int64
		if t.Exit != nil {
			code := int64(*t.Exit)
			exit = &code
		}
		b.Queue(`INSERT INTO tasks (session, id, kind, owner, agent, status, command, started, ended, exit_code)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (session, id) DO UPDATE SET kind = excluded.kind, owner = excluded.owner, agent = excluded.agent,
				status = excluded.status, command = excluded.command, started = excluded.started,
				ended = excluded.ended, exit_code = excluded.exit_code`,
			session, t.ID, t.Kind, t.Owner, t.Agent, t.Status, t.Command, e.time(t.Started), e.time(t.Ended), exit)
	}
	for _, it := range pr.Items {
		if it.StatusOnly {
			b.Queue(`UPDATE items SET status = $1, run = $2 WHERE session = $3 AND id = $4`, it.Status, it.Run, session, it.ID)
			continue
		}
		b.Queue(`INSERT INTO items (session, id, agent, kind, priority, sender, status, run, enqueued)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (session, id) DO UPDATE SET agent = excluded.agent, kind = excluded.kind,
				priority = excluded.priority, sender = excluded.sender, status = excluded.status,
				run = excluded.run, enqueued = excluded.enqueued`,
			session, it.ID, it.Agent, it.Kind, it.Priority, it.From, it.Status, it.Run, e.time(it.Enqueued))
	}
	return pr.Notes
}

// SnapshotSave implements store.Store.
func (s *Store) SnapshotSave(ctx context.Context, p *store.SnapshotSaveParams) error {
	data := p.Data
	if data == nil {
		data = []byte{}
	}
	return s.tx(ctx, "save snapshot of "+p.Session, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, p.Session, p.Epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO snapshots (session, seq, data) VALUES ($1, $2, $3)
			ON CONFLICT (session) DO UPDATE SET seq = excluded.seq, data = excluded.data WHERE excluded.seq >= snapshots.seq`,
			p.Session, p.Seq, data)
		return err
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

// EventList implements store.Store.
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) ([]store.Record, error) {
	var out []store.Record
	err := s.read(ctx, "list events of "+p.Session, func() error {
		out = nil
		return s.collect(ctx, `SELECT seq, global, at, type, data FROM events WHERE session = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
			[]any{p.Session, p.AfterSeq, limit(p.Limit)}, func(rows pgx.Rows) error {
				r := store.Record{Session: p.Session}
				var at *int64
				if err := rows.Scan(&r.Seq, &r.Global, &at, &r.Type, &r.Data); err != nil {
					return err
				}
				r.At = fromNanos(at)
				out = append(out, r)
				return nil
			})
	})
	return out, err
}

// EventListAll implements store.Store.
func (s *Store) EventListAll(ctx context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	var out []store.Record
	err := s.read(ctx, "list events", func() error {
		out = nil
		return s.collect(ctx, `SELECT session, seq, global, at, type, data FROM events WHERE global > $1 ORDER BY global LIMIT $2`,
			[]any{p.AfterGlobal, limit(p.Limit)}, func(rows pgx.Rows) error {
				var r store.Record
				var at *int64
				if err := rows.Scan(&r.Session, &r.Seq, &r.Global, &at, &r.Type, &r.Data); err != nil {
					return err
				}
				r.At = fromNanos(at)
				out = append(out, r)
				return nil
			})
	})
	return out, err
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context, session string) (int64, error) {
	var n int64
	err := s.read(ctx, "last seq of "+session, func() error {
		return s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session = $1`, session).Scan(&n)
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

const sessionCols = `id, title, owner, provider, model, cwd, closed, created, updated, last_seq, input_tokens, output_tokens`

func scanSession(row pgx.Row) (store.SessionRow, error) {
	var r store.SessionRow
	var created, updated *int64
	err := row.Scan(&r.ID, &r.Title, &r.Owner, &r.Provider, &r.Model, &r.Cwd, &r.Closed, &created, &updated,
		&r.LastSeq, &r.InputTokens, &r.OutputTokens)
	r.Created, r.Updated = fromNanos(created), fromNanos(updated)
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

// ItemList returns a session's inbox item rows in enqueue order. It is not
// part of store.Store; storetest checks it through storetest.ItemLister.
func (s *Store) ItemList(ctx context.Context, session string) ([]store.ItemRow, error) {
	var out []store.ItemRow
	err := s.read(ctx, "list items of "+session, func() error {
		out = nil
		return s.collect(ctx, `SELECT id, agent, kind, priority, sender, status, run, enqueued
			FROM items WHERE session = $1 ORDER BY ord`, []any{session}, func(rows pgx.Rows) error {
			it := store.ItemRow{Session: session}
			var enqueued *int64
			if err := rows.Scan(&it.ID, &it.Agent, &it.Kind, &it.Priority, &it.From, &it.Status, &it.Run, &enqueued); err != nil {
				return err
			}
			it.Enqueued = fromNanos(enqueued)
			out = append(out, it)
			return nil
		})
	})
	return out, err
}
