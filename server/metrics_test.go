package server

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/vigilrun/vigil"
)

// sample returns the value of a counter, gauge or histogram count with the
// given labels, summed over the series that match.
func sample(t *testing.T, m *Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			for k, v := range labels {
				if !hasLabel(s, k, v) {
					continue series
				}
			}
			found = true
			switch {
			case s.Counter != nil:
				sum += s.Counter.GetValue()
			case s.Gauge != nil:
				sum += s.Gauge.GetValue()
			case s.Histogram != nil:
				sum += float64(s.Histogram.GetSampleCount())
			}
		}
	}
	return sum, found
}

func hasLabel(s *dto.Metric, k, v string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// TestMetrics runs the coordinator scenario through the API and reads the
// counters the observer kept.
func TestMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "coord", Prompt: "Build the release", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	h.quiet(id)
	held := h.create(CreateSessionRequest{Provider: "echo"})
	h.must("POST", "/api/sessions/"+held+"/hold", nil, 200, nil)
	h.must("POST", "/api/sessions/"+held+"/prompts", PromptRequest{Text: "wait"}, 202, nil)
	h.must("POST", "/api/sessions/"+held+"/prompts", PromptRequest{Text: "wait more"}, 202, nil)

	list, err := h.rt.RunList(t.Context(), vigil.SessionID(id), "")
	if err != nil {
		t.Fatal(err)
	}
	runs := len(list)
	want := map[string]float64{
		"vigil_runs_started_total":            float64(runs),
		"vigil_runs_ended_total":              float64(runs),
		"vigil_notifications_written_total":   5,
		"vigil_notifications_delivered_total": 5,
		"vigil_wake_latency_seconds":          5,
		"vigil_messages_total":                2,
	}
	for name, v := range want {
		if got, _ := sample(t, h.metrics, name, nil); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	if got, _ := sample(t, h.metrics, "vigil_runs_ended_total", map[string]string{"status": "completed"}); got != float64(runs) {
		t.Errorf("completed runs = %v, want %v", got, runs)
	}
	if got, _ := sample(t, h.metrics, "vigil_model_calls_total", map[string]string{"provider": "coord", "outcome": "ok"}); got == 0 {
		t.Error("no model calls counted")
	}
	if got, _ := sample(t, h.metrics, "vigil_model_call_duration_seconds", nil); got == 0 {
		t.Error("no model call durations")
	}
	if got, found := sample(t, h.metrics, "vigil_drops_total", nil); found || got != 0 {
		t.Errorf("drops in normal operation: %v", got)
	}
	if got, _ := sample(t, h.metrics, "vigil_sessions", map[string]string{"state": "open"}); got != 2 {
		t.Errorf("open sessions = %v, want 2", got)
	}
	if got, _ := sample(t, h.metrics, "vigil_inbox_depth", map[string]string{"session": held}); got != 2 {
		t.Errorf("inbox depth of the held session = %v, want 2", got)
	}
	if got, _ := sample(t, h.metrics, "vigil_inbox_depth", map[string]string{"session": id}); got != 0 {
		t.Errorf("inbox depth of the quiescent session = %v, want 0", got)
	}
	if got, found := sample(t, h.metrics, "vigil_cpu_slots", nil); !found || got != 0 {
		t.Errorf("cpu slots = %v (found %v), want 0: no gate by default", got, found)
	}
	if got, found := sample(t, h.metrics, "vigil_cpu_waiting", map[string]string{"kind": "start"}); !found || got != 0 {
		t.Errorf("background calls waiting on a quiet node = %v (found %v), want 0", got, found)
	}

	code, b := h.call("GET", "/metrics", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, name := range []string{"vigil_runs_started_total", "vigil_wake_latency_seconds_bucket", "vigil_inbox_depth", "vigil_cpu_waits_total", "vigil_session_queue_full_total", "go_goroutines"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestMetricsCountDrops: a drop the runtime reports is counted by reason.
func TestMetricsCountDrops(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	m.Dropped("s1", "model response c3", "stale-model-response")
	if got, _ := sample(t, m, "vigil_drops_total", map[string]string{"reason": "stale-model-response"}); got != 1 {
		t.Fatalf("drops = %v", got)
	}
}
