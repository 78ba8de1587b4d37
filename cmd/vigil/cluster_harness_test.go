package main

// The multi-node test's harness: vigil nodes in UTS namespaces of their
// own, haproxy in front of them, a client that counts every answer it gets,
// event stream readers that check order and completeness, and a watcher of
// the leases table.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serveFlags are the flags 'vigil serve --help' lists, by name.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--help")
	cmd.Env = append(os.Environ(), "VIGIL_AS_CLI=1")
	out, _ := cmd.CombinedOutput() // --help exits 2
	flags := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-"); ok {
			name, _, _ := strings.Cut(rest, " ")
			flags[name] = true
		}
	}
	return flags
}

// clusterNode is one 'vigil serve' of the cluster (this test binary as the
// vigil command), in a UTS namespace of its own: its host name is its name,
// so the other nodes see a node of another host.
type clusterNode struct {
	name string // host name: node1, node2, node3
	idx  int
	addr string // 127.0.0.1:port
	data string
	args []string // after "serve"
	env  []string
	logs string // directory of the nodes' logs

	mu      sync.Mutex
	cmd     *exec.Cmd
	starts  int
	exited  chan struct{} // closed when the current process has exited
	exitErr error
	logPath string
}

// start starts the node's process and returns at once.
func (n *clusterNode) start(t *testing.T) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.starts++
	n.logPath = filepath.Join(n.logs, fmt.Sprintf("%s.%d.log", n.name, n.starts))
	f, err := os.Create(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	// unshare execs sh, which sets the host name in the new namespace and
	// execs vigil: the process is vigil itself, and signals reach it.
	args := append([]string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, n.name, os.Args[0], "serve"}, n.args...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", n.name, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.exitErr = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		f.Close()
		n.mu.Lock()
		n.exitErr = err
		n.mu.Unlock()
		close(exited)
	}()
}

// pid is the current process's pid.
func (n *clusterNode) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.Process.Pid
}

// signal sends sig to the current process.
func (n *clusterNode) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s %v: %w", n.name, sig, err)
	}
	return nil
}

// wait waits for the current process to exit, at most d.
func (n *clusterNode) wait(d time.Duration) (error, bool) {
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	select {
	case <-exited:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.exitErr, true
	case <-time.After(d):
		return nil, false
	}
}

// alive reports whether the current process has not exited.
func (n *clusterNode) alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// waitHealthy polls /healthz until it answers 200.
func (n *clusterNode) waitHealthy(ctx context.Context) error {
	for {
		if !n.alive() {
			return fmt.Errorf("%s exited before serving: %s", n.name, n.logTail(2000))
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.addr+"/healthz", nil)
		c := &http.Client{Timeout: time.Second}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become healthy: %w\n%s", n.name, ctx.Err(), n.logTail(2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail is the end of the current process's log.
func (n *clusterNode) logTail(max int) string {
	n.mu.Lock()
	p := n.logPath
	n.mu.Unlock()
	b, _ := os.ReadFile(p)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// stop ends the process (SIGCONT first, in case it is stopped, then
// SIGKILL) and waits for it.
func (n *clusterNode) stop() {
	if n.alive() {
		_ = n.signal(syscall.SIGCONT)
		_ = n.signal(syscall.SIGKILL)
		n.wait(10 * time.Second)
	}
}

// haproxy is the load balancer in front of the nodes.
type haproxy struct {
	cmd  *exec.Cmd
	addr string
	log  *lockedBuf
	done chan struct{}
}

// startHAProxy runs haproxy in the foreground on testdata/haproxy.cfg,
// the README's configuration, with the addresses in its environment.
func startHAProxy(t *testing.T, bin, addr string, nodes []*clusterNode) *haproxy {
	t.Helper()
	cfg, err := filepath.Abs("testdata/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	h := &haproxy{addr: addr, log: &lockedBuf{}, done: make(chan struct{})}
	h.cmd = exec.Command(bin, "-db", "-f", cfg)
	h.cmd.Env = append(os.Environ(), "VIGIL_LB="+addr)
	for i, n := range nodes {
		h.cmd.Env = append(h.cmd.Env, fmt.Sprintf("VIGIL_NODE%d=%s", i+1, n.addr))
	}
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	go func() {
		_ = h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-h.done
		if t.Failed() {
			t.Logf("haproxy log:\n%s", h.log.String())
		}
	})
	return h
}

// waitServing waits until haproxy answers /healthz through a node.
func (h *haproxy) waitServing(ctx context.Context) error {
	for {
		select {
		case <-h.done:
			return fmt.Errorf("haproxy exited: %s", h.log.String())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+h.addr+"/healthz", nil)
		if resp, err := (&http.Client{Timeout: time.Second}).Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy did not serve: %w: %s", ctx.Err(), h.log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// answerStats counts what the cluster answered the client.
type answerStats struct {
	mu        sync.Mutex
	requests  int
	byStatus  map[string]int // "POST 202", "GET 503 recovering", ...
	moved     []string       // refusals for ownership: 409 moved
	retried   int            // 503 with Retry-After, retried
	bare503   []string       // vigil's 503 without Retry-After (retried)
	lbErrors  []string       // haproxy's own 502/503/504 (retried)
	transport []string       // connection errors (retried)
	timeouts  []string       // GETs that got no answer in getTimeout (retried)
	slow      []slowAnswer   // answers that took over slowAnswerAfter
}

// slowAnswer is a request that took long to answer.
type slowAnswer struct {
	what  string
	start time.Time
	took  time.Duration
}

// Client timeouts: a GET is sent again when it has no answer after
// getTimeout (haproxy may have sent it to a paused node); an answer that
// takes over slowAnswerAfter is recorded.
const (
	getTimeout      = 5 * time.Second
	slowAnswerAfter = 2 * time.Second
)

func newAnswerStats() *answerStats { return &answerStats{byStatus: map[string]int{}} }

func (s *answerStats) add(f func(s *answerStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// note records a sample for a list without letting it grow without bound.
func note(list *[]string, v string) {
	if len(*list) < 200 {
		*list = append(*list, v)
	}
}

// clusterClient talks to the cluster through one address (haproxy) with
// the cluster's token, retrying what a client may retry.
type clusterClient struct {
	base  string
	token string
	hc    *http.Client
	stats *answerStats
}

// httpError is an answer the client does not retry.
type httpError struct {
	status int
	code   string
	body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.code, strings.TrimSpace(e.body))
}

// statusOf returns err's HTTP status, 0 for none.
func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.status
	}
	return 0
}

// call sends a request and decodes a 2xx answer into out. A 503 with
// Retry-After is retried after it (capped at 2 s); vigil's 503 without
// it, haproxy's own errors and connection errors are retried after a
// moment; a 409 "moved" (a refusal for ownership) is counted and retried.
// Every other answer is returned, as an *httpError.
func (c *clusterClient) call(ctx context.Context, method, path string, body, out any) (int, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode: %w", err)
		}
		payload = b
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%s %s: %w", method, path, err)
		}
		var r io.Reader
		if payload != nil {
			r = bytes.NewReader(payload)
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if method == "GET" {
			actx, cancel = context.WithTimeout(ctx, getTimeout)
		}
		req, err := http.NewRequestWithContext(actx, method, c.base+path, r)
		if err != nil {
			cancel()
			return 0, fmt.Errorf("request: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		start := time.Now()
		resp, err := c.hc.Do(req)
		var b []byte
		if err == nil {
			b, err = io.ReadAll(io.LimitReader(resp.Body, 8<<20))
			resp.Body.Close()
		}
		cancel()
		took := time.Since(start)
		c.stats.add(func(s *answerStats) {
			s.requests++
			if took > slowAnswerAfter && len(s.slow) < 1000 {
				s.slow = append(s.slow, slowAnswer{what: method + " " + path, start: start, took: took})
			}
		})
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
			}
			if errors.Is(err, context.DeadlineExceeded) {
				c.stats.add(func(s *answerStats) {
					note(&s.timeouts, fmt.Sprintf("%s %s at %s", method, path, start.Format("15:04:05.000")))
				})
				continue
			}
			c.stats.add(func(s *answerStats) { note(&s.transport, fmt.Sprintf("%s %s: %v", method, path, err)) })
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		isJSON := json.Unmarshal(b, &eb) == nil
		key := fmt.Sprintf("%s %d %s", method, resp.StatusCode, eb.Error.Code)
		c.stats.add(func(s *answerStats) { s.byStatus[strings.TrimSpace(key)]++ })
		switch {
		case resp.StatusCode/100 == 2:
			if out != nil && len(b) > 0 {
				if err := json.Unmarshal(b, out); err != nil {
					return resp.StatusCode, fmt.Errorf("%s %s: decode %.200s: %w", method, path, b, err)
				}
			}
			return resp.StatusCode, nil
		case resp.StatusCode == http.StatusConflict && eb.Error.Code == "moved":
			c.stats.add(func(s *answerStats) {
				note(&s.moved, fmt.Sprintf("%s %s -> 409 moved: %s", method, path, eb.Error.Message))
			})
			sleepCtx(ctx, 500*time.Millisecond)
		case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
			secs, _ := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64)
			c.stats.add(func(s *answerStats) { s.retried++ })
			sleepCtx(ctx, min(time.Duration(secs*float64(time.Second)), 2*time.Second))
		case resp.StatusCode == http.StatusServiceUnavailable && isJSON && eb.Error.Code != "":
			c.stats.add(func(s *answerStats) {
				note(&s.bare503, fmt.Sprintf("%s %s -> 503 %s: %s", method, path, eb.Error.Code, eb.Error.Message))
			})
			sleepCtx(ctx, 300*time.Millisecond)
		case (resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504) && !isJSON:
			c.stats.add(func(s *answerStats) {
				note(&s.lbErrors, fmt.Sprintf("%s %s -> %d from the load balancer", method, path, resp.StatusCode))
			})
			sleepCtx(ctx, 300*time.Millisecond)
		default:
			return resp.StatusCode, &httpError{status: resp.StatusCode, code: eb.Error.Code, body: string(b)}
		}
	}
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// seenEvent is an event as a stream delivered it.
type seenEvent struct {
	session string
	seq     int64
	global  int64
	typ     string
	at      time.Time // the event's time (its step's)
	got     time.Time // when the stream delivered it
	live    bool      // it was committed after the stream's connection opened
	data    string    // the start of its body (one session's streams only)
}

// streamReader reads one event stream, reconnecting with Last-Event-ID,
// and checks that its events come in order, none twice, none skipped.
type streamReader struct {
	name    string
	base    string // server base URL
	path    string // /api/events or /api/sessions/{id}/events
	token   string
	session string // "" for all sessions
	// reconnectEvery, when positive, drops the connection after that many
	// events and reconnects, as a client does after a network blip.
	reconnectEvery int
	// from is the position the stream starts after.
	from int64
	// liveText counts the live events (text.delta) the stream delivered;
	// they are not checked against the log.
	liveText int
	// onEvent, when set, sees each event as it arrives.
	onEvent func(e seenEvent)

	mu         sync.Mutex
	last       int64 // seq (one session) or global (all sessions)
	events     []seenEvent
	problems   []string
	reconnects int
	cuts       int
	errs       []string
	connected  bool
}

// run reads until ctx ends.
func (s *streamReader) run(ctx context.Context) {
	s.mu.Lock()
	s.last = s.from
	s.mu.Unlock()
	hc := &http.Client{}
	for ctx.Err() == nil {
		err := s.once(ctx, hc)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.reconnects++
		if err != nil && len(s.errs) < 50 {
			s.errs = append(s.errs, err.Error())
		}
		s.mu.Unlock()
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// errDropped ends a connection the reader drops on purpose.
var errDropped = errors.New("dropped on purpose")

// once reads one connection of the stream.
func (s *streamReader) once(ctx context.Context, hc *http.Client) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	after := s.last
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+s.path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	opened := time.Now()
	s.mu.Lock()
	s.connected = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.connected = false
		s.mu.Unlock()
	}()
	n := 0
	err = readSSE(resp.Body, func(f sseFrame) error {
		if f.Event == cutEventType {
			s.mu.Lock()
			s.cuts++
			s.mu.Unlock()
			return fmt.Errorf("cut: %s", f.Data)
		}
		var ev vigil.Event
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			return fmt.Errorf("bad event %.200q: %w", f.Data, err)
		}
		if ev.Live {
			// Live text (text.delta) is not in the log and has no
			// position: the committed model.ended that follows carries
			// it, and the order checks below are for committed events.
			s.mu.Lock()
			s.liveText++
			s.mu.Unlock()
			return nil
		}
		e := seenEvent{session: string(ev.Session), seq: ev.Seq, global: ev.Global, typ: ev.Type, at: ev.At, got: time.Now()}
		e.live = e.at.After(opened)
		if s.session != "" {
			e.data = string(ev.Data[:min(len(ev.Data), 300)])
		}
		pos := ev.Global
		if s.session != "" {
			pos = ev.Seq
		}
		s.mu.Lock()
		switch {
		case s.session != "" && ev.Seq != s.last+1:
			s.problems = append(s.problems, fmt.Sprintf("seq %d (%s) after %d (connection from Last-Event-ID %d)", ev.Seq, ev.Type, s.last, after))
		case s.session == "" && ev.Global <= s.last:
			s.problems = append(s.problems, fmt.Sprintf("global %d (%s#%d) after %d (connection from Last-Event-ID %d)", ev.Global, ev.Session, ev.Seq, s.last, after))
		}
		if pos > s.last {
			s.last = pos
			s.events = append(s.events, e)
		}
		s.mu.Unlock()
		if s.onEvent != nil {
			s.onEvent(e)
		}
		n++
		if s.reconnectEvery > 0 && n >= s.reconnectEvery {
			return errDropped
		}
		return nil
	})
	if errors.Is(err, errDropped) {
		return nil
	}
	if err == nil {
		err = errors.New("the stream ended")
	}
	return err
}

// tail describes the last n events the stream delivered.
func (s *streamReader) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, e := range s.events[max(0, len(s.events)-n):] {
		fmt.Fprintf(&b, "\n    %d %s %s %s", e.seq, e.at.Format("15:04:05.000"), e.typ, e.data)
	}
	return b.String()
}

// position is the last seq or global the stream delivered.
func (s *streamReader) position() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// leaseWatch polls the leases table and keeps, per session, who owned it
// and since when.
type leaseWatch struct {
	dsn   string
	nodes []*clusterNode

	mu      sync.Mutex
	owner   map[string]leaseState
	history map[string][]ownerChange
	errs    []string
}

// leaseState is a session's lease as last read.
type leaseState struct {
	closed  bool // the session is closed (as its row says)
	owner   string
	node    int // index into nodes, -1 when no node's
	epoch   int64
	expires time.Time
}

// ownerChange is a session's lease seen held by node from at.
type ownerChange struct {
	at    time.Time
	node  int
	epoch int64
}

// nodeOf maps a lease owner to a node by the host name in it (vigil:host:
// pid:ticks), else by the address of its row in the nodes table.
func (w *leaseWatch) nodeOf(owner string, addrs map[string]string) int {
	for i, n := range w.nodes {
		if strings.Contains(owner, ":"+n.name+":") || strings.HasSuffix(owner, ":"+n.name) || owner == n.name {
			return i
		}
	}
	if a, ok := addrs[owner]; ok {
		for i, n := range w.nodes {
			if strings.Contains(a, n.addr) {
				return i
			}
		}
	}
	return -1
}

// run polls every 100 ms until ctx ends.
func (w *leaseWatch) run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			c, err := pgx.Connect(ctx, w.dsn)
			if err != nil {
				w.fail(err)
				sleepCtx(ctx, time.Second)
				continue
			}
			conn = c
		}
		if err := w.poll(ctx, conn); err != nil && ctx.Err() == nil {
			w.fail(err)
			conn.Close(context.Background())
			conn = nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func (w *leaseWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) < 20 {
		w.errs = append(w.errs, err.Error())
	}
}

func (w *leaseWatch) poll(ctx context.Context, conn *pgx.Conn) error {
	addrs := map[string]string{}
	// The nodes table, where there is one, names each node's address.
	if rows, err := conn.Query(ctx, "SELECT id, address FROM nodes"); err == nil {
		for rows.Next() {
			var id, addr string
			if rows.Scan(&id, &addr) == nil {
				addrs[id] = addr
			}
		}
		rows.Close()
	}
	rows, err := conn.Query(ctx, "SELECT l.session, l.owner, l.epoch, l.expires, coalesce(s.closed, false) FROM leases l LEFT JOIN sessions s ON s.id = l.session")
	if err != nil {
		return fmt.Errorf("read leases: %w", err)
	}
	now := time.Now()
	seen := map[string]leaseState{}
	for rows.Next() {
		var session, owner string
		var epoch, expires int64
		var closed bool
		if err := rows.Scan(&session, &owner, &epoch, &expires, &closed); err != nil {
			rows.Close()
			return fmt.Errorf("read leases: %w", err)
		}
		seen[session] = leaseState{owner: owner, node: w.nodeOf(owner, addrs), epoch: epoch, expires: time.Unix(0, expires), closed: closed}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read leases: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owner == nil {
		w.owner, w.history = map[string]leaseState{}, map[string][]ownerChange{}
	}
	for s, l := range seen {
		old, ok := w.owner[s]
		w.owner[s] = l
		if !ok || old.node != l.node || old.epoch != l.epoch {
			w.history[s] = append(w.history[s], ownerChange{at: now, node: l.node, epoch: l.epoch})
		}
	}
	return nil
}

// ownedBy returns the open sessions whose lease node holds, unexpired.
func (w *leaseWatch) ownedBy(node int) map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int64{}
	now := time.Now()
	for s, l := range w.owner {
		if l.node == node && l.expires.After(now) && !l.closed {
			out[s] = l.epoch
		}
	}
	return out
}

// ownerAt returns the node that held session's lease at t, -1 when not
// known.
func (w *leaseWatch) ownerAt(session string, t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	node := -1
	for _, c := range w.history[session] {
		if c.at.After(t) {
			break
		}
		node = c.node
	}
	return node
}

// adoption waits until every session of owned has a lease held by a node
// other than from (a newer epoch), and returns how long after since each
// took, as first seen by the poller; sessions not adopted by deadline are
// counted in missing.
func (w *leaseWatch) adoption(ctx context.Context, owned map[string]int64, from int, since time.Time, deadline time.Duration) (took []time.Duration, missing []string) {
	end := time.Now().Add(deadline)
	done := map[string]time.Duration{}
	for {
		w.mu.Lock()
		for s, epoch := range owned {
			if _, ok := done[s]; ok {
				continue
			}
			for _, c := range w.history[s] {
				if c.epoch > epoch && c.node >= 0 && c.node != from {
					done[s] = c.at.Sub(since)
					break
				}
			}
		}
		w.mu.Unlock()
		if len(done) == len(owned) || time.Now().After(end) || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	w.mu.Lock()
	for s := range owned {
		if d, ok := done[s]; ok {
			took = append(took, d)
		} else {
			l := w.owner[s]
			missing = append(missing, fmt.Sprintf("%s (held by %s at epoch %d, expires in %s, closed %v)", s, l.owner, l.epoch, time.Until(l.expires).Round(time.Millisecond), l.closed))
		}
	}
	w.mu.Unlock()
	slices.Sort(took)
	slices.Sort(missing)
	return took, missing
}

// percentile is the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// probeSample is one write a prober made: a hold or a resume of a probe
// session, sent to one node directly.
type probeSample struct {
	node    int
	session string
	start   time.Time
	took    time.Duration
	err     string // "" when it was answered 200
}

// prober writes to one probe session through one node directly (not
// through haproxy, so that its requests go only where it sends them): a
// hold, then a resume, every 500 ms.
type prober struct {
	node    int
	base    string
	token   string
	session string

	mu      sync.Mutex
	samples []probeSample
}

func (p *prober) run(ctx context.Context) {
	hc := &http.Client{Timeout: 30 * time.Second}
	for ctx.Err() == nil {
		for _, op := range []string{"hold", "resume"} {
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "POST", p.base+"/api/sessions/"+p.session+"/"+op, nil)
			req.Header.Set("Authorization", "Bearer "+p.token)
			resp, err := hc.Do(req)
			msg := ""
			switch {
			case err != nil:
				msg = err.Error()
			default:
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				if resp.StatusCode != 200 {
					msg = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
				}
			}
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.samples = append(p.samples, probeSample{node: p.node, session: p.session, start: start, took: time.Since(start), err: msg})
			p.mu.Unlock()
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// perNode counts the open sessions each node holds, by index (-1: none
// of the nodes').
func (w *leaseWatch) perNode() map[int]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int]int{}
	now := time.Now()
	for _, l := range w.owner {
		if !l.closed && l.expires.After(now) {
			out[l.node]++
		}
	}
	return out
}

// dbActivity samples pg_stat_activity of the test's database: the most
// connections seen at once in each state and wait.
type dbActivity struct {
	dsn string

	mu      sync.Mutex
	most    map[string]int
	samples int
	errs    []string
}

func (a *dbActivity) run(ctx context.Context) {
	a.most = map[string]int{}
	conn, err := pgx.Connect(ctx, a.dsn)
	if err != nil {
		a.errs = append(a.errs, err.Error())
		return
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, `SELECT coalesce(state, '') || coalesce(' waiting on ' || wait_event_type || ':' || wait_event, ''), count(*)
			FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1`)
		if err != nil {
			if ctx.Err() == nil {
				a.errs = append(a.errs, err.Error())
			}
			return
		}
		seen := map[string]int{}
		for rows.Next() {
			var what string
			var n int
			if rows.Scan(&what, &n) == nil {
				seen[what] = n
			}
		}
		rows.Close()
		a.mu.Lock()
		a.samples++
		for k, n := range seen {
			a.most[k] = max(a.most[k], n)
		}
		a.mu.Unlock()
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// summary lists the most connections seen in each state.
func (a *dbActivity) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := make([]string, 0, len(a.most))
	for k := range a.most {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%q at most %d", k, a.most[k]))
	}
	return fmt.Sprintf("%d samples: %s %v", a.samples, strings.Join(parts, ", "), a.errs)
}
