package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
)

// WaitInput is wait's input.
type WaitInput struct {
	Caller
	Tasks          []string `json:"tasks,omitempty" jsonschema:"wait for these tasks only (one, or any of a list); default: any of your tasks"`
	TimeoutSeconds *int     `json:"timeout_seconds,omitempty" jsonschema:"how long to block when nothing is there yet (default 120); 0 returns at once"`
	Ack            []string `json:"ack,omitempty" jsonschema:"ids of notifications a previous wait returned, to acknowledge first: they are never returned again"`
}

// WaitOutput is wait's result.
type WaitOutput struct {
	Notifications []Notification `json:"notifications" jsonschema:"every notification in scope you have not acknowledged, oldest first"`
	Running       []TaskInfo     `json:"running" jsonschema:"the tasks in scope that are still working: more notifications will come from them"`
	Acknowledged  []string       `json:"acknowledged,omitempty" jsonschema:"the ids of ack, now acknowledged"`
	TimedOut      bool           `json:"timed_out" jsonschema:"the timeout passed with nothing new"`
	Detail        string         `json:"detail"`
}

// scope is what a wait looks at: every open session of the caller, or the
// sessions of the given tasks with those tasks only.
type scope struct {
	all   bool
	tasks map[string]map[core.TaskID]bool // session -> tasks (nil when all)
}

// snap is what a wait saw in one session.
type snap struct {
	seq     int64
	items   []Notification
	at      []time.Time // when each item was queued
	running []TaskInfo
}

func (s *Server) wait(ctx context.Context, owner string, in WaitInput) (WaitOutput, error) {
	timeout := s.opts.DefaultWait
	if in.TimeoutSeconds != nil {
		timeout = min(time.Duration(*in.TimeoutSeconds)*time.Second, s.opts.MaxWait)
	}
	sc := scope{all: len(in.Tasks) == 0, tasks: map[string]map[core.TaskID]bool{}}
	for _, id := range in.Tasks {
		ref, err := parseTask(id)
		if err != nil {
			return WaitOutput{}, err
		}
		if err := s.owned(ctx, owner, ref.session, id, func(st *core.State) error {
			if st.Tasks[ref.task] == nil {
				return notFoundTask(id)
			}
			return nil
		}); err != nil {
			return WaitOutput{}, err
		}
		if sc.tasks[ref.session] == nil {
			sc.tasks[ref.session] = map[core.TaskID]bool{}
		}
		sc.tasks[ref.session][ref.task] = true
	}
	acked, err := s.ack(ctx, owner, in.Ack)
	if err != nil {
		return WaitOutput{}, err
	}

	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w := newWatcher(s.rt, tctx)
	defer w.close()
	snaps := map[string]*snap{}
	var order []string // sessions in scope, in the order listed
	refresh := func(sessions []string) error {
		for _, sid := range sessions {
			sn, err := s.look(ctx, owner, sid, sc.tasks[sid])
			if errors.Is(err, errNoTask) {
				delete(snaps, sid) // closed under us, or gone
				continue
			}
			if err != nil {
				return err
			}
			snaps[sid] = sn
		}
		return nil
	}
	rescope := func() error {
		if !sc.all {
			order = order[:0]
			for sid := range sc.tasks {
				order = append(order, sid)
			}
			slices.Sort(order)
			return refresh(order)
		}
		rows, err := s.sessions(ctx, owner, false)
		if err != nil {
			return err
		}
		order = order[:0]
		var fresh []string
		for _, r := range rows {
			order = append(order, r.ID)
			if _, ok := snaps[r.ID]; !ok {
				fresh = append(fresh, r.ID)
			}
		}
		return refresh(fresh)
	}
	spawned := s.spawnSignal(owner) // before listing: a spawn after it is seen
	if err := rescope(); err != nil {
		return WaitOutput{}, err
	}
	timedOut := false
	for {
		out := gather(order, snaps)
		if len(out.Notifications) > 0 || len(out.Running) == 0 || timedOut {
			out.Acknowledged, out.TimedOut = acked, timedOut && len(out.Notifications) == 0
			return s.finish(owner, out), nil
		}
		// Block: watch every session in scope from the position read, so
		// that nothing committed since is missed.
		for _, sid := range order {
			if sn := snaps[sid]; sn != nil {
				if err := w.watch(sid, sn.seq); err != nil { // a no-op while subscribed
					return WaitOutput{}, err
				}
			}
		}
		if s.onBlock != nil {
			s.onBlock(owner)
		}
		select {
		case <-w.wake:
			if err := refresh(w.takeDirty()); err != nil {
				return WaitOutput{}, err
			}
		case <-spawned:
			spawned = s.spawnSignal(owner)
			if err := rescope(); err != nil {
				return WaitOutput{}, err
			}
		case <-tctx.Done():
			if err := ctx.Err(); err != nil {
				return WaitOutput{}, fmt.Errorf("wait interrupted (nothing was lost: what you did not acknowledge comes back): %w", err)
			}
			timedOut = true
			if err := refresh(order); err != nil {
				return WaitOutput{}, err
			}
		}
	}
}

// gather joins the sessions' snapshots in order.
func gather(order []string, snaps map[string]*snap) WaitOutput {
	out := WaitOutput{Notifications: []Notification{}, Running: []TaskInfo{}}
	type timed struct {
		n  Notification
		at time.Time
	}
	var all []timed
	for _, sid := range order {
		if sn := snaps[sid]; sn != nil {
			for i, n := range sn.items {
				all = append(all, timed{n, sn.at[i]})
			}
			out.Running = append(out.Running, sn.running...)
		}
	}
	slices.SortStableFunc(all, func(a, b timed) int { return a.at.Compare(b.at) })
	for _, t := range all {
		out.Notifications = append(out.Notifications, t.n)
	}
	return out
}

// finish marks repeats and says what the result means.
func (s *Server) finish(owner string, out WaitOutput) WaitOutput {
	ids := make([]string, len(out.Notifications))
	for i, n := range out.Notifications {
		ids[i] = n.ID
	}
	repeat := s.markShown(owner, ids)
	repeats := 0
	for i := range out.Notifications {
		if repeat[out.Notifications[i].ID] {
			out.Notifications[i].Repeat = true
			repeats++
		}
	}
	var b strings.Builder
	switch n := len(out.Notifications); {
	case n > 0:
		fmt.Fprintf(&b, "%d notification(s). Pass their ids in the ack of your next wait (or call ack).", n)
		if repeats > 0 {
			fmt.Fprintf(&b, " %d of them were returned before and not acknowledged.", repeats)
		}
	case out.TimedOut:
		b.WriteString("Nothing arrived before the timeout.")
	default:
		b.WriteString("Nothing is waiting for you.")
	}
	if len(out.Running) > 0 {
		fmt.Fprintf(&b, " %d task(s) still running: wait again for them.", len(out.Running))
	} else {
		b.WriteString(" Nothing in scope is running.")
	}
	out.Detail = b.String()
	return out
}

// look reads one session: the caller's items in scope and the tasks in
// scope still working.
func (s *Server) look(ctx context.Context, owner, session string, tasks map[core.TaskID]bool) (*snap, error) {
	sn := &snap{}
	err := s.owned(ctx, owner, session, session, func(st *core.State) error {
		sn.seq = st.Seq
		for _, it := range callerItems(st, tasks) {
			sn.items = append(sn.items, itemView(st, it))
			sn.at = append(sn.at, it.Enqueued)
		}
		if st.Session.Closed {
			return nil
		}
		for _, t := range callerTasks(st) {
			if tasks != nil && !tasks[t.ID] {
				continue
			}
			working := false
			if t.Kind == core.TaskShell {
				working = t.Status.Live()
			} else {
				working = busy(st, st.Agents[t.Agent])
			}
			if working {
				sn.running = append(sn.running, taskView(st, t))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sn, nil
}

func (s *Server) ackTool(ctx context.Context, owner string, in AckInput) (AckOutput, error) {
	if len(in.IDs) == 0 {
		return AckOutput{}, errors.New("ids is empty: give the ids of notifications that wait returned")
	}
	acked, err := s.ack(ctx, owner, in.IDs)
	if err != nil {
		return AckOutput{}, err
	}
	return AckOutput{Acknowledged: acked, Detail: fmt.Sprintf("%d acknowledged: no wait returns them again", len(acked))}, nil
}

// ack acknowledges items of the caller's inboxes: notification keys
// ("<session>/t1#2") or item ids ("<session>/i7"). It checks every id before
// it acknowledges any; an id acknowledged before is accepted again.
func (s *Server) ack(ctx context.Context, owner string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	bySession := map[string][]string{}
	var order []string
	for _, id := range ids {
		sid, local, ok := strings.Cut(strings.TrimSpace(id), "/")
		if !ok || sid == "" || local == "" {
			return nil, fmt.Errorf("bad notification id %q in ack: give the id as wait returned it, e.g. k3v9x2m4pq/t1#2", id)
		}
		if _, ok := bySession[sid]; !ok {
			order = append(order, sid)
		}
		bySession[sid] = append(bySession[sid], local)
	}
	items := map[string][]string{}
	for _, sid := range order {
		err := s.owned(ctx, owner, sid, sid, func(st *core.State) error {
			main := st.Agents[core.MainAgent]
			for _, local := range bySession[sid] {
				item, err := resolveAck(st, main, local)
				if err != nil {
					return fmt.Errorf("ack %s/%s: %w", sid, local, err)
				}
				if item != "" {
					items[sid] = append(items[sid], item)
				}
			}
			return nil
		})
		if errors.Is(err, errNoTask) {
			return nil, fmt.Errorf("ack: no such notification in session %q (not yours, or it does not exist); nothing was acknowledged", sid)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, sid := range order {
		if len(items[sid]) == 0 {
			continue
		}
		if err := s.rt.Ack(ctx, sid, items[sid]); err != nil {
			return nil, fmt.Errorf("ack: %w", s.actionErr(sid, err))
		}
	}
	var acked []string
	for _, sid := range order {
		for _, local := range bySession[sid] {
			acked = append(acked, sid+"/"+local)
		}
	}
	s.forgetShown(owner, acked)
	return acked, nil
}

// resolveAck returns the caller's inbox item an ack id names, or "" when
// it was acknowledged before.
func resolveAck(st *core.State, main *core.Agent, local string) (string, error) {
	inInbox := func(id core.ItemID) bool {
		return main != nil && slices.ContainsFunc(main.Inbox, func(it *core.Item) bool { return it.ID == id })
	}
	if strings.Contains(local, "#") {
		var k core.NoteKey
		if err := k.UnmarshalText([]byte(local)); err != nil {
			return "", err
		}
		n := st.Note(k)
		switch {
		case n == nil || n.Owner != core.MainAgent:
			return "", errors.New("no such notification")
		case n.Item != "" && inInbox(n.Item):
			return string(n.Item), nil
		}
		return "", nil // delivered before
	}
	id := core.ItemID(local)
	if inInbox(id) {
		return local, nil
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(local, "i")); err == nil && strings.HasPrefix(local, "i") && n >= 1 && n <= st.Counters.Item {
		return "", nil // an item that existed: taken before
	}
	return "", errors.New("no such notification")
}

// watcher wakes a wait when a watched session commits events. It
// subscribes to each session from the position the wait last read, so no
// event between the read and the subscription is missed.
type watcher struct {
	rt   *vigil.Runtime
	ctx  context.Context
	wake chan struct{}

	mu    sync.Mutex
	dirty map[string]bool
	subs  map[string]*vigil.Subscription
	wg    sync.WaitGroup
}

func newWatcher(rt *vigil.Runtime, ctx context.Context) *watcher {
	return &watcher{rt: rt, ctx: ctx, wake: make(chan struct{}, 1), dirty: map[string]bool{}, subs: map[string]*vigil.Subscription{}}
}

// watch subscribes to a session's events after seq.
func (w *watcher) watch(session string, seq int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.subs[session]; ok {
		return nil
	}
	sub, err := w.rt.Subscribe(w.ctx, session, seq)
	if err != nil {
		if errors.Is(err, vigil.ErrClosed) {
			return errShuttingDown
		}
		return fmt.Errorf("watch session %s: %w", session, err)
	}
	w.subs[session] = sub
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for range sub.C {
			w.mark(session)
		}
		// The stream ended: the session stopped here (closed, moved or the
		// runtime closing). Look once more; a later watch subscribes again.
		w.mu.Lock()
		if w.subs[session] == sub {
			delete(w.subs, session)
		}
		w.mu.Unlock()
		w.mark(session)
	}()
	return nil
}

func (w *watcher) mark(session string) {
	w.mu.Lock()
	w.dirty[session] = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// takeDirty returns the sessions with events since the last call.
func (w *watcher) takeDirty() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.dirty))
	for sid := range w.dirty {
		out = append(out, sid)
	}
	clear(w.dirty)
	slices.Sort(out)
	return out
}

// close ends every subscription.
func (w *watcher) close() {
	w.mu.Lock()
	subs := make([]*vigil.Subscription, 0, len(w.subs))
	for _, sub := range w.subs {
		subs = append(subs, sub)
	}
	w.mu.Unlock()
	for _, sub := range subs {
		sub.Close()
	}
	w.wg.Wait()
}
