// Package admit orders a node's CPU work when there is more of it than
// processors: a fixed number of slots (one per processor), and the work
// that waits for one is served by priority, first come first served within
// a priority.
//
// Without it, every busy session's actor and every model call's goroutine
// is runnable at once on a saturated node, and Go's scheduler serves them
// in turn: a wake (a background run's result reaching its owner) waits
// behind every other session's step, several times over, and its latency
// grows with the number of busy sessions. With it, at most one holder per
// slot runs a session step (takeovers, providers, tools and the server run
// outside it); the rest wait here, in the order the runtime chooses: work in progress first, then results and requests, and
// last the start of new background work.
//
// A holder must release its slot before it blocks on I/O (a store commit)
// and acquire it again after; a slot held while blocked only goes unused,
// and nothing a holder waits for needs a slot, so the gate cannot
// deadlock. Work of the lowest priority is not starved: once the oldest of
// it has waited MaxStartWait, it goes first. An unsaturated node never
// waits: Acquire takes a free slot at once.
package admit

import (
	"sync"
	"time"
)

// Priority orders the work that waits for a slot: lower first.
type Priority uint8

// The priorities, first served first.
const (
	// Resume is work already under way that stopped for I/O (a step whose
	// commit returned): finishing it frees what it holds and delivers what
	// others wait for.
	Resume Priority = iota
	// Step is a session step: an effect's outcome, an API request, a timer.
	Step
	// Start is the start of new background work (a background agent's
	// model call), served when nothing else waits, or once it waited
	// MaxStartWait.
	Start

	priorities = int(Start) + 1
)

// MaxStartWait bounds how long Start work waits while other work goes
// ahead of it: the oldest of it is served first once it waited this long.
const MaxStartWait = 100 * time.Millisecond

// Gate hands out a fixed number of slots by priority. A nil *Gate admits
// everything at once.
type Gate struct {
	now   func() time.Time
	slots int

	mu     sync.Mutex
	free   int
	queues [priorities][]*waiter
	// taken counts the acquisitions per priority, waited those that had
	// to wait.
	taken, waited [priorities]uint64
	aged          uint64
}

// New returns a gate of slots slots (at least 1); now tells the time (for
// MaxStartWait), time.Now when nil.
func New(slots int, now func() time.Time) *Gate {
	if now == nil {
		now = time.Now
	}
	return &Gate{free: max(slots, 1), slots: max(slots, 1), now: now}
}

// Slots is how many slots the gate hands out.
func (g *Gate) Slots() int {
	if g == nil {
		return 0
	}
	return g.slots
}

// Acquire takes a slot, waiting while none is free or other work waits
// that goes first: of a higher priority, or of the same and come earlier.
func (g *Gate) Acquire(p Priority) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.taken[p]++
	if g.free > 0 && g.waitingLocked() == 0 {
		g.free--
		g.mu.Unlock()
		return
	}
	g.waited[p]++
	w := &waiter{ready: make(chan struct{})}
	if p == Start {
		w.at = g.now()
	}
	g.queues[p] = append(g.queues[p], w)
	g.mu.Unlock()
	<-w.ready // the releaser handed its slot over
}

// Release gives a slot back: to the waiter that goes first, or to the
// free ones.
func (g *Gate) Release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	w := g.nextLocked()
	if w == nil {
		g.free++
	}
	g.mu.Unlock()
	if w != nil {
		close(w.ready)
	}
}

// Admit waits for the turn of work of priority p without keeping a slot:
// for work that is about to leave the node (a model call), which should
// start only when what goes first is served.
func (g *Gate) Admit(p Priority) {
	g.Acquire(p)
	g.Release()
}

// nextLocked takes the waiter that goes first off its queue: the oldest
// Start once it waited MaxStartWait, else the first of the highest
// priority. nil when nobody waits.
func (g *Gate) nextLocked() *waiter {
	if q := g.queues[Start]; len(q) > 0 && g.now().Sub(q[0].at) >= MaxStartWait {
		g.aged++
		return g.popLocked(Start)
	}
	for p := range priorities {
		if len(g.queues[p]) > 0 {
			return g.popLocked(Priority(p))
		}
	}
	return nil
}

func (g *Gate) popLocked(p Priority) *waiter {
	q := g.queues[p]
	w := q[0]
	q[0] = nil
	if len(q) == 1 {
		g.queues[p] = q[:0] // keep the array: the queue fills again
	} else {
		g.queues[p] = q[1:]
	}
	return w
}

func (g *Gate) waitingLocked() int {
	n := 0
	for _, q := range g.queues {
		n += len(q)
	}
	return n
}

// Stats is what a gate has done so far.
type Stats struct {
	// Waiting is how many wait for a slot now, per priority.
	Waiting [priorities]int
	// Taken counts the acquisitions (and admissions) per priority, Waited
	// those of them that had to wait.
	Taken, Waited [priorities]uint64
	// Aged counts the Start work served first because it had waited
	// MaxStartWait.
	Aged uint64
}

// Stats reads the gate's counters.
func (g *Gate) Stats() Stats {
	if g == nil {
		return Stats{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Stats{Taken: g.taken, Waited: g.waited, Aged: g.aged}
	for p, q := range g.queues {
		s.Waiting[p] = len(q)
	}
	return s
}

type waiter struct {
	ready chan struct{}
	at    time.Time // when Start work began to wait
}
