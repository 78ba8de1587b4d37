package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigilrun/vigil"
)

// startSweep starts the retention sweep once, until Close.
func (s *Server) startSweep() {
	if s.opts.Retention < 0 {
		return
	}
	s.sweepOnce.Do(func() {
		s.sweeps.Add(1)
		go func() {
			defer s.sweeps.Done()
			every := min(max(s.opts.Retention/4, time.Second), 10*time.Minute)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				if _, err := s.sweep(s.ctx); err != nil && s.ctx.Err() == nil {
					s.log.Warn("mcp: the retention sweep failed; it runs again later", "err", err)
				}
				select {
				case <-s.ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	})
}

// sweep closes the callers' sessions that have ended and been
// acknowledged for longer than the retention period, and returns them.
func (s *Server) sweep(ctx context.Context) ([]vigil.SessionID, error) {
	rows, err := s.rt.SessionList(ctx, &vigil.SessionListParams{Open: true})
	if err != nil {
		return nil, fmt.Errorf("list open sessions: %w", err)
	}
	now := s.opts.Now()
	var closed []vigil.SessionID
	var errs []error
	for _, row := range rows {
		if row.Owner == "" || ctx.Err() != nil {
			continue
		}
		v, err := s.owned(ctx, row.Owner, row.ID, string(row.ID), needLists|needRuns)
		if errors.Is(err, errNoTask) {
			continue // not a caller's session
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		since, ended := v.endedSince()
		if !ended || now.Sub(since) < s.opts.Retention {
			continue
		}
		if err := s.rt.CloseSession(ctx, row.ID, "retention"); err != nil && vigil.CodeOf(err) != vigil.CodeClosed {
			errs = append(errs, fmt.Errorf("close session %s: %w", row.ID, err))
			continue
		}
		s.log.Info("mcp: closed a session whose tasks ended and were acknowledged", "session", row.ID, "owner_key", row.Owner, "idle", now.Sub(since).Round(time.Second))
		closed = append(closed, row.ID)
	}
	return closed, errors.Join(errs...)
}

// endedSince reports whether every task of the caller's session has ended
// with nothing left to acknowledge or answer, and since when nothing has
// happened in it. It needs a view with needLists and needRuns.
func (v *view) endedSince() (time.Time, bool) {
	if v.Session.Closed || len(v.Approvals) > 0 {
		return time.Time{}, false
	}
	main := v.agents[vigil.MainAgent]
	if main == nil || len(main.Inbox) > 0 {
		return time.Time{}, false
	}
	last := v.Session.Created
	for i := range v.Agents {
		a := &v.Agents[i]
		if a.ID != vigil.MainAgent && v.busy(a) {
			return time.Time{}, false
		}
		if a.LastActive.After(last) {
			last = a.LastActive
		}
	}
	for i := range v.Tasks {
		t := &v.Tasks[i]
		if t.Live() {
			return time.Time{}, false
		}
		if t.Ended.After(last) {
			last = t.Ended
		}
	}
	return last, true
}
