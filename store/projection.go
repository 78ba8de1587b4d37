package store

import (
	"slices"
	"strings"
	"time"

	"github.com/vigilrun/vigil/core"
)

// Projection holds the rows a step changed. Every row is complete: a
// backend upserts it by its key.
type Projection struct {
	Session *SessionRow
	Agents  []AgentRow
	Runs    []RunRow
	Tasks   []TaskRow
	// Items are items that wait in an inbox: upserted. The items table
	// holds the inboxes, not their history (the log has that): an item is
	// deleted when a run takes it or it is removed, and one taken before
	// its row was written is never written.
	Items []ItemRow
	// ItemsGone are the items, by ID, that left their inbox (taken by a
	// run, or removed) and may have a row: deleted.
	ItemsGone []string
	// Notes are inserted when New (a repeated insert of the same key is a
	// no-op, reported in AppendResult.DuplicateNotes) and updated otherwise.
	Notes []NoteRow
}

// SessionRow is a session's summary. Updated is when the session was last
// active: the time of its last event, a restart's "recovered" aside.
type SessionRow struct {
	ID           string    `json:"id"`
	Title        string    `json:"title,omitempty"`
	Owner        string    `json:"owner,omitempty"`
	Provider     string    `json:"provider,omitempty"`
	Model        string    `json:"model,omitempty"`
	Cwd          string    `json:"cwd,omitempty"`
	Closed       bool      `json:"closed"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
	LastSeq      int64     `json:"last_seq"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	// NeedsYou are the reasons a person must act on the session
	// (core.Attention), as of LastSeq; none when nobody needs to.
	NeedsYou []string `json:"needs_you,omitempty"`
}

// AgentRow is an agent's summary.
type AgentRow struct {
	Session      string `json:"session"`
	ID           string `json:"id"`
	Name         string `json:"name"`
	Owner        string `json:"owner,omitempty"`
	Task         string `json:"task,omitempty"`
	State        string `json:"state"`
	Runs         int    `json:"runs"`
	Inbox        int    `json:"inbox"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
}

// RunRow is one run.
type RunRow struct {
	Session      string    `json:"session"`
	Agent        string    `json:"agent"`
	Seq          int       `json:"seq"`
	Kind         string    `json:"kind"`
	Status       string    `json:"status"`
	Started      time.Time `json:"started"`
	Ended        time.Time `json:"ended,omitzero"`
	Reply        string    `json:"reply,omitempty"`
	Error        string    `json:"error,omitempty"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
}

// TaskRow is one task.
type TaskRow struct {
	Session string    `json:"session"`
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Owner   string    `json:"owner"`
	Agent   string    `json:"agent,omitempty"`
	Status  string    `json:"status"`
	Command string    `json:"command,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	Exit    *int      `json:"exit_code,omitempty"`
}

// ItemRow is an item waiting in an agent's inbox.
type ItemRow struct {
	Session  string    `json:"session"`
	ID       string    `json:"id"`
	Agent    string    `json:"agent"`
	Kind     string    `json:"kind"`
	Priority string    `json:"priority"`
	From     string    `json:"from,omitempty"`
	Enqueued time.Time `json:"enqueued"`
}

// NoteRow is one notification, unique by (Session, Task, Run).
type NoteRow struct {
	Session      string    `json:"session"`
	Task         string    `json:"task"`
	Run          int       `json:"run"` // 0 for a shell task's exit
	Owner        string    `json:"owner"`
	Status       string    `json:"status"`
	Delivery     string    `json:"delivery"`
	DeliveredRun int       `json:"delivered_run,omitempty"`
	Dropped      string    `json:"dropped,omitempty"`
	Written      time.Time `json:"written"`
	New          bool      `json:"-"`
}

// Key is the notification's unique key as text, e.g. "t3#2".
func (n NoteRow) Key() string { return core.NoteKey{Task: core.TaskID(n.Task), Run: n.Run}.String() }

// Project returns the rows that events changed, read from s, the state
// after the events were applied. The session row's Updated is the zero
// time when no event is the session's own activity (a takeover's
// Recovered alone): the caller keeps the Updated the session had.
func Project(s *core.State, events []core.Event) *Projection {
	p := &Projection{}
	if len(events) == 0 {
		return p
	}
	agents := map[core.AgentID]bool{}
	tasks := map[core.TaskID]bool{}
	// runs are the runs the events touched, by agent and seq; an agent's
	// run in progress when its seq is not in the event.
	runs := map[core.AgentID]map[int]bool{}
	touchRun := func(id core.AgentID, seq int) {
		if runs[id] == nil {
			runs[id] = map[int]bool{}
		}
		if seq == 0 {
			if a := s.Agents[id]; a != nil && a.Run != nil {
				seq = a.Run.Seq
			} else if a != nil && len(a.Runs) > 0 {
				seq = a.Runs[len(a.Runs)-1].Seq
			}
		}
		runs[id][seq] = true
		// An agent's task follows its runs (running, idle).
		if a := s.Agents[id]; a != nil && a.Task != "" {
			tasks[a.Task] = true
		}
	}
	// items are the items the events enqueued (true) or that left an
	// inbox (false).
	items := map[core.ItemID]bool{}
	notes := map[core.NoteKey]bool{}
	var newNotes []core.NoteKey
	var updNotes []core.NoteKey
	touchAgent := func(id core.AgentID) { agents[id] = true }
	for _, e := range events {
		switch b := e.Body.(type) {
		case *core.SessionCreated:
			touchAgent(core.MainAgent)
		case *core.AgentCreated:
			touchAgent(b.Agent.ID)
		case *core.AgentRetired:
			touchAgent(b.Agent)
		case *core.TaskStarted:
			tasks[b.Task.ID] = true
		case *core.TaskUpdated:
			tasks[b.Task] = true
		case *core.ItemEnqueued:
			touchAgent(b.Item.Agent)
			items[b.Item.ID] = true
		case *core.ItemRemoved:
			touchAgent(b.Agent)
			gone(items, b.Item)
		case *core.RunStarted:
			touchAgent(b.Agent)
			touchRun(b.Agent, b.Seq)
			for _, id := range b.Items {
				gone(items, id)
			}
		case *core.ItemsJoined:
			touchAgent(b.Agent)
			for _, id := range b.Items {
				gone(items, id)
			}
		case *core.ModelCallEnded:
			touchAgent(b.Agent)
			touchRun(b.Agent, 0)
		case *core.RunEnded:
			touchAgent(b.Agent)
			touchRun(b.Agent, b.Seq)
		case *core.ApprovalRequested:
			touchAgent(b.Approval.Agent)
		case *core.ApprovalResolved:
			for _, id := range s.Order {
				touchAgent(id) // the agent of a resolved approval is not in the event
			}
		case *core.NotificationWritten:
			k := b.Note.Key
			if !notes[k] {
				notes[k] = true
				newNotes = append(newNotes, b.Note.Key)
			}
		case *core.NotificationDropped:
			updNotes = append(updNotes, b.Key)
		case *core.NotificationRequeued:
			updNotes = append(updNotes, b.Key)
		case *core.NotesDelivered:
			updNotes = append(updNotes, b.Keys...)
		}
		updNotes = append(updNotes, deliveredNotes(e.Body)...)
	}
	p.Session = sessionRow(s, activity(events))
	for _, id := range s.Order {
		a := s.Agents[id]
		if agents[id] {
			p.Agents = append(p.Agents, AgentRow{
				Session: string(s.Session.ID), ID: string(a.ID), Name: a.Name, Owner: string(a.Owner),
				Task: string(a.Task), State: string(a.State), Runs: len(a.Runs), Inbox: len(a.Inbox),
				InputTokens: a.Usage.InputTokens, OutputTokens: a.Usage.OutputTokens,
			})
		}
		if seqs := runs[id]; len(seqs) > 0 {
			p.Runs = append(p.Runs, runRows(s, a, seqs)...)
		}
	}
	for _, id := range s.TaskOrder {
		if tasks[id] {
			t := s.Tasks[id]
			p.Tasks = append(p.Tasks, TaskRow{
				Session: string(s.Session.ID), ID: string(t.ID), Kind: string(t.Kind), Owner: string(t.Owner),
				Agent: string(t.Agent), Status: string(t.Status), Command: t.Command, Started: t.Started,
				Ended: t.Ended, Exit: t.ExitCode,
			})
		}
	}
	for _, e := range events {
		// In enqueue order: the items the events enqueued that still wait.
		if b, ok := e.Body.(*core.ItemEnqueued); ok && items[b.Item.ID] {
			it := b.Item
			p.Items = append(p.Items, ItemRow{
				Session: string(s.Session.ID), ID: string(it.ID), Agent: string(it.Agent), Kind: string(it.Kind),
				Priority: string(it.Priority), From: it.From, Enqueued: e.At,
			})
			delete(items, it.ID)
		}
	}
	for _, id := range sortedItems(items) {
		p.ItemsGone = append(p.ItemsGone, string(id)) // enqueued before these events
	}
	for _, k := range newNotes {
		p.Notes = append(p.Notes, noteRow(s, k, true))
	}
	seen := map[core.NoteKey]bool{}
	for _, k := range updNotes {
		if notes[k] || seen[k] {
			continue
		}
		seen[k] = true
		p.Notes = append(p.Notes, noteRow(s, k, false))
	}
	return p
}

// gone records that item id left its inbox: an item the same events
// enqueued is never written; one enqueued before may have a row.
func gone(items map[core.ItemID]bool, id core.ItemID) {
	if enqueued, ok := items[id]; ok && enqueued {
		delete(items, id)
		return
	}
	items[id] = false
}

// deliveredNotes returns the notifications an event delivered to a run.
func deliveredNotes(b core.Body) []core.NoteKey {
	switch b := b.(type) {
	case *core.RunStarted:
		return b.Notes
	case *core.ItemsJoined:
		return b.Notes
	}
	return nil
}

// activity returns the time of the last of events that is the session's
// own activity, or the zero time when none is: a restart's Recovered marks
// a new process taking the session over, which the session did not do, so
// taking a session over does not make it look active.
func activity(events []core.Event) time.Time {
	for i := len(events) - 1; i >= 0; i-- {
		if _, ok := events[i].Body.(*core.Recovered); !ok {
			return events[i].At
		}
	}
	return time.Time{}
}

func sessionRow(s *core.State, at time.Time) *SessionRow {
	var in, out int64
	for _, a := range s.Agents {
		in += a.Usage.InputTokens
		out += a.Usage.OutputTokens
	}
	return &SessionRow{
		ID: string(s.Session.ID), Title: s.Session.Title, Owner: s.Session.Owner, Provider: s.Session.Provider,
		Model: s.Session.Model, Cwd: s.Session.Cwd, Closed: s.Session.Closed, Created: s.Session.Created,
		Updated: at, LastSeq: s.Seq, InputTokens: in, OutputTokens: out, NeedsYou: core.Attention(s),
	}
}

// runRows returns the rows of an agent's runs seqs, ended or in
// progress, in seq order.
func runRows(s *core.State, a *core.Agent, seqs map[int]bool) []RunRow {
	first := 0
	for seq := range seqs {
		if first == 0 || seq < first {
			first = seq
		}
	}
	// Runs are in seq order: only the tail from the first one touched is
	// read, not an agent's whole history.
	from := len(a.Runs)
	for from > 0 && a.Runs[from-1].Seq >= first {
		from--
	}
	var out []RunRow
	for _, r := range a.Runs[from:] {
		if !seqs[r.Seq] {
			continue
		}
		out = append(out, RunRow{
			Session: string(s.Session.ID), Agent: string(a.ID), Seq: r.Seq, Kind: string(r.Kind),
			Status: string(r.Status), Started: r.Started, Ended: r.Ended, Reply: r.Reply, Error: r.Error,
			InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
		})
	}
	if r := a.Run; r != nil && seqs[r.Seq] {
		out = append(out, RunRow{
			Session: string(s.Session.ID), Agent: string(a.ID), Seq: r.Seq, Kind: string(r.Kind),
			Status: string(core.RunRunning), Started: r.Started,
			InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
		})
	}
	return out
}

func noteRow(s *core.State, k core.NoteKey, isNew bool) NoteRow {
	n := s.Note(k)
	return NoteRow{
		Session: string(s.Session.ID), Task: string(k.Task), Run: k.Run, Owner: string(n.Owner),
		Status: n.Status, Delivery: string(n.Delivery), DeliveredRun: n.DeliveredRun, Dropped: n.Dropped,
		Written: n.Written, New: isNew,
	}
}

func sortedItems(m map[core.ItemID]bool) []core.ItemID {
	ids := make([]core.ItemID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b core.ItemID) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(string(a), string(b))
	})
	return ids
}

// Pending accumulates the projection rows of several steps of one session
// until they are written: a later row of a key replaces the earlier one,
// so a row changed by many steps is written once. A new notification
// stays new (an insert) whatever updates follow it. An item that leaves
// its inbox while its row is pending was never written: both go.
type Pending struct {
	p      Projection
	agents map[string]int
	runs   map[runKey]int
	tasks  map[string]int
	items  map[string]int
	gone   map[string]bool
	notes  map[core.NoteKey]int
	// dropped counts the pending item rows that left (Take skips them).
	dropped int
}

type runKey struct {
	agent string
	seq   int
}

// Add folds a step's rows into the pending ones.
func (x *Pending) Add(q *Projection) {
	if q == nil {
		return
	}
	if x.agents == nil {
		x.agents, x.runs, x.tasks = map[string]int{}, map[runKey]int{}, map[string]int{}
		x.items, x.gone, x.notes = map[string]int{}, map[string]bool{}, map[core.NoteKey]int{}
	}
	if q.Session != nil {
		r := *q.Session
		if r.Updated.IsZero() && x.p.Session != nil {
			r.Updated = x.p.Session.Updated // steps of no activity keep the last one's
		}
		x.p.Session = &r
	}
	for _, a := range q.Agents {
		x.p.Agents = put(x.p.Agents, x.agents, a.ID, a)
	}
	for _, r := range q.Runs {
		x.p.Runs = put(x.p.Runs, x.runs, runKey{r.Agent, r.Seq}, r)
	}
	for _, t := range q.Tasks {
		x.p.Tasks = put(x.p.Tasks, x.tasks, t.ID, t)
	}
	for _, it := range q.Items {
		x.p.Items = put(x.p.Items, x.items, it.ID, it)
	}
	for _, id := range q.ItemsGone {
		if i, ok := x.items[id]; ok {
			// Enqueued since the last write, never written.
			x.p.Items[i].ID = ""
			delete(x.items, id)
			x.dropped++
			continue
		}
		if !x.gone[id] {
			x.gone[id] = true
			x.p.ItemsGone = append(x.p.ItemsGone, id)
		}
	}
	for _, n := range q.Notes {
		k := core.NoteKey{Task: core.TaskID(n.Task), Run: n.Run}
		if i, ok := x.notes[k]; ok {
			n.New = n.New || x.p.Notes[i].New
		}
		x.p.Notes = put(x.p.Notes, x.notes, k, n)
	}
}

func put[K comparable, R any](rows []R, index map[K]int, k K, r R) []R {
	if i, ok := index[k]; ok {
		rows[i] = r
		return rows
	}
	index[k] = len(rows)
	return append(rows, r)
}

// Empty reports whether no row is pending.
func (x *Pending) Empty() bool {
	p := &x.p
	return p.Session == nil && len(p.Agents)+len(p.Runs)+len(p.Tasks)+len(p.Items)-x.dropped+len(p.ItemsGone)+len(p.Notes) == 0
}

// Take returns the pending rows and forgets them.
func (x *Pending) Take() *Projection {
	p := x.p
	if x.dropped > 0 {
		p.Items = slices.DeleteFunc(p.Items, func(it ItemRow) bool { return it.ID == "" })
	}
	*x = Pending{}
	return &p
}
