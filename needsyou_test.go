package vigil

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/vigilrun/vigil/store/memstore"
)

const approvalScenario = `
name: approval
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "rm -rf build"}
      - say: "done"
`

// needsYou returns the session's NeedsYou as the store's list has it.
func needsYou(t *testing.T, rt *Runtime, id SessionID) []string {
	t.Helper()
	list, err := rt.SessionList(context.Background(), nil)
	must(t, err)
	for _, s := range list {
		if s.ID == id {
			return s.NeedsYou
		}
	}
	t.Fatalf("session %s not listed", id)
	return nil
}

// TestNeedsYouListed: a session whose main agent waits for an approval
// lists it in NeedsYou as soon as the request is committed, with no time
// passing (a busy session's rows otherwise wait for the projection's lag:
// this change is written at once), and an answer clears it as promptly.
// A session nobody needs to act on lists none.
func TestNeedsYouListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		rt := openWith(t, st, mustParse(t, approvalScenario), nil)
		sub, err := rt.Subscribe(ctx, &SubscribeParams{})
		must(t, err)
		defer sub.Close()
		sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "clean up", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermAsk}})
		must(t, err)
		var approval ApprovalID
		for ev := range sub.C {
			if ev.Session == sess.ID && ev.Type == "approval.requested" {
				d, err := rt.SessionGet(ctx, sess.ID, nil)
				must(t, err)
				if len(d.Approvals) != 1 {
					t.Fatalf("approvals %+v, want one", d.Approvals)
				}
				approval = d.Approvals[0].ID
				break
			}
		}
		want := []string{"approval " + string(approval) + ": Bash (main)"}
		if got := needsYou(t, rt, sess.ID); !slices.Equal(got, want) {
			t.Fatalf("needs_you while the approval waits: %q, want %q", got, want)
		}

		must(t, rt.AnswerApproval(ctx, sess.ID, &AnswerApprovalParams{Approval: approval, Allow: false, By: "test"}))
		for ev := range sub.C {
			if ev.Session == sess.ID && ev.Type == "approval.resolved" {
				break
			}
		}
		if got := needsYou(t, rt, sess.ID); got != nil {
			t.Fatalf("needs_you after the answer: %q, want none", got)
		}
		must(t, rt.WaitQuiescent(ctx, sess.ID))
		if got := needsYou(t, rt, sess.ID); got != nil {
			t.Fatalf("needs_you at the end: %q, want none", got)
		}
	})
}
