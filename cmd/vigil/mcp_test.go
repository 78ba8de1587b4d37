package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/internal/mcptest"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/store/sqlite"
)

// The MCP tests run the test binary as the vigil command (TestMain, with
// VIGIL_AS_CLI=1) and kill it with SIGKILL in the middle of the
// exactly-once scenario of package mcptest.

// lockedBuf collects a child's stderr for the failure log.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mcpScenario is the scripted agents' scenario file.
func mcpScenario(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../mcpserver/testdata/agents.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// vigilCmd returns the vigil command (this test binary) with a clean
// environment: no config files, no API keys.
func vigilCmd(t *testing.T, stderr *lockedBuf, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "VIGIL_AS_CLI=1", "HOME="+t.TempDir(), "XDG_CONFIG_HOME=", "VIGIL_OWNER=",
		"ANTHROPIC_API_KEY=", "OPENAI_API_KEY=", "VIGIL_TOKEN=", "VIGIL_DATA=")
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("vigil %s stderr:\n%s", args[0], stderr.String())
		}
	})
	return cmd
}

func newKey(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "owner-" + hex.EncodeToString(b)
}

// startMCP starts 'vigil mcp args...' and connects the SDK's client to it.
func startMCP(t *testing.T, ctx context.Context, args ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := vigilCmd(t, &lockedBuf{}, append([]string{"mcp"}, args...)...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start vigil mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, cmd
}

// kill ends a child with SIGKILL and reaps it.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	_ = cmd.Wait()
}

// TestMCPStdioKillRestart runs the exactly-once scenario against 'vigil mcp
// --standalone --data DIR' over stdio, kills it with SIGKILL while an agent's run is in
// flight, starts it again on the same directory and reconnects with the
// same owner key (the owner_key argument): every notification arrives
// once, and the store holds exactly those, all delivered.
func TestMCPStdioKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	args := []string{"--standalone", "--data", dir, "--provider", "script", "--script", mcpScenario(t)}
	owner := newKey(t)
	cs, cmd := startMCP(t, ctx, args...)
	res := mcptest.ExactlyOnce(ctx, t, mcptest.Scenario{
		Client: &mcptest.Client{CS: cs, OwnerKey: owner},
		Restart: func() *mcptest.Client {
			// SIGKILL; the client sees stdout end, closes and reaps it.
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cs.Wait()
			cs, cmd = startMCP(t, ctx, args...)
			return &mcptest.Client{CS: cs, OwnerKey: owner}
		},
	})
	if err := cs.Close(); err != nil { // stdin closes: vigil mcp exits
		t.Errorf("vigil mcp exit: %v", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "vigil.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mcptest.CheckStore(ctx, t, st, owner, res.Collector.Keys())
}

// serveProc is a 'vigil serve' child.
type serveProc struct {
	cmd *exec.Cmd
	url string
}

// startServeMCP starts 'vigil serve' on addr and waits for its banner.
func startServeMCP(t *testing.T, ctx context.Context, dir, addr string) *serveProc {
	t.Helper()
	cmd := vigilCmd(t, &lockedBuf{}, "serve", "--addr", addr, "--data", dir, "--provider", "script", "--script", mcpScenario(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "vigil serving on "); ok {
				u, _, _ := strings.Cut(rest, " ")
				urls <- u
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatal("vigil serve exited before serving")
		}
		return &serveProc{cmd: cmd, url: u}
	case <-ctx.Done():
		t.Fatal("vigil serve did not start")
	}
	return nil
}

// headers adds a bearer token and an owner key to every request.
type headers struct{ token, owner string }

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	r.Header.Set(mcpserver.OwnerHeader, h.owner)
	return http.DefaultTransport.RoundTrip(r)
}

func connectServe(ctx context.Context, url, token, owner string) (*mcp.ClientSession, error) {
	tr := &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: headers{token, owner}}, MaxRetries: -1}
	return mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
}

func readToken(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestMCPServeKillRestart runs the exactly-once scenario over streamable
// HTTP against 'vigil serve' on a random loopback port (bearer token;
// without it, 401), kills the server with SIGKILL in the middle, starts it
// again on the same port and directory, and reconnects with the same
// owner (the Vigil-Owner header).
func TestMCPServeKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	sp := startServeMCP(t, ctx, dir, "127.0.0.1:0")
	token := readToken(t, dir)
	owner := newKey(t)
	if _, err := connectServe(ctx, sp.url, "", owner); err == nil {
		t.Fatal("connected to /mcp without the token")
	}
	resp, err := http.Post(sp.url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", resp.StatusCode)
	}
	cs, err := connectServe(ctx, sp.url, token, owner)
	if err != nil {
		t.Fatal(err)
	}
	res := mcptest.ExactlyOnce(ctx, t, mcptest.Scenario{
		Client: &mcptest.Client{CS: cs},
		Restart: func() *mcptest.Client {
			kill(t, sp.cmd)
			cs.Close()
			sp = startServeMCP(t, ctx, dir, strings.TrimPrefix(sp.url, "http://"))
			if cs, err = connectServe(ctx, sp.url, token, owner); err != nil {
				t.Fatal(err)
			}
			return &mcptest.Client{CS: cs}
		},
	})
	cs.Close()
	kill(t, sp.cmd)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "vigil.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mcptest.CheckStore(ctx, t, st, owner, res.Collector.Keys())
}

// TestMCPBridgeKillRestart runs the scenario through 'vigil mcp --server'
// (stdio in front, the server's /mcp behind) and kills the server, not the
// bridge, in the middle: the bridge reconnects with the same owner.
func TestMCPBridgeKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	sp := startServeMCP(t, ctx, dir, "127.0.0.1:0")
	owner := newKey(t)
	cs, _ := startMCP(t, ctx, "--server", sp.url, "--data", dir, "--owner", owner)
	res := mcptest.ExactlyOnce(ctx, t, mcptest.Scenario{
		Client: &mcptest.Client{CS: cs},
		Restart: func() *mcptest.Client {
			kill(t, sp.cmd)
			sp = startServeMCP(t, ctx, dir, strings.TrimPrefix(sp.url, "http://"))
			return &mcptest.Client{CS: cs}
		},
	})
	cs.Close()
	kill(t, sp.cmd)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "vigil.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mcptest.CheckStore(ctx, t, st, owner, res.Collector.Keys())
}

// TestMCPBridgeNeedsServer: without a server to bridge to, vigil mcp
// --server fails at once with a clear message.
func TestMCPBridgeNeedsServer(t *testing.T) {
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := runMain(context.Background(), e, []string{"mcp", "--server", "127.0.0.1:1", "--token", "x"})
	if code == 0 || !strings.Contains(errb.String(), "cannot reach vigil") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if out.Len() != 0 {
		t.Errorf("wrote to stdout (the protocol's): %q", out.String())
	}
}

// stopDaemon kills the background server of a data directory, if one
// runs, and returns its pid.
func stopDaemon(t *testing.T, dir string) int {
	t.Helper()
	rec, err := readServeRecord(dir)
	if err != nil {
		return 0
	}
	if p, err := os.FindProcess(rec.PID); err == nil {
		_ = p.Kill()
	}
	// Reap nothing: it is not our child. Wait until it is gone.
	for i := 0; i < 500 && syscall.Kill(rec.PID, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return rec.PID
}

// TestMCPDaemonKillRestart runs the exactly-once scenario through the
// default 'vigil mcp': a bridge to the background server it starts. The
// server is killed with SIGKILL in the middle; the bridge starts it again
// at the next call, and nothing is lost or repeated.
func TestMCPDaemonKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dir) })
	args := []string{"--data", dir, "--provider", "script", "--script", mcpScenario(t)}
	owner := newKey(t)
	cs, _ := startMCP(t, ctx, append(args, "--owner", owner)...)
	first, err := readServeRecord(dir)
	if err != nil {
		t.Fatalf("no background server after vigil mcp started: %v", err)
	}
	res := mcptest.ExactlyOnce(ctx, t, mcptest.Scenario{
		Client: &mcptest.Client{CS: cs},
		Restart: func() *mcptest.Client {
			if pid := stopDaemon(t, dir); pid != first.PID {
				t.Fatalf("killed %d, want the server %d", pid, first.PID)
			}
			return &mcptest.Client{CS: cs}
		},
	})
	second, err := readServeRecord(dir)
	if err != nil || second.PID == first.PID {
		t.Fatalf("the bridge did not start the server again: %v %+v", err, second)
	}
	cs.Close()
	stopDaemon(t, dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "vigil.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mcptest.CheckStore(ctx, t, st, owner, res.Collector.Keys())
}

// TestMCPDaemonOutlivesTheClient: an agent spawned through 'vigil mcp'
// keeps working after the client exits (the bridge ends; the background
// server does not), and the next client run in the same project (no
// --owner: the project's key) gets its notification.
func TestMCPDaemonOutlivesTheClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir, project := t.TempDir(), t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dir) })
	args := []string{"--data", dir, "--provider", "script", "--script", mcpScenario(t)}
	start := func() (*mcptest.Client, *exec.Cmd) {
		cmd := vigilCmd(t, &lockedBuf{}, append([]string{"mcp"}, args...)...)
		cmd.Dir = project
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("start vigil mcp: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return &mcptest.Client{CS: cs}, cmd
	}
	c, cmd := start()
	sp, err := c.Spawn(ctx, "slow", "the long job") // its run takes 2 s
	if err != nil {
		t.Fatal(err)
	}
	if want := mcpserver.ProjectKey(project); sp.OwnerKey != want {
		t.Errorf("owner key %q, want the project's %q", sp.OwnerKey, want)
	}
	// The client exits at once, as a 'codex exec' that is done would.
	if err := c.CS.Close(); err != nil {
		t.Fatal(err)
	}
	if ps := cmd.ProcessState; ps == nil || !ps.Success() {
		t.Fatalf("vigil mcp did not exit cleanly when its client left: %v", ps)
	}
	rec, err := readServeRecord(dir)
	if err != nil || syscall.Kill(rec.PID, 0) != nil {
		t.Fatalf("the background server is gone with the client: %v", err)
	}
	// The agent finishes meanwhile, with no client: the server writes its
	// notification.
	waitNotified(t, ctx, dir, sp.Task)
	c2, _ := start()
	var w mcpserver.WaitOutput
	if err := c2.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 30}, &w); err != nil || len(w.Notifications) != 1 ||
		w.Notifications[0].Task != sp.Task || !strings.Contains(w.Notifications[0].Reply, "slow: done with the long job") {
		t.Fatalf("the next client run's wait: %v %+v", err, w)
	}
}

// TestMCPNoProvider: without a model provider, vigil mcp exits at once
// with a message that tells each client how to give it one (Codex's
// env_vars above all: Codex passes an MCP server no variable it does not
// list), and starts no background server.
func TestMCPNoProvider(t *testing.T) {
	var out, errb bytes.Buffer
	dir := t.TempDir()
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "HOME" || k == "XDG_CONFIG_HOME" {
			return dir
		}
		return ""
	}}
	code := runMain(context.Background(), e, []string{"mcp", "--data", filepath.Join(dir, "data")})
	msg := errb.String()
	if code == 0 {
		t.Fatalf("exit 0; stderr %q", msg)
	}
	for _, want := range []string{"claude mcp add vigil -e ANTHROPIC_API_KEY", `env_vars = ["ANTHROPIC_API_KEY"`, "[mcp_servers.vigil]", "other clients"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message does not say %q:\n%s", want, msg)
		}
	}
	if _, err := readServeRecord(filepath.Join(dir, "data")); err == nil {
		t.Error("a background server was started without a provider")
	}
	if out.Len() != 0 {
		t.Errorf("wrote to stdout (the protocol's): %q", out.String())
	}
}

// TestMCPSIGTERMIsClean: Codex ends its MCP server with SIGTERM (to its
// process group), Claude Code with SIGINT. vigil mcp exits 0 on either,
// logs nothing at warn or error (the SDK's "server run cancelled" was an
// ERROR), and the background server, in a session of its own, goes on.
func TestMCPSIGTERMIsClean(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dir := t.TempDir()
			t.Cleanup(func() { stopDaemon(t, dir) })
			stderr := &lockedBuf{}
			cmd := vigilCmd(t, stderr, "mcp", "--data", dir, "--provider", "script", "--script", mcpScenario(t))
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if _, err := (&mcptest.Client{CS: cs}).Spawn(ctx, "slow", "work"); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = cs.Wait()
			for cmd.ProcessState == nil && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // the transport reaps it
			}
			if ps := cmd.ProcessState; ps == nil || !ps.Success() {
				t.Errorf("vigil mcp after %v: %v", sig, ps)
			}
			if s := stderr.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") {
				t.Errorf("vigil mcp logged at warn or error on %v:\n%s", sig, s)
			}
			if rec, err := readServeRecord(dir); err != nil || syscall.Kill(rec.PID, 0) != nil {
				t.Errorf("the background server did not outlive the bridge: %v", err)
			}
		})
	}
}
