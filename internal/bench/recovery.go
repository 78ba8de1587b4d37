package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/snapshot"
	"github.com/vigilrun/vigil/store"
)

// Generate writes a session of at least n events to st without a runtime:
// the core is stepped directly, a main agent messaging ten workers that
// answer at once, and the events are appended in batches with their
// projections. With snapshots, state snapshots are saved as the runtime
// saves them (internal/snapshot's format, every 5000 events, or one event
// per KiB of the last snapshot). It returns the session id.
func Generate(ctx context.Context, st store.Store, n int, snapshots bool) (string, error) {
	const id = "bench-recovery"
	// No budget: the generated session is far longer than a default budget allows.
	c := core.New(core.Config{Budget: core.Budget{Tokens: -1, Rounds: -1, Wall: -1, Cost: -1}})
	s := core.NewState()
	lease, err := st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: id, Owner: "bench-generator", TTL: time.Nanosecond, Now: time.Now()})
	if err != nil {
		return "", fmt.Errorf("lease: %w", err)
	}
	now := time.Now()
	var pending []core.Event
	var calls []core.CallModel
	total, sinceSnap, snapBytes := 0, 0, 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		recs := make([]store.Record, len(pending))
		for i, e := range pending {
			data, err := json.Marshal(e.Body)
			if err != nil {
				return err
			}
			recs[i] = store.Record{Session: id, Seq: e.Seq, At: e.At, Type: e.Body.Type(), Data: data}
		}
		if _, err := st.EventAppend(ctx, &store.EventAppendParams{Session: id, Epoch: lease.Epoch, Records: recs, Projection: store.Project(s, pending)}); err != nil {
			return fmt.Errorf("append: %w", err)
		}
		total += len(pending)
		sinceSnap += len(pending)
		pending = pending[:0]
		if snapshots && sinceSnap >= max(5000, snapBytes/1024) {
			b, err := snapshot.Encode(s)
			if err != nil {
				return err
			}
			snapBytes = len(b)
			if err := st.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: id, Epoch: lease.Epoch, Seq: s.Seq, Data: b}); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			sinceSnap = 0
		}
		return nil
	}
	step := func(in core.Input) error {
		now = now.Add(time.Millisecond)
		out := c.Step(s, now, in)
		if out.Err != nil {
			return out.Err
		}
		pending = append(pending, out.Events...)
		for _, ef := range out.Effects {
			if cm, ok := ef.(core.CallModel); ok {
				calls = append(calls, cm)
			}
		}
		if len(pending) >= 2000 {
			return flush()
		}
		return nil
	}
	if err := step(core.CreateSession{Session: core.Session{ID: id, Permissions: core.Permissions{Mode: core.PermBypass}}, Prompt: "go"}); err != nil {
		return "", err
	}
	round := 0
	for total+len(pending) < n {
		if len(calls) == 0 {
			// Everyone is idle: a new prompt starts the next round.
			if err := step(core.UserPrompt{Text: "again"}); err != nil {
				return "", err
			}
			continue
		}
		cm := calls[0]
		calls = calls[1:]
		var resp chat.Response
		switch {
		case cm.AgentName != "main":
			resp = chat.Response{Content: []chat.Block{chat.Text("worker result")}, StopReason: chat.StopEndTurn}
		case round == 0:
			for i := range 10 {
				resp.Content = append(resp.Content, toolUse(fmt.Sprintf("s%d", i), "Agent", map[string]any{"prompt": fmt.Sprintf("work %d", i), "name": fmt.Sprintf("w%d", i), "run_in_background": true}))
			}
		case cm.Round == 1 && round%3 != 0:
			for i := range 10 {
				resp.Content = append(resp.Content, toolUse(fmt.Sprintf("m%d-%d", round, i), "SendMessage", map[string]any{"to": fmt.Sprintf("w%d", i), "message": "more"}))
			}
		default:
			resp = chat.Response{Content: []chat.Block{chat.Text("main reply")}, StopReason: chat.StopEndTurn}
		}
		if cm.AgentName == "main" {
			round++
		}
		if err := step(core.ModelResponded{Agent: cm.Agent, Call: cm.Call, Response: resp}); err != nil {
			return "", err
		}
	}
	if err := flush(); err != nil {
		return "", err
	}
	return id, nil
}

// Recovery measures how long a runtime takes to open a store holding one
// session of n events and take it over: snapshot load, replay, recovery
// step, commit.
func Recovery(ctx context.Context, cfg Config, snapshot bool) (Stats, int64, error) {
	id, err := Generate(ctx, cfg.Store, cfg.N, snapshot)
	if err != nil {
		return Stats{}, 0, err
	}
	last, err := cfg.Store.LastSeq(ctx, id)
	if err != nil {
		return Stats{}, 0, err
	}
	// The generator's garbage (its own copy of the state, the encoded
	// events) is not the recovery's: collected before the clock starts, as
	// a new process after a crash has none. Measured in one process with
	// it, the takeover of 1M events took 1.0-1.7 s; without, 0.66-0.76 s.
	runtime.GC()
	start := time.Now()
	rt, err := vigil.Open(ctx, vigil.Options{Store: cfg.Store, DataDir: cfg.DataDir, Node: "bench-recover"})
	if err != nil {
		return Stats{}, 0, err
	}
	elapsed := time.Since(start)
	defer rt.Close()
	if _, err := rt.SessionStatus(ctx, vigil.SessionID(id)); err != nil {
		return Stats{}, 0, fmt.Errorf("the session was not taken over: %w", err)
	}
	return Stats{N: 1, Elapsed: elapsed, P50: elapsed, P99: elapsed, Max: elapsed}, last, nil
}
