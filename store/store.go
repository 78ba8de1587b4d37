// Package store defines how vigil keeps sessions durable: an append-only
// log of events per session, projections of its entities for queries, state
// snapshots, and session leases with an epoch that fences every write; and,
// for several nodes on one database, their heartbeats, the saved output of
// tasks, and Watcher, which tells when events were committed.
//
// Backends implement Store: store/memstore (in memory, for tests and
// --memory runs), store/sqlite (the embedded default) and store/postgres
// (several nodes). store/storetest is the conformance suite every backend
// passes.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors a backend returns, wrapped with context. Callers test with
// errors.Is.
var (
	// ErrFenced: the write carried an epoch that is no longer the session's
	// lease epoch. The writer lost the session to a successor and must stop.
	ErrFenced = errors.New("store: lease lost (fenced)")
	// ErrLeaseHeld: another owner holds an unexpired lease on the session.
	ErrLeaseHeld = errors.New("store: session lease held by another owner")
	// ErrConflict: the appended events do not follow the stored ones.
	ErrConflict = errors.New("store: event sequence conflict")
	// ErrNotFound: no such session or snapshot.
	ErrNotFound = errors.New("store: not found")
	// ErrFull: the disk or database is full. Nothing of the failed write was
	// kept; earlier writes are intact.
	ErrFull = errors.New("store: storage full")
	// ErrReadOnly: the database cannot be written (read-only file or
	// server).
	ErrReadOnly = errors.New("store: database is read-only")
	// ErrRefused: the database will never accept this write as it is (an
	// encoding or constraint error: a NUL byte in text, a value too big).
	// Nothing of it was kept; retrying the same write cannot succeed.
	ErrRefused = errors.New("store: write refused")
	// ErrUnavailable: the database cannot be reached. Retry later.
	ErrUnavailable = errors.New("store: database unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
)

// Stats counts what a store wrote since it was opened: how many
// transactions committed, how many appends they carried, and how many rows
// they inserted, updated or deleted in all tables (the log and the
// projections; a backend may count its other writes too, and says so).
type Stats struct {
	Commits int64
	Appends int64
	Rows    int64
	// Tables breaks Rows down by table (steps, sessions, agents, runs,
	// tasks, items, notes, ...): its values add up to Rows. nil when no
	// row was written.
	Tables map[string]int64
}

// Since returns what was written between before and s, two readings of one
// store's Stats.
func (s Stats) Since(before Stats) Stats {
	d := Stats{Commits: s.Commits - before.Commits, Appends: s.Appends - before.Appends, Rows: s.Rows - before.Rows}
	for t, n := range s.Tables {
		if n -= before.Tables[t]; n != 0 {
			if d.Tables == nil {
				d.Tables = map[string]int64{}
			}
			d.Tables[t] = n
		}
	}
	return d
}

// Add returns the sum of s and o: what two stores wrote.
func (s Stats) Add(o Stats) Stats {
	sum := Stats{Commits: s.Commits + o.Commits, Appends: s.Appends + o.Appends, Rows: s.Rows + o.Rows}
	for _, m := range []map[string]int64{s.Tables, o.Tables} {
		for t, n := range m {
			if sum.Tables == nil {
				sum.Tables = map[string]int64{}
			}
			sum.Tables[t] += n
		}
	}
	return sum
}

// StatsReader is implemented by stores that count their writes (every
// backend of this module does); vigil bench reads it.
type StatsReader interface {
	Stats() Stats
}

// Record is one stored event.
type Record struct {
	Session string    `json:"session"`
	Seq     int64     `json:"seq"`    // per session, from 1, contiguous
	Global  int64     `json:"global"` // store-wide order, assigned by the store at append
	At      time.Time `json:"at"`
	Type    string    `json:"type"`
	Data    []byte    `json:"data"` // the event body as JSON
}

// Lease is a session's ownership. Epoch grows by one at every acquisition.
type Lease struct {
	Session string
	Owner   string
	Epoch   int64
	Expires time.Time
	// Previous is the owner that held the lease before this acquisition
	// ("" for a session's first lease), and Released says it gave the
	// lease up (LeaseRelease: a clean stop) rather than letting it expire
	// or losing it to Steal. LeaseAcquire sets them, for the successor to
	// tell a clean stop from a crash; they are informational (two
	// acquisitions racing may see a holder a moment old) and fence nothing.
	Previous string
	Released bool
}

// LeaseAcquireParams asks for a session's lease.
type LeaseAcquireParams struct {
	Session string
	Owner   string
	TTL     time.Duration
	// Now is the caller's clock reading; the lease expires at Now+TTL and a
	// lease of another owner is free once its Expires is not after Now.
	Now time.Time
	// Steal, when set, takes the lease from that owner even before it
	// expires: the caller has made sure the owner is gone (a process of
	// this host that died).
	Steal string
}

// LeaseHeldError is the ErrLeaseHeld a LeaseAcquire returns: who holds the
// lease and until when.
type LeaseHeldError struct {
	Session string
	Owner   string
	Expires time.Time
}

// Error implements error.
func (e *LeaseHeldError) Error() string {
	return "session " + e.Session + " lease held by " + e.Owner + " until " + e.Expires.UTC().Format(time.RFC3339)
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// LeaseAcquireManyParams asks for many sessions' leases for one owner at
// once, as LeaseAcquire does for one (without Steal): a node that starts
// takes its sessions over with a statement per few hundred, not a
// transaction each.
type LeaseAcquireManyParams struct {
	Owner    string
	Sessions []string
	TTL      time.Duration
	Now      time.Time
}

// Distinct returns the sessions asked for, sorted, each once: the order a
// backend locks their rows in.
func (p *LeaseAcquireManyParams) Distinct() []string {
	return slices.Compact(slices.Sorted(slices.Values(p.Sessions)))
}

// LeaseAcquireManyResult reports an acquisition of many leases. Every
// session asked for is in exactly one of Leases and Held.
type LeaseAcquireManyResult struct {
	// Leases are the leases acquired, as LeaseAcquire returns them
	// (Previous and Released set), in no order.
	Leases []Lease
	// Held are the sessions whose lease another owner holds, unexpired.
	Held []LeaseHeldError
}

// LeaseRenewParams extends leases one owner holds, in one statement: a
// node renews all its sessions in one round, not one write per session.
type LeaseRenewParams struct {
	Owner  string
	Leases []LeaseRef
	TTL    time.Duration
	Now    time.Time
}

// LeaseRef names a held lease: the session and the epoch it was granted at.
type LeaseRef struct {
	Session string
	Epoch   int64
}

// LeaseRenewResult reports a renewal. Every lease asked for is in exactly
// one of Renewed and Lost.
type LeaseRenewResult struct {
	// Expires is the renewed leases' new expiry (Now+TTL).
	Expires time.Time
	// Renewed lists the sessions whose lease was extended.
	Renewed []string
	// Lost lists the sessions whose lease is no longer Owner's at that
	// epoch: fenced, the owner must stop acting for them.
	Lost []string
}

// LeaseReleaseParams gives up leases one owner holds, in one statement: a
// node that stops releases all its sessions' leases at once, not one write
// per session.
type LeaseReleaseParams struct {
	Owner  string
	Leases []LeaseRef
}

// EventAppendParams appends a step's events and the projection rows they
// changed, in one transaction, if Epoch is still the session's lease epoch.
type EventAppendParams struct {
	Session    string
	Epoch      int64
	Records    []Record
	Projection *Projection
}

// AppendResult reports what an append did.
type AppendResult struct {
	// Globals are the store-wide positions given to the appended records,
	// in order.
	Globals []int64
	// DuplicateNotes lists notification keys that existed already; their
	// insert was a no-op.
	DuplicateNotes []string
}

// EventListParams reads a session's events after a sequence.
type EventListParams struct {
	Session  string
	AfterSeq int64
	Limit    int // 0 means no limit
}

// EventListAllParams reads every session's events in store order.
type EventListAllParams struct {
	AfterGlobal int64
	Limit       int
}

// Snapshot is a session state encoded at a sequence.
type Snapshot struct {
	Session string
	Seq     int64
	Data    []byte
}

// TailLoadManyParams reads what rebuilds many sessions at once: each
// one's newest snapshot and the records after it.
type TailLoadManyParams struct {
	Sessions []string
	// Limit bounds the records read per session; 0 means no bound.
	Limit int
	// MaxBytes bounds what the call reads, snapshots and records
	// together (by the size of their data); 0 means no bound. The call
	// stops at the session where it would go past it: that session's
	// records are cut there (its tail is not complete), or it is not read
	// at all when its snapshot does not fit, and the sessions after it are
	// not read. The first session's snapshot is read whatever its size.
	MaxBytes int
}

// Distinct returns the sessions asked for, each once, in the order first
// named.
func (p *TailLoadManyParams) Distinct() []string {
	seen := make(map[string]bool, len(p.Sessions))
	out := make([]string, 0, len(p.Sessions))
	for _, s := range p.Sessions {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Tail is what rebuilds one session: its newest snapshot, when it has
// one, and the records after it.
type Tail struct {
	Session string
	// Snapshot is the newest snapshot; nil when the session has none.
	Snapshot *Snapshot
	// Records are the session's records after Snapshot's Seq (after 0
	// without one), in order, at most Limit of them.
	Records []Record
	// Complete says Records hold every record after the snapshot, as of
	// the read. A tail cut at Limit or by MaxBytes is not complete, and
	// one of exactly Limit records may be reported either way: read on
	// with EventList after its last record.
	Complete bool
}

// SnapshotSaveParams saves a snapshot, fenced like an append.
type SnapshotSaveParams struct {
	Session string
	Epoch   int64
	Seq     int64
	Data    []byte
}

// SessionListParams filters sessions.
type SessionListParams struct {
	// Owner, when set, keeps only sessions with that owner key.
	Owner string
	// Open keeps only sessions that are not closed.
	Open bool
}

// Node is one vigil process sharing the store, as its last heartbeat
// recorded it.
type Node struct {
	ID       string    // the node's lease owner name (Options.Node of the runtime)
	Address  string    // base URL other nodes reach its API at; "" when it serves none
	Started  time.Time // when it joined
	Beat     time.Time // its last heartbeat, by its own clock
	Draining bool      // it is stopping: it takes no new sessions
	Sessions int       // sessions it owned at its last beat
}

// OutputSaveParams saves a task's output: the whole of it, replacing what
// was saved before.
type OutputSaveParams struct {
	Session, Task string
	Data          []byte
}

// OutputReadParams reads a range of a saved output: up to Limit bytes
// (0: all) from Offset.
type OutputReadParams struct {
	Session, Task string
	Offset, Limit int64
}

// Output is a range of a saved output. Size is the length of the whole
// output; Data is empty when Offset is at or past it.
type Output struct {
	Data []byte
	Size int64
}

// Watcher is implemented by stores that tell when events were committed,
// by this process or, for a shared database (PostgreSQL), by any process.
type Watcher interface {
	// Watch returns a channel that receives after commits of events
	// (coalesced: one receive may stand for many commits, and a spurious
	// one is allowed, e.g. after a reconnect, so the reader re-reads),
	// until ctx ends or the store is closed; then it is closed. Every call
	// gets its own channel.
	Watch(ctx context.Context) (<-chan struct{}, error)
}

// Store is a durable home for sessions.
type Store interface {
	// LeaseAcquire grants the session's lease to Owner with a new epoch when
	// it is free, expired, or already Owner's; otherwise ErrLeaseHeld.
	LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) (*Lease, error)
	// LeaseAcquireMany is LeaseAcquire, without Steal, of many sessions
	// for one owner, in one transaction. A session named twice counts
	// once. An error means none was acquired.
	LeaseAcquireMany(ctx context.Context, p *LeaseAcquireManyParams) (*LeaseAcquireManyResult, error)
	// LeaseRenew extends the leases Owner still holds at their epochs, all
	// at once, and reports the ones it lost. An error means none was
	// renewed.
	LeaseRenew(ctx context.Context, p *LeaseRenewParams) (*LeaseRenewResult, error)
	// LeaseRelease gives up the leases Owner holds at their epochs: any
	// owner may acquire them at once (its Lease says Released, with this
	// owner as Previous), and Owner can no longer renew them. The epochs
	// stay, so the caller must make no write under them after. A lease
	// Owner lost, or named at an epoch that is not its own, is left as it
	// is; that is not an error.
	LeaseRelease(ctx context.Context, p *LeaseReleaseParams) error

	// EventAppend appends records whose Seq continue the session's log
	// (ErrConflict otherwise) and upserts the projection, atomically,
	// fenced by Epoch (ErrFenced; a session without a lease cannot be
	// written). After ErrUnavailable the outcome may be unknown (a lost
	// COMMIT): read LastSeq before writing again.
	EventAppend(ctx context.Context, p *EventAppendParams) (*AppendResult, error)
	// EventList returns a session's records with Seq > AfterSeq in order.
	EventList(ctx context.Context, p *EventListParams) ([]Record, error)
	// EventListAll returns records of all sessions with Global > AfterGlobal
	// in Global order.
	EventListAll(ctx context.Context, p *EventListAllParams) ([]Record, error)
	// LastSeq returns a session's last event sequence (0 when none).
	LastSeq(ctx context.Context, session string) (int64, error)

	// SnapshotSave stores a snapshot, replacing an older one.
	SnapshotSave(ctx context.Context, p *SnapshotSaveParams) error
	// SnapshotLoad returns the newest snapshot, or ErrNotFound.
	SnapshotLoad(ctx context.Context, session string) (*Snapshot, error)
	// TailLoadMany is SnapshotLoad and EventList after the snapshot, of
	// many sessions in a few statements: a node taking over thousands of
	// sessions reads them a chunk at a time, not two round trips each. It
	// returns one Tail for each session named, in the order first named,
	// up to where MaxBytes ran out; a session that does not exist has no
	// snapshot, no records and is complete.
	TailLoadMany(ctx context.Context, p *TailLoadManyParams) ([]Tail, error)

	// SessionList returns session rows, newest first.
	SessionList(ctx context.Context, p *SessionListParams) ([]SessionRow, error)
	// SessionGet returns one session row, or ErrNotFound.
	SessionGet(ctx context.Context, session string) (*SessionRow, error)
	// RunList returns a session's runs, by agent and seq.
	RunList(ctx context.Context, session string) ([]RunRow, error)
	// TaskList returns a session's tasks in creation order.
	TaskList(ctx context.Context, session string) ([]TaskRow, error)
	// NoteList returns a session's notifications in write order.
	NoteList(ctx context.Context, session string) ([]NoteRow, error)

	// NodeBeat records a node's heartbeat: inserts or replaces its row.
	NodeBeat(ctx context.Context, n *Node) error
	// NodeList lists the nodes in ID order.
	NodeList(ctx context.Context) ([]Node, error)
	// NodeLeave removes a node's row (a clean stop); no row is no error.
	NodeLeave(ctx context.Context, id string) error
	// LeaseList lists every session's lease in session order: Owner,
	// Epoch, Expires, and Released (for LeaseList: the lease was given up
	// by LeaseRelease and is free now; Expires is then the zero time).
	// Previous is "".
	LeaseList(ctx context.Context) ([]Lease, error)

	// OutputSave stores a task's output (the whole of it, replacing what
	// was saved) so that every node can read it after the task ended, even
	// when the node that ran it is gone.
	OutputSave(ctx context.Context, p *OutputSaveParams) error
	// OutputRead reads up to Limit bytes of a saved output from Offset;
	// Size is the saved output's length. ErrNotFound when none was saved.
	OutputRead(ctx context.Context, p *OutputReadParams) (*Output, error)

	// Close releases the store's resources. Safe to call twice.
	Close() error
}

// ReleaseOne gives up one lease through LeaseRelease.
func ReleaseOne(ctx context.Context, s Store, session, owner string, epoch int64) error {
	return s.LeaseRelease(ctx, &LeaseReleaseParams{Owner: owner, Leases: []LeaseRef{{Session: session, Epoch: epoch}}})
}

// RenewOne renews one lease through LeaseRenew: the lease it now is, or
// ErrFenced when it was lost.
func RenewOne(ctx context.Context, s Store, session, owner string, epoch int64, ttl time.Duration, now time.Time) (*Lease, error) {
	res, err := s.LeaseRenew(ctx, &LeaseRenewParams{Owner: owner, Leases: []LeaseRef{{Session: session, Epoch: epoch}}, TTL: ttl, Now: now})
	if err != nil {
		return nil, err
	}
	if len(res.Renewed) != 1 || res.Renewed[0] != session {
		return nil, fmt.Errorf("renew lease of %s: %s at epoch %d: %w", session, owner, epoch, ErrFenced)
	}
	return &Lease{Session: session, Owner: owner, Epoch: epoch, Expires: res.Expires}, nil
}
