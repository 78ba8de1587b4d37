package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/vigilrun/vigil/store"
)

// outputChunk is the size of the chunks a task's output is saved in.
const outputChunk = 256 << 10

// NodeBeat implements store.Store.
func (s *Store) NodeBeat(ctx context.Context, n *store.Node) error {
	var e enc
	started, beat := e.time(n.Started), e.time(n.Beat)
	if e.err != nil {
		return fmt.Errorf("beat of node %s: %w", n.ID, e.err)
	}
	return s.write(ctx, "beat of node "+n.ID, func(w *writer) error {
		_, err := w.exec(`INSERT INTO nodes (id, address, started, beat, draining, sessions) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, started = excluded.started, beat = excluded.beat,
				draining = excluded.draining, sessions = excluded.sessions`,
			n.ID, n.Address, started, beat, n.Draining, n.Sessions)
		return err
	})
}

// NodeList implements store.Store.
func (s *Store) NodeList(ctx context.Context) ([]store.Node, error) {
	var out []store.Node
	err := s.read(ctx, "list nodes", func(db *reads) error {
		return query(ctx, db, `SELECT id, address, started, beat, draining, sessions FROM nodes ORDER BY id`, nil, func(rows *sql.Rows) error {
			var n store.Node
			var started, beat sql.NullInt64
			if err := rows.Scan(&n.ID, &n.Address, &started, &beat, &n.Draining, &n.Sessions); err != nil {
				return err
			}
			n.Started, n.Beat = fromNanos(started), fromNanos(beat)
			out = append(out, n)
			return nil
		})
	})
	return out, err
}

// NodeLeave implements store.Store.
func (s *Store) NodeLeave(ctx context.Context, id string) error {
	return s.write(ctx, "leave of node "+id, func(w *writer) error {
		_, err := w.exec(`DELETE FROM nodes WHERE id = ?`, id)
		return err
	})
}

// LeaseList implements store.Store.
func (s *Store) LeaseList(ctx context.Context) ([]store.Lease, error) {
	var out []store.Lease
	err := s.read(ctx, "list leases", func(db *reads) error {
		return query(ctx, db, `SELECT session, owner, epoch, expires FROM leases ORDER BY session`, nil, func(rows *sql.Rows) error {
			var l store.Lease
			var expires sql.NullInt64
			if err := rows.Scan(&l.Session, &l.Owner, &l.Epoch, &expires); err != nil {
				return err
			}
			if expires.Valid && expires.Int64 == releasedMark {
				l.Released = true
			} else {
				l.Expires = fromNanos(expires)
			}
			out = append(out, l)
			return nil
		})
	})
	return out, err
}

// OutputSave implements store.Store: the output's chunks replace the
// saved ones in one transaction.
func (s *Store) OutputSave(ctx context.Context, p *store.OutputSaveParams) error {
	return s.write(ctx, "save output of "+p.Session+"/"+p.Task, func(w *writer) error {
		if _, err := w.exec(`DELETE FROM outputs WHERE session = ? AND task = ?`, p.Session, p.Task); err != nil {
			return err
		}
		for off := 0; off == 0 || off < len(p.Data); off += outputChunk {
			chunk := p.Data[off:min(off+outputChunk, len(p.Data))]
			if chunk == nil {
				chunk = []byte{} // an empty output is one empty chunk, not NULL
			}
			if _, err := w.exec(`INSERT INTO outputs (session, task, off, data) VALUES (?, ?, ?, ?)`, p.Session, p.Task, off, chunk); err != nil {
				return err
			}
		}
		return nil
	})
}

// OutputRead implements store.Store: it reads the size and the chunks the
// range overlaps in one read transaction.
func (s *Store) OutputRead(ctx context.Context, p *store.OutputReadParams) (*store.Output, error) {
	what := "read output of " + p.Session + "/" + p.Task
	if p.Offset < 0 || p.Limit < 0 {
		return nil, fmt.Errorf("%s: offset %d, limit %d: negative", what, p.Offset, p.Limit)
	}
	out := &store.Output{}
	err := s.read(ctx, what, func(db *reads) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		err = tx.QueryRowContext(ctx, `SELECT off + length(data) FROM outputs WHERE session = ? AND task = ? ORDER BY off DESC LIMIT 1`,
			p.Session, p.Task).Scan(&out.Size)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		from, to := outputRange(p, out.Size)
		out.Data = make([]byte, 0, to-from)
		if from == to {
			return nil
		}
		rows, err := tx.QueryContext(ctx, `SELECT off, data FROM outputs WHERE session = ?1 AND task = ?2
			AND off >= (SELECT max(off) FROM outputs WHERE session = ?1 AND task = ?2 AND off <= ?3) AND off < ?4 ORDER BY off`,
			p.Session, p.Task, from, to)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var off int64
			var data []byte
			if err := rows.Scan(&off, &data); err != nil {
				return err
			}
			lo, hi := max(from-off, 0), min(to-off, int64(len(data)))
			if lo < hi {
				out.Data = append(out.Data, data[lo:hi]...)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if int64(len(out.Data)) != to-from {
			return fmt.Errorf("chunks hold %d bytes of [%d, %d)", len(out.Data), from, to)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// outputRange is the range [from, to) of an output of size bytes that p
// reads.
func outputRange(p *store.OutputReadParams, size int64) (int64, int64) {
	from := min(p.Offset, size)
	to := size
	if p.Limit > 0 && p.Limit < size-from {
		to = from + p.Limit
	}
	return from, to
}

// Watch implements store.Watcher: the channel receives after this Store's
// commits of events (not another Store's or process's on the same file).
func (s *Store) Watch(ctx context.Context) (<-chan struct{}, error) {
	if err := s.enter("watch"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	ch, ok := s.watch.Add(ctx)
	if !ok {
		return nil, fmt.Errorf("watch: %w", store.ErrClosed)
	}
	return ch, nil
}
