package relay

import (
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
)

// Metrics are the relay's Prometheus metrics. Safe for concurrent use.
type Metrics struct {
	decoded   prometheus.Counter
	published *prometheus.CounterVec
	failing   *prometheus.GaugeVec
	latency   *prometheus.HistogramVec

	deadLettered     prometheus.Counter
	refused          *prometheus.CounterVec
	retentionDeleted prometheus.Counter

	// The publication or the table changing under the relay (coverage.go).
	foreignRelations prometheus.Counter
	gaps             prometheus.Counter
	gapRows          prometheus.Counter
	notPublished     prometheus.Gauge
	gapOpen          prometheus.Gauge

	mu      sync.Mutex
	tracker *checkpoint.Tracker
	window  *publish.Window
	stream  *replication.Stream
}

// NewMetrics registers the metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decoded: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_messages_decoded_total",
			Help: "Outbox messages read from the replication stream."}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_messages_published_total",
			Help: "Messages a sink acknowledged (retried batches count once)."}, []string{"sink"}),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_sink_failing",
			Help: "1 while a sink is retrying a batch it failed to publish."}, []string{"sink"}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_dead_lettered_total",
			Help: "Outbox rows that could not be mapped and were parked in the dead-letter table."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_refused_total",
			Help: "Messages a sink refused for good (too large, ...) that were parked in the dead-letter table (relay.on_refused: dead_letter)."}, []string{"sink"}),
		retentionDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_retention_deleted_total",
			Help: "Delivered outbox rows deleted by relay.retention."}),
		foreignRelations: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_foreign_relations_total",
			Help: "Relations other than the outbox seen in the replication stream (each once per process); their rows are skipped."}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_stream_gaps_total",
			Help: "Times the publication stopped covering the outbox or changed what covers it: stretches the stream may not have carried."}),
		gapRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_gap_rows_relayed_total",
			Help: "Rows of such stretches relayed from the outbox table because the stream did not carry them."}),
		notPublished: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_outbox_not_published",
			Help: "1 while the publication does not publish the outbox table's inserts."}),
		gapOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_stream_gap_open",
			Help: "1 while a stretch the stream may not have carried is not yet relayed from the outbox table."}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "walpost_end_to_end_latency_seconds",
			Help:    "From the transaction's commit (its Begin message's commit time) to the sink's acknowledgement.",
			Buckets: latencyBuckets}, []string{"sink"}),
	}
	if reg != nil {
		reg.MustRegister(m.decoded, m.published, m.failing, m.latency, m.deadLettered, m.refused, m.retentionDeleted,
			m.foreignRelations, m.gaps, m.gapRows, m.notPublished, m.gapOpen,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_confirmed_lsn",
				Help: "The LSN confirmed to the slot (as a number)."}, m.confirmed),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_inflight_deliveries",
				Help: "Deliveries read from the stream and not yet acknowledged."}, m.inflight),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_lag_bytes",
				Help: "Server WAL end (last keepalive) minus the confirmed LSN."}, m.lag),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_connected",
				Help: "1 while the replication stream is connected."}, m.connected),
		)
	}
	return m
}

// latencyBuckets are the end-to-end latency histogram's upper bounds, in
// seconds. The relay's p99 is about 1 ms in normal operation (0.6–2 ms
// measured at 1,000 tx/s, BENCHMARKS.md), so the buckets are dense from
// 0.5 ms to 10 ms to tell discard, file and Kafka apart and to see a
// regression of a few milliseconds; during an outage messages wait for a
// sink's retries (relay.retry_backoff, 30 s by default), so a few buckets
// go on to 60 s to show how long it lasted. Beyond 60 s only the count
// and sum tell. 16 buckets instead of a fine exponential scale keep every
// sink's series cheap (18 per sink).
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// addSinks makes every per-sink series exist for each sink, at 0, before
// anything is published: a dashboard or alert sees 0 (a healthy sink, no
// message yet), not a missing series.
func (m *Metrics) addSinks(names []string) {
	for _, name := range names {
		m.published.WithLabelValues(name)
		m.failing.WithLabelValues(name).Set(0)
		m.refused.WithLabelValues(name)
		m.latency.WithLabelValues(name)
	}
}

// RegisterBuildInfo registers walpost_build_info{version, revision,
// goversion}, always 1, with reg: the binary passes its version and VCS
// revision (cmd/cdc, version.go), goversion is the running Go's.
func RegisterBuildInfo(reg prometheus.Registerer, version, revision string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_build_info",
		Help:        "Always 1; the labels name the relay's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()}})
	g.Set(1)
	reg.MustRegister(g)
}

func (m *Metrics) watch(t *checkpoint.Tracker, w *publish.Window, s *replication.Stream) {
	m.mu.Lock()
	m.tracker, m.window, m.stream = t, w, s
	m.mu.Unlock()
}

func (m *Metrics) setFailing(sink string, f bool) {
	v := 0.0
	if f {
		v = 1
	}
	m.failing.WithLabelValues(sink).Set(v)
}

func (m *Metrics) confirmed() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tracker == nil {
		return 0
	}
	return float64(m.tracker.Confirmed())
}

func (m *Metrics) inflight() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.window == nil {
		return 0
	}
	n, _ := m.window.InFlight()
	return float64(n)
}

func (m *Metrics) lag() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stream == nil || m.tracker == nil {
		return 0
	}
	w, c := m.stream.ServerWAL(), m.tracker.Confirmed()
	if w < c {
		return 0
	}
	return float64(w - c)
}

func (m *Metrics) connected() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stream != nil && m.stream.Connected() {
		return 1
	}
	return 0
}
