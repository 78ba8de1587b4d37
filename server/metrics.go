package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vigilrun/vigil"
)

// Metrics measures the runtime for Prometheus, on a registry of its own.
// It implements vigil.Observer: give it to vigil.Options.Observer, then to
// Options.Metrics, so one registry counts what the runtime does and is
// served at /metrics.
//
// Counters: runs started (by kind) and ended (by status), notifications
// written (by status) and delivered (by delivery), messages by outcome,
// drops by reason (vigil_drops_total, zero in normal operation), model
// calls by provider and outcome, event streams cut short by reason,
// connections closed to make room under the cap. Histograms: model call
// duration, run duration (by status), wake latency (from a notification's write to the run start or
// round that takes it in, by event times). Gauges: event stream clients, open HTTP
// connections; read at scrape time: inbox depth per open session and
// sessions by state.
type Metrics struct {
	reg            *prometheus.Registry
	runsStarted    *prometheus.CounterVec
	runsEnded      *prometheus.CounterVec
	notesWritten   *prometheus.CounterVec
	notesDelivered *prometheus.CounterVec
	messages       *prometheus.CounterVec
	drops          *prometheus.CounterVec
	modelCalls     *prometheus.CounterVec
	modelDuration  *prometheus.HistogramVec
	wakeLatency    prometheus.Histogram
	runDuration    *prometheus.HistogramVec
	sseClients     prometheus.Gauge
	sseEvents      prometheus.Counter
	sseCuts        *prometheus.CounterVec
	httpConns      prometheus.Gauge
	httpEvicted    prometheus.Counter
	queueFull      prometheus.Counter

	attachOnce sync.Once
}

var (
	_ vigil.Observer      = (*Metrics)(nil)
	_ vigil.RunObserver   = (*Metrics)(nil)
	_ vigil.QueueObserver = (*Metrics)(nil)
)

// NewMetrics returns metrics on a new registry that also holds the Go and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_runs_started_total", Help: "Runs started, by the kind of their first item.",
		}, []string{"kind"}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_runs_ended_total", Help: "Runs ended, by status.",
		}, []string{"status"}),
		notesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_notifications_written_total", Help: "Notifications written, by the status they report.",
		}, []string{"status"}),
		notesDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_notifications_delivered_total", Help: "Notifications delivered to their owner, by delivery (inbox or tool-result).",
		}, []string{"delivery"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_messages_total", Help: "Messages by the outcome their sender was told (joined, queued-behind-stop, resumed, rejected).",
		}, []string{"outcome"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_drops_total", Help: "Things skipped, deduplicated or dropped, by reason. Zero in normal operation.",
		}, []string{"reason"}),
		modelCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_model_calls_total", Help: "Model calls ended, by provider and outcome (ok or error).",
		}, []string{"provider", "outcome"}),
		modelDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vigil_model_call_duration_seconds", Help: "Model call duration.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"provider"}),
		wakeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vigil_wake_latency_seconds", Help: "Time from a notification's write to the run start or model round that takes it in.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800, 3600},
		}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vigil_run_duration_seconds", Help: "Run duration, from its start to its end by the events' times (a run across a restart counts whole), by status.",
			Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200},
		}, []string{"status"}),
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_sse_clients", Help: "Event stream clients connected.",
		}),
		sseEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_sse_events_total", Help: "Events written to event stream clients.",
		}),
		sseCuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_sse_cuts_total", Help: "Event streams ended early with a vigil.cut event, by reason (behind, store, shutdown).",
		}, []string{"reason"}),
		httpConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_http_connections", Help: "HTTP connections open.",
		}),
		httpEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_http_connections_evicted_total", Help: "Connections in no request closed to make room under the connection cap.",
		}),
		queueFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_session_queue_full_total", Help: "Requests that found a session's queue full and waited for room (backpressure; nothing is dropped).",
		}),
	}
	m.reg.MustRegister(m.runsStarted, m.runsEnded, m.notesWritten, m.notesDelivered, m.messages, m.drops,
		m.modelCalls, m.modelDuration, m.wakeLatency, m.runDuration, m.sseClients, m.sseEvents, m.sseCuts, m.httpConns, m.httpEvicted, m.queueFull,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, to add collectors of one's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// attach adds the scrape-time gauges of rt. Only the first runtime
// attached is measured.
func (m *Metrics) attach(rt *vigil.Runtime) {
	if rt == nil {
		return
	}
	m.attachOnce.Do(func() { m.reg.MustRegister(newRuntimeCollector(rt)) })
}

// RunStarted implements vigil.Observer.
func (m *Metrics) RunStarted(_ vigil.SessionID, kind string) {
	m.runsStarted.WithLabelValues(kind).Inc()
}

// RunEnded implements vigil.Observer.
func (m *Metrics) RunEnded(_ vigil.SessionID, status string) {
	m.runsEnded.WithLabelValues(status).Inc()
}

// RunDuration implements vigil.RunObserver.
func (m *Metrics) RunDuration(_ vigil.SessionID, status string, d time.Duration) {
	m.runDuration.WithLabelValues(status).Observe(d.Seconds())
}

// NotificationWritten implements vigil.Observer.
func (m *Metrics) NotificationWritten(_ vigil.SessionID, status string) {
	m.notesWritten.WithLabelValues(status).Inc()
}

// NotificationDelivered implements vigil.Observer: it counts the
// notification and, for one taken in by a run, observes its wake latency.
func (m *Metrics) NotificationDelivered(_ vigil.SessionID, how string, wait time.Duration) {
	m.notesDelivered.WithLabelValues(how).Inc()
	if how == "inbox" {
		m.wakeLatency.Observe(wait.Seconds())
	}
}

// MessageResolved implements vigil.Observer.
func (m *Metrics) MessageResolved(_ vigil.SessionID, outcome string) {
	m.messages.WithLabelValues(outcome).Inc()
}

// Dropped implements vigil.Observer.
func (m *Metrics) Dropped(_ vigil.SessionID, what, reason string) {
	m.drops.WithLabelValues(reason).Inc()
}

// ModelCall implements vigil.Observer.
func (m *Metrics) ModelCall(provider string, d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.modelCalls.WithLabelValues(provider, outcome).Inc()
	m.modelDuration.WithLabelValues(provider).Observe(d.Seconds())
}

// QueueFull implements vigil.QueueObserver.
func (m *Metrics) QueueFull(vigil.SessionID) { m.queueFull.Inc() }

// runtimeCollector reads gauges from the runtime at scrape time: levels,
// not edges, so they are right after a restart too.
type runtimeCollector struct {
	rt       *vigil.Runtime
	inbox    *prometheus.Desc
	sessions *prometheus.Desc
	cpuSlots *prometheus.Desc
	cpuWait  *prometheus.Desc
	cpuWaits *prometheus.Desc
	cpuAged  *prometheus.Desc
}

func newRuntimeCollector(rt *vigil.Runtime) *runtimeCollector {
	return &runtimeCollector{
		rt:       rt,
		inbox:    prometheus.NewDesc("vigil_inbox_depth", "Items queued in the inboxes of an open session's agents (sum).", []string{"session"}, nil),
		sessions: prometheus.NewDesc("vigil_sessions", "Sessions in the store, by state (open or closed).", []string{"state"}, nil),
		cpuSlots: prometheus.NewDesc("vigil_cpu_slots", "Steps the runtime runs at once (vigil.Options.CPUSlots; 0: no limit).", nil, nil),
		cpuWait:  prometheus.NewDesc("vigil_cpu_waiting", "Work waiting for a CPU slot now, by kind (step, or start: a background agent's model call).", []string{"kind"}, nil),
		cpuWaits: prometheus.NewDesc("vigil_cpu_waits_total", "Work that had to wait for a CPU slot, by kind (step or start): a saturated node.", []string{"kind"}, nil),
		cpuAged:  prometheus.NewDesc("vigil_cpu_aged_starts_total", "Background model calls that went ahead of newer steps after waiting 100 ms.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *runtimeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inbox
	ch <- c.sessions
	ch <- c.cpuSlots
	ch <- c.cpuWait
	ch <- c.cpuWaits
	ch <- c.cpuAged
}

// Collect implements prometheus.Collector.
func (c *runtimeCollector) Collect(ch chan<- prometheus.Metric) {
	cpu := c.rt.CPUStats()
	ch <- prometheus.MustNewConstMetric(c.cpuSlots, prometheus.GaugeValue, float64(cpu.Slots))
	ch <- prometheus.MustNewConstMetric(c.cpuWait, prometheus.GaugeValue, float64(cpu.WaitingSteps), "step")
	ch <- prometheus.MustNewConstMetric(c.cpuWait, prometheus.GaugeValue, float64(cpu.WaitingStarts), "start")
	ch <- prometheus.MustNewConstMetric(c.cpuWaits, prometheus.CounterValue, float64(cpu.WaitedSteps), "step")
	ch <- prometheus.MustNewConstMetric(c.cpuWaits, prometheus.CounterValue, float64(cpu.WaitedStarts), "start")
	ch <- prometheus.MustNewConstMetric(c.cpuAged, prometheus.CounterValue, float64(cpu.AgedStarts))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.rt.SessionList(ctx, nil)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.sessions, err)
		return
	}
	open, closed := 0, 0
	for _, row := range rows {
		if row.Closed {
			closed++
			continue
		}
		open++
		st, err := c.rt.SessionStatus(ctx, row.ID)
		if err != nil {
			continue // gone since the listing
		}
		depth := 0
		for _, in := range st.Inboxes {
			depth += in.Items
		}
		ch <- prometheus.MustNewConstMetric(c.inbox, prometheus.GaugeValue, float64(depth), string(row.ID))
	}
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(open), "open")
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(closed), "closed")
}
