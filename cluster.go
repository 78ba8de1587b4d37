package vigil

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/store"
)

// ClusterOptions makes a runtime one node of several that share a store
// (PostgreSQL). Every node then serves every session: an action on a
// session another node runs is carried to that node (PeerHandler), live
// events of every session reach every node's subscriptions through the
// store, a node that stops beating is taken for dead within DeadAfter and
// its sessions are adopted by the others, spread among them, and a node
// that closes hands its sessions over at once.
type ClusterOptions struct {
	// Advertise is the base URL other nodes reach this node's HTTP API at
	// (http://host:port); PeerHandler must be served under it at
	// /api/internal/call.
	Advertise string
	// Token is the cluster secret: the bearer token of calls between
	// nodes. Every node must accept it.
	Token string
	// Client sends calls to other nodes; nil means a client that gives up
	// connecting after 3 s.
	Client *http.Client
	// Heartbeat is how often the node records that it is alive and reads
	// the other nodes' beats (1 s).
	Heartbeat time.Duration
	// DeadAfter is how long a node's beat may stand still before the
	// others take it for dead and take its sessions over (5 s). The lease
	// epoch, not this judgement, keeps a node taken for dead from writing
	// again: at worst a paused node's sessions move needlessly.
	DeadAfter time.Duration
	// RouteWait bounds how long an action waits for a session between
	// owners (a failover) before it is answered CodeUnavailable with a
	// RetryAfter (15 s).
	RouteWait time.Duration
}

// NodeInfo is a node of the cluster as this node sees it.
type NodeInfo struct {
	ID      string
	Address string
	Started time.Time
	// Beat is the node's last heartbeat, by its own clock.
	Beat time.Time
	// Alive says its beat moved within DeadAfter, as this node saw it.
	Alive bool
	// Draining says it is stopping: it takes no new sessions.
	Draining bool
	// Self is this node.
	Self bool
	// Sessions is how many sessions it ran at its last beat.
	Sessions int
}

const (
	defaultHeartbeat = time.Second
	defaultDeadAfter = 5 * time.Second
	defaultRouteWait = 15 * time.Second
	// feedPage is how many records the cluster feed reads at a time.
	feedPage = 512
)

// cluster is a runtime's part in a cluster.
type cluster struct {
	opts    ClusterOptions
	client  *http.Client
	started time.Time
	mu      sync.Mutex
	nodes   map[string]*seenNode
	owners  map[SessionID]string // lease holders learned from refused acquisitions
	orphans map[core.SessionID]time.Time
	// closed are sessions found closed whose leases are free: no pass
	// reads the sessions list for them again.
	closed map[string]bool
	// placed counts the sessions this node sent to each node since that
	// node's last beat, which does not count them yet.
	placed   map[string]int
	draining bool

	// bugs puts back, for the tests of rule 13, a bug the checks must
	// catch; the zero value has none.
	bugs clusterBugs

	// adoptNow asks the adoption loop for a pass now, renewNow the
	// renewal loop (buffered, 1).
	adoptNow, renewNow chan struct{}
	// lastBeat is the time written by the last heartbeat that succeeded
	// (the others judge this node by it); failing is when they began
	// failing (zero while they succeed) and warned when that was last
	// logged.
	lastBeat, failing, warned time.Time
	// observed is when this node last read the nodes table. A node is
	// judged by what this node saw of it up to then: its beat stood still
	// between two reads DeadAfter apart. Never by the time alone: a node
	// that was paused itself (or whose reads failed) has not watched the
	// others meanwhile, and would take them all for dead.
	observed time.Time
	// renewedAt is when a renewal round began that the store answered.
	renewedAt time.Time
	// saves counts the task outputs being saved (saveOutput).
	saves sync.WaitGroup
	feed  *feed
}

// clusterBugs are bugs a test may put back to see its checks catch them.
type clusterBugs struct {
	// noForward runs every action here: a session another node runs is
	// refused (CodeMoved), as before any node answered.
	noForward bool
	// feedLocal feeds subscriptions this node's events only, as when
	// live events stayed on the owner.
	feedLocal bool
}

// seenNode is a node's last row and when this node saw its beat move.
type seenNode struct {
	row     store.Node
	changed time.Time
}

func newCluster(r *Runtime, o ClusterOptions) *cluster {
	if o.Heartbeat <= 0 {
		o.Heartbeat = defaultHeartbeat
	}
	if o.DeadAfter <= 0 {
		o.DeadAfter = defaultDeadAfter
	}
	if o.RouteWait <= 0 {
		o.RouteWait = defaultRouteWait
	}
	c := &cluster{
		opts: o, client: o.Client, started: r.started,
		nodes: map[string]*seenNode{}, owners: map[SessionID]string{}, orphans: map[core.SessionID]time.Time{}, placed: map[string]int{}, closed: map[string]bool{},
		adoptNow: make(chan struct{}, 1), renewNow: make(chan struct{}, 1), feed: newFeed(),
	}
	if c.client == nil {
		c.client = defaultPeerClient()
	}
	return c
}

// beat records this node's heartbeat and reads the others'. A node whose
// beat stood still for DeadAfter, or that left, starts an adoption pass.
func (r *Runtime) beat() {
	c := r.cl
	ctx, cancel := context.WithTimeout(r.ctx, c.opts.Heartbeat*2)
	defer cancel()
	beat, err := r.beatOnce(ctx)
	if r.ctx.Err() != nil {
		return
	}
	now := r.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && c.failing.IsZero():
		c.failing, c.warned = now, now
		r.log.Warn("cluster heartbeat failed; will retry", "err", err)
	case err != nil && now.Sub(c.warned) >= 30*time.Second:
		c.warned = now
		r.log.Warn("cluster heartbeats still fail; the other nodes take this one for dead", "since", c.failing, "err", err)
	case err == nil:
		if !c.failing.IsZero() {
			r.log.Info("cluster heartbeat recovered", "failed_for", now.Sub(c.failing))
			c.failing = time.Time{}
		}
		if !c.lastBeat.IsZero() && beat.Sub(c.lastBeat) >= c.opts.DeadAfter {
			// The others may have taken this node for dead (a pause, a
			// partition) and its sessions over: learn which at once
			// rather than at the next renewal.
			c.pokeRenew()
		}
		// The time the beat wrote, not when it returned: the others may
		// have seen it stand still from then on.
		c.lastBeat = beat
	}
}

// beatOnce records this node's heartbeat and reads the others'; it
// returns the beat's time.
func (r *Runtime) beatOnce(ctx context.Context) (time.Time, error) {
	c := r.cl
	c.mu.Lock()
	draining := c.draining
	c.mu.Unlock()
	n := &store.Node{ID: r.opts.Node, Address: c.opts.Advertise, Started: c.started, Beat: r.clock.Now(), Draining: draining, Sessions: r.running()}
	if err := r.st.NodeBeat(ctx, n); err != nil {
		return n.Beat, fmt.Errorf("record heartbeat: %w", err)
	}
	rows, err := r.st.NodeList(ctx)
	if err != nil {
		return n.Beat, fmt.Errorf("list nodes: %w", err)
	}
	now := r.clock.Now()
	if c.observe(r.opts.Node, rows, now) {
		c.pokeAdopt()
	}
	for _, id := range c.longDead(now) {
		// A node that crashed long ago leaves no row behind for good.
		if err := r.st.NodeLeave(ctx, id); err != nil {
			return n.Beat, fmt.Errorf("remove the row of node %s, dead since long: %w", id, err)
		}
	}
	return n.Beat, nil
}

// pruneAfter is how long a node is dead before its row is removed.
const pruneAfter = time.Minute

// longDead lists the nodes dead for pruneAfter.
func (c *cluster) longDead(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, n := range c.nodes {
		if c.observed.Sub(n.changed) >= c.opts.DeadAfter+pruneAfter {
			out = append(out, id)
		}
	}
	return out
}

// observe takes in the nodes' rows at now and reports whether a node
// died, left or began draining since the last look.
func (c *cluster) observe(self string, rows []store.Node, now time.Time) (changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.observed) {
		return false // an older read, done late: the last look stands
	}
	wasAlive := map[string]bool{}
	for id := range c.nodes {
		wasAlive[id] = c.aliveLocked(self, id)
	}
	c.observed = now
	seen := make(map[string]bool, len(rows))
	for _, row := range rows {
		seen[row.ID] = true
		old := c.nodes[row.ID]
		if old == nil {
			c.nodes[row.ID] = &seenNode{row: row, changed: now}
			continue
		}
		if !old.row.Beat.Equal(row.Beat) {
			old.changed = now
			delete(c.placed, row.ID)
		}
		if row.Draining && !old.row.Draining {
			changed = true
		}
		old.row = row
		if wasAlive[row.ID] && !c.aliveLocked(self, row.ID) {
			changed = true
		}
	}
	for id := range c.nodes {
		if !seen[id] {
			delete(c.nodes, id)
			changed = true
		}
	}
	return changed
}

func (c *cluster) pokeRenew() {
	select {
	case c.renewNow <- struct{}{}:
	default:
	}
}

// unsure reports whether this node's heartbeats have failed for
// DeadAfter, so that the others may have taken it for dead and its
// sessions over, and no renewal has shown its leases held since.
func (c *cluster) unsure(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastBeat.IsZero() || now.Sub(c.lastBeat) < c.opts.DeadAfter {
		return false
	}
	return c.renewedAt.Before(c.lastBeat.Add(c.opts.DeadAfter))
}

// renewed records a renewal round that the store answered.
func (c *cluster) renewed(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.renewedAt = at
}

func (c *cluster) pokeAdopt() {
	select {
	case c.adoptNow <- struct{}{}:
	default:
	}
}

// alive reports whether node id is this node, or one whose beat this node
// saw move within DeadAfter of its last read of the nodes table. A node
// never seen is not alive.
func (c *cluster) alive(self, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aliveLocked(self, id)
}

func (c *cluster) aliveLocked(self, id string) bool {
	if id == self {
		return true
	}
	n := c.nodes[id]
	return n != nil && c.observed.Sub(n.changed) < c.opts.DeadAfter
}

// dead reports whether node id is a member whose beat this node saw stand
// still for DeadAfter: between two of its reads of the nodes table, never
// because time passed while it did not look (its own pause). A node not
// in the table is not judged (its leases expire).
func (c *cluster) dead(self, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	return id != self && n != nil && c.observed.Sub(n.changed) >= c.opts.DeadAfter
}

// address is a live member's advertised address, or "".
func (c *cluster) address(self, id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[id]; n != nil && id != self && c.aliveLocked(self, id) {
		return n.row.Address
	}
	return ""
}

// liveNodes lists the live members that take sessions, this node
// included (unless it drains), by ID.
func (c *cluster) liveNodes(self string) []store.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Node
	for id, n := range c.nodes {
		if id == self && c.draining {
			continue
		}
		if c.aliveLocked(self, id) && !n.row.Draining && (id == self || n.row.Address != "") {
			out = append(out, n.row)
		}
	}
	slices.SortFunc(out, func(a, b store.Node) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

func (c *cluster) remember(session SessionID, owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owners[session] = owner
}

func (c *cluster) forget(session SessionID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.owners, session)
}

func (c *cluster) cachedOwner(session SessionID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.owners[session]
	return o, ok
}

// running counts the sessions this runtime runs.
func (r *Runtime) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.actors {
		if a != nil {
			n++
		}
	}
	return n
}

// Nodes lists the members of the cluster as this node sees them, by ID;
// a runtime not in a cluster lists itself alone.
func (r *Runtime) Nodes(ctx context.Context) ([]NodeInfo, error) {
	now := r.clock.Now()
	if r.cl == nil {
		return []NodeInfo{{ID: r.opts.Node, Started: r.started, Alive: true, Self: true, Beat: now, Sessions: r.running()}}, nil
	}
	rows, err := r.st.NodeList(ctx)
	if err != nil {
		return nil, wrapErr(fmt.Errorf("list nodes: %w", err))
	}
	r.cl.observe(r.opts.Node, rows, now)
	out := make([]NodeInfo, 0, len(rows))
	for _, row := range rows {
		out = append(out, NodeInfo{
			ID: row.ID, Address: row.Address, Started: row.Started, Beat: row.Beat,
			Alive: r.cl.alive(r.opts.Node, row.ID), Draining: row.Draining, Self: row.ID == r.opts.Node, Sessions: row.Sessions,
		})
	}
	return out, nil
}

// NodeID is this runtime's name as a lease owner and cluster member.
func (r *Runtime) NodeID() string { return r.opts.Node }

// claimable reports whether the cluster should take session over: its
// lease is free (released or expired), or its owner is dead. Sessions are
// spread over the live nodes: each is first left, for a pass, to the node
// its id hashes to, then taken by whoever sees it still orphaned.
func (r *Runtime) claimable(id core.SessionID, l store.Lease, now time.Time) bool {
	c := r.cl
	if l.Owner == r.opts.Node {
		return true // this node's own lease that lapsed: retaken as before
	}
	if !l.Released && now.Before(l.Expires) && !c.dead(r.opts.Node, l.Owner) && !nodeGone(l.Owner) {
		c.mu.Lock()
		delete(c.orphans, id)
		c.mu.Unlock()
		return false
	}
	live := c.liveNodes(r.opts.Node)
	if len(live) <= 1 {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	if live[int(h.Sum32()%uint32(len(live)))].ID == r.opts.Node {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	first, ok := c.orphans[id]
	if !ok {
		c.orphans[id] = now
		return false
	}
	return now.Sub(first) >= 2*c.opts.Heartbeat
}

// clusterCandidates lists the open sessions the cluster should take over
// now, from one read of the leases; the sessions list is read only when
// some lease is free.
func (r *Runtime) clusterCandidates(ctx context.Context) ([]store.SessionRow, error) {
	leases, err := r.st.LeaseList(ctx)
	if err != nil {
		return nil, fmt.Errorf("vigil: list leases: %w", err)
	}
	now := r.clock.Now()
	free := map[string]bool{}
	for _, l := range leases {
		r.mu.Lock()
		_, mine := r.actors[core.SessionID(l.Session)]
		r.mu.Unlock()
		r.cl.mu.Lock()
		closed := r.cl.closed[l.Session]
		r.cl.mu.Unlock()
		if !mine && !closed && r.claimable(core.SessionID(l.Session), l, now) {
			free[l.Session] = true
		}
	}
	if len(free) == 0 {
		return nil, nil
	}
	rows, err := r.st.SessionList(ctx, &store.SessionListParams{Open: true})
	if err != nil {
		return nil, fmt.Errorf("vigil: list sessions: %w", err)
	}
	out := rows[:0]
	for _, row := range rows {
		if free[row.ID] {
			out = append(out, row)
			delete(free, row.ID)
		}
	}
	// What is left is closed (or unknown to the list): never open again.
	r.cl.mu.Lock()
	for id := range free {
		r.cl.closed[id] = true
	}
	r.cl.mu.Unlock()
	return out, nil
}

// drain tells the cluster this node stops: it takes no new sessions.
func (r *Runtime) drain() {
	c := r.cl
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := r.beatOnce(ctx); err != nil {
		r.log.Debug("could not record that this node drains", "err", err)
	}
}

// waitSaves waits, within releaseTimeout, for the outputs of the
// commands that ended being saved.
func (r *Runtime) waitSaves() {
	done := make(chan struct{})
	go func() {
		r.cl.saves.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(releaseTimeout):
		r.log.Warn("task outputs were not saved in time; other nodes cannot read them", "waited", releaseTimeout)
	}
}

// leave removes this node from the cluster after its leases were
// released, so that the others adopt its sessions at their next beat.
func (r *Runtime) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := r.st.NodeLeave(ctx, r.opts.Node); err != nil {
		r.log.Warn("could not leave the cluster; the others take this node for dead shortly", "err", err)
	}
}

// placeFor picks the node a new session goes to: the live node that runs
// the fewest, this one unless another runs at least two fewer. A node's
// count is its last beat's plus what this node sent it since; a node
// whose last beat is older than two heartbeats is not chosen (its count
// is old). It returns that node's ID and address, "" for here.
func (r *Runtime) placeFor(now time.Time) (id, addr string) {
	c := r.cl
	live := c.liveNodes(r.opts.Node)
	mine := r.running()
	c.mu.Lock()
	defer c.mu.Unlock()
	bestLoad := mine
	for _, n := range live {
		seen := c.nodes[n.ID]
		if n.ID == r.opts.Node || seen == nil || now.Sub(seen.changed) >= 2*c.opts.Heartbeat {
			continue
		}
		if load := n.Sessions + c.placed[n.ID]; load+1 < bestLoad {
			id, addr, bestLoad = n.ID, n.Address, load+1
		}
	}
	return id, addr
}

// sent counts a session sent to node id.
func (c *cluster) sent(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.placed[id]++
}

// errUnsure is why a session this node runs is not answered for here: its
// lease may have passed to another node (see locate).
var errUnsure = errors.New("this node's lease on it may have lapsed; checking")

// errNotMember is why a session cannot be reached: the lease holder is no
// live member of the cluster.
var errNotMember = errors.New("its lease holder is not a live member of the cluster")

// joinCluster makes the runtime a member: its first heartbeat is recorded
// and the others' read before it adopts any session, and the cluster feed
// starts at the store's end.
func (r *Runtime) joinCluster(ctx context.Context, o ClusterOptions) error {
	r.cl = newCluster(r, o)
	last, err := r.lastGlobal(ctx)
	if err != nil {
		return fmt.Errorf("vigil: find the end of the event log: %w", err)
	}
	r.cl.feed.last = last
	if _, err := r.beatOnce(ctx); err != nil {
		return fmt.Errorf("vigil: join the cluster: %w", err)
	}
	return nil
}

// feed follows the store's log for a cluster node: every session's events,
// whichever node commits them, in Global order. It feeds the all-sessions
// subscriptions and every session subscription of the node, so a stream
// carries a session's live events wherever the session runs and goes on
// when it moves.
type feed struct {
	poke chan struct{} // read now (buffered, 1)

	mu       sync.Mutex
	sessions map[SessionID]*fanout
	last     int64 // the last Global read
	closed   bool
}

func newFeed() *feed {
	return &feed{poke: make(chan struct{}, 1), sessions: map[SessionID]*fanout{}}
}

// wake asks the feed to read now: this node committed.
func (f *feed) wake() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// listen registers a listener of one session's live events.
func (f *feed) listen(session SessionID, maxBytes int64) (*fanout, *listener) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fo := f.sessions[session]
	if fo == nil {
		fo = newFanout()
		if f.closed {
			fo.closeAll()
		} else {
			f.sessions[session] = fo
		}
	}
	return fo, fo.add(maxBytes)
}

// publish hands records read from the log to the session's listeners; a
// session's fanout no one listens to goes, and a closed session's
// listeners end.
func (f *feed) publish(session SessionID, recs []store.Record, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fo := f.sessions[session]
	if fo == nil {
		return
	}
	fo.publish(recs)
	fo.mu.Lock()
	empty := len(fo.subs) == 0
	fo.mu.Unlock()
	if closed || empty {
		delete(f.sessions, session)
		fo.closeAll()
	}
}

func (f *feed) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for id, fo := range f.sessions {
		delete(f.sessions, id)
		fo.closeAll()
	}
}

// feedPoll is how often the feed reads the log without being told of a
// commit: the bound on how late a lost notification makes an event.
const feedPoll = time.Second

// feedLoop reads the log whenever the store tells of a commit (any node's,
// through store.Watcher), this node commits, or feedPoll passes.
func (r *Runtime) feedLoop() {
	defer r.wg.Done()
	f := r.cl.feed
	var changes <-chan struct{}
	w, ok := r.st.(store.Watcher)
	if !ok {
		r.log.Info("the store tells of no commits; other nodes' events arrive by polling", "every", feedPoll)
	}
	if ok {
		ch, err := w.Watch(r.ctx)
		if err != nil {
			r.log.Warn("cannot watch the store for other nodes' commits; their events arrive by polling", "every", feedPoll, "err", err)
		} else {
			changes = ch
		}
	}
	tick := make(chan struct{}, 1)
	var t Timer
	arm := func() {
		t = r.clock.AfterFunc(feedPoll, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
	}
	arm()
	defer func() { t.Stop() }()
	for {
		select {
		case <-r.loopStop:
			return
		case <-f.poke:
		case _, ok := <-changes:
			if !ok {
				changes = nil
			}
		case <-tick:
			arm()
		}
		r.feedRead()
	}
}

// feedRead reads the log from where the feed stands to its end.
func (r *Runtime) feedRead() {
	f := r.cl.feed
	for {
		f.mu.Lock()
		last := f.last
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		recs, err := r.st.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: last, Limit: feedPage})
		cancel()
		if err != nil {
			if r.ctx.Err() == nil {
				r.log.Warn("reading the event log for live events failed; will retry", "after", last, "err", err)
			}
			return
		}
		if len(recs) == 0 {
			return
		}
		n, next := len(recs), recs[len(recs)-1].Global
		if r.cl.bugs.feedLocal {
			recs = r.runsHere(recs)
		}
		r.allSubs.publish(recs)
		for i := 0; i < len(recs); {
			j := i + 1
			for j < len(recs) && recs[j].Session == recs[i].Session {
				j++
			}
			closed := false
			for _, rec := range recs[i:j] {
				if rec.Type == (&core.SessionClosed{}).Type() {
					closed = true
				}
			}
			f.publish(SessionID(recs[i].Session), recs[i:j], closed)
			i = j
		}
		f.mu.Lock()
		f.last = next
		f.mu.Unlock()
		if n < feedPage {
			return
		}
	}
}

// runsHere keeps the records of the sessions this node runs (a seeded
// bug: clusterBugs.feedLocal).
func (r *Runtime) runsHere(recs []store.Record) []store.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Record
	for _, rec := range recs {
		if r.actors[core.SessionID(rec.Session)] != nil {
			out = append(out, rec)
		}
	}
	return out
}

// maxSavedOutput caps the task output a cluster node saves in the store
// when a command ends; more is cut, and said so.
const maxSavedOutput = 64 << 20

// saveOutput saves a task's output file in the store when its command has
// ended, so that every node can read it, even once this one is gone.
// Best effort: a failure is logged, and the file stays here.
func (r *Runtime) saveOutput(session core.SessionID, task core.TaskID, path string) {
	data, _, err := shell.ReadOutput(path, 0, maxSavedOutput+1)
	if errors.Is(err, fs.ErrNotExist) {
		data, err = nil, nil
	}
	if err != nil {
		r.log.Warn("could not read a task's output to save it; other nodes cannot read it", "session", session, "task", task, "err", err)
		return
	}
	if len(data) > maxSavedOutput {
		data = append(data[:maxSavedOutput:maxSavedOutput], fmt.Sprintf("\n[vigil: output cut at %d bytes for the store]\n", maxSavedOutput)...)
	}
	// Not the runtime's context: a node that closes saves the output of
	// the commands its close ended (Close waits, within releaseTimeout).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.st.OutputSave(ctx, &store.OutputSaveParams{Session: string(session), Task: string(task), Data: data}); err != nil {
		r.log.Warn("could not save a task's output in the store; other nodes cannot read it", "session", session, "task", task, "err", err)
	}
}

// storedOutput reads a task's output the store keeps: fs.ErrNotExist
// when none was saved.
func (r *Runtime) storedOutput(ctx context.Context, session core.SessionID, task core.TaskID, offset, limit int64) ([]byte, int64, error) {
	o, err := r.st.OutputRead(ctx, &store.OutputReadParams{Session: string(session), Task: string(task), Offset: offset, Limit: limit})
	if errors.Is(err, store.ErrNotFound) {
		return nil, offset, fmt.Errorf("task %s output: %w", task, fs.ErrNotExist)
	}
	if err != nil {
		return nil, offset, fmt.Errorf("read the stored output of task %s: %w", task, err)
	}
	return o.Data, offset + int64(len(o.Data)), nil
}
