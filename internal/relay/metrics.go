package relay

import (
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

	deadLettered prometheus.Counter
	refused      *prometheus.CounterVec

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
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "walpost_end_to_end_latency_seconds",
			Help: "From the transaction's commit (its Begin message's commit time) to the sink's acknowledgement.",
			// 100µs … ~2 min in steps of 25%: fine enough to read p99 off.
			Buckets: prometheus.ExponentialBuckets(0.0001, 1.25, 64)}, []string{"sink"}),
	}
	if reg != nil {
		reg.MustRegister(m.decoded, m.published, m.failing, m.latency, m.deadLettered, m.refused,
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
