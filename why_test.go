package vigil

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// overlapScript: main starts three background workers and asks to run a
// command that mode ask leaves to a person; the workers end while it
// waits, and their notifications queue behind the request.
const overlapScript = `name: overlap
agents:
  main:
    turns:
      - say: "Three workers, then a clean build."
        tools:
          - Agent: {name: w1, prompt: "part one", run_in_background: true}
          - Agent: {name: w2, prompt: "part two", run_in_background: true}
          - Agent: {name: w3, prompt: "part three", run_in_background: true}
          - Bash: {command: "rm -rf build"}
      - say: "cleaned"
    on:
      notification:
        - say: "noted {{.Notification.Agent}}"
  "*":
    turns:
      - delay: 1s
        say: "finished {{.Input}}"
`

// The status: main waits on permission request p1 while the user
// queue is held and three notifications sit behind the request. The why
// says the approval first, names the notifications and the held prompt;
// status says the inbox is not draining, with the approval's deadline as
// the approval's; the inbox shows what each notification says.
func TestWhyOverlapOnARuntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc, err := script.Parse([]byte(overlapScript))
		must(t, err)
		rt := openWith(t, memstore.New(), sc, nil)
		ctx := context.Background()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Permissions: Permissions{Mode: PermAsk}})
		must(t, err)
		time.Sleep(5 * time.Second) // the workers' rounds (1 s each) end
		synctest.Wait()
		must(t, rt.Hold(ctx, sess.ID, &HoldParams{By: "alice", Reason: "reviewing"}))
		_, err = rt.Prompt(ctx, sess.ID, &PromptParams{Text: "and then the docs"})
		must(t, err)
		d, err := rt.SessionGet(ctx, sess.ID, nil)
		must(t, err)
		if len(d.Approvals) != 1 || d.Approvals[0].ID != "p1" {
			t.Fatalf("approvals: %+v", d.Approvals)
		}
		p1 := d.Approvals[0]
		main := d.Agents[0]
		// The workers end at the same moment: their notifications queue
		// in the order their ends were stepped.
		var notes []ItemID
		var keys []string
		for _, it := range main.Inbox {
			if it.Kind == KindNotification {
				notes = append(notes, it.ID)
				keys = append(keys, it.Note.String())
				if !strings.HasPrefix(it.Text, "w") || !strings.Contains(it.Text, " run 1 completed: finished ") {
					t.Errorf("notification %s reads %q", it.ID, it.Text)
				}
			}
		}
		want := Why{
			Kind: WhyApproval, NeedsYou: true, Since: p1.Asked, Until: p1.Deadline,
			Text: "waiting for approval p1 (Bash: rm -rf build), denied at " + p1.Deadline.UTC().Format(time.TimeOnly) +
				" if unanswered; 3 notifications wait behind it (" + strings.Join(keys, ", ") + "); 1 user prompt held by alice",
			ClearsOn: "an answer to the request, or its deadline (then denied)", HoldsUp: notes,
		}
		if !slices.Equal(slices.Sorted(slices.Values(keys)), []string{"t1#1", "t2#1", "t3#1"}) {
			t.Fatalf("queued notifications %v, want t1#1, t2#1 and t3#1", keys)
		}
		if w := main.Why; w.Kind != want.Kind || w.Text != want.Text || !w.NeedsYou || !slices.Equal(w.HoldsUp, want.HoldsUp) ||
			!w.Until.Equal(want.Until) || !w.Since.Equal(want.Since) || w.ClearsOn != want.ClearsOn {
			t.Fatalf("main's why:\n got %+v\nwant %+v", w, want)
		}
		for _, a := range d.Agents[1:] {
			if a.Why.Kind != WhyIdle || a.Why.Text != "idle" || a.Why.NeedsYou {
				t.Errorf("%s's why: %+v", a.Name, a.Why)
			}
		}
		st, err := rt.SessionStatus(ctx, sess.ID)
		must(t, err)
		if len(st.Inboxes) != 1 {
			t.Fatalf("inboxes: %+v", st.Inboxes)
		}
		if in := st.Inboxes[0]; in.Draining || in.Held != 1 || in.Items != 4 || in.Kind != WhyApproval || in.Reason != want.Text || !in.Until.Equal(p1.Deadline) {
			t.Errorf("main's inbox status: %+v", in)
		}
		if len(st.Agents) != 4 || st.Agents[0].Name != "main" || st.Agents[0].Why.Text != want.Text {
			t.Errorf("status's agents: %+v", st.Agents)
		}
		if len(st.Progress) != 1 || st.Progress[0].Waiting != "approval p1" {
			t.Errorf("progress: %+v", st.Progress)
		}
		// Answered, main's run goes on and takes the notifications; the
		// held prompt waits for the hold alone.
		must(t, rt.AnswerApproval(ctx, sess.ID, &AnswerApprovalParams{Approval: "p1", Allow: true}))
		time.Sleep(time.Minute)
		synctest.Wait()
		st, err = rt.SessionStatus(ctx, sess.ID)
		must(t, err)
		if len(st.Inboxes) != 1 || st.Inboxes[0].Kind != WhyHeld || st.Inboxes[0].Reason != "1 user prompt held by alice (reviewing)" || !st.Inboxes[0].Until.IsZero() {
			t.Errorf("inboxes after the answer: %+v", st.Inboxes)
		}
	})
}
