package bench

import (
	"context"
	"testing"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

func report(b *testing.B, s Stats) {
	b.ReportMetric(float64(s.P50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(s.P99.Microseconds()), "p99-µs")
	b.ReportMetric(float64(s.Max.Microseconds()), "max-µs")
}

// BenchmarkWakeLatencyBash: background shell completion to the owner's next
// model request, in memory. Claude Code 2.1.328 measured 106 ms median.
func BenchmarkWakeLatencyBash(b *testing.B) {
	for b.Loop() {
		st := memstore.New()
		s, err := WakeLatencyBash(context.Background(), Config{Store: st, DataDir: b.TempDir(), N: 50})
		if err != nil {
			b.Fatal(err)
		}
		report(b, s)
	}
}

// BenchmarkWakeLatencyAgent: background subagent's final answer to the
// owner's next model request, in memory. Claude Code 2.1.328: 76 ms median.
func BenchmarkWakeLatencyAgent(b *testing.B) {
	for b.Loop() {
		s, err := WakeLatencyAgent(context.Background(), Config{Store: memstore.New(), DataDir: b.TempDir(), N: 200})
		if err != nil {
			b.Fatal(err)
		}
		report(b, s)
	}
}

// BenchmarkNotifications: notifications written and delivered per second
// through the in-memory runtime, four sessions of ten workers each.
func BenchmarkNotifications(b *testing.B) {
	for b.Loop() {
		s, err := Notifications(context.Background(), Config{Store: memstore.New(), DataDir: b.TempDir(), N: 4000}, 4)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(s.PerSecond, "notes/s")
	}
}

// The workloads must really deliver what they measure.
func TestWorkloadsDeliver(t *testing.T) {
	ctx := context.Background()
	if s, err := WakeLatencyAgent(ctx, Config{Store: memstore.New(), DataDir: t.TempDir(), N: 5}); err != nil || s.N != 5 {
		t.Fatalf("agent wake: %v %v", s, err)
	}
	if s, err := WakeLatencyBash(ctx, Config{Store: memstore.New(), DataDir: t.TempDir(), N: 3}); err != nil || s.N != 3 {
		t.Fatalf("bash wake: %v %v", s, err)
	}
	if s, err := Notifications(ctx, Config{Store: memstore.New(), DataDir: t.TempDir(), N: 120}, 2); err != nil || s.N < 120 {
		t.Fatalf("notifications: %v %v", s, err)
	}
}

func TestRecoveryTakesOver(t *testing.T) {
	for _, snap := range []bool{false, true} {
		s, last, err := Recovery(context.Background(), Config{Store: memstore.New(), DataDir: t.TempDir(), N: 12000}, snap)
		if err != nil {
			t.Fatal(err)
		}
		if last < 12000 {
			t.Fatalf("generated %d events", last)
		}
		t.Logf("snapshot=%v: %d events recovered in %s", snap, last, s.Elapsed)
	}
}

// TestGenerateMakesTenWorkers: the session Recovery takes over is the one
// Generate's doc comment describes, a main agent and ten workers it
// messages, none of its messages refused (with one prompt for all, the
// core had refused nine workers as duplicates, and their messages went to
// names that did not exist).
func TestGenerateMakesTenWorkers(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	id, err := Generate(ctx, st, 3000, false)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.EventList(ctx, &store.EventListParams{Session: id})
	if err != nil {
		t.Fatal(err)
	}
	events := make([]core.Event, len(recs))
	for i, r := range recs {
		body, err := core.DecodeBody(r.Type, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		events[i] = core.Event{Seq: r.Seq, At: r.At, Body: body}
	}
	s := core.Replay(events)
	if len(s.Agents) != 11 {
		t.Fatalf("%d agents, want main and ten workers", len(s.Agents))
	}
	if len(s.Msgs) == 0 {
		t.Fatal("no messages")
	}
	for _, m := range s.Msgs {
		if m.Outcome == core.OutcomeRejected {
			t.Fatalf("message %s to %s rejected: %s", m.ID, m.To, m.Reason)
		}
	}
}

// BenchmarkSendLatency: how long SendMessage keeps its sender waiting when
// the recipient's model round (SendRound long) is in flight.
func BenchmarkSendLatency(b *testing.B) {
	for b.Loop() {
		s, err := SendLatency(context.Background(), Config{Store: memstore.New(), DataDir: b.TempDir(), N: 20})
		if err != nil {
			b.Fatal(err)
		}
		report(b, s)
	}
}
