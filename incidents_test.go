package vigil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// Seed report 000: five DONE messages, each sent inside the worker's final
// model round. Every reply must be announced, each by its own notification.
func TestIncident000FiveRoundsAllRepliesDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, _ := openScript(t, "internal/examples/incident-000.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Run five rounds", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		s, _ := rt.State(ctx, sess.ID)
		checkDelivered(t, s)
		worker := s.Agent("worker")
		if len(worker.Runs) != 6 {
			t.Fatalf("worker ran %d times, want 6 (one, then one per DONE)", len(worker.Runs))
		}
		for k := 1; k <= 5; k++ {
			var m *core.Msg
			for _, x := range s.Msgs {
				if x.Text == fmt.Sprintf("DONE %d", k) {
					m = x
				}
			}
			if m == nil {
				t.Fatalf("DONE %d was never sent", k)
			}
			if m.Outcome != core.OutcomeQueuedBehindStop || m.Run != k || m.AnsweredBy != k+1 {
				t.Errorf("DONE %d: %s run %d answered by %d; want queued-behind-stop run %d answered by %d", k, m.Outcome, m.Run, m.AnsweredBy, k, k+1)
			}
			n := s.Note(core.NoteKey{Task: worker.Task, Run: k + 1})
			if n == nil || n.Reply != fmt.Sprintf("acknowledged DONE %d", k) || n.DeliveredRun == 0 {
				t.Errorf("the answer to DONE %d was not announced: %+v", k, n)
			}
		}
		main := s.Agents[core.MainAgent]
		if last := main.Runs[len(main.Runs)-1]; !strings.Contains(last.Reply, "All five replies arrived") {
			t.Errorf("main's last reply: %q", last.Reply)
		}
	})
}

// Seed report 003: a background watchdog exits while the main agent's last
// round is still in flight; the session must wake when that round ends.
// Then it sleeps two hours on a wakeup and must wake again.
func TestIncident003IdleSessionWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, _ := openScript(t, "internal/examples/incident-003.yaml")
		ctx := context.Background()
		start := time.Now()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Watch the build", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 2*time.Hour {
			t.Errorf("the two-hour wakeup fired after %s", waited)
		}
		s, _ := rt.State(ctx, sess.ID)
		checkDelivered(t, s)
		main := s.Agents[core.MainAgent]
		if len(main.Runs) != 3 {
			t.Fatalf("main ran %d times, want 3 (prompt, watchdog notification, wakeup)", len(main.Runs))
		}
		if r := main.Runs[1]; r.Kind != core.RunKind(core.KindNotification) || r.Reply != "A check is scheduled in two hours." {
			t.Errorf("run 2: %s %q", r.Kind, r.Reply)
		}
		if !transcriptContains(main, "Woken by t1#exit: exit 0.") {
			t.Errorf("main did not read the watchdog's notification")
		}
		if r := main.Runs[2]; r.Kind != core.RunKind(core.KindTimer) || !strings.Contains(r.Reply, "Two hours passed") {
			t.Errorf("run 3: %s %q", r.Kind, r.Reply)
		}
		out, err := rt.TaskOutput(ctx, sess.ID, &TaskOutputParams{Task: "t1"})
		if err != nil || !strings.Contains(string(out.Data), "WATCHDOG-OK") {
			t.Errorf("watchdog output %+v, %v", out, err)
		}
	})
}

// Seed report 002: two provider wakes arrive while the previous run is
// finishing and the user queue is held. The continuation is not held, the
// second wake supersedes the first and carries its evidence, the gate is
// released, and the held user prompt waits visibly.
func TestIncident002WakeWhileFinishingIsNeverHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, _ := openScript(t, "internal/examples/incident-002.yaml")
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "start", Permissions: Permissions{Mode: PermBypass}})
		if err != nil {
			t.Fatal(err)
		}
		id := sess.ID
		synctest.Wait() // main's first round is in flight (it answers after 1s)
		must(t, rt.Hold(ctx, id, &HoldParams{By: "alice", Reason: "reviewing"}))
		if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "a held question"}); err != nil {
			t.Fatal(err)
		}
		must(t, rt.ProviderWake(ctx, id, string(core.MainAgent), "background task A completed"))
		must(t, rt.ProviderWake(ctx, id, string(core.MainAgent), "background task B completed"))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		s, _ := rt.State(ctx, id)
		main := s.Agents[core.MainAgent]
		if len(main.Runs) != 2 {
			for _, r := range main.Runs {
				t.Logf("run %d %s %s %q items %v", r.Seq, r.Kind, r.Status, r.Reply, r.Items)
			}
			t.Fatalf("main ran %d times, want 2", len(main.Runs))
		}
		wake := main.Runs[1]
		if wake.Kind != core.RunProviderWake || !strings.Contains(wake.Reply, "task A") || !strings.Contains(wake.Reply, "task B") {
			t.Errorf("wake run: %s %q", wake.Kind, wake.Reply)
		}
		if main.Gate != nil {
			t.Errorf("gate still held: %+v", main.Gate)
		}
		status, err := rt.SessionStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st := status.Inboxes; len(st) != 1 || st[0].Held != 1 || !strings.Contains(st[0].Reason, "held by alice") {
			t.Errorf("status: %+v", st)
		}
		must(t, rt.Resume(ctx, id, "alice"))
		if err := rt.WaitQuiescent(ctx, id); err != nil {
			t.Fatal(err)
		}
		s, _ = rt.State(ctx, id)
		if last := s.Agents[core.MainAgent].Runs[2]; !strings.Contains(last.Reply, "a held question") {
			t.Errorf("held prompt answered as %q", last.Reply)
		}
		checkDelivered(t, s)
		_ = chat.Text
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func transcriptContains(a *core.Agent, text string) bool {
	for _, m := range a.Transcript {
		for _, b := range m.Content {
			if strings.Contains(b.Text, text) || strings.Contains(b.Content, text) {
				return true
			}
		}
	}
	return false
}
