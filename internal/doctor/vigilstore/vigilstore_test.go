package vigilstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/doctor"
	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

// session is a real vigil session run to its end on SQLite: its store file
// and its log as the read-only reader returns it.
type session struct {
	dir, db string
	id      string
	recs    []store.Record
	// before is the data directory's files once the runtime closed,
	// before anything read them.
	before map[string][32]byte
}

// runSession runs testdata/coordinator.yaml (a main agent, three background
// subagents, a background shell task, two messages sent into the workers'
// final rounds) through the runtime on a SQLite store, closes the session
// as vigil run does, and reads its log back read-only.
func runSession(t *testing.T) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "vigil.db")
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := runOn(t, ctx, st, dir)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileState(t, dir)
	ro, err := sqlite.OpenReader(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	recs, err := ro.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{dir: dir, db: path, id: id, recs: recs, before: before}
	s.mustHave(t)
	return s
}

// runOn runs testdata/coordinator.yaml on st through the runtime until the
// session is quiescent, closes it as vigil run does and closes the runtime;
// it returns the session's id.
func runOn(t *testing.T, ctx context.Context, st store.Store, dir string) string {
	t.Helper()
	sc, err := script.Load("testdata/coordinator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := vigil.Open(ctx, vigil.Options{
		Store: st, Providers: map[string]provider.Provider{"script": script.New(sc, nil)}, DefaultProvider: "script",
		DataDir: dir, Node: "doctor-test", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "Build the release", Permissions: vigil.Permissions{Mode: vigil.PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if err := rt.CloseSession(ctx, sess.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	return string(sess.ID)
}

// mustHave checks that the session holds what the checks look at, so that
// finding nothing in it means something.
func (s *session) mustHave(t *testing.T) {
	t.Helper()
	count := map[string]int{}
	kinds := map[core.TaskKind]int{}
	outcomes := map[core.MsgOutcome]int{}
	for _, r := range s.recs {
		count[r.Type]++
		body, err := core.DecodeBody(r.Type, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		switch e := body.(type) {
		case *core.TaskStarted:
			kinds[e.Task.Kind]++
		case *core.MessageResolved:
			outcomes[e.Outcome]++
		}
	}
	if kinds[core.TaskAgent] != 3 || kinds[core.TaskShell] != 1 {
		t.Fatalf("tasks started: %v, want 3 agent tasks and 1 shell task", kinds)
	}
	if outcomes[core.OutcomeQueuedBehindStop] != 2 {
		t.Fatalf("message outcomes: %v, want two queued-behind-stop", outcomes)
	}
	if count["notification.written"] < 6 || count["session.closed"] != 1 {
		t.Fatalf("events: %v", count)
	}
	t.Logf("session %s: %d events; %v", s.id, len(s.recs), count)
}

// records is a Source over a slice.
type records []store.Record

func (rs records) EventListAll(_ context.Context, p *store.EventListAllParams) ([]store.Record, error) {
	var out []store.Record
	for _, r := range rs {
		if r.Global > p.AfterGlobal {
			out = append(out, r)
			if p.Limit > 0 && len(out) == p.Limit {
				break
			}
		}
	}
	return out, nil
}

func scan(t *testing.T, recs []store.Record) doctor.Report {
	t.Helper()
	rep, err := Scan(context.Background(), records(recs), Options{Name: "test.db", PageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func kinds(rep doctor.Report) []doctor.Kind {
	var out []doctor.Kind
	for _, f := range rep.Findings {
		out = append(out, f.Kind)
	}
	return out
}

func text(t *testing.T, rep doctor.Report) string {
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func fileState(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(b)
	}
	return out
}

// TestRealSessionIsClean runs a real session and finds nothing in its store,
// reading the file through sqlite.OpenReader, which leaves every file of the data
// directory as it was.
func TestRealSessionIsClean(t *testing.T) {
	s := runSession(t)
	before := s.before
	ctx := context.Background()
	ro, err := sqlite.OpenReader(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Scan(ctx, ro, Options{Name: s.db, PageSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 1 || len(rep.Findings) != 0 || len(rep.Warnings) != 0 {
		t.Fatalf("a real session:\n%s", text(t, rep))
	}
	after := fileState(t, s.dir)
	if !mapsEqual(before, after) {
		t.Fatalf("reading changed the data directory:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("%s", text(t, rep))
}

func mapsEqual(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// decode returns a record's body.
func decode(t *testing.T, r store.Record) core.Body {
	t.Helper()
	b, err := core.DecodeBody(r.Type, r.Data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func encode(t *testing.T, r store.Record, b core.Body) store.Record {
	t.Helper()
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	r.Type, r.Data = b.Type(), data
	return r
}

// renumber gives edited records contiguous sequences and globals again.
func renumber(recs []store.Record) []store.Record {
	for i := range recs {
		recs[i].Seq = int64(i + 1)
		recs[i].Global = int64(i + 1)
	}
	return recs
}

// TestEachFailurePutBack edits the real session's log to put each failure
// back, and checks that exactly that finding comes out.
func TestEachFailurePutBack(t *testing.T) {
	s := runSession(t)
	if rep := scan(t, s.recs); len(rep.Findings) != 0 {
		t.Fatalf("unedited log:\n%s", text(t, rep))
	}
	clone := func() []store.Record { return slices.Clone(s.recs) }

	t.Run("stranded-reply", func(t *testing.T) {
		// Delete the notification.written of the follow-on run that
		// answered "Also add tests…" (w2's run 2): the reply was never
		// announced.
		recs := clone()
		i := slices.IndexFunc(recs, func(r store.Record) bool {
			if r.Type != "notification.written" {
				return false
			}
			n := decode(t, r).(*core.NotificationWritten).Note
			return n.Key.Run == 2 && len(n.Answered) > 0 && strings.Contains(n.Reply, "tests added")
		})
		if i < 0 {
			t.Fatal("no notification of w2's follow-on run")
		}
		recs = renumber(slices.Delete(recs, i, i+1))
		rep := scan(t, recs)
		if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.StrandedReply}) {
			t.Fatalf("findings %v:\n%s", got, text(t, rep))
		}
		if f := rep.Findings[0]; !strings.Contains(f.Recovered, "tests added") || len(f.Evidence) != 3 {
			t.Fatalf("finding:\n%s", text(t, rep))
		}
		t.Logf("%s", text(t, rep))
	})

	t.Run("missed-wake", func(t *testing.T) {
		// Delay, by ten minutes, the run that took a notification queued
		// while main was idle, and everything after it: no user input
		// came between.
		recs := clone()
		enq, start := idleWake(t, recs)
		for i := start; i < len(recs); i++ {
			recs[i].At = recs[i].At.Add(10 * time.Minute)
		}
		rep := scan(t, recs)
		if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.MissedWake}) {
			t.Fatalf("findings %v:\n%s", got, text(t, rep))
		}
		f := rep.Findings[0]
		if want := recs[start].At.Sub(recs[enq].At); f.Stall != want || f.Stall < 10*time.Minute {
			t.Fatalf("stall %s, want %s", f.Stall, want)
		}
		t.Logf("%s", text(t, rep))

		// A user prompt queued during the wait explains the late start:
		// no finding.
		prompt := encode(t, recs[enq], &core.ItemEnqueued{Item: core.Item{ID: "i-user", Agent: core.MainAgent, Kind: core.KindPrompt, From: "user", Text: "status?"}})
		prompt.At = recs[start].At.Add(-time.Second)
		withUser := renumber(slices.Insert(slices.Clone(recs), start, prompt))
		if rep := scan(t, withUser); len(rep.Findings) != 0 {
			t.Fatalf("a user prompt came between:\n%s", text(t, rep))
		}

		// So does a block of main while it waited (a stated reason, which
		// vigil status shows).
		block := encode(t, recs[enq], &core.AgentBlocked{Agent: core.MainAgent, Block: core.Block{Reason: "budget: tokens spent"}})
		block.At = recs[enq].At.Add(time.Second)
		withBlock := renumber(slices.Insert(slices.Clone(recs), enq+1, block))
		if rep := scan(t, withBlock); len(rep.Findings) != 0 {
			t.Fatalf("main was blocked:\n%s", text(t, rep))
		}
	})

	t.Run("held-continuation", func(t *testing.T) {
		// Before main's second run, a hold is set and a continuation is
		// queued with its gate opened; main's later runs pass it over and
		// nothing takes it, as T3's held wake run (seed 002).
		recs := clone()
		i := nthRun(t, recs, core.MainAgent, 2)
		at := recs[i].At.Add(-time.Millisecond)
		hold := encode(t, recs[i], &core.HoldSet{By: "user", Reason: "restart"})
		item := encode(t, recs[i], &core.ItemEnqueued{Item: core.Item{ID: "i-cont", Agent: core.MainAgent, Kind: core.KindContinuation, From: "system", Text: "Background task completed.", Gate: 1}})
		gate := encode(t, recs[i], &core.GateOpened{Agent: core.MainAgent, Gate: core.Gate{Gen: 1, Item: "i-cont", Deadline: at.Add(time.Minute)}})
		hold.At, item.At, gate.At = at, at, at
		recs = renumber(slices.Insert(recs, i, hold, item, gate))
		rep := scan(t, recs)
		if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.HeldContinuation}) {
			t.Fatalf("findings %v:\n%s", got, text(t, rep))
		}
		if f := rep.Findings[0]; f.Item != "i-cont" {
			t.Fatalf("item %q", f.Item)
		}
		t.Logf("%s", text(t, rep))

		// Each half alone: the continuation passed over with no gate,
		// and a gate never released with no continuation.
		for _, drop := range []string{"gate.opened", "item.enqueued"} {
			part := slices.DeleteFunc(slices.Clone(recs), func(r store.Record) bool {
				return r.Type == drop && strings.Contains(string(r.Data), "i-cont")
			})
			rep := scan(t, renumber(part))
			if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.HeldContinuation}) || rep.Findings[0].Item != "i-cont" {
				t.Fatalf("without %s: findings %v:\n%s", drop, got, text(t, rep))
			}
		}
	})

	t.Run("stuck-subagent", func(t *testing.T) {
		// Delete the shell task's updates after it started: its exit was
		// never applied, and the session closed with it "running".
		recs := clone()
		var shell core.TaskID
		for _, r := range recs {
			if e, ok := decode(t, r).(*core.TaskStarted); ok && e.Task.Kind == core.TaskShell {
				shell = e.Task.ID
			}
		}
		recs = slices.DeleteFunc(recs, func(r store.Record) bool {
			e, ok := decode(t, r).(*core.TaskUpdated)
			return ok && e.Task == shell
		})
		rep := scan(t, renumber(recs))
		if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.StuckSubagent}) {
			t.Fatalf("findings %v:\n%s", got, text(t, rep))
		}
		if f := rep.Findings[0]; f.Item != string(shell) {
			t.Fatalf("item %q, want %s", f.Item, shell)
		}
		t.Logf("%s", text(t, rep))

		// The session left open (its closing steps cut off) and taken
		// over by a new vigil (a recovered event) after the shell task's
		// process was recorded, with nothing ending the task after it.
		open := clone()
		open = open[:slices.IndexFunc(open, func(r store.Record) bool { return r.Type == "agent.closed" })]
		if rep := scan(t, open); len(rep.Findings) != 0 {
			t.Fatalf("the open session:\n%s", text(t, rep))
		}
		recov := slices.DeleteFunc(slices.Clone(open), func(r store.Record) bool {
			e, ok := decode(t, r).(*core.TaskUpdated)
			return ok && e.Task == shell
		})
		r := encode(t, recov[len(recov)-1], &core.Recovered{Incarnation: 2})
		r.At = r.At.Add(time.Second)
		rep = scan(t, renumber(append(recov, r)))
		if got := kinds(rep); !slices.Equal(got, []doctor.Kind{doctor.StuckSubagent}) || !strings.Contains(rep.Findings[0].Summary, "died with the vigil") {
			t.Fatalf("after recovery: findings %v:\n%s", got, text(t, rep))
		}

		// A subagent's task set running again after its last run ended.
		agentTask := slices.Clone(open)
		i := slices.IndexFunc(agentTask, func(r store.Record) bool {
			e, ok := decode(t, r).(*core.RunEnded)
			return ok && e.Agent != core.MainAgent
		})
		var task core.TaskID
		for _, r := range agentTask {
			if e, ok := decode(t, r).(*core.AgentCreated); ok && e.Agent.ID == decode(t, agentTask[i]).(*core.RunEnded).Agent {
				task = e.Agent.Task
			}
		}
		up := encode(t, agentTask[i], &core.TaskUpdated{Task: task, Status: core.TaskRunning})
		agentTask = renumber(slices.Insert(agentTask, i+1, up))
		// Its agent must not run again after it for the case to hold.
		rep = scan(t, agentTask)
		if got := kinds(rep); len(got) != 1 || got[0] != doctor.StuckSubagent || rep.Findings[0].Item != string(task) {
			t.Fatalf("agent task %s: findings %v:\n%s", task, got, text(t, rep))
		}
	})
}

// idleWake finds a notification queued for main while it had no run, and
// the index of the run.started that took it.
func idleWake(t *testing.T, recs []store.Record) (enq, start int) {
	t.Helper()
	running := false
	queued := map[core.ItemID]int{}
	for i, r := range recs {
		switch e := decode(t, r).(type) {
		case *core.RunStarted:
			if e.Agent != core.MainAgent {
				continue
			}
			running = true
			for _, id := range e.Items {
				if j, ok := queued[id]; ok {
					return j, i
				}
			}
		case *core.RunEnded:
			if e.Agent == core.MainAgent {
				running = false
			}
		case *core.ItemEnqueued:
			if e.Item.Agent == core.MainAgent && e.Item.Kind == core.KindNotification && !running {
				queued[e.Item.ID] = i
			}
		}
	}
	t.Fatal("no notification woke an idle main")
	return 0, 0
}

// nthRun returns the index of the run.started of an agent's run n.
func nthRun(t *testing.T, recs []store.Record, agent core.AgentID, n int) int {
	t.Helper()
	for i, r := range recs {
		if e, ok := decode(t, r).(*core.RunStarted); ok && e.Agent == agent && e.Seq == n {
			return i
		}
	}
	t.Fatalf("no run %d of %s", n, agent)
	return 0
}

// TestRealSessionPostgres runs the session on a PostgreSQL store, and
// reads it back through postgres.OpenReader: nothing is found.
func TestRealSessionPostgres(t *testing.T) {
	dsn := pgtest.Fresh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := runOn(t, ctx, st, t.TempDir())
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := postgres.OpenReader(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	rep, err := Scan(ctx, ro, Options{Name: ro.Name(), PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 1 || len(rep.Findings) != 0 || len(rep.Warnings) != 0 {
		t.Fatalf("session %s on PostgreSQL:\n%s", id, text(t, rep))
	}
	recs, err := ro.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	(&session{id: id, recs: recs}).mustHave(t)
}
