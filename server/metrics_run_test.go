package server

import (
	"math"
	"testing"

	"github.com/vigilrun/vigil"
)

// TestMetricsRunDuration: every run's duration is observed once, by its
// status, and the histogram's sum is the runs' lengths by their times.
func TestMetricsRunDuration(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "coord", Prompt: "Build the release", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	h.quiet(id)
	list, err := h.rt.RunList(t.Context(), vigil.SessionID(id), "")
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, r := range list {
		total += r.Ended.Sub(r.Started).Seconds()
	}
	if got, _ := sample(t, h.metrics, "vigil_run_duration_seconds", map[string]string{"status": "completed"}); got != float64(len(list)) {
		t.Errorf("run durations observed = %v, want %d (one per run)", got, len(list))
	}
	fams, err := h.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == "vigil_run_duration_seconds" {
			for _, m := range f.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	if math.Abs(sum-total) > 1e-6 || total == 0 {
		t.Errorf("run duration sum = %v s, want %v s (the runs' lengths)", sum, total)
	}
}
