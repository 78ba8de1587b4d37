package vigil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// internals are what a snapshot keeps of processes and leases and the
// library never shows.
var internals = []string{"pid", "start_ticks", "cgroup", "incarnation", "notified"}

// TestAPIAndSnapshotEncodingsAreSeparate: while a background command runs,
// the durable snapshot of the session (the core's encoding) holds the
// command's pid and start ticks, and nothing the library hands out does:
// not the session detail, not the task, not the status.
func TestAPIAndSnapshotEncodingsAreSeparate(t *testing.T) {
	sc, err := script.Parse([]byte(`
name: background
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "sleep 30", run_in_background: true}
      - say: "started"
`))
	if err != nil {
		t.Fatal(err)
	}
	rt := openWith(t, memstore.New(), sc, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := rt.Subscribe(ctx, &SubscribeParams{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	for ev := range sub.C {
		if ev.Type == "task.process" {
			break
		}
	}
	sub.Close()

	var snapshot []byte
	must(t, rt.inspect(ctx, sess.ID, func(s *core.State) { snapshot, err = json.Marshal(s) }))
	must(t, err)
	for _, key := range []string{`"pid":`, `"start_ticks":`} {
		if !strings.Contains(string(snapshot), key) {
			t.Fatalf("the snapshot has no %s: the test no longer sees a live process", key)
		}
	}
	d, err := rt.SessionGet(ctx, sess.ID, &SessionGetParams{Messages: true, Notifications: true})
	must(t, err)
	st, err := rt.SessionStatus(ctx, sess.ID)
	must(t, err)
	main, err := rt.AgentGet(ctx, sess.ID, "main")
	must(t, err)
	runs, err := rt.RunList(ctx, sess.ID, "")
	must(t, err)
	if len(d.Tasks) != 1 || !d.Tasks[0].Live() || d.Tasks[0].Command != "sleep 30" {
		t.Fatalf("tasks: %+v", d.Tasks)
	}
	events, err := rt.EventList(ctx, sess.ID, 0)
	must(t, err)
	var process bool
	for _, e := range events {
		process = process || e.Type == "task.process"
	}
	if !process {
		t.Fatal("no task.process event: the test no longer sees the event that records a process")
	}
	for _, v := range []any{d, st, main, runs, events} {
		b, err := json.Marshal(v)
		must(t, err)
		for _, key := range internals {
			if strings.Contains(string(b), `"`+key+`"`) {
				t.Errorf("%T encodes %q: %s", v, key, b)
			}
		}
	}
	must(t, rt.StopTask(ctx, sess.ID, &StopTaskParams{Task: d.Tasks[0].ID, By: "test"}))
	must(t, rt.WaitQuiescent(ctx, sess.ID))
}

// TestReadTypesHaveNoInternals walks every read type of the library: no
// field, however deep, is named for a process, a cgroup, a lease or the
// seed bugs' flag.
func TestReadTypesHaveNoInternals(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() != reflect.TypeFor[Session]().PkgPath() {
			return
		}
		seen[ty] = true
		for f := range ty.Fields() {
			name := strings.ToLower(f.Name)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			for _, bad := range []string{"pid", "startticks", "cgroup", "incarnation", "notified", "epoch"} {
				if name == bad || strings.ReplaceAll(tag, "_", "") == bad {
					t.Errorf("%s.%s (json %q) is an internal", path, f.Name, tag)
				}
			}
			walk(path+"."+f.Name, f.Type)
		}
	}
	for _, v := range []any{SessionDetail{}, AgentDetail{}, Status{}, SessionSummary{}, TaskOutput{}, Event{}, Message{}, Notification{}} {
		walk(reflect.TypeOf(v).Name(), reflect.TypeOf(v))
	}
	if len(seen) < 15 {
		t.Fatalf("walked %d types: the walk no longer reaches the read types", len(seen))
	}
}

// TestIDsMatchTheCore: the constants the library names are the core's.
func TestIDsMatchTheCore(t *testing.T) {
	if MainAgent != AgentID(core.MainAgent) {
		t.Errorf("MainAgent %q, core %q", MainAgent, core.MainAgent)
	}
	for _, p := range []Priority{PriorityNow, PriorityNext, PriorityLater} {
		if got, ok := core.ParsePriority(string(p)); !ok || string(got) != string(p) {
			t.Errorf("priority %q: core reads %q %v", p, got, ok)
		}
	}
	for _, m := range []PermissionMode{PermAsk, PermAcceptEdits, PermAuto, PermBypass} {
		if m != PermissionMode(core.PermAsk) && m != PermissionMode(core.PermAcceptEdits) && m != PermissionMode(core.PermAuto) && m != PermissionMode(core.PermBypass) {
			t.Errorf("permission mode %q is not the core's", m)
		}
	}
}

// TestErrorVocabulary: every error the library returns is a *Error whose
// code errors.Is matches, and the cause stays in the chain.
func TestErrorVocabulary(t *testing.T) {
	sc, err := script.Parse([]byte("name: x\nagents:\n  main:\n    turns:\n      - say: hi\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	rt := openWith(t, st, sc, nil)
	ctx := context.Background()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go"})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))

	check := func(what string, err error, code ErrorCode, sentinel error) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.Code != code || CodeOf(err) != code || !errors.Is(err, sentinel) {
			t.Errorf("%s: %v (%T, code %q), want code %s", what, err, err, CodeOf(err), code)
		}
	}
	_, err = rt.Prompt(ctx, "nope", &PromptParams{Text: "hi"})
	check("prompt to an unknown session", err, CodeNotFound, ErrNotFound)
	_, err = rt.SessionGet(ctx, "nope", nil)
	check("get an unknown session", err, CodeNotFound, ErrNotFound)
	_, err = rt.AgentGet(ctx, sess.ID, "nobody")
	check("get an unknown agent", err, CodeNotFound, ErrNotFound)
	_, err = rt.TaskOutput(ctx, sess.ID, &TaskOutputParams{Task: "t9"})
	check("output of an unknown task", err, CodeNotFound, ErrNotFound)
	_, err = rt.CreateSession(ctx, &SessionParams{Provider: "nope"})
	check("an unknown provider", err, CodeInvalid, ErrInvalid)
	_, err = rt.Prompt(ctx, sess.ID, &PromptParams{Text: "a\x00b"})
	check("a NUL byte", err, CodeInvalid, ErrInvalid)
	err = rt.CancelItem(ctx, sess.ID, &CancelItemParams{Item: "i99"})
	check("cancel an unknown item", err, CodeNotFound, ErrNotFound)
	err = rt.AnswerApproval(ctx, sess.ID, &AnswerApprovalParams{Approval: "p1", Always: true})
	check("always without allow", err, CodeInvalid, ErrInvalid)

	must(t, rt.CloseSession(ctx, sess.ID, "test"))
	_, err = rt.Prompt(ctx, sess.ID, &PromptParams{Text: "hi"})
	check("prompt to a closed session", err, CodeClosed, ErrSessionClosed)

	// The store's and the context's errors keep their identity.
	for _, c := range []struct {
		err  error
		code ErrorCode
	}{
		{store.ErrFull, CodeUnavailable}, {store.ErrUnavailable, CodeUnavailable}, {store.ErrFenced, CodeMoved},
		{store.ErrNotFound, CodeNotFound}, {context.DeadlineExceeded, CodeTimeout}, {context.Canceled, CodeCanceled},
		{&core.Error{Code: core.CodeConflict, Message: "taken"}, CodeConflict}, {errors.New("boom"), CodeInternal},
	} {
		w := wrapErr(fmt.Errorf("commit: %w", c.err))
		if CodeOf(w) != c.code || !errors.Is(w, c.err) || w.Error() != "commit: "+c.err.Error() {
			t.Errorf("wrap %v: code %q, is %v, %q", c.err, CodeOf(w), errors.Is(w, c.err), w)
		}
	}
	if CodeOf(nil) != "" || wrapErr(nil) != nil {
		t.Error("nil has a code")
	}
	if errors.Is(errNoSession, ErrSessionClosed) || !errors.Is(errNoSession, ErrNotFound) {
		t.Error("sentinels match by code only")
	}

	_, err = Open(ctx, Options{})
	check("open without a store", err, CodeInvalid, ErrInvalid)

	rt.Close()
	_, err = rt.CreateSession(ctx, &SessionParams{Prompt: "late"})
	check("create after close", err, CodeShuttingDown, ErrShuttingDown)
}

// TestCopiesAreTheCallers: what the library hands out shares no memory
// with the session: a caller that edits its transcript changes nothing
// anyone else sees. An event's bytes are shared, read only, and an append
// to them never reaches another reader's.
func TestCopiesAreTheCallers(t *testing.T) {
	rt, _ := openScript(t, "internal/examples/coordinator.yaml")
	ctx := context.Background()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))
	a, err := rt.AgentGet(ctx, sess.ID, "main")
	must(t, err)
	var edited bool
	for i := range a.Transcript {
		for j := range a.Transcript[i].Content {
			b := &a.Transcript[i].Content[j]
			b.Text = "EDITED"
			if len(b.Input) > 0 {
				b.Input[0] = 'X'
			}
			edited = true
		}
	}
	if !edited {
		t.Fatal("the transcript has no block to edit")
	}
	again, err := rt.AgentGet(ctx, sess.ID, "main")
	must(t, err)
	for _, m := range again.Transcript {
		for _, b := range m.Content {
			if b.Text == "EDITED" || (len(b.Input) > 0 && b.Input[0] == 'X') {
				t.Fatalf("an edit of a copy reached the session: %+v", b)
			}
		}
	}

	// The live fan-out hands one event's bytes to every subscriber, read
	// only (Event.Data); appending to them never reaches another's.
	data := make([]byte, 0, 64)
	data = append(data, `{"agent":"a0"}`...)
	rec := store.Record{Session: "s", Seq: 1, Type: "run.started", Data: data}
	e1, e2 := eventOut(rec), eventOut(rec)
	more := append(e2.Data, 'Y')
	_ = append(e1.Data, "garbage"...)
	if string(more) != `{"agent":"a0"}Y` || string(e2.Data) != `{"agent":"a0"}` {
		t.Fatalf("an append reached another reader's bytes: %s", more)
	}
	// Two live subscribers of the same new events: an append by one never
	// changes what the other reads.
	subs := make([]*Subscription, 2)
	for i := range subs {
		subs[i], err = rt.Subscribe(ctx, &SubscribeParams{Session: sess.ID, FromNow: true})
		must(t, err)
		defer subs[i].Close()
	}
	_, err = rt.Prompt(ctx, sess.ID, &PromptParams{Text: "once more"})
	must(t, err)
	first := <-subs[0].C
	second := <-subs[1].C
	want := string(second.Data)
	_ = append(first.Data, "garbage"...)
	if string(second.Data) != want || string(append(second.Data, 'Y')) != want+"Y" {
		t.Fatalf("two subscribers' appends meet: %s", second.Data)
	}
}

// TestReadTypesEncodeAsTheCore: the read types' JSON is the core's for
// every field they share, so the HTTP API kept its shape when it moved
// off the core's types; the only differences are the internals left out
// and the few fields added for readers.
func TestReadTypesEncodeAsTheCore(t *testing.T) {
	rt, _ := openScript(t, "internal/examples/coordinator.yaml")
	ctx := context.Background()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))
	var checked int
	must(t, rt.inspect(ctx, sess.ID, func(s *core.State) {
		same := func(what string, coreV, v any, dropped, added []string) {
			t.Helper()
			checked++
			var a, b map[string]any
			ca, _ := json.Marshal(coreV)
			cb, _ := json.Marshal(v)
			must(t, json.Unmarshal(ca, &a))
			must(t, json.Unmarshal(cb, &b))
			for _, k := range dropped {
				delete(a, k)
			}
			for _, k := range added {
				delete(b, k)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s:\n core %s\n  api %s", what, ca, cb)
			}
		}
		same("session", s.Session, sessionOut(&s.Session), nil, nil)
		for _, id := range s.TaskOrder {
			same("task "+string(id), s.Tasks[id], taskOut(s.Tasks[id]), []string{"pid", "start_ticks", "cgroup", "incarnation"}, nil)
		}
		for _, k := range s.NoteOrder {
			same("notification "+k.String(), s.Note(k), noteOut(s.Note(k)), nil, nil)
		}
		for _, m := range s.Msgs {
			same("message "+string(m.ID), m, messageOut(s, m), []string{"sender_call"}, []string{"detail"})
		}
		for _, id := range s.Order {
			a := s.Agents[id]
			for i, r := range a.Runs {
				same(fmt.Sprintf("run %s#%d", a.Name, r.Seq), r, runSummaryOut(a, a.Runs[i]), nil, []string{"agent", "agent_name", "round"})
			}
		}
	}))
	if checked < 20 {
		t.Fatalf("compared %d values: the scenario no longer makes tasks, notes, messages and runs", checked)
	}
}

// TestEnumsAreTheCores: every kind and state the library names is the
// core's value of it.
func TestEnumsAreTheCores(t *testing.T) {
	for _, c := range []struct{ lib, core string }{
		{string(AgentIdle), string(core.AgentIdle)},
		{string(AgentRunning), string(core.AgentRunning)},
		{string(AgentWaiting), string(core.AgentWaiting)},
		{string(AgentClosed), string(core.AgentClosed)},
		{string(DriverLoop), string(core.DriverLoop)},
		{string(DriverExternal), string(core.DriverExternal)},
		{string(DriverCaller), string(core.DriverCaller)},
		{string(KindPrompt), string(core.KindPrompt)},
		{string(KindSpawn), string(core.KindSpawn)},
		{string(KindMessage), string(core.KindMessage)},
		{string(KindNotification), string(core.KindNotification)},
		{string(KindTimer), string(core.KindTimer)},
		{string(KindContinuation), string(core.KindContinuation)},
		{string(KindProviderWake), string(core.RunProviderWake)},
		{string(RunRunning), string(core.RunRunning)},
		{string(RunCompleted), string(core.RunCompleted)},
		{string(RunFailed), string(core.RunFailed)},
		{string(RunCancelled), string(core.RunCancelled)},
		{string(RunInterrupted), string(core.RunInterrupted)},
		{string(RunBudgetExceeded), string(core.RunBudgetExceeded)},
		{string(TaskAgent), string(core.TaskAgent)},
		{string(TaskShell), string(core.TaskShell)},
		{string(TaskRunning), string(core.TaskRunning)},
		{string(TaskIdle), string(core.TaskIdle)},
		{string(TaskStopping), string(core.TaskStopping)},
		{string(TaskCompleted), string(core.TaskCompleted)},
		{string(TaskFailed), string(core.TaskFailed)},
		{string(TaskStopped), string(core.TaskStopped)},
		{string(TaskTimedOut), string(core.TaskTimedOut)},
		{string(TaskInterrupted), string(core.TaskInterrupted)},
		{string(TaskLost), string(core.TaskLost)},
		{string(TaskClosed), string(core.TaskClosed)},
		{string(OutcomeJoined), string(core.OutcomeJoined)},
		{string(OutcomeQueuedBehindStop), string(core.OutcomeQueuedBehindStop)},
		{string(OutcomeResumed), string(core.OutcomeResumed)},
		{string(OutcomeRejected), string(core.OutcomeRejected)},
		{string(OutcomePending), string(core.OutcomePending)},
		{string(DeliverInbox), string(core.DeliverInbox)},
		{string(DeliverToolResult), string(core.DeliverToolResult)},
	} {
		if c.lib != c.core {
			t.Errorf("the library says %q where the core says %q", c.lib, c.core)
		}
	}
	for _, s := range []TaskStatus{TaskRunning, TaskIdle, TaskStopping, TaskCompleted, TaskFailed, TaskStopped, TaskTimedOut, TaskInterrupted, TaskLost, TaskClosed} {
		if s.Live() != core.TaskStatus(s).Live() {
			t.Errorf("%s: live %v, the core says %v", s, s.Live(), core.TaskStatus(s).Live())
		}
	}
}

// TestEventDataLeavesOutInternals: the events that record a process or an
// incarnation reach readers without them; a provider process's says
// whether it runs.
func TestEventDataLeavesOutInternals(t *testing.T) {
	for _, c := range []struct{ typ, in, want string }{
		{"task.process", `{"task":"t1","pid":42,"start_ticks":7,"cgroup":"/sys/fs/cgroup/x"}`, `{"task":"t1"}`},
		{"provider.process", `{"agent":"a0","pid":42,"start_ticks":7,"session":"cc"}`, `{"agent":"a0","running":true,"session":"cc"}`},
		{"provider.process", `{"agent":"a0","pid":0}`, `{"agent":"a0","running":false}`},
		{"recovered", `{"incarnation":3}`, `{}`},
		{"run.started", `{"agent":"a0","pid_like":1}`, `{"agent":"a0","pid_like":1}`},
	} {
		if got := string(eventData(c.typ, []byte(c.in))); got != c.want {
			t.Errorf("%s %s: got %s, want %s", c.typ, c.in, got, c.want)
		}
	}
}
