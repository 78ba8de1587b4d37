package vigil

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// armedClock is a manualClock that says each delay it is asked to wait.
type armedClock struct {
	*manualClock
	armed chan time.Duration
}

func (c *armedClock) AfterFunc(d time.Duration, f func()) Timer {
	select {
	case c.armed <- d:
	default:
	}
	return c.manualClock.AfterFunc(d, f)
}

// TestRuntimeClockReachesCommands: a command's timeout runs on the
// runtime's clock (Options.Clock), not the wall clock. Before, shell kept
// a clock of its own: the command below ran its full real minute whatever
// the runtime's clock said, and its timeout never reached this clock.
func TestRuntimeClockReachesCommands(t *testing.T) {
	sc, err := script.Parse([]byte(`
name: clock
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "sleep 600", timeout: 61234}
      - say: "done"
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := &armedClock{manualClock: &manualClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, armed: make(chan time.Duration, 64)}
	rt := openWith(t, memstore.New(), sc, func(o *Options) { o.Clock = clock })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Cwd: t.TempDir(), Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	for armed := false; !armed; {
		select {
		case d := <-clock.armed:
			armed = d == 61234*time.Millisecond
		case <-ctx.Done():
			t.Fatal("the command's timeout never reached the runtime's clock")
		}
	}
	clock.advance(62 * time.Second)
	// The kill's grace period and the wait for the output run on the same
	// clock: move it past each wait the runtime arms until it is quiet.
	quiet := make(chan error, 1)
	go func() { quiet <- rt.WaitQuiescent(ctx, sess.ID) }()
	for done := false; !done; {
		select {
		case err := <-quiet:
			must(t, err)
			done = true
		case d := <-clock.armed:
			clock.advance(d)
		}
	}
	var tr bytes.Buffer
	must(t, rt.Transcript(ctx, &tr, &TranscriptParams{Session: sess.ID, Agent: "main"}))
	if !strings.Contains(tr.String(), "killed after the 1m1.234s timeout") {
		t.Fatalf("the command was not killed by its timeout on the runtime's clock:\n%s", tr.String())
	}
}
