package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/mcptest"
	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/postgres"
)

// The multi-node test's sizes.
const (
	clusterNodes    = 3
	clusterSessions = 50
	clusterMCP      = 4 // MCP clients
)

// clusterNeeds returns haproxy's path, or skips the test (fails it under
// VIGIL_TEST_STRICT=1) when haproxy or UTS namespaces are missing.
func clusterNeeds(t *testing.T) string {
	t.Helper()
	missing := func(msg string) {
		msg = "SKIP: " + msg
		if os.Getenv("VIGIL_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if _, err2 := os.Stat("/usr/sbin/haproxy"); err2 == nil {
			bin, err = "/usr/sbin/haproxy", nil
		}
	}
	if err != nil {
		missing("the multi-node test needs haproxy (apt-get install haproxy; .ci/run installs it)")
	}
	if out, err := exec.Command("unshare", "--uts", "sh", "-c", "hostname vigil-probe && hostname").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "vigil-probe" {
		missing(fmt.Sprintf("the multi-node test needs unshare --uts (util-linux, as root or with CAP_SYS_ADMIN): %v %s", err, out))
	}
	return bin
}

// TestHAProxyConfigIsTheREADMEs: the README's haproxy configuration is the
// one TestCluster runs, byte for byte.
func TestHAProxyConfigIsTheREADMEs(t *testing.T) {
	b, err := os.ReadFile("testdata/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readmeSnippet(t, "haproxy.cfg"), strings.TrimRight(string(b), "\n"); got != want {
		t.Errorf("the README's haproxy.cfg differs from testdata/haproxy.cfg, which TestCluster runs:\nREADME:\n%s\n\nfile:\n%s", got, want)
	}
}

// TestCluster runs three 'vigil serve' nodes on one PostgreSQL database,
// each in a UTS namespace of its own (another host to the others), behind
// haproxy (the README's configuration: round robin, no stickiness), and
// drives 50 sessions through haproxy only — create, prompt, message, hold
// and resume, a background command started, its output read, stopped —
// with event streams (each session's and all sessions', dropped and
// resumed with Last-Event-ID) and MCP clients, while one node is killed
// with SIGKILL (and started again), one is stopped with SIGTERM (and
// started again), and one is paused with SIGSTOP for longer than a lease,
// then resumed. It fails on a refusal for ownership (409 moved), a
// notification written twice or never, an event stream with a gap, a
// duplicate or a missing event (against the database), or a command's
// process that outlives its task. It reports the adoption times, the
// delay of live events across nodes and the writes made while a node was
// paused (VIGIL_CLUSTER_REPORT names a file to write the report to).
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the multi-node test takes minutes")
	}
	// Beside the other slow end-to-end tests (Codex's waits for minutes).
	t.Parallel()
	haproxyBin := clusterNeeds(t)
	dsn := pgtest.Fresh(t)
	c := newCluster(t, haproxyBin, dsn)
	c.run()
}

// cluster is one run of the multi-node test.
type cluster struct {
	t          *testing.T
	ctx        context.Context
	haproxyBin string
	dsn        string
	nonce      string
	token      string
	cwd        string
	nodes      []*clusterNode
	lb         *haproxy
	client     *clusterClient
	leases     *leaseWatch
	flags      map[string]bool
	ttl        time.Duration // the lease's
	report     []string
	// missing lists the features the nodes lack (flags, routes), found
	// as the test ran.
	missing []string

	mu       sync.Mutex
	sessions []*clusterSession
	lbAll    []*streamReader // all sessions, through haproxy
	direct   []*streamReader // all sessions, one per node, not through haproxy
	delays   map[bool][]time.Duration
	mcps     []*mcpWorker
	probes   []*prober
	// probeSessions are the probes' sessions.
	probeSessions []string
	pause         [2]time.Time
	// lostOutput lists the tasks their node's death interrupted whose
	// output no node could read after.
	lostOutput []string
	// pausedOwned are the sessions the paused node held as it was paused.
	pausedOwned map[string]int64
	started     time.Time
	faultAt     []faultTime
	stopping    chan struct{} // closed when the workload is to finish
}

// faultTime is when a fault was made.
type faultTime struct {
	what string
	at   time.Time
}

// fault records that a fault is made now.
func (c *cluster) fault(what string) time.Time {
	now := time.Now()
	c.mu.Lock()
	c.faultAt = append(c.faultAt, faultTime{what, now})
	c.mu.Unlock()
	return now
}

// when places t on the run's time line: seconds since the workload began,
// and after which fault.
func (c *cluster) when(t time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("at %.1fs", t.Sub(c.started).Seconds())
	for i := len(c.faultAt) - 1; i >= 0; i-- {
		if f := c.faultAt[i]; !t.Before(f.at) {
			return s + fmt.Sprintf(", %.1fs after %s", t.Sub(f.at).Seconds(), f.what)
		}
	}
	return s
}

func newCluster(t *testing.T, haproxyBin, dsn string) *cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	tok := make([]byte, 32)
	_, _ = rand.Read(tok)
	c := &cluster{
		t: t, ctx: ctx, haproxyBin: haproxyBin, dsn: dsn, nonce: fmt.Sprintf("900.%06d", mrand.IntN(1_000_000)), token: hex.EncodeToString(tok),
		cwd: t.TempDir(), flags: serveFlags(t), delays: map[bool][]time.Duration{}, stopping: make(chan struct{}),
	}
	t.Cleanup(func() { killNonce(c.nonce) })
	t.Logf("cluster test: nonce %s (the commands sleep %s s)", c.nonce, c.nonce)
	if raceEnabled {
		c.report = append(c.report, "(the nodes run with the race detector, which slows them several times: the timings are not the product's)")
	}

	src, err := os.ReadFile("testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	scenario := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(scenario, bytes.ReplaceAll(src, []byte("NONCE"), []byte(c.nonce)), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ttl = 30 * time.Second // the runtime's default lease
	logs := os.Getenv("VIGIL_CLUSTER_LOGS")
	if logs == "" {
		logs = t.TempDir()
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range clusterNodes {
		n := &clusterNode{name: fmt.Sprintf("node%d", i+1), idx: i, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), data: t.TempDir(), logs: logs}
		n.args = []string{"--addr", n.addr, "--data", n.data, "--db", dsn, "--provider", "script", "--script", scenario,
			"--shutdown-timeout", "10s", "--show-token=false"}
		if c.flags["advertise"] {
			n.args = append(n.args, "--advertise", "http://"+n.addr)
		} else if i == 0 {
			c.missing = append(c.missing, "vigil serve has no --advertise flag")
		}
		if c.flags["lease-ttl"] {
			c.ttl = 5 * time.Second
			n.args = append(n.args, "--lease-ttl", c.ttl.String())
		} else if i == 0 {
			c.missing = append(c.missing, "vigil serve has no --lease-ttl flag: the pause outlasts the default 30 s lease")
		}
		// One cluster secret: --token-file for node1, VIGIL_TOKEN for the
		// others. Where serve takes neither, the same token file in every
		// data directory.
		envToken := c.token
		if c.flags["token-file"] && i == 0 {
			n.args = append(n.args, "--token-file", tokenFile)
			envToken = ""
		}
		if !c.flags["token-file"] {
			if i == 0 {
				c.missing = append(c.missing, "vigil serve has no --token-file flag (the test put one token in every data directory)")
			}
			if err := os.WriteFile(filepath.Join(n.data, "token"), []byte(c.token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		n.env = append(os.Environ(), "VIGIL_AS_CLI=1", "HOME="+t.TempDir(), "XDG_CONFIG_HOME=", "VIGIL_OWNER=",
			"ANTHROPIC_API_KEY=", "OPENAI_API_KEY=", "VIGIL_DATA=", "VIGIL_DB=", "VIGIL_TOKEN="+envToken)
		c.nodes = append(c.nodes, n)
		t.Cleanup(n.stop)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("%s's last log lines:\n%s", n.name, n.logTail(6000))
			}
			t.Logf("the nodes' logs are in %s (VIGIL_CLUSTER_LOGS=DIR keeps them)", logs)
		}
	})
	return c
}

// logf logs a line of the report.
func (c *cluster) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	c.t.Log(line)
	c.mu.Lock()
	c.report = append(c.report, line)
	c.mu.Unlock()
}

func (c *cluster) run() {
	t, ctx := c.t, c.ctx
	for _, n := range c.nodes {
		n.start(t)
	}
	for _, n := range c.nodes {
		if err := n.waitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lbAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.lb = startHAProxy(t, c.haproxyBin, lbAddr, c.nodes)
	if err := c.lb.waitServing(ctx); err != nil {
		t.Fatal(err)
	}
	stats := newAnswerStats()
	c.client = &clusterClient{base: "http://" + lbAddr, token: c.token, stats: stats,
		hc: &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	c.checkNodes("at start")

	c.leases = &leaseWatch{dsn: c.dsn, nodes: c.nodes}
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.leases.run(bg) })
	// Two all-sessions streams through haproxy, dropped every 300
	// events; one stream on each node, for the live delay across nodes.
	for i := range 2 {
		s := &streamReader{name: fmt.Sprintf("all-sessions via haproxy #%d", i+1), base: c.client.base, path: "/api/events", token: c.token, reconnectEvery: 300}
		c.lbAll = append(c.lbAll, s)
		wg.Go(func() { s.run(bg) })
	}
	for i, n := range c.nodes {
		s := &streamReader{name: "all-sessions on " + n.name, base: "http://" + n.addr, path: "/api/events", token: c.token}
		s.onEvent = func(e seenEvent) {
			if !e.live {
				return
			}
			owner := c.leases.ownerAt(e.session, e.at)
			if owner < 0 {
				return
			}
			c.mu.Lock()
			if i == 2 && !c.pause[0].IsZero() && e.got.After(c.pause[0]) && (c.pause[1].IsZero() || e.at.Before(c.pause[1].Add(time.Second))) {
				c.mu.Unlock()
				return // the paused node's own stream, which read nothing while paused
			}
			c.delays[owner != i] = append(c.delays[owner != i], e.got.Sub(e.at))
			c.mu.Unlock()
		}
		c.direct = append(c.direct, s)
		wg.Go(func() { s.run(bg) })
	}

	// The probes: twelve idle sessions that the nodes not paused are
	// asked to hold and resume, directly, around the pause.
	for i := range 12 {
		var d clusterView
		if _, err := c.client.call(ctx, "POST", "/api/sessions", map[string]any{"title": fmt.Sprintf("probe %d", i), "cwd": c.cwd}, &d); err != nil {
			t.Fatalf("create a probe session: %v", err)
		}
		c.probeSessions = append(c.probeSessions, d.Session.ID)
	}

	// The workload: 50 sessions and the MCP clients, until the faults are
	// over.
	started := time.Now()
	c.started = started
	var work sync.WaitGroup
	firstRound := make(chan struct{}, clusterSessions)
	for i := range clusterSessions {
		s := &clusterSession{c: c, n: i}
		c.sessions = append(c.sessions, s)
		work.Go(func() { s.run(bg, firstRound) })
	}
	for i := range clusterMCP {
		m := &mcpWorker{c: c, n: i, owner: newKey(t)}
		c.mcps = append(c.mcps, m)
		work.Go(func() { m.run(bg) })
	}
	warm := time.After(60 * time.Second)
	through := 0
wait:
	for through < clusterSessions*4/5 {
		select {
		case <-firstRound:
			through++
		case <-warm:
			break wait
		}
	}
	c.logf("warm-up: %d sessions through their first round in %s", through, time.Since(started).Round(time.Millisecond))

	c.faults()
	close(c.stopping)
	work.Wait()
	c.logf("workload: %d sessions, %d rounds, in %s", len(c.sessions), c.rounds(), time.Since(started).Round(time.Second))

	c.closeAll()
	c.finish(stopBG, &wg)
}

// checkNodes reads GET /api/nodes through haproxy: every node is a member.
func (c *cluster) checkNodes(when string) {
	var out struct {
		Nodes []map[string]any `json:"nodes"`
	}
	ctx, cancel := context.WithTimeout(c.ctx, 20*time.Second)
	defer cancel()
	if _, err := c.client.call(ctx, "GET", "/api/nodes", nil, &out); err != nil {
		if statusOf(err) == 404 {
			c.missing = append(c.missing, "GET /api/nodes answers 404")
			return
		}
		c.t.Errorf("GET /api/nodes %s: %v", when, err)
		return
	}
	alive := 0
	for _, n := range out.Nodes {
		if a, _ := n["alive"].(bool); a {
			alive++
		}
	}
	c.logf("GET /api/nodes %s: %d nodes, %d alive", when, len(out.Nodes), alive)
	if alive < clusterNodes {
		c.t.Errorf("GET /api/nodes %s: %d alive nodes, want %d: %v", when, alive, clusterNodes, out.Nodes)
	}
}

// rounds is how many rounds the sessions finished.
func (c *cluster) rounds() int {
	n := 0
	for _, s := range c.sessions {
		n += s.done()
	}
	return n
}

// faults kills one node with SIGKILL, stops one with SIGTERM and pauses
// one with SIGSTOP for longer than a lease, measuring what follows.
func (c *cluster) faults() {
	t, ctx := c.t, c.ctx
	adoption := func(what string, node int, since time.Time, owned map[string]int64, deadline time.Duration) {
		took, missing := c.leases.adoption(ctx, owned, node, since, deadline)
		if len(owned) == 0 {
			c.logf("adoption after %s of %s: it owned no session", what, c.nodes[node].name)
			return
		}
		c.logf("adoption after %s of %s: %d of %d sessions taken over by other nodes, p50 %s, max %s after the signal",
			what, c.nodes[node].name, len(took), len(owned), percentile(took, 0.5).Round(time.Millisecond), percentile(took, 1).Round(time.Millisecond))
		if len(missing) > 0 {
			t.Errorf("after %s of %s, %d sessions were not taken over within %s: %v", what, c.nodes[node].name, len(missing), deadline, missing[:min(len(missing), 5)])
		}
	}
	settle := func() {
		sleepCtx(ctx, 4*time.Second) // haproxy's checks see the node up (rise 2, inter 1s)
	}

	// SIGKILL node1, and start it again once its sessions moved.
	n := c.nodes[0]
	owned := c.leases.ownedBy(0)
	at := c.fault("kill -9 of " + n.name)
	if err := n.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.wait(10 * time.Second)
	adoption("kill -9", 0, at, owned, c.ttl+30*time.Second)
	n.start(t)
	if err := n.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	c.fault("the restart of " + n.name)
	settle()

	// SIGTERM node2: a clean drain; started again.
	n = c.nodes[1]
	owned = c.leases.ownedBy(1)
	at = c.fault("SIGTERM of " + n.name)
	if err := n.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err, exited := n.wait(30 * time.Second)
	switch {
	case !exited:
		t.Errorf("%s did not exit within 30 s of SIGTERM", n.name)
		_ = n.signal(syscall.SIGKILL)
		n.wait(10 * time.Second)
	case err != nil:
		t.Errorf("%s exited after SIGTERM with %v", n.name, err)
	default:
		c.logf("SIGTERM: %s exited 0 after %s", n.name, time.Since(at).Round(time.Millisecond))
	}
	adoption("SIGTERM", 1, at, owned, c.ttl+30*time.Second)
	n.start(t)
	if err := n.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	c.fault("the restart of " + n.name)
	settle()

	// SIGSTOP node3 for longer than a lease, then SIGCONT.
	n = c.nodes[2]
	owned = c.leases.ownedBy(2)
	// Longer than a lease and than the database's idle-in-transaction
	// timeout, so that what ends at the pause's end is told from what
	// a timeout ends.
	pause := c.ttl + 10*time.Second
	probesHeld := map[int]int{}
	for _, session := range c.probeSessions {
		probesHeld[c.leases.ownerAt(session, time.Now())]++
	}
	c.logf("before the pause: sessions held per node (by index) %v; probe sessions held per node %v", c.leases.perNode(), probesHeld)
	probing, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	for i, pn := range c.nodes[:2] {
		for _, session := range c.probeSessions {
			p := &prober{node: i, base: "http://" + pn.addr, token: c.token, session: session}
			c.probes = append(c.probes, p)
			probes.Go(func() { p.run(probing) })
		}
	}
	sleepCtx(ctx, 2*time.Second)
	activity, stopActivity := context.WithCancel(ctx)
	act := &dbActivity{dsn: c.dsn}
	actDone := make(chan struct{})
	go func() { defer close(actDone); act.run(activity) }()
	c.pausedOwned = owned
	at = c.fault("SIGSTOP of " + n.name)
	c.mu.Lock()
	c.pause[0] = at
	c.mu.Unlock()
	if err := n.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sleepCtx(ctx, pause)
	if err := n.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	at = c.fault("SIGCONT of " + n.name)
	c.mu.Lock()
	c.pause[1] = at
	c.mu.Unlock()
	stopActivity()
	<-actDone
	sleepCtx(ctx, 2*time.Second)
	stopProbes()
	probes.Wait()
	c.logf("the database while %s was paused (sampled every 250 ms): %s", n.name, act.summary())
	adoption(fmt.Sprintf("SIGSTOP (%s)", pause), 2, c.pause[0], owned, 20*time.Second)
	settle()
	c.checkNodes("after the faults")
}

// closeAll closes every open session of the store through haproxy: the
// workload's, the MCP clients', and any a retried create made twice.
func (c *cluster) closeAll() {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
	defer cancel()
	var list struct {
		Sessions []struct {
			ID     string `json:"id"`
			Closed bool   `json:"closed"`
		} `json:"sessions"`
	}
	if _, err := c.client.call(ctx, "GET", "/api/sessions?open=true", nil, &list); err != nil {
		c.t.Errorf("list sessions: %v", err)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, s := range list.Sessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.client.call(ctx, "POST", "/api/sessions/"+s.ID+"/close", nil, nil); err != nil {
				c.t.Errorf("close %s: %v", s.ID, err)
			}
		})
	}
	wg.Wait()
	c.logf("closed %d open sessions", len(list.Sessions))
}

// finish waits for the streams to catch up with the database, stops the
// readers and checks everything against the database.
func (c *cluster) finish(stopBG context.CancelFunc, wg *sync.WaitGroup) {
	t, ctx := c.t, c.ctx
	st, err := postgres.Open(ctx, c.dsn, nil)
	if err != nil {
		t.Fatalf("open the database: %v", err)
	}
	defer st.Close()
	all := readLog(t, st)
	var maxGlobal int64
	if len(all) > 0 {
		maxGlobal = all[len(all)-1].Global
	}
	// Every stream must reach the database's end.
	deadline := time.Now().Add(60 * time.Second)
	caughtUp := func() bool {
		for _, s := range c.sessions {
			if s.stream != nil && s.stream.position() < s.lastSeq(ctx, st) {
				return false
			}
		}
		for _, s := range slices.Concat(c.lbAll, c.direct) {
			if s.position() < maxGlobal {
				return false
			}
		}
		return true
	}
	for !caughtUp() && time.Now().Before(deadline) {
		sleepCtx(ctx, 200*time.Millisecond)
		if fresh := readLog(t, st); len(fresh) != len(all) {
			all = fresh
			maxGlobal = all[len(all)-1].Global
		}
	}
	stopBG()
	wg.Wait()

	c.checkAnswers()
	c.checkSessionStreams(ctx, st)
	for _, s := range slices.Concat(c.lbAll, c.direct) {
		c.checkAllStream(s, all)
	}
	c.checkStoreNotes(ctx, st)
	c.checkMCP()
	c.checkProcesses()
	if len(c.lostOutput) > 0 {
		c.logf("tasks interrupted by their node's death whose output (the line they printed) no node could read after: %d: %v", len(c.lostOutput), c.lostOutput)
	}
	c.delayReport()
	c.pauseReport(all)
	c.probeReport()
	if len(c.missing) > 0 {
		c.logf("features the nodes lack: %s", strings.Join(c.missing, "; "))
	}
	if errs := c.leases.errs; len(errs) > 0 {
		c.logf("lease watch errors: %v", errs)
	}
	if path := os.Getenv("VIGIL_CLUSTER_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(strings.Join(c.report, "\n")+"\n"), 0o644); err != nil {
			t.Errorf("write the report: %v", err)
		}
	}
}

// readLog reads every record of the store in global order.
func readLog(t *testing.T, st store.Store) []store.Record {
	t.Helper()
	var all []store.Record
	after := int64(0)
	for {
		recs, err := st.EventListAll(context.Background(), &store.EventListAllParams{AfterGlobal: after, Limit: 5000})
		if err != nil {
			t.Fatalf("read the log: %v", err)
		}
		all = append(all, recs...)
		if len(recs) < 5000 {
			return all
		}
		after = recs[len(recs)-1].Global
	}
}

// checkAnswers fails on a refusal for ownership and reports the rest.
func (c *cluster) checkAnswers() {
	s := c.client.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	c.logf("client: %d requests through haproxy; 409 moved: %d; 503 with Retry-After (retried): %d; 503 without Retry-After (retried): %d; haproxy's own errors (retried): %d; connection errors (retried): %d; GETs unanswered in %s (retried): %d",
		s.requests, len(s.moved), s.retried, len(s.bare503), len(s.lbErrors), len(s.transport), getTimeout, len(s.timeouts))
	slow := slices.Clone(s.slow)
	slices.SortFunc(slow, func(a, b slowAnswer) int { return int(b.took - a.took) })
	var top []string
	for _, a := range slow[:min(len(slow), 5)] {
		top = append(top, fmt.Sprintf("%s %s (sent %s)", a.what, a.took.Round(time.Millisecond), c.when(a.start)))
	}
	c.logf("answers slower than %s: %d; slowest: %s", slowAnswerAfter, len(slow), strings.Join(top, "; "))
	keys := make([]string, 0, len(s.byStatus))
	for k := range s.byStatus {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, s.byStatus[k]))
	}
	c.logf("answers: %s", strings.Join(parts, ", "))
	if len(s.moved) > 0 {
		c.t.Errorf("%d actions refused for ownership (409 moved), e.g.:\n  %s", len(s.moved), strings.Join(s.moved[:min(len(s.moved), 10)], "\n  "))
	}
	if len(s.bare503) > 0 {
		c.logf("503 without Retry-After, e.g.: %s", strings.Join(s.bare503[:min(len(s.bare503), 5)], "; "))
	}
	if len(s.lbErrors) > 0 {
		c.logf("haproxy's errors, e.g.: %s", strings.Join(s.lbErrors[:min(len(s.lbErrors), 5)], "; "))
	}
	if len(s.transport) > 0 {
		c.logf("connection errors, e.g.: %s", strings.Join(s.transport[:min(len(s.transport), 3)], "; "))
	}
}

// checkSessionStreams compares each session's stream with its log.
func (c *cluster) checkSessionStreams(ctx context.Context, st store.Store) {
	reconnects, events, bad := 0, 0, 0
	for _, s := range c.sessions {
		if s.stream == nil {
			continue
		}
		r := s.stream
		r.mu.Lock()
		reconnects += r.reconnects
		events += len(r.events)
		problems := slices.Clone(r.problems)
		got := slices.Clone(r.events)
		errs := slices.Clone(r.errs)
		r.mu.Unlock()
		recs, err := st.EventList(ctx, &store.EventListParams{Session: s.id})
		if err != nil {
			c.t.Errorf("read %s: %v", s.id, err)
			continue
		}
		if len(got) != len(recs) {
			problems = append(problems, fmt.Sprintf("%d events delivered, the log has %d (last errors: %v)", len(got), len(recs), errs[max(0, len(errs)-3):]))
		}
		for i := range min(len(got), len(recs)) {
			if got[i].seq != recs[i].Seq || got[i].typ != recs[i].Type {
				problems = append(problems, fmt.Sprintf("event %d is %s#%d, the log has %s#%d", i, got[i].typ, got[i].seq, recs[i].Type, recs[i].Seq))
				break
			}
		}
		if len(problems) > 0 {
			bad++
			if bad <= 10 {
				c.t.Errorf("session %s's event stream: %s", s.id, strings.Join(problems[:min(len(problems), 5)], "; "))
			}
		}
	}
	c.logf("session streams: %d streams, %d events, %d reconnects (dropped every 5-20 events and at faults), %d incomplete or out of order", len(c.sessions), events, reconnects, bad)
}

// checkAllStream compares an all-sessions stream with the log.
func (c *cluster) checkAllStream(s *streamReader, all []store.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := map[int64]bool{}
	for _, e := range s.events {
		got[e.global] = true
	}
	inLog := map[int64]bool{}
	bySeq := map[string]store.Record{}
	for _, r := range all {
		inLog[r.Global] = true
		bySeq[fmt.Sprintf("%s#%d", r.Session, r.Seq)] = r
	}
	var extras []string
	for _, e := range s.events {
		if !inLog[e.global] {
			r, ok := bySeq[fmt.Sprintf("%s#%d", e.session, e.seq)]
			logHas := "the log has no such event"
			if ok {
				logHas = fmt.Sprintf("the log has it at global %d as %s at %s", r.Global, r.Type, r.At.Format("15:04:05.000"))
			}
			extras = append(extras, fmt.Sprintf("global %d %s#%d %s at %s delivered %s; %s", e.global, e.session, e.seq, e.typ, e.at.Format("15:04:05.000"), c.when(e.got), logHas))
		}
	}
	var missing []string
	for _, r := range all {
		if r.Global > s.from && !got[r.Global] {
			missing = append(missing, fmt.Sprintf("%d (%s#%d %s)", r.Global, r.Session, r.Seq, r.Type))
		}
	}
	c.logf("%s: %d events, %d live text events, %d reconnects, %d cuts; %d out of order, %d missing, %d not in the log", s.name, len(s.events), s.liveText, s.reconnects, s.cuts, len(s.problems), len(missing), len(extras))
	if len(s.problems) > 0 {
		c.t.Errorf("%s out of order: %s", s.name, strings.Join(s.problems[:min(len(s.problems), 5)], "; "))
	}
	if len(missing) > 0 {
		c.t.Errorf("%s never delivered %d events of the log, e.g. %s (last errors: %v)", s.name, len(missing), strings.Join(missing[:min(len(missing), 5)], ", "), s.errs[max(0, len(s.errs)-3):])
	}
	if len(extras) > 0 {
		c.t.Errorf("%s delivered %d events the log does not have:\n  %s", s.name, len(extras), strings.Join(extras[:min(len(extras), 10)], "\n  "))
	}
}

// checkStoreNotes checks, on the log and the notes table of every
// session, that each run of each task has exactly one notification, that
// no notification was written twice, and that no task is left running.
func (c *cluster) checkStoreNotes(ctx context.Context, st store.Store) {
	rows, err := st.SessionList(ctx, &store.SessionListParams{})
	if err != nil {
		c.t.Fatalf("list sessions: %v", err)
	}
	notes, shells, problems := 0, 0, 0
	fail := func(format string, args ...any) {
		problems++
		if problems <= 20 {
			c.t.Errorf(format, args...)
		}
	}
	for _, row := range rows {
		recs, err := st.EventList(ctx, &store.EventListParams{Session: row.ID})
		if err != nil {
			c.t.Fatalf("read %s: %v", row.ID, err)
		}
		var evs []core.Event
		written := map[core.NoteKey]int{}
		for i, r := range recs {
			if r.Seq != int64(i+1) {
				fail("session %s: the log has seq %d at %d", row.ID, r.Seq, i+1)
			}
			e, err := decodeRecord(r)
			if err != nil {
				c.t.Fatal(err)
			}
			evs = append(evs, e)
			if b, ok := e.Body.(*core.NotificationWritten); ok {
				written[b.Note.Key]++
			}
		}
		s := core.Replay(evs)
		for _, id := range s.Order {
			a := s.Agents[id]
			if a.Run != nil {
				fail("session %s: run %s#%d never ended", row.ID, a.Name, a.Run.Seq)
			}
			if a.Task == "" {
				continue
			}
			for _, r := range a.Runs {
				if k := (core.NoteKey{Task: a.Task, Run: r.Seq}); written[k] != 1 {
					fail("session %s: run %s#%d (%s): %d notifications, want 1", row.ID, a.Name, r.Seq, r.Status, written[k])
				}
			}
		}
		for _, id := range s.TaskOrder {
			task := s.Tasks[id]
			if task.Kind != core.TaskShell {
				continue
			}
			shells++
			if task.Status.Live() {
				fail("session %s: task %s still %s", row.ID, id, task.Status)
			}
			if n := written[core.NoteKey{Task: id}]; n != 1 {
				fail("session %s: shell task %s (%s): %d notifications, want 1", row.ID, id, task.Status, n)
			}
			if task.PID != 0 && shell.Alive(task.PID, task.StartTicks) {
				fail("session %s: task %s ended %s while its process %d lives", row.ID, id, task.Status, task.PID)
			}
		}
		for k, n := range written {
			notes++
			if n != 1 {
				fail("session %s: notification %s written %d times", row.ID, k, n)
			}
		}
		table, err := st.NoteList(ctx, row.ID)
		if err != nil {
			c.t.Fatalf("notes of %s: %v", row.ID, err)
		}
		inTable := map[string]int{}
		for _, n := range table {
			inTable[n.Key()]++
		}
		for k := range written {
			if inTable[k.String()] != 1 {
				fail("session %s: notification %s is in the log, %d times in the notes table", row.ID, k, inTable[k.String()])
			}
		}
		if len(inTable) != len(written) {
			fail("session %s: %d notifications in the notes table, %d in the log", row.ID, len(inTable), len(written))
		}
	}
	c.logf("database: %d sessions, %d notifications, %d shell tasks; %d problems (lost, duplicated, or a task left running)", len(rows), notes, shells, problems)
}

// diagnose reports a session for a failure: who held its lease when (as
// the lease watch saw it), and its last n events as the database holds
// them.
func (c *cluster) diagnose(session string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s: lease holders:", session)
	c.leases.mu.Lock()
	for _, h := range c.leases.history[session] {
		name := "none"
		if h.node >= 0 {
			name = c.nodes[h.node].name
		}
		fmt.Fprintf(&b, " %s (epoch %d) %s;", name, h.epoch, c.when(h.at))
	}
	c.leases.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, c.dsn, nil)
	if err != nil {
		fmt.Fprintf(&b, " (the database: %v)", err)
		return b.String()
	}
	defer st.Close()
	last, err := st.LastSeq(ctx, session)
	if err != nil {
		fmt.Fprintf(&b, " (its log: %v)", err)
		return b.String()
	}
	recs, err := st.EventList(ctx, &store.EventListParams{Session: session, AfterSeq: max(0, last-int64(n)), Limit: n})
	if err != nil {
		fmt.Fprintf(&b, " (its log: %v)", err)
		return b.String()
	}
	fmt.Fprintf(&b, "\n  its last %d events in the database (of %d):", len(recs), last)
	for _, r := range recs {
		fmt.Fprintf(&b, "\n    %d %s %s %.300s", r.Seq, r.At.Format("15:04:05.000"), r.Type, r.Data)
	}
	// What the nodes logged of it, every start of each.
	for _, n := range c.nodes {
		logs, _ := filepath.Glob(filepath.Join(n.logs, n.name+".*.log"))
		for _, path := range logs {
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			var lines []string
			for line := range strings.SplitSeq(string(data), "\n") {
				if strings.Contains(line, session) {
					lines = append(lines, line)
				}
			}
			if len(lines) > 0 {
				fmt.Fprintf(&b, "\n  %s logged of it:\n    %s", filepath.Base(path), strings.Join(lines[max(0, len(lines)-20):], "\n    "))
			}
		}
	}
	return b.String()
}

// checkProcesses waits (30 s at most) until no process of the commands
// is alive: every task has ended, so none may outlive it.
func (c *cluster) checkProcesses() {
	deadline := time.Now().Add(30 * time.Second)
	pids := noncePids(c.nonce)
	for len(pids) > 0 && time.Now().Before(deadline) {
		sleepCtx(c.ctx, 200*time.Millisecond)
		pids = noncePids(c.nonce)
	}
	if len(pids) > 0 {
		var lines []string
		sessions := map[string]bool{}
		for _, p := range pids {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			line := fmt.Sprintf("%d: %s", p, strings.ReplaceAll(string(b), "\x00", " "))
			// Who started it, and in which group: the session and the
			// task are in the group's path (<root>/<session>/task-<id>).
			if ps, err := shell.ReadProcStat(p); err == nil {
				parent, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ps.PPID))
				line += fmt.Sprintf("\n    parent %d: %.120s", ps.PPID, strings.ReplaceAll(string(parent), "\x00", " "))
			}
			if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p)); err == nil {
				path := strings.TrimSpace(string(cg))
				line += "\n    cgroup " + path
				parts := strings.Split(path, "/")
				if len(parts) >= 2 && strings.HasPrefix(parts[len(parts)-1], "task-") {
					sessions[parts[len(parts)-2]] = true
				}
			}
			lines = append(lines, line)
		}
		for id := range sessions {
			lines = append(lines, c.diagnose(id, 60))
		}
		c.t.Errorf("%d processes of the commands outlived their tasks (30 s after the last session closed):\n  %s", len(pids), strings.Join(lines, "\n  "))
	}
	c.logf("processes of the commands alive after the run: %d", len(pids))
}

// delayReport reports the live events' delay, across nodes and on the
// owner.
func (c *cluster) delayReport() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, remote := range []bool{true, false} {
		d := slices.Clone(c.delays[remote])
		slices.Sort(d)
		what := "on the owner's stream"
		if remote {
			what = "across nodes (committed on A, seen on B's stream)"
		}
		c.report = append(c.report, "")
		line := fmt.Sprintf("live-event delay %s: n=%d p50 %s p99 %s max %s", what, len(d), percentile(d, 0.5).Round(time.Microsecond), percentile(d, 0.99).Round(time.Microsecond), percentile(d, 1).Round(time.Microsecond))
		c.report[len(c.report)-1] = line
		c.t.Log(line)
		if remote && len(d) == 0 {
			c.t.Errorf("no live event was seen on another node's stream")
		}
	}
}

// pauseReport counts what the cluster committed while a node was paused,
// against the same span just before.
func (c *cluster) pauseReport(all []store.Record) {
	from, to := c.pause[0], c.pause[1]
	if from.IsZero() {
		return
	}
	span := to.Sub(from)
	during, before, adopted := 0, 0, 0
	sessions := map[string]bool{}
	for _, r := range all {
		switch {
		case !r.At.Before(from) && r.At.Before(to):
			during++
			sessions[r.Session] = true
			if _, ok := c.pausedOwned[r.Session]; ok {
				adopted++
			}
		case !r.At.Before(from.Add(-span)) && r.At.Before(from):
			before++
		}
	}
	c.logf("while %s was paused (%s): the cluster committed %d events in %d sessions (%.0f/s; %d of them in sessions the paused node held and others took over); in the %s before: %d events (%.0f/s)",
		c.nodes[2].name, span.Round(time.Millisecond), during, len(sessions), float64(during)/span.Seconds(), adopted, span.Round(time.Millisecond), before, float64(before)/span.Seconds())
	// Per second of the pause: a stall shows as seconds with nothing.
	perSec := make([]int, int(span.Seconds())+1)
	for _, r := range all {
		if !r.At.Before(from) && r.At.Before(to) {
			perSec[int(r.At.Sub(from).Seconds())]++
		}
	}
	c.logf("events committed in each second of the pause: %v", perSec)
	if during == 0 {
		c.t.Errorf("nothing was committed while %s was paused: one node stalled the cluster", c.nodes[2].name)
	}
}

// probeReport reports the probes' writes while a node was paused, sent
// to the other nodes: to sessions the paused node did not hold (a stall
// of these is one node stalling another) and to sessions it held (they
// wait for their adoption).
func (c *cluster) probeReport() {
	from, to := c.pause[0], c.pause[1]
	if from.IsZero() {
		return
	}
	var other, held []time.Duration
	var errs []string
	for _, p := range c.probes {
		if p.node == 2 {
			continue
		}
		p.mu.Lock()
		for _, s := range p.samples {
			if s.start.Before(from) || !s.start.Before(to) {
				continue
			}
			if s.err != "" {
				errs = append(errs, fmt.Sprintf("%s via %s %s: %s", s.session, c.nodes[s.node].name, c.when(s.start), s.err))
				continue
			}
			if _, ok := c.pausedOwned[s.session]; ok {
				held = append(held, s.took)
			} else {
				other = append(other, s.took)
			}
		}
		p.mu.Unlock()
	}
	slices.Sort(other)
	slices.Sort(held)
	c.logf("probe writes (hold/resume) sent to the other nodes while %s was paused: sessions it did not hold: n=%d p50 %s max %s; sessions it held: n=%d p50 %s max %s; failed: %d",
		c.nodes[2].name, len(other), percentile(other, 0.5).Round(time.Millisecond), percentile(other, 1).Round(time.Millisecond),
		len(held), percentile(held, 0.5).Round(time.Millisecond), percentile(held, 1).Round(time.Millisecond), len(errs))
	if len(errs) > 0 {
		c.logf("failed probe writes, e.g.: %s", strings.Join(errs[:min(len(errs), 5)], "; "))
	}
	if len(other)+len(held) == 0 {
		c.t.Errorf("no probe write was answered while %s was paused", c.nodes[2].name)
	}
}

// clusterSession is one session of the workload and its event stream.
type clusterSession struct {
	c  *cluster
	n  int
	id string

	stream *streamReader
	mu     sync.Mutex
	rounds int
	shells map[string]bool
}

func (s *clusterSession) done() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rounds
}

// lastSeq is the session's last sequence in the store.
func (s *clusterSession) lastSeq(ctx context.Context, st store.Store) int64 {
	n, err := st.LastSeq(ctx, s.id)
	if err != nil {
		return 0
	}
	return n
}

// clusterView is what the workload reads of GET /api/sessions/{id}.
type clusterView struct {
	Session struct {
		ID string `json:"id"`
	} `json:"session"`
	Quiescent bool `json:"quiescent"`
	Tasks     []struct {
		ID      string `json:"id"`
		Kind    string `json:"kind"`
		Command string `json:"command"`
		Status  string `json:"status"`
	} `json:"tasks"`
}

// run drives the session round after round until the faults are over.
func (s *clusterSession) run(ctx context.Context, firstRound chan<- struct{}) {
	c := s.c
	s.shells = map[string]bool{}
	rng := mrand.New(mrand.NewPCG(uint64(s.n), 13))
	for k := 1; ; k++ {
		if err := s.round(ctx, k, rng); err != nil {
			if ctx.Err() == nil {
				tail := ""
				if s.stream != nil {
					tail = "; its last events as its stream delivered them:" + s.stream.tail(25)
				}
				c.t.Errorf("session %d (%s) round %d, %s: %v%s\n%s", s.n, s.id, k, c.when(time.Now()), err, tail, c.diagnose(s.id, 40))
			}
			return
		}
		s.mu.Lock()
		s.rounds++
		s.mu.Unlock()
		if k == 1 {
			firstRound <- struct{}{}
		}
		select {
		case <-c.stopping:
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(300+rng.IntN(700)) * time.Millisecond):
		}
	}
}

// roundWait bounds each wait of a round: longer than a pause and the
// adoption after it.
func (s *clusterSession) roundWait() time.Duration { return s.c.ttl + 90*time.Second }

// round runs one round: the prompt (with the session's creation in the
// first; behind a hold in the others), the command it starts, read and
// stopped, a message to the round's helper, and quiescence.
func (s *clusterSession) round(ctx context.Context, k int, rng *mrand.Rand) error {
	c := s.c
	cl := c.client
	name := fmt.Sprintf("r%d", k)
	if k == 1 {
		var d clusterView
		body := map[string]any{"prompt": name, "title": fmt.Sprintf("cluster %d", s.n), "cwd": c.cwd, "permissions": map[string]any{"mode": "bypass"}}
		if _, err := cl.call(ctx, "POST", "/api/sessions", body, &d); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		s.id = d.Session.ID
		s.stream = &streamReader{name: "session " + s.id, base: cl.base, path: "/api/sessions/" + s.id + "/events", token: c.token,
			session: s.id, reconnectEvery: 5 + rng.IntN(16)}
		go s.stream.run(ctx)
	} else {
		path := "/api/sessions/" + s.id
		if _, err := cl.call(ctx, "POST", path+"/hold", map[string]any{"reason": "round " + name}, nil); err != nil {
			return fmt.Errorf("hold: %w", err)
		}
		if _, err := cl.call(ctx, "POST", path+"/prompts", map[string]any{"text": name}, nil); err != nil {
			return fmt.Errorf("prompt: %w", err)
		}
		if _, err := cl.call(ctx, "POST", path+"/resume", nil, nil); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
	}
	path := "/api/sessions/" + s.id
	// The round's command: its task, then the line it prints.
	var task string
	if err := s.poll(ctx, "the round's command", func() (bool, error) {
		var d clusterView
		if _, err := cl.call(ctx, "GET", path, nil, &d); err != nil {
			return false, err
		}
		for _, tk := range d.Tasks {
			if tk.Kind == "shell" && !s.shells[tk.ID] && strings.Contains(tk.Command, "started "+name+";") {
				task = tk.ID
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	s.shells[task] = true
	var out struct {
		Data   string `json:"data"`
		Status string `json:"status"`
	}
	if err := s.poll(ctx, "task "+task+"'s output", func() (bool, error) {
		if _, err := cl.call(ctx, "GET", path+"/tasks/"+task+"/output", nil, &out); err != nil {
			return false, fmt.Errorf("task output: %w", err)
		}
		// A task its node's death ended may have lost its output: the
		// check after the round tells.
		return strings.Contains(out.Data, "started "+name) || (out.Status != "running" && out.Status != "stopping"), nil
	}); err != nil {
		return err
	}
	// A message to the round's helper, which answers with one to main.
	var msg struct {
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
	}
	if _, err := cl.call(ctx, "POST", path+"/agents/"+name+"/messages", map[string]any{"text": "ping " + name}, &msg); err != nil {
		return fmt.Errorf("message: %w", err)
	}
	if msg.Outcome == "rejected" {
		return fmt.Errorf("message to %s rejected: %s", name, msg.Reason)
	}
	// Stop the command.
	if _, err := cl.call(ctx, "POST", path+"/tasks/"+task+"/stop", nil, nil); err != nil && statusOf(err) != http.StatusConflict {
		return fmt.Errorf("stop %s: %w", task, err)
	}
	// The command's notification, then quiescence.
	if err := s.poll(ctx, "task "+task+"'s notification", func() (bool, error) {
		var notes struct {
			Notifications []struct{ Key string } `json:"notifications"`
		}
		if _, err := cl.call(ctx, "GET", path+"/notifications", nil, &notes); err != nil {
			return false, err
		}
		for _, n := range notes.Notifications {
			if n.Key == task+"#exit" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	if err := s.poll(ctx, "quiescence", func() (bool, error) {
		var d clusterView
		if _, err := cl.call(ctx, "GET", path, nil, &d); err != nil {
			return false, err
		}
		// A prompt sent twice (its first answer was lost with a node)
		// started a second command: stop it too.
		for _, tk := range d.Tasks {
			if tk.Kind == "shell" && tk.Status == "running" {
				s.shells[tk.ID] = true
				if _, err := cl.call(ctx, "POST", path+"/tasks/"+tk.ID+"/stop", nil, nil); err != nil && statusOf(err) != http.StatusConflict {
					return false, fmt.Errorf("stop %s: %w", tk.ID, err)
				}
			}
		}
		return d.Quiescent, nil
	}); err != nil {
		return err
	}
	// The ended command's output, read through any node.
	var tk struct {
		Status string `json:"status"`
	}
	if _, err := cl.call(ctx, "GET", path+"/tasks/"+task, nil, &tk); err != nil {
		return fmt.Errorf("task %s: %w", task, err)
	}
	// A command a paused node ran, stopped by the node that took its
	// session over, has its output saved by the paused node once it
	// wakes: wait for it a while.
	for wait := time.Now().Add(30 * time.Second); ; {
		if _, err := cl.call(ctx, "GET", path+"/tasks/"+task+"/output", nil, &out); err != nil {
			return fmt.Errorf("output of ended task %s: %w", task, err)
		}
		if strings.Contains(out.Data, "started "+name) || tk.Status == "interrupted" || time.Now().After(wait) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(out.Data, "started "+name) {
		if tk.Status == "interrupted" {
			// Its node died with it: what it printed was on that node.
			c.mu.Lock()
			c.lostOutput = append(c.lostOutput, fmt.Sprintf("%s/%s", s.id, task))
			c.mu.Unlock()
		} else {
			c.t.Errorf("session %s: the output of task %s (%s) reads %q through haproxy, want the line it printed", s.id, task, tk.Status, out.Data)
		}
	}
	return nil
}

// poll calls f every 250-500 ms until it reports true, fails, or the
// round's wait passes.
func (s *clusterSession) poll(ctx context.Context, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(s.roundWait())
	for {
		ok, err := f()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", s.roundWait(), what)
		}
		sleepCtx(ctx, time.Duration(250+mrand.IntN(250))*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// mcpWorker is an MCP client (the SDK's, streamable HTTP) talking to the
// cluster through haproxy: it spawns agents and waits for their
// notifications, reconnecting when its MCP session is lost.
type mcpWorker struct {
	c     *cluster
	n     int
	owner string

	mu         sync.Mutex
	col        *mcptest.Collector
	tasks      []string
	spawnFails int
	reconnects int
	errs       []string
	lists      int
}

func (m *mcpWorker) connect(ctx context.Context) (*mcptest.Client, error) {
	tr := &mcp.StreamableClientTransport{Endpoint: m.c.client.base + "/mcp", HTTPClient: &http.Client{Transport: headers{m.c.token, m.owner}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cluster-test"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		return nil, err
	}
	return &mcptest.Client{CS: cs}, nil
}

func (m *mcpWorker) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 30 {
		m.errs = append(m.errs, err.Error())
	}
}

// run spawns an agent, waits for its notification and lists the tools,
// over and over until the faults are over; then it waits for the last.
func (m *mcpWorker) run(ctx context.Context) {
	m.col = mcptest.NewCollector()
	var cl *mcptest.Client
	reconnect := func() bool {
		if cl != nil {
			cl.CS.Close()
			m.mu.Lock()
			m.reconnects++
			m.mu.Unlock()
		}
		for ctx.Err() == nil {
			c, err := m.connect(ctx)
			if err == nil {
				cl = c
				return true
			}
			m.fail(fmt.Errorf("connect: %w", err))
			sleepCtx(ctx, 500*time.Millisecond)
		}
		return false
	}
	if !reconnect() {
		return
	}
	defer func() { cl.CS.Close() }()
	notified := func(task string) bool {
		for _, n := range m.col.Seen {
			if n.Task == task {
				return true
			}
		}
		return false
	}
	// waitFor waits until task's notification was read, or until the
	// deadline.
	waitFor := func(task string, d time.Duration) bool {
		end := time.Now().Add(d)
		for !notified(task) && time.Now().Before(end) && ctx.Err() == nil {
			if _, err := m.col.Wait(ctx, cl, nil, 5); err != nil {
				m.fail(fmt.Errorf("wait: %w", err))
				if !reconnect() {
					return false
				}
			}
		}
		return notified(task)
	}
	for i := 1; ; i++ {
		select {
		case <-m.c.stopping:
			// Read what is left, and acknowledge it.
			for _, task := range m.tasks {
				if !waitFor(task, m.c.ttl+60*time.Second) {
					m.fail(fmt.Errorf("no notification for %s", task))
				}
			}
			if err := m.col.Flush(ctx, cl); err != nil {
				m.fail(fmt.Errorf("ack: %w", err))
			}
			return
		default:
		}
		if _, err := cl.CS.ListTools(ctx, nil); err != nil {
			m.fail(fmt.Errorf("tools/list: %w", err))
			if !reconnect() {
				return
			}
			continue
		}
		m.mu.Lock()
		m.lists++
		m.mu.Unlock()
		out, err := cl.Spawn(ctx, fmt.Sprintf("m%d-%d", m.n, i), "work "+fmt.Sprint(i))
		if err != nil {
			m.fail(fmt.Errorf("spawn: %w", err))
			m.mu.Lock()
			m.spawnFails++
			m.mu.Unlock()
			var te *mcptest.ToolError
			if !errors.As(err, &te) && !reconnect() {
				return
			}
			continue
		}
		m.mu.Lock()
		m.tasks = append(m.tasks, out.Task)
		m.mu.Unlock()
		if !waitFor(out.Task, m.c.ttl+60*time.Second) {
			m.fail(fmt.Errorf("no notification for %s", out.Task))
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// checkMCP fails when an MCP client read a notification twice, or never
// read one of its agents', or was refused for ownership.
func (c *cluster) checkMCP() {
	tasks, notes, reconnects, lists, spawnFails := 0, 0, 0, 0, 0
	for _, m := range c.mcps {
		m.mu.Lock()
		tasks += len(m.tasks)
		notes += len(m.col.Seen)
		reconnects += m.reconnects
		lists += m.lists
		spawnFails += m.spawnFails
		if len(m.col.Dups) > 0 {
			c.t.Errorf("MCP client %d read notifications twice: %v", m.n, m.col.Dups)
		}
		per := map[string]int{}
		for _, n := range m.col.Seen {
			per[n.Task]++
		}
		for _, task := range m.tasks {
			if per[task] != 1 {
				c.t.Errorf("MCP client %d: task %s: %d notifications read, want 1", m.n, task, per[task])
			}
		}
		for _, e := range m.errs {
			// "between nodes ... retry" is the 503 with Retry-After of a
			// tool: a session in the middle of a takeover.
			if strings.Contains(e, "another node owns") || (strings.Contains(e, "moved") && !strings.Contains(e, "between nodes")) {
				c.t.Errorf("MCP client %d refused for ownership: %s", m.n, e)
			}
		}
		if len(m.errs) > 0 {
			c.logf("MCP client %d errors (%d), e.g.: %s", m.n, len(m.errs), strings.Join(m.errs[:min(len(m.errs), 3)], "; "))
		}
		m.mu.Unlock()
	}
	c.logf("MCP through haproxy: %d clients, %d tools/list, %d agents spawned (%d spawns failed), %d notifications read, %d reconnects", len(c.mcps), lists, tasks, spawnFails, notes, reconnects)
	if tasks == 0 {
		c.t.Errorf("no MCP client spawned an agent through haproxy")
	}
}
