package vigil

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// projectionLag bounds how far a busy session's projection rows (the
// store's sessions, agents, runs, tasks, items and notes tables) may lag
// its log. The log is the truth and is written with every step; the rows
// that summarise it are folded per key (store.Pending) and written with a
// step when it is due: the step creates or closes the session, leaves it
// quiescent, changes what a person must act on (core.Attention: an
// approval asked or answered, a run blocked; lists show it at once), or
// comes the session's lag (projLag) after the last rows were written; a
// timer writes what is pending when no step comes. A session's row says
// how far its projection goes (SessionRow.LastSeq); a successor, or the
// same actor after a failed commit, projects the events after it again.
const projectionLag = time.Second

// projLag is a session's own lag, from half of projectionLag up to it,
// spread by a hash of its ID. With one lag for all, sessions started
// together wrote their rows together once a second: measured with 100
// busy sessions, a store write of some 3,000 rows that held every wake
// behind it for 5-15 ms.
func projLag(id core.SessionID) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(id))
	return projectionLag/2 + time.Duration(h.Sum64()%uint64(projectionLag/2))
}

// projector is an actor's pending projection. Only the actor's goroutine
// uses it.
type projector struct {
	// lag is the session's projLag.
	lag     time.Duration
	pending store.Pending
	last    time.Time // when rows were last written
	timer   Timer
	// stale is set when the pending rows cannot be trusted (a commit
	// failed): the next commit projects again from the stored row's
	// LastSeq.
	stale bool
	// updated and needs are the session row's Updated and NeedsYou as last
	// written (or read from the store): a step of no activity keeps that
	// Updated, and a change of needs is due at once.
	updated time.Time
	needs   []string
	// seed is what a takeover read already, for its first reproject.
	seed *projSeed
}

// projSeed is what a takeover read that the first reproject needs: the
// session's row as listed (nil: read it) and the log after the snapshot.
type projSeed struct {
	row  *store.SessionRow
	tail *logTail
}

// take returns the pending rows to write now, the session row's Updated
// filled in when no event of theirs was the session's activity.
func (p *projector) take(now time.Time) *store.Projection {
	rows := p.pending.Take()
	if r := rows.Session; r != nil {
		if r.Updated.IsZero() {
			r.Updated = p.updated
		}
		if r.Updated.IsZero() {
			r.Updated = now // the session's row was never read: as before
		}
		p.updated, p.needs = r.Updated, r.NeedsYou
	}
	return rows
}

// projection returns the rows to write with a commit of events, folding
// them into the pending ones; nil when they can wait. A new actor's first
// commit, and the first after a failed one, projects again the events the
// stored rows do not cover, and writes them.
func (a *actor) projection(ctx context.Context, events []core.Event) *store.Projection {
	p := &a.proj
	due := false
	if p.stale {
		if err := a.reproject(ctx); err != nil {
			a.rt.log.Warn("could not read what the session's summary rows miss; they are written later", "session", a.id, "err", err)
		} else {
			due = true
		}
	}
	p.pending.Add(store.Project(a.state, events))
	now := a.rt.clock.Now()
	due = due || a.state.Quiescent() || now.Sub(p.last) >= p.lag || !slices.Equal(core.Attention(a.state), p.needs)
	for _, e := range events {
		switch e.Body.(type) {
		case *core.SessionCreated, *core.SessionClosed:
			due = true // the listing and adoption read the session's row
		}
	}
	if !due || p.pending.Empty() {
		return nil
	}
	p.last = now
	return p.take(now)
}

// projected runs after a commit: a timer writes rows still pending once
// they are due. A failed commit makes the pending rows stale.
func (a *actor) projected(err error) {
	p := &a.proj
	if err != nil {
		p.pending = store.Pending{}
		p.stale = true
		return
	}
	if p.pending.Empty() || p.timer != nil {
		return
	}
	wait := max(p.lag-a.rt.clock.Now().Sub(p.last), 0)
	p.timer = a.rt.clock.AfterFunc(wait, func() {
		a.submitControl(func() {
			a.proj.timer = nil
			a.flushProjection()
		})
	})
}

// flushProjection writes the pending rows alone, with no event.
func (a *actor) flushProjection() {
	if a.proj.pending.Empty() || a.moved || a.poisoned != nil {
		return
	}
	a.proj.last = a.rt.clock.Now()
	p := a.proj.take(a.proj.last)
	rehold := a.unhold()
	_, err := a.rt.st.EventAppend(a.ctx, &store.EventAppendParams{Session: string(a.id), Epoch: a.lease.Epoch, Projection: p})
	rehold()
	if err != nil {
		// The rows are written with a later step, or projected again from
		// the log by whoever recovers the session.
		a.rt.log.Warn("writing a session's summary rows failed; they are written later", "session", a.id, "err", err)
		a.proj.pending.Add(p)
	}
}

// reproject folds the rows of the events the store's projection does not
// cover yet (those after the session row's LastSeq) into the pending
// ones, in place of what was pending.
func (a *actor) reproject(ctx context.Context) error {
	defer a.unhold()() // store reads: no slot held
	a.proj.pending = store.Pending{}
	seed := a.proj.seed
	a.proj.seed = nil // what it read holds until the first commit only
	if seed == nil {
		seed = &projSeed{}
	}
	from := int64(0)
	row, err := seed.row, error(nil)
	if row == nil {
		row, err = a.rt.st.SessionGet(ctx, string(a.id))
	}
	switch {
	case err == nil:
		from = row.LastSeq
		a.proj.updated, a.proj.needs = row.Updated, row.NeedsYou
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("read the session's row: %w", err)
	}
	if t := seed.tail; t != nil && t.Events != nil && from >= t.After {
		// The takeover read the log from t.After to its end, t.End: no
		// one has written it since (the lease is this actor's and it has
		// not committed yet).
		i, _ := slices.BinarySearchFunc(t.Events, from+1, func(e core.Event, seq int64) int { return cmp.Compare(e.Seq, seq) })
		if i < len(t.Events) {
			a.proj.pending.Add(store.Project(a.state, t.Events[i:]))
		}
		a.proj.stale = false
		return nil
	}
	for from < a.state.Seq {
		recs, err := a.rt.st.EventList(ctx, &store.EventListParams{Session: string(a.id), AfterSeq: from, Limit: 10_000})
		if err != nil {
			return fmt.Errorf("read events after %d: %w", from, err)
		}
		if len(recs) == 0 {
			break
		}
		events := make([]core.Event, 0, len(recs))
		for _, rec := range recs {
			e, err := decodeEvent(rec)
			if err != nil {
				return err
			}
			events = append(events, e)
		}
		a.proj.pending.Add(store.Project(a.state, events))
		from = recs[len(recs)-1].Seq
	}
	a.proj.stale = false
	return nil
}
