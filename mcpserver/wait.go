package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
)

// WaitInput is vigil_wait's input.
type WaitInput struct {
	Caller
	Tasks          []string `json:"tasks,omitempty" jsonschema:"wait for these tasks only (one, or any of a list); default: any of your tasks"`
	TimeoutSeconds *int     `json:"timeout_seconds,omitempty" jsonschema:"how long to block when nothing is there yet, in seconds (default 120, and never longer than this client allows); 0 returns at once"`
	Ack            []string `json:"ack,omitempty" jsonschema:"ids of notifications a previous wait returned, to acknowledge first: they are never returned again"`
}

// WaitOutput is vigil_wait's result.
type WaitOutput struct {
	Notifications []Notification `json:"notifications" jsonschema:"every notification in scope you have not acknowledged, oldest first"`
	Running       []TaskInfo     `json:"running" jsonschema:"the tasks in scope that are still working: more notifications will come from them"`
	Acknowledged  []string       `json:"acknowledged,omitempty" jsonschema:"the ids of ack, now acknowledged"`
	TimedOut      bool           `json:"timed_out" jsonschema:"the timeout passed with nothing new: call vigil_wait again while tasks run"`
	Waited        int            `json:"waited_seconds,omitempty" jsonschema:"with timed_out: how long it blocked"`
	Capped        bool           `json:"capped,omitempty" jsonschema:"the timeout asked for was longer than this client allows: it returned at the client's limit"`
	Detail        string         `json:"detail"`
}

// scope is what a wait looks at: every open session of the caller, or the
// sessions of the given tasks with those tasks only.
type scope struct {
	all   bool
	tasks map[vigil.SessionID]map[vigil.TaskID]bool // session -> tasks (nil when all)
}

// snap is what a wait saw in one session.
type snap struct {
	seq     int64
	items   []Notification
	at      []time.Time // when each item was queued
	running []TaskInfo
}

func (s *Server) wait(ctx context.Context, owner string, in WaitInput) (WaitOutput, error) {
	limit := limitFrom(ctx)
	timeout := min(s.opts.DefaultWait, limit)
	if in.TimeoutSeconds != nil {
		timeout = min(time.Duration(max(*in.TimeoutSeconds, 0))*time.Second, limit)
	}
	capped := in.TimeoutSeconds != nil && time.Duration(*in.TimeoutSeconds)*time.Second > limit
	sc := scope{all: len(in.Tasks) == 0, tasks: map[vigil.SessionID]map[vigil.TaskID]bool{}}
	for _, id := range in.Tasks {
		ref, err := parseTask(id)
		if err != nil {
			return WaitOutput{}, err
		}
		v, err := s.owned(ctx, owner, ref.session, id, 0)
		if err != nil {
			return WaitOutput{}, err
		}
		if v.tasks[ref.task] == nil {
			return WaitOutput{}, notFoundTask(id)
		}
		if sc.tasks[ref.session] == nil {
			sc.tasks[ref.session] = map[vigil.TaskID]bool{}
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
	snaps := map[vigil.SessionID]*snap{}
	var order []vigil.SessionID // sessions in scope, in the order listed
	refresh := func(sessions []vigil.SessionID) error {
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
		var fresh []vigil.SessionID
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
			if out.TimedOut {
				out.Waited = int(timeout / time.Second)
				out.Capped = capped
			}
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
func gather(order []vigil.SessionID, snaps map[vigil.SessionID]*snap) WaitOutput {
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
		fmt.Fprintf(&b, "%d notification(s). Pass their ids in the ack of your next %s (or call %s).", n, ToolWait, ToolAck)
		if repeats > 0 {
			fmt.Fprintf(&b, " %d of them were returned before and not acknowledged.", repeats)
		}
	case out.TimedOut && out.Capped:
		fmt.Fprintf(&b, "Nothing arrived in %d s, the longest this client lets a tool call block.", out.Waited)
	case out.TimedOut:
		fmt.Fprintf(&b, "Nothing arrived in %d s.", out.Waited)
	default:
		b.WriteString("Nothing is waiting for you.")
	}
	if len(out.Running) > 0 {
		fmt.Fprintf(&b, " %d task(s) still running: call %s again for them (this is normal, nothing failed).", len(out.Running), ToolWait)
	} else {
		b.WriteString(" Nothing in scope is running.")
	}
	out.Detail = b.String()
	return out
}

// look reads one session: the caller's items in scope and the tasks in
// scope still working.
func (s *Server) look(ctx context.Context, owner string, session vigil.SessionID, tasks map[vigil.TaskID]bool) (*snap, error) {
	v, err := s.owned(ctx, owner, session, string(session), needLists|needRuns)
	if err != nil {
		return nil, err
	}
	sn := &snap{seq: v.Seq}
	for _, it := range v.callerItems(tasks) {
		sn.items = append(sn.items, v.itemView(it))
		sn.at = append(sn.at, it.Enqueued)
	}
	if v.Session.Closed {
		return sn, nil
	}
	for _, t := range v.callerTasks() {
		if tasks != nil && !tasks[t.ID] {
			continue
		}
		working := false
		if t.Kind == vigil.TaskShell {
			working = live(t)
		} else {
			working = v.busy(v.agents[t.Agent])
		}
		if working {
			sn.running = append(sn.running, v.taskView(t))
		}
	}
	return sn, nil
}

func (s *Server) ackTool(ctx context.Context, owner string, in AckInput) (AckOutput, error) {
	if len(in.IDs) == 0 {
		return AckOutput{}, errors.New("ids is empty: give the ids of notifications that " + ToolWait + " returned")
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
	bySession := map[vigil.SessionID][]string{}
	var order []vigil.SessionID
	for _, id := range ids {
		sid, local, ok := strings.Cut(strings.TrimSpace(id), "/")
		if !ok || sid == "" || local == "" {
			return nil, fmt.Errorf("bad notification id %q in ack: give the id as %s returned it, e.g. k3v9x2m4pq/t1#2", id, ToolWait)
		}
		if _, ok := bySession[vigil.SessionID(sid)]; !ok {
			order = append(order, vigil.SessionID(sid))
		}
		bySession[vigil.SessionID(sid)] = append(bySession[vigil.SessionID(sid)], local)
	}
	items := map[vigil.SessionID][]vigil.ItemID{}
	for _, sid := range order {
		v, err := s.owned(ctx, owner, sid, string(sid), needLists)
		if errors.Is(err, errNoTask) {
			return nil, fmt.Errorf("ack: no such notification in session %q (not yours, or it does not exist); nothing was acknowledged", sid)
		}
		if err != nil {
			return nil, err
		}
		var taken map[vigil.ItemID]bool // read when an item id is not in the inbox
		for _, local := range bySession[sid] {
			if taken == nil && !strings.Contains(local, "#") && !v.inInbox(vigil.ItemID(local)) {
				if taken, err = s.takenItems(ctx, v); err != nil {
					return nil, err
				}
			}
			item, err := v.resolveAck(local, taken)
			if err != nil {
				return nil, fmt.Errorf("ack %s/%s: %w", sid, local, err)
			}
			if item != "" {
				items[sid] = append(items[sid], item)
			}
		}
	}
	for _, sid := range order {
		if len(items[sid]) == 0 {
			continue
		}
		if err := s.rt.Ack(ctx, sid, items[sid]); err != nil {
			return nil, fmt.Errorf("ack: %w", toolErr(err))
		}
	}
	var acked []string
	for _, sid := range order {
		for _, local := range bySession[sid] {
			acked = append(acked, globalID(sid, local))
		}
	}
	s.forgetShown(owner, acked)
	return acked, nil
}

// inInbox reports whether the caller's inbox holds the item.
func (v *view) inInbox(id vigil.ItemID) bool {
	main := v.agents[vigil.MainAgent]
	return main != nil && slices.ContainsFunc(main.Inbox, func(it vigil.InboxItem) bool { return it.ID == id })
}

// takenItems returns the items that left the caller's inbox: those it
// acknowledged (the items of its runs: each ack is one) and the messages
// to it, which closing the session may have dropped.
func (s *Server) takenItems(ctx context.Context, v *view) (map[vigil.ItemID]bool, error) {
	runs, err := s.rt.RunList(ctx, v.id, string(vigil.MainAgent))
	if err != nil {
		return nil, toolErr(fmt.Errorf("read your acknowledgements in session %s: %w", v.id, err))
	}
	taken := map[vigil.ItemID]bool{}
	for _, r := range runs {
		for _, id := range r.Items {
			taken[id] = true
		}
	}
	for _, m := range v.Messages {
		if m.To == vigil.MainAgent && m.Item != "" {
			taken[m.Item] = true
		}
	}
	return taken, nil
}

// resolveAck returns the caller's inbox item an ack id names, or "" when
// it was acknowledged before; taken are the items that left the inbox.
func (v *view) resolveAck(local string, taken map[vigil.ItemID]bool) (vigil.ItemID, error) {
	if strings.Contains(local, "#") {
		k, err := parseNoteKey(local)
		if err != nil {
			return "", err
		}
		n := v.notes[k]
		switch {
		case n == nil || n.Owner != vigil.MainAgent:
			return "", errors.New("no such notification")
		case n.Item != "" && v.inInbox(n.Item):
			return n.Item, nil
		}
		return "", nil // delivered before
	}
	id := vigil.ItemID(local)
	switch {
	case v.inInbox(id):
		return id, nil
	case taken[id]:
		return "", nil // taken before
	}
	return "", errors.New("no such notification")
}

// parseNoteKey parses a notification key, "t1#2" or "t2#exit".
func parseNoteKey(s string) (vigil.NotificationKey, error) {
	var k vigil.NotificationKey
	err := k.UnmarshalText([]byte(s))
	return k, err
}

// watcher wakes a wait when a watched session commits events. It
// subscribes to each session from the position the wait last read, so no
// event between the read and the subscription is missed.
type watcher struct {
	rt   *vigil.Runtime
	ctx  context.Context
	wake chan struct{}

	mu    sync.Mutex
	dirty map[vigil.SessionID]bool
	subs  map[vigil.SessionID]*vigil.Subscription
	wg    sync.WaitGroup
}

func newWatcher(rt *vigil.Runtime, ctx context.Context) *watcher {
	return &watcher{rt: rt, ctx: ctx, wake: make(chan struct{}, 1), dirty: map[vigil.SessionID]bool{}, subs: map[vigil.SessionID]*vigil.Subscription{}}
}

// watch subscribes to a session's events after seq.
func (w *watcher) watch(session vigil.SessionID, seq int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.subs[session]; ok {
		return nil
	}
	sub, err := w.rt.Subscribe(w.ctx, &vigil.SubscribeParams{Session: session, After: seq})
	if err != nil {
		return toolErr(fmt.Errorf("watch session %s: %w", session, err))
	}
	w.subs[session] = sub
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for ev := range sub.C {
			if !ev.Live { // streamed model text changes nothing a wait reads
				w.mark(session)
			}
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

func (w *watcher) mark(session vigil.SessionID) {
	w.mu.Lock()
	w.dirty[session] = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// takeDirty returns the sessions with events since the last call.
func (w *watcher) takeDirty() []vigil.SessionID {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]vigil.SessionID, 0, len(w.dirty))
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
