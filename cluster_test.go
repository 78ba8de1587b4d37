package vigil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/postgres"
)

const (
	clusterToken = "cluster-secret"
	// outputScenario starts a background command that prints and ends,
	// then answers the notification.
	outputScenario = `
name: output
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "echo cluster-output-$((40+2))", run_in_background: true}
      - say: "started"
      - say: "noted"
`
)

// pausable is a store that, once paused, holds every call until it is
// resumed or its context ends: a node stopped by SIGSTOP, as the others
// see it.
type pausable struct {
	store.Store
	mu     sync.Mutex
	paused chan struct{} // closed on resume; nil while running
}

func (p *pausable) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

func (p *pausable) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

func (p *pausable) wait(ctx context.Context) error {
	p.mu.Lock()
	c := p.paused
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pausable) NodeBeat(ctx context.Context, n *store.Node) error {
	if err := p.wait(ctx); err != nil {
		return err
	}
	return p.Store.NodeBeat(ctx, n)
}

func (p *pausable) LeaseRenew(ctx context.Context, r *store.LeaseRenewParams) (*store.LeaseRenewResult, error) {
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.Store.LeaseRenew(ctx, r)
}

func (p *pausable) EventAppend(ctx context.Context, a *store.EventAppendParams) (*store.AppendResult, error) {
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.Store.EventAppend(ctx, a)
}

// node is one runtime of a test cluster with its HTTP server.
type node struct {
	rt  *Runtime
	srv *httptest.Server
	st  *pausable
	// mute, when set, makes the node run the calls forwarded to it and
	// then drop the connection without an answer: a node that dies
	// between doing and saying.
	mute atomic.Bool
}

// startNode opens a runtime as a cluster member on st, serving
// PeerHandler behind the cluster token, with short beats.
func startNode(t *testing.T, st store.Store, name string) *node {
	t.Helper()
	n := &node{st: &pausable{Store: st}}
	var h http.Handler = http.NotFoundHandler()
	var mu sync.RWMutex
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+clusterToken {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mu.RLock()
		defer mu.RUnlock()
		if n.mute.Load() {
			h.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(n.srv.Close)
	providers := providersOf(t, map[string]string{"script": idleScenario, "background": backgroundScenario, "output": outputScenario})
	n.rt = openWith(t, n.st, mustParse(t, idleScenario), func(o *Options) {
		o.Node = name
		o.Providers = providers
		o.Cluster = &ClusterOptions{Advertise: n.srv.URL, Token: clusterToken, Heartbeat: 20 * time.Millisecond, DeadAfter: 300 * time.Millisecond}
	})
	mu.Lock()
	mux := http.NewServeMux()
	mux.Handle(PeerPath, n.rt.PeerHandler())
	h = mux
	mu.Unlock()
	return n
}

func providersOf(t *testing.T, scenarios map[string]string) map[string]provider.Provider {
	t.Helper()
	out := map[string]provider.Provider{}
	for name, text := range scenarios {
		sc, err := script.Parse([]byte(text))
		must(t, err)
		out[name] = script.New(sc, nil)
	}
	return out
}

// runs reports whether rt runs the session.
func (n *node) runs(id SessionID) bool {
	n.rt.mu.Lock()
	defer n.rt.mu.Unlock()
	return n.rt.actors[core.SessionID(id)] != nil
}

// eventually polls cond until it holds or the test's patience (a minute)
// runs out.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clusterStores are the stores the cluster tests run on: one memstore two
// runtimes share, and a PostgreSQL database (skipped loudly when none).
func clusterStores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memstore.New() },
		"postgres": func(t *testing.T) store.Store {
			st, err := postgres.Open(context.Background(), pgtest.Fresh(t), nil)
			must(t, err)
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

// TestClusterForwards: every action on a session, sent to a node that
// does not run it, is carried to the node that does and answered as
// there; the session does not move.
func TestClusterForwards(t *testing.T) {
	for kind, open := range clusterStores(t) {
		t.Run(kind, func(t *testing.T) {
			st := open(t)
			a := startNode(t, st, "node-a")
			b := startNode(t, st, "node-b")
			ctx := context.Background()
			sess, err := a.rt.CreateSession(ctx, &SessionParams{Prompt: "hello", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
			must(t, err)
			must(t, b.rt.WaitQuiescent(ctx, sess.ID))
			if !a.runs(sess.ID) || b.runs(sess.ID) {
				t.Fatalf("session not on node a alone (a %v, b %v)", a.runs(sess.ID), b.runs(sess.ID))
			}
			item, err := b.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "again"})
			must(t, err)
			if item == "" {
				t.Error("forwarded prompt: no item")
			}
			must(t, b.rt.Hold(ctx, sess.ID, &HoldParams{By: "test", Reason: "look"}))
			st1, err := b.rt.SessionStatus(ctx, sess.ID)
			must(t, err)
			if st1.Hold == nil {
				t.Errorf("forwarded hold not in the status read through node b: %+v", st1)
			}
			must(t, b.rt.Resume(ctx, sess.ID, "test"))
			m, err := b.rt.Message(ctx, sess.ID, &MessageParams{To: "main", Text: "hi"})
			must(t, err)
			if m.ID == "" {
				t.Errorf("forwarded message: %+v", m)
			}
			agent, task, err := b.rt.Spawn(ctx, sess.ID, &SpawnParams{Name: "helper", Prompt: "go"})
			must(t, err)
			if agent == "" || task == "" {
				t.Errorf("forwarded spawn: agent %q task %q", agent, task)
			}
			must(t, b.rt.WaitQuiescent(ctx, sess.ID))
			d, err := b.rt.SessionGet(ctx, sess.ID, nil)
			must(t, err)
			if len(d.Agents) < 2 {
				t.Errorf("session read through node b has %d agents, want 2", len(d.Agents))
			}
			if _, err := b.rt.AgentGet(ctx, sess.ID, "helper"); err != nil {
				t.Errorf("forwarded agent get: %v", err)
			}
			if runs, err := b.rt.RunList(ctx, sess.ID, ""); err != nil || len(runs) == 0 {
				t.Errorf("forwarded run list: %d runs, %v", len(runs), err)
			}
			if _, err := b.rt.InboxList(ctx, sess.ID, "main"); err != nil {
				t.Errorf("forwarded inbox list: %v", err)
			}
			if _, err := b.rt.AgentGet(ctx, sess.ID, "nobody"); !errors.Is(err, ErrNotFound) {
				t.Errorf("forwarded agent get of no agent: %v, want not found", err)
			}
			if !a.runs(sess.ID) || b.runs(sess.ID) {
				t.Fatalf("the session moved (a %v, b %v)", a.runs(sess.ID), b.runs(sess.ID))
			}
			must(t, b.rt.CloseSession(ctx, sess.ID, "test"))
			if _, err := b.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "late"}); !errors.Is(err, ErrSessionClosed) {
				t.Errorf("prompt to a closed session through node b: %v, want closed", err)
			}
		})
	}
}

// TestClusterLiveEvents: a node's subscriptions carry the live events of
// sessions another node runs, per session by Seq and all sessions by
// Global, in order, none twice, none missing.
func TestClusterLiveEvents(t *testing.T) {
	for kind, open := range clusterStores(t) {
		t.Run(kind, func(t *testing.T) {
			st := open(t)
			a := startNode(t, st, "node-a")
			b := startNode(t, st, "node-b")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			all, err := b.rt.Subscribe(ctx, &SubscribeParams{FromNow: true})
			must(t, err)
			sess, err := a.rt.CreateSession(ctx, &SessionParams{})
			must(t, err)
			one, err := b.rt.Subscribe(ctx, &SubscribeParams{Session: sess.ID})
			must(t, err)
			for i := range 5 {
				_, err := a.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "n" + string(rune('0'+i))})
				must(t, err)
				must(t, a.rt.WaitQuiescent(ctx, sess.ID))
			}
			last, err := st.LastSeq(ctx, string(sess.ID))
			must(t, err)
			var seqs []int64
			for ev := range one.C {
				seqs = append(seqs, ev.Seq)
				if ev.Seq == last {
					break
				}
			}
			for i, s := range seqs {
				if s != int64(i+1) {
					t.Fatalf("session stream through node b: %v, want 1..%d in order", seqs, last)
				}
			}
			var globals []int64
			for ev := range all.C {
				if ev.Session == sess.ID {
					globals = append(globals, ev.Global)
					if ev.Seq == last {
						break
					}
				}
			}
			if !slices.IsSorted(globals) || len(globals) != int(last) {
				t.Fatalf("all-sessions stream through node b: %d events of the session, want %d in Global order: %v", len(globals), last, globals)
			}
		})
	}
}

// TestClusterFailover: a node that stops (paused: its store calls hang)
// is taken for dead by the other within DeadAfter, which takes its
// sessions over at once; the output of a task the paused node ran is
// read from the store; when the paused node comes back its writes are
// fenced and it lets the sessions go. A node that closes hands its
// sessions over: the other resumes them as a clean stop.
func TestClusterFailover(t *testing.T) {
	for kind, open := range clusterStores(t) {
		t.Run(kind, func(t *testing.T) {
			st := open(t)
			a := startNode(t, st, "node-a")
			b := startNode(t, st, "node-b")
			ctx := context.Background()
			sess, err := a.rt.CreateSession(ctx, &SessionParams{Prompt: "go", Provider: "output", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
			must(t, err)
			var task TaskID
			eventually(t, "the task ends on node a", func() bool {
				d, err := a.rt.SessionGet(ctx, sess.ID, nil)
				must(t, err)
				for _, tk := range d.Tasks {
					if tk.Kind == TaskShell && !tk.Status.Live() {
						task = tk.ID
						return true
					}
				}
				return false
			})
			must(t, a.rt.WaitQuiescent(ctx, sess.ID))

			a.st.pause()
			eventually(t, "node b takes the paused node's session over", func() bool { return b.runs(sess.ID) })
			out, err := b.rt.TaskOutput(ctx, sess.ID, &TaskOutputParams{Task: task})
			must(t, err)
			if !strings.Contains(string(out.Data), "cluster-output-42") {
				t.Errorf("output of a task of the paused node, read through node b: %q", out.Data)
			}
			_, err = b.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "after failover"})
			must(t, err)
			must(t, b.rt.WaitQuiescent(ctx, sess.ID))
			a.st.resume()
			eventually(t, "the paused node lets the session go", func() bool { return !a.runs(sess.ID) })
			// It serves the session again, through node b.
			_, err = a.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "through a"})
			must(t, err)
			if !b.runs(sess.ID) {
				t.Error("the session left node b")
			}

			// A clean stop hands over at once.
			s2, err := b.rt.CreateSession(ctx, &SessionParams{Prompt: "hello"})
			must(t, err)
			must(t, b.rt.WaitQuiescent(ctx, s2.ID))
			must(t, b.rt.Close())
			eventually(t, "node a resumes node b's sessions after its clean stop", func() bool { return a.runs(sess.ID) && a.runs(s2.ID) })
			must(t, a.rt.WaitQuiescent(ctx, s2.ID))
		})
	}
}

// TestClusterWrongToken: a node whose token the others refuse says so.
func TestClusterWrongToken(t *testing.T) {
	st := memstore.New()
	a := startNode(t, st, "node-a")
	b := startNode(t, st, "node-b")
	b.rt.cl.opts.Token = "wrong"
	ctx := context.Background()
	sess, err := a.rt.CreateSession(ctx, &SessionParams{})
	must(t, err)
	_, err = b.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "x"})
	if err == nil || !strings.Contains(err.Error(), "same cluster token") {
		t.Fatalf("prompt through a node with the wrong token: %v", err)
	}
}

// Watch passes the store's commit notifications through (a paused node
// hears them as a stopped process would, later; that does not matter).
func (p *pausable) Watch(ctx context.Context) (<-chan struct{}, error) {
	w, ok := p.Store.(store.Watcher)
	if !ok {
		return nil, errors.New("the store tells of no commits")
	}
	return w.Watch(ctx)
}

// TestClusterNoDoubleActions: a node that runs a forwarded prompt and dies
// before it answers is not sent the prompt again (nor is any other node):
// the caller hears that it may have been applied, and it was, once. A
// call that is safe twice (a hold) is retried, and succeeds.
func TestClusterNoDoubleActions(t *testing.T) {
	st := memstore.New()
	a := startNode(t, st, "node-a")
	b := startNode(t, st, "node-b")
	ctx := context.Background()
	sess, err := a.rt.CreateSession(ctx, &SessionParams{})
	must(t, err)
	a.mute.Store(true)
	_, err = b.rt.Prompt(ctx, sess.ID, &PromptParams{Text: "once"})
	if err == nil || !strings.Contains(err.Error(), "may or may not have been applied") {
		t.Fatalf("prompt through a node whose owner dies before it answers: %v", err)
	}
	a.mute.Store(false)
	must(t, a.rt.WaitQuiescent(ctx, sess.ID))
	d, err := a.rt.SessionGet(ctx, sess.ID, &SessionGetParams{Runs: true})
	must(t, err)
	runs := 0
	for _, ag := range d.Agents {
		runs += len(ag.RunHistory)
	}
	if runs != 1 {
		t.Errorf("the prompt ran %d times, want once", runs)
	}
	a.mute.Store(true)
	go func() {
		// The owner answers again after a while: the hold, sent again,
		// gets through.
		time.Sleep(200 * time.Millisecond)
		a.mute.Store(false)
	}()
	must(t, b.rt.Hold(ctx, sess.ID, &HoldParams{By: "test"}))
}

// listCounter counts the sessions-list reads of a store.
type listCounter struct {
	store.Store
	lists atomic.Int64
}

func (c *listCounter) SessionList(ctx context.Context, p *store.SessionListParams) ([]store.SessionRow, error) {
	c.lists.Add(1)
	return c.Store.SessionList(ctx, p)
}

func (c *listCounter) Watch(ctx context.Context) (<-chan struct{}, error) {
	return c.Store.(store.Watcher).Watch(ctx)
}

// TestClusterIdleReads: an idle cluster's adoption passes read the leases
// only; a closed session's free lease makes one pass read the sessions
// list, not every pass.
func TestClusterIdleReads(t *testing.T) {
	st := memstore.New()
	a := startNode(t, st, "node-a")
	counted := &listCounter{Store: st}
	b := startNode(t, counted, "node-b")
	ctx := context.Background()
	sess, err := a.rt.CreateSession(ctx, &SessionParams{})
	must(t, err)
	must(t, a.rt.CloseSession(ctx, sess.ID, "test"))
	must(t, a.rt.Close()) // releases the closed session's lease
	eventually(t, "node b sees node a gone", func() bool {
		nodes, err := b.rt.Nodes(ctx)
		must(t, err)
		return len(nodes) == 1
	})
	// Twenty heartbeats: ten adoption passes at least.
	before := counted.lists.Load()
	passes := 0
	for passes < 10 {
		b.rt.cl.pokeAdopt()
		time.Sleep(2 * b.rt.cl.opts.Heartbeat)
		passes++
	}
	if n := counted.lists.Load() - before; n > 1 {
		t.Errorf("%d idle adoption passes read the sessions list %d times, want at most once", passes, n)
	}
}

// TestPeerCallDoubtsALapsedLease: a call forwarded to the node that runs
// a session is not answered from its copy once its lease ran out by that
// node's clock (a node that wakes from a pause, the calls sent to it
// waiting in its socket): the caller hears that the session moved and
// looks again. Once a renewal shows the lease still held, calls are
// answered again.
func TestPeerCallDoubtsALapsedLease(t *testing.T) {
	st := memstore.New()
	a := startNode(t, st, "node-a")
	ctx := context.Background()
	sess, err := a.rt.CreateSession(ctx, &SessionParams{})
	must(t, err)
	must(t, a.rt.Hold(ctx, sess.ID, &HoldParams{By: "test"}))
	call := func(method string) *peerReply {
		t.Helper()
		body, err := json.Marshal(peerCall{Method: method, Session: sess.ID, Params: json.RawMessage(`"test"`)})
		must(t, err)
		req, err := http.NewRequest(http.MethodPost, a.srv.URL+PeerPath, bytes.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		var reply peerReply
		must(t, json.NewDecoder(resp.Body).Decode(&reply))
		return &reply
	}
	// The lease ran out by this node's clock, as after a pause; the
	// store's copy of it has not been looked at yet.
	a.rt.mu.Lock()
	act := a.rt.actors[core.SessionID(sess.ID)]
	a.rt.mu.Unlock()
	act.mu.Lock()
	act.expires = a.rt.clock.Now().Add(-time.Second)
	act.mu.Unlock()
	if reply := call(callResume); reply.Error == nil || reply.Error.Code != CodeMoved {
		t.Fatalf("resume forwarded to a node whose lease ran out by its clock: %+v, want an error %q", reply, CodeMoved)
	}
	st1, err := a.rt.SessionStatus(ctx, sess.ID)
	must(t, err)
	if st1.Hold == nil {
		t.Fatalf("the resume refused was applied: %+v", st1)
	}
	// The renewal it asked for finds the lease still this node's.
	eventually(t, "calls answered once the renewal shows the lease held", func() bool {
		return call(callResume).Error == nil
	})
}

// TestDeadOnlyBySeenStandstill: a node is taken for dead when this node
// saw its beat stand still between two reads of the nodes table, never
// because time passed while this node did not look: a node that wakes
// from a pause of its own took every other for dead, stole the live
// owners' leases, and the old owners answered from their copies until
// their renewals failed (a resume applied to a copy without the hold was
// lost, and the session stayed held: TestCluster in CI).
func TestDeadOnlyBySeenStandstill(t *testing.T) {
	c := newCluster(&Runtime{}, ClusterOptions{DeadAfter: 5 * time.Second})
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	rows := func(beat time.Time) []store.Node {
		return []store.Node{{ID: "self", Address: "http://self", Beat: t0}, {ID: "other", Address: "http://other", Beat: beat}}
	}
	c.observe("self", rows(t0), t0)
	c.observe("self", rows(t0.Add(time.Second)), t0.Add(time.Second))
	// Twenty seconds pass unseen (this node was paused): nothing is judged.
	if c.dead("self", "other") || !c.alive("self", "other") || c.address("self", "other") == "" {
		t.Fatalf("a node this node has not looked at since it saw it beat is taken for dead")
	}
	// The first read after the pause: its beat moved meanwhile.
	if c.observe("self", rows(t0.Add(20*time.Second)), t0.Add(21*time.Second)) {
		t.Errorf("a node whose beat moved is reported as a change (dead or left)")
	}
	if c.dead("self", "other") {
		t.Errorf("a node whose beat moved between two reads is taken for dead")
	}
	// Its beat stands still between reads DeadAfter apart: dead.
	c.observe("self", rows(t0.Add(20*time.Second)), t0.Add(24*time.Second))
	if c.dead("self", "other") {
		t.Errorf("taken for dead after a standstill of 3 s (DeadAfter 5 s)")
	}
	if !c.observe("self", rows(t0.Add(20*time.Second)), t0.Add(26*time.Second)) {
		t.Errorf("a node's death is not reported as a change")
	}
	if !c.dead("self", "other") || c.alive("self", "other") {
		t.Errorf("not taken for dead after its beat stood still for 5 s between reads")
	}
	// A read older than the last one does not undo it.
	c.observe("self", rows(t0.Add(20*time.Second)), t0.Add(22*time.Second))
	if !c.dead("self", "other") {
		t.Errorf("a late, older read brought a dead node back")
	}
}
