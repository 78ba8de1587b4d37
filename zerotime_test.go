package vigil

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// zeroTimes returns the paths of the JSON values in data that hold the
// zero time.Time ("0001-01-01T00:00:00Z" and the like).
func zeroTimes(data []byte) ([]string, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		case string:
			if strings.HasPrefix(v, "0001-01-01") {
				out = append(out, path)
			}
		}
	}
	walk("", v)
	return out, nil
}

// approvalsScenario asks for approvals (one answered yes, one no) and runs
// a background command, so that permission and task events are written.
const approvalsScenario = `
name: approvals
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "echo one > one.txt"}
      - tools:
          - Bash: {command: "rm -rf build"}
      - tools:
          - Bash: {command: "echo bg", run_in_background: true}
      - say: "done"
    on:
      notification: [{say: "noted"}]
`

// TestEventsCarryRealTimes runs the coordinator scenario (subagents,
// messages, notifications) and a session that asks for approvals and runs
// a background command, and fails on any event whose body holds the zero
// time: every time an event carries is the real one.
func TestEventsCarryRealTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		coord, err := script.Load("internal/examples/coordinator.yaml")
		must(t, err)
		rt := openWith(t, memstore.New(), coord, func(o *Options) {
			o.Providers["approvals"] = script.New(mustParse(t, approvalsScenario), nil)
			_ = provider.Provider(nil)
		})
		sub, err := rt.Subscribe(ctx, &SubscribeParams{})
		must(t, err)
		defer sub.Close()
		a, err := rt.CreateSession(ctx, &SessionParams{Prompt: "Build the release", Permissions: Permissions{Mode: PermBypass}})
		must(t, err)
		b, err := rt.CreateSession(ctx, &SessionParams{Prompt: "tidy up", Provider: "approvals", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermAsk}})
		must(t, err)
		answered := 0
		for ev := range sub.C {
			if ev.Session != b.ID || ev.Type != "approval.requested" {
				continue
			}
			d, err := rt.SessionGet(ctx, b.ID, nil)
			must(t, err)
			for _, p := range d.Approvals {
				must(t, rt.AnswerApproval(ctx, b.ID, &AnswerApprovalParams{Approval: p.ID, Allow: answered != 1, By: "test"}))
				answered++
			}
			if answered >= 3 {
				break
			}
		}
		for _, id := range []SessionID{a.ID, b.ID} {
			must(t, rt.WaitQuiescent(ctx, id))
			events, err := rt.EventList(ctx, id, 0)
			must(t, err)
			types := map[string]bool{}
			for _, e := range events {
				types[e.Type] = true
				if e.At.IsZero() {
					t.Errorf("session %s event %d %s: zero At", id, e.Seq, e.Type)
				}
				zero, err := zeroTimes(e.Data)
				if err != nil {
					t.Fatalf("session %s event %d %s: %v", id, e.Seq, e.Type, err)
				}
				if len(zero) > 0 {
					t.Errorf("session %s event %d %s: zero time at %s: %s", id, e.Seq, e.Type, strings.Join(zero, ", "), e.Data)
				}
			}
			t.Logf("session %s: %d events of %d types", id, len(events), len(types))
		}
	})
}
