// Package memstore is an in-memory store.Store, for tests and for runs that
// need no durability (vigil run --memory). It honours leases and fencing
// like the durable backends, and implements store.Watcher for its own
// appends.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/internal/watch"
)

// Store keeps everything in maps guarded by one mutex.
type Store struct {
	mu       sync.Mutex
	closed   bool
	global   int64
	events   map[string][]store.Record
	all      []store.Record
	leases   map[string]store.Lease
	snaps    map[string]store.Snapshot
	sessions map[string]store.SessionRow
	agents   map[string]map[string]store.AgentRow
	runs     map[string]map[string]store.RunRow
	tasks    map[string][]store.TaskRow
	items    map[string][]store.ItemRow // the items that wait, in enqueue order
	notes    map[string][]store.NoteRow
	// noteAt finds a session's note in notes by its task and run: a long
	// session's notes were looked for one by one at every step.
	noteAt  map[string]map[noteKey]int
	nodes   map[string]store.Node
	outputs map[outputKey][]byte
	stats   store.Stats
	watch   watch.Set
	// Fail, when set, makes every write return it (tests of full disks and
	// lost databases).
	fail error
}

// New returns an empty store.
func New() *Store {
	return &Store{
		events: map[string][]store.Record{}, leases: map[string]store.Lease{},
		snaps: map[string]store.Snapshot{}, sessions: map[string]store.SessionRow{},
		agents: map[string]map[string]store.AgentRow{},
		runs:   map[string]map[string]store.RunRow{}, tasks: map[string][]store.TaskRow{},
		items: map[string][]store.ItemRow{}, notes: map[string][]store.NoteRow{}, noteAt: map[string]map[noteKey]int{},
		nodes: map[string]store.Node{}, outputs: map[outputKey][]byte{},
	}
}

// FailWrites makes every later write — appends, snapshots, lease
// acquisitions, renewals and releases, node beats and leaves, outputs —
// fail with err (nil to heal).
func (m *Store) FailWrites(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = err
}

func (m *Store) check(op string) error {
	if m.closed {
		return fmt.Errorf("%s: %w", op, store.ErrClosed)
	}
	return nil
}

// LeaseAcquire implements store.Store.
func (m *Store) LeaseAcquire(_ context.Context, p *store.LeaseAcquireParams) (*store.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("acquire lease"); err != nil {
		return nil, err
	}
	if m.fail != nil {
		return nil, fmt.Errorf("acquire lease of %s: %w", p.Session, m.fail)
	}
	nl, held := m.acquire(p)
	if held != nil {
		return nil, fmt.Errorf("acquire lease: %w", held)
	}
	return nl, nil
}

// acquire grants p's lease unless another owner holds it. Called with
// m.mu held.
func (m *Store) acquire(p *store.LeaseAcquireParams) (*store.Lease, *store.LeaseHeldError) {
	l, ok := m.leases[p.Session]
	if ok && l.Owner != p.Owner && l.Expires.After(p.Now) && (p.Steal == "" || l.Owner != p.Steal) {
		return nil, &store.LeaseHeldError{Session: p.Session, Owner: l.Owner, Expires: l.Expires}
	}
	nl := store.Lease{Session: p.Session, Owner: p.Owner, Epoch: l.Epoch + 1, Expires: p.Now.Add(p.TTL)}
	m.leases[p.Session] = nl
	// A stored lease's Released says it was released; the one returned
	// says so of its predecessor.
	nl.Previous, nl.Released = l.Owner, l.Released
	return &nl, nil
}

// LeaseAcquireMany implements store.Store.
func (m *Store) LeaseAcquireMany(_ context.Context, p *store.LeaseAcquireManyParams) (*store.LeaseAcquireManyResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("acquire leases"); err != nil {
		return nil, err
	}
	if m.fail != nil {
		return nil, fmt.Errorf("acquire %d leases: %w", len(p.Sessions), m.fail)
	}
	res := &store.LeaseAcquireManyResult{}
	for _, sess := range p.Distinct() {
		l, held := m.acquire(&store.LeaseAcquireParams{Session: sess, Owner: p.Owner, TTL: p.TTL, Now: p.Now})
		if held != nil {
			res.Held = append(res.Held, *held)
			continue
		}
		res.Leases = append(res.Leases, *l)
	}
	return res, nil
}

// LeaseRenew implements store.Store.
func (m *Store) LeaseRenew(_ context.Context, p *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("renew leases"); err != nil {
		return nil, err
	}
	if m.fail != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(p.Leases), m.fail)
	}
	res := &store.LeaseRenewResult{Expires: p.Now.Add(p.TTL)}
	for _, ref := range p.Leases {
		l, ok := m.leases[ref.Session]
		if !ok || l.Owner != p.Owner || l.Epoch != ref.Epoch || l.Released {
			res.Lost = append(res.Lost, ref.Session)
			continue
		}
		l.Expires = res.Expires
		m.leases[ref.Session] = l
		res.Renewed = append(res.Renewed, ref.Session)
	}
	return res, nil
}

// LeaseRelease implements store.Store.
func (m *Store) LeaseRelease(_ context.Context, p *store.LeaseReleaseParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("release lease"); err != nil {
		return err
	}
	if m.fail != nil {
		return fmt.Errorf("release %d leases: %w", len(p.Leases), m.fail)
	}
	for _, ref := range p.Leases {
		if l := m.leases[ref.Session]; l.Owner == p.Owner && l.Epoch == ref.Epoch && !l.Released {
			// Expired for every clock; the owner stays, for the next
			// acquisition to report.
			l.Expires = time.Unix(0, math.MinInt64).UTC()
			l.Released = true
			m.leases[ref.Session] = l
		}
	}
	return nil
}

// EventAppend implements store.Store.
func (m *Store) EventAppend(_ context.Context, p *store.EventAppendParams) (*store.AppendResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("append"); err != nil {
		return nil, err
	}
	if m.fail != nil {
		return nil, fmt.Errorf("append to %s: %w", p.Session, m.fail)
	}
	if l := m.leases[p.Session]; l.Epoch == 0 || l.Epoch != p.Epoch {
		return nil, fmt.Errorf("append to %s at epoch %d (lease epoch %d): %w", p.Session, p.Epoch, l.Epoch, store.ErrFenced)
	}
	last := int64(0)
	if evs := m.events[p.Session]; len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	for i, r := range p.Records {
		if r.Seq != last+int64(i)+1 {
			return nil, fmt.Errorf("append to %s: seq %d after %d: %w", p.Session, r.Seq, last+int64(i), store.ErrConflict)
		}
	}
	res := &store.AppendResult{}
	if len(p.Records) > 0 {
		defer m.watch.Signal()
	}
	for _, r := range p.Records {
		m.global++
		r.Global = m.global
		res.Globals = append(res.Globals, r.Global)
		r.Session = p.Session
		r.Data = slices.Clone(r.Data)
		m.events[p.Session] = append(m.events[p.Session], r)
		m.all = append(m.all, r)
	}
	// As a database would count it: one transaction, one log row per step,
	// one row per projection row that changed.
	m.stats.Commits++
	m.stats.Appends++
	if len(p.Records) > 0 {
		m.count("steps", 1)
	}
	if pr := p.Projection; pr != nil {
		m.project(p.Session, pr, res)
	}
	return res, nil
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.StatsReader = (*Store)(nil)
	_ store.Watcher     = (*Store)(nil)
)

// Stats implements store.StatsReader.
func (m *Store) Stats() store.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.Tables = maps.Clone(st.Tables)
	return st
}

// count counts n rows written to table, as a database would: with m.mu
// held.
func (m *Store) count(table string, n int) {
	if n == 0 {
		return
	}
	if m.stats.Tables == nil {
		m.stats.Tables = map[string]int64{}
	}
	m.stats.Rows += int64(n)
	m.stats.Tables[table] += int64(n)
}

// project applies a projection, counting the rows it changed: a row
// written again with the values it holds is left alone, as the SQL
// backends' upserts do. m.mu is held.
func (m *Store) project(sess string, pr *store.Projection, res *store.AppendResult) {
	if pr.Session != nil {
		r := *pr.Session
		r.NeedsYou = slices.Clone(r.NeedsYou) // the caller's slice stays the caller's
		if old, ok := m.sessions[sess]; !ok || !sameRow(old, r) {
			m.count("sessions", 1)
		}
		m.sessions[sess] = r
	}
	if m.agents[sess] == nil {
		m.agents[sess] = map[string]store.AgentRow{}
	}
	for _, a := range pr.Agents {
		if old, ok := m.agents[sess][a.ID]; !ok || old != a {
			m.count("agents", 1)
		}
		m.agents[sess][a.ID] = a
	}
	if m.runs[sess] == nil {
		m.runs[sess] = map[string]store.RunRow{}
	}
	for _, r := range pr.Runs {
		k := fmt.Sprintf("%s/%d", r.Agent, r.Seq)
		if old, ok := m.runs[sess][k]; !ok || !sameRow(old, r) {
			m.count("runs", 1)
		}
		m.runs[sess][k] = r
	}
	for _, t := range pr.Tasks {
		i := slices.IndexFunc(m.tasks[sess], func(x store.TaskRow) bool { return x.ID == t.ID })
		switch {
		case i < 0:
			m.tasks[sess] = append(m.tasks[sess], t)
		case sameRow(m.tasks[sess][i], t):
			continue
		default:
			m.tasks[sess][i] = t
		}
		m.count("tasks", 1)
	}
	for _, it := range pr.Items {
		i := slices.IndexFunc(m.items[sess], func(x store.ItemRow) bool { return x.ID == it.ID })
		switch {
		case i < 0:
			m.items[sess] = append(m.items[sess], it)
		case sameRow(m.items[sess][i], it):
			continue
		default:
			m.items[sess][i] = it
		}
		m.count("items", 1)
	}
	for _, id := range pr.ItemsGone {
		if i := slices.IndexFunc(m.items[sess], func(x store.ItemRow) bool { return x.ID == id }); i >= 0 {
			m.items[sess] = slices.Delete(m.items[sess], i, i+1)
			m.count("items", 1)
		}
	}
	if m.noteAt[sess] == nil {
		m.noteAt[sess] = map[noteKey]int{}
	}
	for _, n := range pr.Notes {
		k := noteKey{n.Task, n.Run}
		i, found := m.noteAt[sess][k]
		switch {
		case n.New && found:
			res.DuplicateNotes = append(res.DuplicateNotes, n.Key())
		case n.New:
			m.noteAt[sess][k] = len(m.notes[sess])
			m.notes[sess] = append(m.notes[sess], n)
			m.count("notes", 1)
		case found:
			if !sameRow(m.notes[sess][i], n) {
				m.count("notes", 1)
			}
			m.notes[sess][i] = n
		}
	}
}

// noteKey is a note's key within its session.
type noteKey struct {
	task string
	run  int
}

// sameRow reports whether two projection rows hold the same values as a
// database stores them: times to the nanosecond, whatever their location
// or monotonic reading; no reasons and an empty list alike; a note's New
// (not stored) ignored.
func sameRow[R any](a, b R) bool {
	return reflect.DeepEqual(storedRow(a), storedRow(b))
}

// storedRow returns a copy of a projection row as a database keeps it.
func storedRow(r any) any {
	t := func(x time.Time) time.Time {
		if x.IsZero() {
			return time.Time{}
		}
		return time.Unix(0, x.UnixNano()).UTC()
	}
	switch r := r.(type) {
	case store.SessionRow:
		r.Created, r.Updated = t(r.Created), t(r.Updated)
		if len(r.NeedsYou) == 0 {
			r.NeedsYou = nil
		}
		return r
	case store.RunRow:
		r.Started, r.Ended = t(r.Started), t(r.Ended)
		return r
	case store.TaskRow:
		r.Started, r.Ended = t(r.Started), t(r.Ended)
		return r
	case store.ItemRow:
		r.Enqueued = t(r.Enqueued)
		return r
	case store.NoteRow:
		r.Written, r.New = t(r.Written), false
		return r
	}
	return r
}

// ItemList returns the items that wait in a session's inboxes, in
// enqueue order (storetest.ItemLister).
func (m *Store) ItemList(_ context.Context, session string) ([]store.ItemRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.items[session]), nil
}

// EventList implements store.Store.
func (m *Store) EventList(_ context.Context, p *store.EventListParams) ([]store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list events"); err != nil {
		return nil, err
	}
	evs := m.events[p.Session]
	i := sort.Search(len(evs), func(i int) bool { return evs[i].Seq > p.AfterSeq })
	out := evs[i:]
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return cloneRecords(out), nil
}

// EventListAll implements store.Store.
func (m *Store) EventListAll(_ context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list all events"); err != nil {
		return nil, err
	}
	i := sort.Search(len(m.all), func(i int) bool { return m.all[i].Global > p.AfterGlobal })
	out := m.all[i:]
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return cloneRecords(out), nil
}

// cloneRecords copies records so callers cannot change the store's.
func cloneRecords(rs []store.Record) []store.Record {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Data = slices.Clone(out[i].Data)
	}
	return out
}

// LastSeq implements store.Store.
func (m *Store) LastSeq(_ context.Context, session string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("last seq"); err != nil {
		return 0, err
	}
	evs := m.events[session]
	if len(evs) == 0 {
		return 0, nil
	}
	return evs[len(evs)-1].Seq, nil
}

// SnapshotSave implements store.Store.
func (m *Store) SnapshotSave(_ context.Context, p *store.SnapshotSaveParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("save snapshot"); err != nil {
		return err
	}
	if m.fail != nil {
		return fmt.Errorf("snapshot %s: %w", p.Session, m.fail)
	}
	if l := m.leases[p.Session]; l.Epoch == 0 || l.Epoch != p.Epoch {
		return fmt.Errorf("snapshot %s: %w", p.Session, store.ErrFenced)
	}
	if old, ok := m.snaps[p.Session]; ok && old.Seq > p.Seq {
		return nil
	}
	m.snaps[p.Session] = store.Snapshot{Session: p.Session, Seq: p.Seq, Data: slices.Clone(p.Data)}
	return nil
}

// SnapshotLoad implements store.Store.
func (m *Store) SnapshotLoad(_ context.Context, session string) (*store.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("load snapshot"); err != nil {
		return nil, err
	}
	s, ok := m.snaps[session]
	if !ok {
		return nil, fmt.Errorf("snapshot of %s: %w", session, store.ErrNotFound)
	}
	s.Data = slices.Clone(s.Data)
	return &s, nil
}

// TailLoadMany implements store.Store.
func (m *Store) TailLoadMany(_ context.Context, p *store.TailLoadManyParams) ([]store.Tail, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("load tails"); err != nil {
		return nil, err
	}
	ids := p.Distinct()
	out := make([]store.Tail, 0, len(ids))
	left := p.MaxBytes // bytes left to read, when p.MaxBytes > 0
	for i, id := range ids {
		t := store.Tail{Session: id, Complete: true}
		var after int64
		if s, ok := m.snaps[id]; ok {
			if p.MaxBytes > 0 && i > 0 && len(s.Data) > left {
				break
			}
			left -= len(s.Data)
			s.Data = slices.Clone(s.Data)
			t.Snapshot, after = &s, s.Seq
		}
		evs := m.events[id]
		evs = evs[sort.Search(len(evs), func(i int) bool { return evs[i].Seq > after }):]
		if p.Limit > 0 && len(evs) > p.Limit {
			evs, t.Complete = evs[:p.Limit], false
		}
		cut := false
		for k, e := range evs {
			if p.MaxBytes > 0 && len(e.Data) > left {
				evs, t.Complete, cut = evs[:k], false, true
				break
			}
			left -= len(e.Data)
		}
		t.Records = cloneRecords(evs)
		out = append(out, t)
		if cut {
			break
		}
	}
	return out, nil
}

// SessionList implements store.Store.
func (m *Store) SessionList(_ context.Context, p *store.SessionListParams) ([]store.SessionRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list sessions"); err != nil {
		return nil, err
	}
	var out []store.SessionRow
	for _, s := range m.sessions {
		if (p.Owner != "" && s.Owner != p.Owner) || (p.Open && s.Closed) {
			continue
		}
		s.NeedsYou = slices.Clone(s.NeedsYou)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// SessionGet implements store.Store.
func (m *Store) SessionGet(_ context.Context, session string) (*store.SessionRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("get session"); err != nil {
		return nil, err
	}
	s, ok := m.sessions[session]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", session, store.ErrNotFound)
	}
	s.NeedsYou = slices.Clone(s.NeedsYou)
	return &s, nil
}

// RunList implements store.Store.
func (m *Store) RunList(_ context.Context, session string) ([]store.RunRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list runs"); err != nil {
		return nil, err
	}
	out := make([]store.RunRow, 0, len(m.runs[session]))
	for _, r := range m.runs[session] {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b store.RunRow) int {
		if c := cmp.Compare(a.Agent, b.Agent); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	return out, nil
}

// TaskList implements store.Store.
func (m *Store) TaskList(_ context.Context, session string) ([]store.TaskRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list tasks"); err != nil {
		return nil, err
	}
	return slices.Clone(m.tasks[session]), nil
}

// NoteList implements store.Store.
func (m *Store) NoteList(_ context.Context, session string) ([]store.NoteRow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list notes"); err != nil {
		return nil, err
	}
	return slices.Clone(m.notes[session]), nil
}

// Close implements store.Store; it closes the Watch channels.
func (m *Store) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.watch.Close()
	return nil
}

// Watch implements store.Watcher: the channel receives after this store's
// appends of events.
func (m *Store) Watch(ctx context.Context) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("watch"); err != nil {
		return nil, err
	}
	ch, ok := m.watch.Add(ctx)
	if !ok {
		return nil, fmt.Errorf("watch: %w", store.ErrClosed)
	}
	return ch, nil
}

// NodeBeat implements store.Store.
func (m *Store) NodeBeat(_ context.Context, n *store.Node) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("node beat"); err != nil {
		return err
	}
	if m.fail != nil {
		return fmt.Errorf("beat of node %s: %w", n.ID, m.fail)
	}
	m.nodes[n.ID] = *n
	return nil
}

// NodeList implements store.Store.
func (m *Store) NodeList(context.Context) ([]store.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list nodes"); err != nil {
		return nil, err
	}
	out := make([]store.Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b store.Node) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// NodeLeave implements store.Store.
func (m *Store) NodeLeave(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("node leave"); err != nil {
		return err
	}
	if m.fail != nil {
		return fmt.Errorf("leave of node %s: %w", id, m.fail)
	}
	delete(m.nodes, id)
	return nil
}

// LeaseList implements store.Store.
func (m *Store) LeaseList(context.Context) ([]store.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list leases"); err != nil {
		return nil, err
	}
	out := make([]store.Lease, 0, len(m.leases))
	for _, l := range m.leases {
		l.Previous = ""
		if l.Released {
			l.Expires = time.Time{}
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b store.Lease) int { return cmp.Compare(a.Session, b.Session) })
	return out, nil
}

// outputKey names a task's saved output.
type outputKey struct{ session, task string }

// OutputSave implements store.Store.
func (m *Store) OutputSave(_ context.Context, p *store.OutputSaveParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("save output"); err != nil {
		return err
	}
	if m.fail != nil {
		return fmt.Errorf("save output of %s/%s: %w", p.Session, p.Task, m.fail)
	}
	m.outputs[outputKey{p.Session, p.Task}] = slices.Clone(p.Data)
	return nil
}

// OutputRead implements store.Store.
func (m *Store) OutputRead(_ context.Context, p *store.OutputReadParams) (*store.Output, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	what := "read output of " + p.Session + "/" + p.Task
	if err := m.check(what); err != nil {
		return nil, err
	}
	if p.Offset < 0 || p.Limit < 0 {
		return nil, fmt.Errorf("%s: offset %d, limit %d: negative", what, p.Offset, p.Limit)
	}
	data, ok := m.outputs[outputKey{p.Session, p.Task}]
	if !ok {
		return nil, fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	size := int64(len(data))
	from := min(p.Offset, size)
	to := size
	if p.Limit > 0 && p.Limit < size-from {
		to = from + p.Limit
	}
	return &store.Output{Data: slices.Clone(data[from:to:to]), Size: size}, nil
}
