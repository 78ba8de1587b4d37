package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vigilrun/vigil/store"
)

// outputChunk is the size of the chunks a task's output is saved in.
const outputChunk = 256 << 10

// NodeBeat implements store.Store: one upsert.
func (s *Store) NodeBeat(ctx context.Context, n *store.Node) error {
	var e enc
	started, beat := e.time(n.Started), e.time(n.Beat)
	if e.err != nil {
		return fmt.Errorf("beat of node %s: %w", n.ID, e.err)
	}
	return s.write1(ctx, "beat of node "+n.ID, func() error {
		_, err := s.pool.Exec(ctx, `INSERT INTO nodes (id, address, started, beat, draining, sessions) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, started = excluded.started, beat = excluded.beat,
				draining = excluded.draining, sessions = excluded.sessions`,
			n.ID, n.Address, started, beat, n.Draining, int64(n.Sessions))
		return err
	})
}

// NodeList implements store.Store.
func (s *Store) NodeList(ctx context.Context) ([]store.Node, error) {
	var out []store.Node
	err := s.read(ctx, "list nodes", func() error {
		out = nil
		return s.collect(ctx, `SELECT id, address, started, beat, draining, sessions FROM nodes ORDER BY id COLLATE "C"`, nil,
			func(rows pgx.Rows) error {
				var n store.Node
				var started, beat *int64
				var sessions int64
				if err := rows.Scan(&n.ID, &n.Address, &started, &beat, &n.Draining, &sessions); err != nil {
					return err
				}
				n.Started, n.Beat, n.Sessions = fromNanos(started), fromNanos(beat), int(sessions)
				out = append(out, n)
				return nil
			})
	})
	return out, err
}

// NodeLeave implements store.Store.
func (s *Store) NodeLeave(ctx context.Context, id string) error {
	return s.write1(ctx, "leave of node "+id, func() error {
		_, err := s.pool.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id)
		return err
	})
}

// LeaseList implements store.Store.
func (s *Store) LeaseList(ctx context.Context) ([]store.Lease, error) {
	var out []store.Lease
	err := s.read(ctx, "list leases", func() error {
		out = nil
		return s.collect(ctx, `SELECT session, owner, epoch, expires FROM leases ORDER BY session COLLATE "C"`, nil,
			func(rows pgx.Rows) error {
				var l store.Lease
				var expires int64
				if err := rows.Scan(&l.Session, &l.Owner, &l.Epoch, &expires); err != nil {
					return err
				}
				if expires == releasedMark {
					l.Released = true
				} else {
					l.Expires = fromNanos(&expires)
				}
				out = append(out, l)
				return nil
			})
	})
	return out, err
}

// saveOutput replaces a saved output: the chunks are upserted and the
// ones past the new last chunk deleted. It runs after lockOutput, in its
// transaction, so that it sees the chunks of a save that ran before it.
const saveOutput = `WITH del AS (DELETE FROM outputs WHERE session = $1 AND task = $2 AND off > $3),
	up AS (INSERT INTO outputs (session, task, off, data) SELECT $1, $2, c.off, c.data FROM unnest($4::bigint[], $5::bytea[]) AS c (off, data)
		ON CONFLICT (session, task, off) DO UPDATE SET data = excluded.data)
	SELECT 1`

// lockOutput serialises the saves of one output (a hash of its name, so
// that others' saves are held up only on a collision).
const lockOutput = `SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text, 0))`

// OutputSave implements store.Store: one transaction in one pipelined
// batch (begin, lockOutput, saveOutput, commit), which the server runs
// without waiting for the client.
func (s *Store) OutputSave(ctx context.Context, p *store.OutputSaveParams) error {
	n := max(1, (len(p.Data)+outputChunk-1)/outputChunk)
	offs, chunks := make([]int64, 0, n), make([][]byte, 0, n)
	for off := 0; off == 0 || off < len(p.Data); off += outputChunk {
		chunk := p.Data[off:min(off+outputChunk, len(p.Data))]
		if chunk == nil {
			chunk = []byte{} // an empty output is one empty chunk, not NULL
		}
		offs, chunks = append(offs, int64(off)), append(chunks, chunk)
	}
	return s.write1(ctx, "save output of "+p.Session+"/"+p.Task, func() error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(lockOutput, p.Session, p.Task)
		b.Queue(saveOutput, p.Session, p.Task, offs[len(offs)-1], offs, chunks)
		commit := b.Queue("COMMIT")
		var tag pgconn.CommandTag
		commit.Exec(func(ct pgconn.CommandTag) error {
			tag = ct
			return nil
		})
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if tag.String() != "COMMIT" {
			return fmt.Errorf("commit: server answered %q", tag.String())
		}
		return nil
	})
}

// readOutput reads an output's size and, from the same snapshot, the part
// of [$3, $4) ($4 NULL: to the end) in each chunk that overlaps it. No
// row: no output; one row with a NULL off: nothing in the range. (The
// server may compute a part before it applies the join's conditions,
// hence the length kept from going negative.)
const readOutput = `WITH size AS (SELECT off + octet_length(data) AS size FROM outputs WHERE session = $1 AND task = $2 ORDER BY off DESC LIMIT 1),
	r AS (SELECT size, least(COALESCE($4, size), size) AS e FROM size)
	SELECT r.size, c.off, c.part FROM r LEFT JOIN LATERAL (
		SELECT off, substring(data FROM (greatest($3, off) - off + 1)::int FOR greatest(least(r.e, off + octet_length(data)) - greatest($3, off), 0)::int) AS part
		FROM outputs WHERE session = $1 AND task = $2 AND $3 < r.e AND off < r.e
			AND off >= (SELECT max(off) FROM outputs WHERE session = $1 AND task = $2 AND off <= $3)
		) AS c ON true
	ORDER BY c.off`

// OutputRead implements store.Store: one statement (see readOutput).
func (s *Store) OutputRead(ctx context.Context, p *store.OutputReadParams) (*store.Output, error) {
	what := "read output of " + p.Session + "/" + p.Task
	if p.Offset < 0 || p.Limit < 0 {
		return nil, fmt.Errorf("%s: offset %d, limit %d: negative", what, p.Offset, p.Limit)
	}
	var end *int64
	if p.Limit > 0 && p.Limit <= (1<<62)-p.Offset {
		e := p.Offset + p.Limit
		end = &e
	}
	var out *store.Output
	err := s.read(ctx, what, func() error {
		out = &store.Output{Data: []byte{}}
		found := false
		err := s.collect(ctx, readOutput, []any{p.Session, p.Task, p.Offset, end}, func(rows pgx.Rows) error {
			var off *int64
			var part []byte
			if err := rows.Scan(&out.Size, &off, &part); err != nil {
				return err
			}
			found = true
			out.Data = append(out.Data, part...)
			return nil
		})
		if err == nil && !found {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	from := min(p.Offset, out.Size)
	want := out.Size - from
	if end != nil {
		want = min(want, *end-from)
	}
	if int64(len(out.Data)) != want {
		return nil, fmt.Errorf("%s: chunks hold %d bytes from %d, want %d", what, len(out.Data), from, want)
	}
	return out, nil
}

// write1 runs an idempotent write of one statement (its own transaction:
// it holds its locks only while the server runs it), again after a lost
// connection, a deadlock or a serialisation failure.
func (s *Store) write1(ctx context.Context, what string, fn func() error) error {
	if err := s.enter(what); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if retryable(err) && attempt < retries && ctx.Err() == nil {
			s.log.Warn("postgres: write failed; retrying", "op", what, "attempt", attempt, "err", err)
			if lost(err) {
				s.pool.Reset()
			}
			continue
		}
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
}

// Watch implements store.Watcher: the channel receives after commits of
// events by this Store (at once) and by any other process on the
// database (LISTEN vigil_events on one connection of the Store's own,
// shared by all its watchers, opened by the first Watch and kept until
// Close). While that connection is down it is opened again, with
// backoff, and every watcher then receives once, for the commits it may
// have missed. Watch returns once the first attempt to listen has
// succeeded or failed.
func (s *Store) Watch(ctx context.Context) (<-chan struct{}, error) {
	if err := s.enter("watch"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		s.mu.RUnlock()
		return nil, fmt.Errorf("watch: %w", err)
	}
	ch, ok := s.watch.Add(ctx)
	if !ok {
		s.mu.RUnlock()
		return nil, fmt.Errorf("watch: %w", store.ErrClosed)
	}
	s.listenOnce.Do(func() {
		s.listenReady = make(chan struct{})
		go s.listen(s.listenReady)
	})
	s.mu.RUnlock()
	select {
	case <-s.listenReady:
	case <-ctx.Done():
	}
	return ch, nil
}

// Backoff of the listener's reconnects.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// listen is the listener goroutine: it holds a connection that listens to
// vigil_events and wakes the watchers at each notification (but the ones
// of this Store's writer, which wakes them itself), until Close. ready is
// closed after the first attempt to listen.
func (s *Store) listen(ready chan struct{}) {
	defer close(s.listenDone)
	ctx := s.listenCtx
	readyOnce := func() {
		if ready != nil {
			close(ready)
			ready = nil
		}
	}
	defer readyOnce()
	backoff := listenBackoffMin
	for first := true; ; first = false {
		conn, err := pgx.ConnectConfig(ctx, s.listenCfg)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN vigil_events"); err == nil {
				readyOnce()
				if !first {
					s.log.Info("postgres: listening to vigil_events again")
					s.watch.Signal() // for the commits missed while down
				}
				backoff = listenBackoffMin
				err = s.wait(ctx, conn)
			}
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		readyOnce()
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("postgres: listening to vigil_events failed; trying again", "in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// wait wakes the watchers at each notification on conn until it fails.
func (s *Store) wait(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if n.PID != 0 && n.PID == s.writerPID.Load() {
			continue // the writer woke the watchers at its commit
		}
		s.watch.Signal()
	}
}
