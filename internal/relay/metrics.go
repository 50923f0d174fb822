package relay

import (
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/coverage"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/redact"
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
	held             *prometheus.CounterVec
	heldKeys         *prometheus.GaugeVec
	retentionDeleted prometheus.Counter
	forged           *prometheus.CounterVec
	forgedProgress   *prometheus.CounterVec // publish.Resumed.Refused, per sink
	guarded          *prometheus.CounterVec // publish.SinkCounters.ReplaysDropped
	reordered        *prometheus.CounterVec // publish.SinkCounters.Reordered
	expired          *prometheus.CounterVec

	// Claim checks (relay.claim_check), per sink that has one.
	claimUploads, claimBytes, claimFailures *prometheus.CounterVec

	// The publication or the table changing under the relay
	// (internal/coverage).
	foreignRelations prometheus.Counter
	coverage         coverage.Metrics

	mu      sync.Mutex
	tracker *checkpoint.Tracker
	window  *pipeline.Window
	stream  *replication.Stream
	// streaming is whether a cycle streams (watch until cycleEnded): the
	// ages below are 0 otherwise, so that an instance that lost the slot
	// does not report the deliveries it abandoned as stuck.
	streaming bool
	// oldest and stalled measure ages at scrape time (under mu): nothing
	// on the hot path (docs/design.md, "Metrics of stalls").
	oldest  ageSince[*checkpoint.Txn]
	stalled stallClock
	now     func() time.Time
	// slot is what the relay last read of its slot in pg_replication_slots
	// (at each cycle's check, and when the run stops on it).
	slot replication.SlotInfo
}

// NewMetrics registers the metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		now: time.Now,
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
		held: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_held_messages_total",
			Help: "Messages parked behind a held key (relay.on_invalid or on_refused: hold_key); sink \"-\": held for every sink."}, []string{"sink"}),
		heldKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_held_keys",
			Help: "Ordering keys held behind a parked message (relay.on_invalid or on_refused: hold_key) as the relay last saw them; sink \"-\": held for every sink. cdc dead-letter resend or drop of the key's parked message releases it."}, []string{"sink"}),
		retentionDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_retention_deleted_total",
			Help: "Delivered outbox rows deleted by relay.retention."}),
		forged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_forged_messages_total",
			Help: "Messages that claimed to be outbox messages without the proof the relay requires (kind envelope: no valid signature under postgres.message_keys; adopt: an adopt message cdc init did not write); never published."}, []string{"kind"}),
		forgedProgress: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_forged_progress_records_total",
			Help: "Progress records at a destination (the kafka sink's progress topic with exactly_once) that its own producer did not provably write, or past the server's WAL position; never resumed from (docs/security.md, \"Progress topic\")."}, []string{"sink"}),
		guarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_exactly_once_replays_dropped_total",
			Help: "Messages an exactly_once sink was handed again after it committed them (a replay after the replication connection dropped) and dropped instead of committing them twice."}, []string{"sink"}),
		reordered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_reordered_messages_total",
			Help: "Messages a broker stored after an earlier message of the same partition failed in the same publish call (the kafka sink): a key's order may be broken; each is logged at error level. Never expected."}, []string{"sink"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_messages_expired_total",
			Help: "Messages whose expires_at had passed when the relay read them, by what relay.on_expired did: drop, dead_letter (parked for their sinks) or send."}, []string{"action"}),
		claimUploads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_claim_check_uploads_total",
			Help: "Payloads a sink's claim check stored (relay.claim_check) before the message went to the broker; a retried batch uploads again."}, []string{"sink"}),
		claimBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_claim_check_upload_bytes_total",
			Help: "Bytes of the payloads a sink's claim check stored (relay.claim_check)."}, []string{"sink"}),
		claimFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_claim_check_upload_failures_total",
			Help: "Claim-check uploads that failed (store down, denied, timed out); each fails the batch, which is retried."}, []string{"sink"}),
		foreignRelations: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_foreign_relations_total",
			Help: "Relations other than the outbox seen in the replication stream (each once per process); their rows are skipped."}),
		coverage: coverage.Metrics{
			Gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_stream_gaps_total",
				Help: "Times the publication stopped covering the outbox or changed what covers it: stretches the stream may not have carried."}),
			GapRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_gap_rows_relayed_total",
				Help: "Rows of such stretches relayed from the outbox table because the stream did not carry them."}),
			NotPublished: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_outbox_not_published",
				Help: "1 while the publication does not publish the outbox table's inserts."}),
			GapOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_stream_gap_open",
				Help: "1 while a stretch the stream may not have carried is not yet relayed from the outbox table."}),
		},
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "walpost_end_to_end_latency_seconds",
			Help:    "From the transaction's commit (its Begin message's commit time) to the sink's acknowledgement.",
			Buckets: latencyBuckets}, []string{"sink"}),
	}
	for _, kind := range []string{"envelope", "adopt"} {
		m.forged.WithLabelValues(kind) // at 0 from the start, for alerts
	}
	for _, action := range []string{"drop", "dead_letter", "send"} {
		m.expired.WithLabelValues(action)
	}
	if reg != nil {
		reg.MustRegister(m.decoded, m.published, m.failing, m.latency, m.deadLettered, m.refused, m.held, m.heldKeys, m.retentionDeleted,
			m.forged, m.forgedProgress, m.guarded, m.reordered, m.expired, m.claimUploads, m.claimBytes, m.claimFailures, m.foreignRelations, m.coverage.Gaps, m.coverage.GapRows, m.coverage.NotPublished, m.coverage.GapOpen,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_confirmed_lsn",
				Help: "The LSN confirmed to the slot (as a number)."}, m.confirmed),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_inflight_deliveries",
				Help: "Deliveries read from the stream and not yet acknowledged."}, m.inflight),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_lag_bytes",
				Help: "Server WAL end (last keepalive) minus the confirmed LSN; until the stream has a keepalive, pg_current_wal_lsn() minus the slot's confirmed_flush_lsn as last read."}, m.lag),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_slot_lost",
				Help: "1 when the relay last found its slot invalidated by the server (wal_status lost): it stops; run cdc recover."}, m.slotLost),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_connected",
				Help: "1 while the replication stream is connected."}, m.connected),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_oldest_inflight_seconds",
				Help: "How long the oldest transaction read with a delivery not yet acknowledged by every sink has been so; 0 when nothing is in flight. Measured at scrape time: short by up to one scrape interval."}, m.oldestInFlight),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_slot_stalled_seconds",
				Help: "How long the confirmed LSN has not moved while the server's WAL is ahead of it; 0 when the slot is caught up or moving. Measured at scrape time: short by up to one scrape interval."}, m.slotStalled),
		)
	}
	return m
}

// ageSince tells how long a value has stayed the same, from the calls
// that observe it: the first observation of a value counts as its start.
type ageSince[T comparable] struct {
	value T
	since time.Time
}

// observe records v at now and returns how long v has been observed,
// 0 for the zero value (nothing to age).
func (a *ageSince[T]) observe(now time.Time, v T) time.Duration {
	var zero T
	if v != a.value || a.since.IsZero() {
		a.value, a.since = v, now
	}
	if v == zero {
		return 0
	}
	return now.Sub(a.since)
}

// stallClock tells how long the confirmed position has not moved while
// the server's WAL was ahead of it.
type stallClock struct{ moved ageSince[pglogrepl.LSN] }

// observe records the confirmed position and the server's WAL end at now
// and returns how long the slot has been stalled.
func (s *stallClock) observe(now time.Time, confirmed, serverWAL pglogrepl.LSN) time.Duration {
	if serverWAL <= confirmed {
		s.moved = ageSince[pglogrepl.LSN]{} // caught up: nothing is stalled
		return 0
	}
	// confirmed is never 0 while streaming (the slot's position), so the
	// zero value of ageSince is not a position.
	return s.moved.observe(now, confirmed)
}

// latencyBuckets are the end-to-end latency histogram's upper bounds, in
// seconds. The relay's p99 is of the order of a millisecond in normal
// operation (BENCHMARKS.md, "Paced: 1,000 single-row transactions per
// second for 20s"), so the buckets are dense from 0.5 ms to 10 ms to tell
// discard, file and Kafka apart and to see a regression of a few
// milliseconds; during an outage messages wait for a sink's retries
// (relay.retry_backoff, 30 s by default), so a few buckets go on to 60 s
// to show how long it lasted. Beyond 60 s only the count and sum tell. 16
// buckets instead of a fine exponential scale keep every sink's series
// cheap (18 per sink).
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// addSinks makes every per-sink series exist for each sink, at 0, before
// anything is published: a dashboard or alert sees 0 (a healthy sink, no
// message yet), not a missing series.
func (m *Metrics) addSinks(names []string) {
	for _, name := range names {
		m.published.WithLabelValues(name)
		m.failing.WithLabelValues(name).Set(0)
		m.refused.WithLabelValues(name)
		m.held.WithLabelValues(name)
		m.heldKeys.WithLabelValues(name).Set(0)
		m.latency.WithLabelValues(name)
		m.forgedProgress.WithLabelValues(name)
	}
}

// addClaimChecks makes the claim-check series of each of sinks (the
// sinks with a claim check) exist at 0 from the start.
func (m *Metrics) addClaimChecks(sinks []string) {
	for _, name := range sinks {
		m.claimUploads.WithLabelValues(name)
		m.claimBytes.WithLabelValues(name)
		m.claimFailures.WithLabelValues(name)
	}
}

// claimCheckMetrics are the counters of sink's claim check.
func (m *Metrics) claimCheckMetrics(sink string) publish.ClaimCheckMetrics {
	return publish.ClaimCheckMetrics{Uploads: m.claimUploads.WithLabelValues(sink), UploadBytes: m.claimBytes.WithLabelValues(sink),
		UploadFailures: m.claimFailures.WithLabelValues(sink)}
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

// pipelineMetrics are the counters the pipeline is handed.
func (m *Metrics) pipelineMetrics() pipeline.Metrics {
	return pipeline.Metrics{Decoded: m.decoded, DeadLettered: m.deadLettered, ForgedEnvelopes: m.forged.WithLabelValues("envelope"),
		ForgedAdopts: m.forged.WithLabelValues("adopt"), ForeignRelations: m.foreignRelations,
		Held: m.held.WithLabelValues("-"), HeldKeys: m.heldKeys.WithLabelValues("-"),
		ExpiredDropped: m.expired.WithLabelValues("drop"), ExpiredParked: m.expired.WithLabelValues("dead_letter"),
		ExpiredSent: m.expired.WithLabelValues("send")}
}

// sinkMetrics are the counters sink's settler is handed.
func (m *Metrics) sinkMetrics(sink string) pipeline.SinkMetrics {
	return pipeline.SinkMetrics{Published: m.published.WithLabelValues(sink), Latency: m.latency.WithLabelValues(sink),
		Refused: m.refused.WithLabelValues(sink), Held: m.held.WithLabelValues(sink), HeldKeys: m.heldKeys.WithLabelValues(sink)}
}

func (m *Metrics) watch(t *checkpoint.Tracker, w *pipeline.Window, s *replication.Stream) {
	m.mu.Lock()
	m.tracker, m.window, m.stream, m.streaming = t, w, s, true
	m.mu.Unlock()
}

// cycleEnded says the cycle watch was called for stopped streaming.
func (m *Metrics) cycleEnded() {
	m.mu.Lock()
	m.streaming = false
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

// slotRead records what the relay read of its slot.
func (m *Metrics) slotRead(info replication.SlotInfo) {
	m.mu.Lock()
	m.slot = info
	m.mu.Unlock()
}

func (m *Metrics) slotLost() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slot.Invalid() {
		return 1
	}
	return 0
}

// lag is the stream's lag (its server WAL end minus the tracker's
// confirmed position) while it has had a keepalive; before that, and for a
// slot that can no longer stream (lost), the slot's lag as last read from
// the server: never a 0 that hides a lag.
func (m *Metrics) lag() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stream == nil || m.tracker == nil || m.stream.ServerWAL() == 0 || m.slot.Invalid() {
		return float64(max(m.slot.LagBytes, 0))
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

func (m *Metrics) oldestInFlight() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var head *checkpoint.Txn
	if m.streaming && m.tracker != nil {
		head = m.tracker.Oldest()
	}
	return m.oldest.observe(m.now(), head).Seconds()
}

func (m *Metrics) slotStalled() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var confirmed, wal pglogrepl.LSN
	if m.streaming && m.tracker != nil && m.stream != nil {
		confirmed, wal = m.tracker.Confirmed(), m.stream.ServerWAL()
	}
	return m.stalled.observe(m.now(), confirmed, wal).Seconds()
}

// sinkError is err as the progress table records it for cdc status
// (store.Progress.Failing): without the configuration's secrets, at most
// 2000 bytes.
func sinkError(secrets *redact.Set, err error) string {
	msg := secrets.Redact(err.Error())
	if len(msg) > 2000 {
		msg = strings.ToValidUTF8(msg[:2000], "") + "…"
	}
	return msg
}
