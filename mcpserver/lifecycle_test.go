package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// newTestServer opens a runtime on a memory store with the scripted agents
// of testdata/agents.yaml, and a Server on it.
func newTestServer(t *testing.T, opts Options) (*Server, *vigil.Runtime, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	sc, err := script.Load("testdata/agents.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := vigil.Open(ctx, vigil.Options{Store: memstore.New(), Providers: map[string]provider.Provider{"script": script.New(sc, nil)},
		DefaultProvider: "script", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	srv := New(rt, &opts)
	t.Cleanup(func() { srv.Close() })
	return srv, rt, ctx
}

// waitFor waits on one task until a notification comes, and returns it.
func waitFor(t *testing.T, ctx context.Context, srv *Server, owner, task string) Notification {
	t.Helper()
	for {
		w, err := srv.wait(ctx, owner, WaitInput{Tasks: []string{task}, TimeoutSeconds: new(30)})
		if err != nil {
			t.Fatalf("wait for %s: %v", task, err)
		}
		if len(w.Notifications) > 0 {
			return w.Notifications[0]
		}
		if len(w.Running) == 0 {
			t.Fatalf("wait for %s: nothing runs and nothing came: %+v", task, w)
		}
	}
}

// TestNamesAreHeldByLiveTasksOnly: a name is refused while its task works
// or has a notification the caller did not acknowledge; once that is
// acknowledged the name can be spawned again (the next day's "worker"), a
// message by name goes to the live task, and vigil_close frees a live
// task's name at once.
func TestNamesAreHeldByLiveTasksOnly(t *testing.T) {
	t.Parallel()
	srv, _, ctx := newTestServer(t, Options{Owner: "me"})
	first, err := srv.spawn(ctx, "me", SpawnInput{Name: "worker", Prompt: "day one"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.spawn(ctx, "me", SpawnInput{Name: "worker", Prompt: "again"}); err == nil || !strings.Contains(err.Error(), "still live") {
		t.Fatalf("a second worker while the first runs: %v", err)
	}
	n := waitFor(t, ctx, srv, "me", first.Task)
	if _, err := srv.spawn(ctx, "me", SpawnInput{Name: "worker", Prompt: "again"}); err == nil || !strings.Contains(err.Error(), "still live") {
		t.Fatalf("a second worker while the first's notification is not acknowledged: %v", err)
	}
	if _, err := srv.ack(ctx, "me", []string{n.ID}); err != nil {
		t.Fatal(err)
	}
	second, err := srv.spawn(ctx, "me", SpawnInput{Name: "worker", Prompt: "day two"})
	if err != nil {
		t.Fatalf("the name of an ended, acknowledged task: %v", err)
	}
	m, err := srv.sendMessage(ctx, "me", SendInput{Agent: "worker", Message: "status?"})
	if err != nil || m.Task != second.Task {
		t.Fatalf("a message by name went to %q (%v), want the live %s", m.Task, err, second.Task)
	}
	l, err := srv.listTasks(ctx, "me", ListInput{})
	if err != nil || len(l.Tasks) != 2 || l.Tasks[0].Task != first.Task || l.Tasks[1].Task != second.Task {
		t.Fatalf("list, oldest first: %v %+v", err, l.Tasks)
	}
	if !strings.Contains(l.Detail, "1 of them ended") || !strings.Contains(l.Detail, ToolClose) {
		t.Errorf("list's hint: %q", l.Detail)
	}
	// Close the live one: the name is free at once.
	c, err := srv.closeTask(ctx, "me", TaskInput{Task: second.Task})
	if err != nil || c.Outcome != "closed" {
		t.Fatalf("close: %v %+v", err, c)
	}
	if _, err := srv.spawn(ctx, "me", SpawnInput{Name: "worker", Prompt: "day three"}); err != nil {
		t.Fatalf("the name after close: %v", err)
	}
}

// TestCloseDeliversWhatItDrops: closing a task returns the notifications
// the caller had not acknowledged, and no wait returns them after; closing
// a running task stops it, with its agents' work.
func TestCloseDeliversWhatItDrops(t *testing.T) {
	t.Parallel()
	srv, rt, ctx := newTestServer(t, Options{Owner: "me"})
	done, err := srv.spawn(ctx, "me", SpawnInput{Name: "quick", Prompt: "the job"})
	if err != nil {
		t.Fatal(err)
	}
	n := waitFor(t, ctx, srv, "me", done.Task)
	c, err := srv.closeTask(ctx, "me", TaskInput{Task: done.Task})
	if err != nil || c.Outcome != "closed" || c.Stopped || len(c.Notifications) != 1 || c.Notifications[0].ID != n.ID || !strings.Contains(c.Notifications[0].Reply, "quick: done with the job") {
		t.Fatalf("close of an ended task: %v %+v", err, c)
	}
	w, err := srv.wait(ctx, "me", WaitInput{TimeoutSeconds: new(0)})
	if err != nil || len(w.Notifications) != 0 {
		t.Fatalf("a wait after the close: %v %+v", err, w)
	}
	// It was delivered (acknowledged), not dropped.
	st, err := srv.taskStatus(ctx, "me", TaskInput{Task: done.Task})
	if err != nil || len(st.Notifications) != 1 || !st.Notifications[0].Acknowledged || st.Notifications[0].Dropped != "" {
		t.Fatalf("the notification after the close: %v %+v", err, st.Notifications)
	}

	slow, err := srv.spawn(ctx, "me", SpawnInput{Name: "slow", Prompt: "a long job"})
	if err != nil {
		t.Fatal(err)
	}
	c, err = srv.closeTask(ctx, "me", TaskInput{Task: slow.Task})
	if err != nil || c.Outcome != "closed" || !c.Stopped {
		t.Fatalf("close of a running task: %v %+v", err, c)
	}
	ref, _ := parseTask(slow.Task)
	d, err := rt.SessionGet(ctx, ref.session, nil)
	if err != nil || !d.Session.Closed {
		t.Fatalf("the session after close: %v %+v", err, d.Session)
	}
	for _, a := range d.Agents {
		if a.Run != nil {
			t.Errorf("agent %s still runs after close", a.Name)
		}
	}
	if c, err = srv.closeTask(ctx, "me", TaskInput{Task: slow.Task}); err != nil || c.Outcome != "already-closed" {
		t.Fatalf("close twice: %v %+v", err, c)
	}
	if _, err := srv.closeTask(ctx, "someone else", TaskInput{Task: slow.Task}); err == nil || !strings.Contains(err.Error(), "no such task") {
		t.Fatalf("another caller's close: %v", err)
	}
}

// TestRetentionClosesEndedSessions: the sweep closes a session once its
// task has ended, its notifications are acknowledged and the retention
// period has passed since anything happened; never one with a
// notification left, or one that still works.
func TestRetentionClosesEndedSessions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	srv, _, ctx := newTestServer(t, Options{Owner: "me", Retention: time.Hour, Now: clock})
	acked, err := srv.spawn(ctx, "me", SpawnInput{Name: "a", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	n := waitFor(t, ctx, srv, "me", acked.Task)
	if _, err := srv.ack(ctx, "me", []string{n.ID}); err != nil {
		t.Fatal(err)
	}
	unacked, err := srv.spawn(ctx, "me", SpawnInput{Name: "b", Prompt: "y"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, srv, "me", unacked.Task)
	working, err := srv.spawn(ctx, "me", SpawnInput{Name: "sleeper", Prompt: "z"}) // a wakeup is set: work is coming
	if err != nil {
		t.Fatal(err)
	}
	if closed, err := srv.sweep(ctx); err != nil || len(closed) != 0 {
		t.Fatalf("a sweep before the retention period: %v %v", err, closed)
	}
	advance(2 * time.Hour)
	closed, err := srv.sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := parseTask(acked.Task)
	if len(closed) != 1 || closed[0] != ref.session {
		t.Fatalf("swept %v, want only %s (b has a notification left, sleeper %s has a wakeup set)", closed, ref.session, working.Task)
	}
	l, err := srv.listTasks(ctx, "me", ListInput{})
	if err != nil || len(l.Tasks) != 2 {
		t.Fatalf("list after the sweep: %v %+v", err, l.Tasks)
	}
}

// TestWaitFitsTheClient: a client that names itself Codex is listed a
// wait whose maximum is Codex's limit, and a wait longer than the limit
// returns at it, as a normal result that says to wait again.
func TestWaitFitsTheClient(t *testing.T) {
	t.Parallel()
	if got := WaitLimit("codex-mcp-client"); got != 270*time.Second {
		t.Errorf("Codex's limit: %v", got)
	}
	if got := WaitLimit("some-ide"); got != DefaultClientWait {
		t.Errorf("an unknown client's limit: %v", got)
	}
	srv, _, ctx := newTestServer(t, Options{Owner: "me"})
	schema := func(client string) (int, string) {
		ct, st := mcp.NewInMemoryTransports()
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx, st) }()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: client, Version: "0.169.0"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			cs.Close()
			<-done
		}()
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if tool.Name != ToolWait {
				continue
			}
			b, _ := json.Marshal(tool.InputSchema)
			var s struct {
				Properties map[string]struct {
					Maximum float64 `json:"maximum"`
				} `json:"properties"`
			}
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			return int(s.Properties["timeout_seconds"].Maximum), tool.Description
		}
		t.Fatal("no wait tool")
		return 0, ""
	}
	if max, desc := schema("codex-mcp-client"); max != 270 || !strings.Contains(desc, "at most 270 seconds") {
		t.Errorf("Codex's wait: maximum %d, description %q", max, desc)
	}
	if max, _ := schema("claude-code"); max != 3600 {
		t.Errorf("Claude Code's wait: maximum %d", max)
	}

	// A wait longer than the limit returns at the limit.
	short, _, ctx := newTestServer(t, Options{Owner: "me", MaxWait: time.Second})
	slow, err := short.spawn(ctx, "me", SpawnInput{Name: "slow", Prompt: "x"}) // 2 s
	if err != nil {
		t.Fatal(err)
	}
	w, err := short.wait(context.WithValue(ctx, limitKey{}, short.limitOf("")), "me", WaitInput{TimeoutSeconds: new(400)})
	if err != nil || !w.TimedOut || !w.Capped || w.Waited != 1 || len(w.Running) != 1 || w.Running[0].Task != slow.Task {
		t.Fatalf("a wait over the limit: %v %+v", err, w)
	}
	if !strings.Contains(w.Detail, "call "+ToolWait+" again") {
		t.Errorf("the capped wait's detail: %q", w.Detail)
	}
}

// TestProjectKey: the key names the project (its git root), is the same
// from any directory in it, and differs between two projects of the same
// name.
func TestProjectKey(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	a, b := filepath.Join(base, "one", "app"), filepath.Join(base, "two", "app")
	for _, d := range []string{filepath.Join(a, ".git"), filepath.Join(a, "src", "deep"), b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ka := ProjectKey(a)
	if !strings.HasPrefix(ka, "project-app-") {
		t.Errorf("key %q", ka)
	}
	if k := ProjectKey(filepath.Join(a, "src", "deep")); k != ka {
		t.Errorf("a subdirectory's key %q, want the project's %q", k, ka)
	}
	if k := ProjectKey(b); k == ka {
		t.Errorf("two projects named app share the key %q", k)
	}
	if ProjectRoot(filepath.Join(a, "src")) != a {
		t.Errorf("root of %s: %s", filepath.Join(a, "src"), ProjectRoot(filepath.Join(a, "src")))
	}
}
