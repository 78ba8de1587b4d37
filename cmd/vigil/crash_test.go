package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

var (
	crashIterations = flag.Int("crash.iterations", 5, "crash-test iterations per backend")
	crashSeed       = flag.Uint64("crash.seed", 0, "crash-test seed (0: from the clock, printed)")
)

// TestMain lets the test binary run as the vigil command: the crash test
// starts it as a child process and kills it.
func TestMain(m *testing.M) {
	sandbox.Main()
	if os.Getenv(testMCPServerEnv) == "1" {
		os.Exit(runTestMCPServer())
	}
	if os.Getenv("VIGIL_AS_CLI") == "1" {
		ctx, stop := signalContext()
		defer stop()
		os.Exit(runMain(ctx, &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// signalContext ends at SIGINT or SIGTERM, as the vigil command's does.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// child runs `vigil args...` as a process of its own.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
	errb  *strings.Builder
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	return startChildEnv(t, nil, args...)
}

// startChildEnv is startChild with more environment variables.
func startChildEnv(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "VIGIL_AS_CLI=1"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1), errb: &strings.Builder{}}
	cmd.Stderr = c.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_, _ = io.Copy(io.Discard, out)
		c.done <- cmd.Wait()
	}()
	return c
}

// crashBackend opens a fresh database for one iteration and returns the
// flags that point vigil at it and a function opening it in the test.
type crashBackend struct {
	name  string
	setup func(t *testing.T) (flags []string, open func() store.Store)
}

func TestCrashRecovery(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash test seed %d (replay with -crash.seed %d), %d iterations per backend", seed, seed, *crashIterations)
	backends := []crashBackend{
		{"sqlite", func(t *testing.T) ([]string, func() store.Store) {
			dir := t.TempDir()
			return []string{"--data", dir}, func() store.Store {
				st, err := sqlite.Open(context.Background(), filepath.Join(dir, "vigil.db"), nil)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		}},
		{"postgres", func(t *testing.T) ([]string, func() store.Store) {
			dsn := pgtest.Fresh(t)
			return []string{"--data", t.TempDir(), "--db", dsn}, func() store.Store {
				st, err := postgres.Open(context.Background(), dsn, nil)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(b.name))))
			for i := range *crashIterations {
				t.Run(fmt.Sprint(i), func(t *testing.T) { crashOnce(t, b, rng) })
			}
		})
	}
}

// crashOnce runs the workload, SIGKILLs vigil at random moments (up to
// three times), restarts it on the same database with --resume until the
// session is done, then checks the rules on what the store holds.
func crashOnce(t *testing.T, b crashBackend, rng *rand.Rand) {
	flags, open := b.setup(t)
	script, _ := filepath.Abs("testdata/crash.yaml")
	base := append(append([]string{"run"}, flags...), "--script", script, "--permission-mode", "bypass",
		"--cwd", t.TempDir(), "--output-format", "stream-json", "--timeout", "2m")
	args := append(append([]string{}, base...), "Start the job")
	// Retries of the failing run back off briefly, and outlast the kills.
	cfgHome := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfgHome, "vigil"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgHome, "vigil", "config.yaml"), []byte("retry: {base: 50ms, max_delay: 200ms, attempts: 20}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	session := ""
	kills := 1 + rng.IntN(3)
	var killedAt []int
	for attempt := 0; ; attempt++ {
		c := startChildEnv(t, []string{"XDG_CONFIG_HOME=" + cfgHome}, args...)
		killAfter := -1
		if attempt < kills {
			killAfter = 1 + rng.IntN(100)
		}
		// The first kill comes while a run that took a notification
		// failed and its agent backs off.
		onRetry := attempt == 0
		n := 0
		killed := false
		for line := range c.lines {
			n++
			if session == "" {
				session = sessionOf(line)
			}
			if (n == killAfter || (onRetry && strings.Contains(line, `"event":"agent.retry"`))) && session != "" {
				_ = c.cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				killedAt = append(killedAt, n)
				break
			}
		}
		if endAttempt(t, c, session, killed) {
			break
		}
		if attempt > 6 {
			t.Fatalf("never finished after %d restarts", attempt)
		}
		args = append(append([]string{}, base...), "--resume", session)
	}
	t.Logf("session %s: killed after %v events, finished", session, killedAt)
	st := open()
	defer st.Close()
	checkStore(t, st, session)
}

// endAttempt drains a child vigil's output and waits for it. It reports
// whether the run is done: the child was not killed and exited cleanly (a
// child that was not killed and failed fails the test).
func endAttempt(t *testing.T, c *child, session string, killed bool) bool {
	t.Helper()
	for range c.lines {
	}
	err := <-c.done
	if session == "" {
		t.Fatalf("no session was created: %v\n%s", err, c.errb.String())
	}
	if !killed && err != nil {
		t.Fatalf("the last run failed: %v\n%s", err, c.errb.String())
	}
	return !killed
}

func sessionOf(line string) string {
	var ev struct {
		Event string          `json:"event"`
		Data  json.RawMessage `json:"data"`
	}
	if json.Unmarshal([]byte(line), &ev) != nil || ev.Event != "session.created" {
		return ""
	}
	var d struct {
		Session struct{ ID string } `json:"session"`
	}
	_ = json.Unmarshal(ev.Data, &d)
	return d.Session.ID
}

// checkStore checks, on the committed events alone, that every run ended,
// every notification was written once and delivered to its owner once,
// every message was answered or rejected, and no task is running without a
// live process.
func checkStore(t *testing.T, st store.Store, session string) {
	t.Helper()
	ctx := context.Background()
	var evs []core.Event
	after := int64(0)
	for {
		recs, err := st.EventList(ctx, &store.EventListParams{Session: session, AfterSeq: after, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			e, err := decodeRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			if e.Seq != after+1 {
				t.Fatalf("event log has a gap: %d after %d", e.Seq, after)
			}
			after = e.Seq
			evs = append(evs, e)
		}
		if len(recs) < 5000 {
			break
		}
	}
	written := map[core.NoteKey]int{}
	// A notification is delivered when a model round with its item was
	// accepted (items.seen), or as a tool's result.
	delivered := map[core.NoteKey]int{}
	noteOf := map[core.ItemID]core.NoteKey{}
	recoveries, returned := 0, 0
	for _, e := range evs {
		switch b := e.Body.(type) {
		case *core.NotificationWritten:
			written[b.Note.Key]++
			if b.Note.Delivery == core.DeliverToolResult {
				delivered[b.Note.Key]++
			}
		case *core.ItemEnqueued:
			if b.Item.Note != nil {
				noteOf[b.Item.ID] = *b.Item.Note
			}
		case *core.ItemsSeen:
			for _, id := range b.Items {
				if k, ok := noteOf[id]; ok {
					delivered[k]++
				}
			}
		case *core.ItemsReturned:
			returned += len(b.Items)
		case *core.Recovered:
			recoveries++
		}
	}
	if returned == 0 {
		t.Errorf("no run gave an item back: the scripted failure did not happen")
	}
	s := core.Replay(evs)
	if recoveries == 0 {
		t.Errorf("no recovery recorded: the kill came too late?")
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Run != nil {
			t.Errorf("run %s#%d never ended", a.Name, a.Run.Seq)
		}
		if len(a.Inbox) > 0 {
			t.Errorf("%s's inbox still holds %d item(s)", a.Name, len(a.Inbox))
		}
		if a.Task == "" {
			continue
		}
		for _, r := range a.Runs {
			if k := (core.NoteKey{Task: a.Task, Run: r.Seq}); written[k] != 1 {
				t.Errorf("run %s#%d (%s): %d notifications, want 1", a.Name, r.Seq, r.Status, written[k])
			}
		}
	}
	for k, n := range written {
		if n != 1 {
			t.Errorf("notification %s written %d times", k, n)
		}
		note := s.Note(k)
		if delivered[k] != 1 && note.Dropped == "" {
			t.Errorf("notification %s (%s) delivered %d times, want 1", k, note.Status, delivered[k])
		}
	}
	for id, m := range s.Msgs {
		if m.Outcome == core.OutcomeRejected {
			continue
		}
		if m.Outcome == core.OutcomePending || m.AnsweredBy == 0 {
			t.Errorf("message %s (%s) to %s was never answered", id, m.Outcome, m.To)
		}
	}
	interrupted := 0
	for _, id := range s.TaskOrder {
		task := s.Tasks[id]
		if task.Kind != core.TaskShell {
			continue
		}
		if task.Status.Live() {
			t.Errorf("task %s still %s", id, task.Status)
		}
		if task.Status == core.TaskInterrupted {
			interrupted++
		}
		if task.PID != 0 && shell.Alive(task.PID, task.StartTicks) {
			t.Errorf("task %s's process %d outlived its vigil", id, task.PID)
		}
		if written[core.NoteKey{Task: id}] != 1 {
			t.Errorf("shell task %s has no exit notification", id)
		}
	}
	if !s.Session.Closed {
		t.Errorf("the finished session was not closed")
	}
	t.Logf("%d events, %d recoveries, %d notifications, %d messages, %d items given back, %d shell tasks interrupted", len(evs), recoveries, len(written), len(s.Msgs), returned, interrupted)
}

// decodeRecord decodes a stored event for the checks on what the store
// holds.
func decodeRecord(r store.Record) (core.Event, error) {
	body, err := core.DecodeBody(r.Type, r.Data)
	if err != nil {
		return core.Event{}, fmt.Errorf("event %s#%d: %w", r.Session, r.Seq, err)
	}
	return core.Event{Seq: r.Seq, At: r.At, Body: body}, nil
}
