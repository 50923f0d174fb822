package tracing

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Queue is a span processor with a bounded queue: OnEnd never blocks; a
// span that finds the queue full is dropped and counted. One goroutine
// drains the queue to the exporter in batches of up to batchSize spans,
// at least every flushInterval. When the exporter fails, the batch is
// dropped and counted as well: tracing never delays a message and never
// grows without bound. Safe for concurrent use.
type Queue struct {
	exp     sdktrace.SpanExporter
	ch      chan sdktrace.ReadOnlySpan
	flush   chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	metrics *Metrics
	log     zerolog.Logger
	// lastWarn: when an export failure was last logged (the drain
	// goroutine's alone).
	lastWarn time.Time
}

const (
	batchSize     = 512
	flushInterval = time.Second
	exportTimeout = 10 * time.Second
	warnEvery     = time.Minute
)

// NewQueue returns a running queue of size spans before exp.
func NewQueue(exp sdktrace.SpanExporter, size int, m *Metrics, log zerolog.Logger) *Queue {
	q := &Queue{exp: exp, ch: make(chan sdktrace.ReadOnlySpan, size), flush: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{}), metrics: m, log: log}
	go q.run()
	return q
}

// OnStart does nothing (sdktrace.SpanProcessor).
func (q *Queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s for export, or drops and counts it when the queue is
// full (sdktrace.SpanProcessor).
func (q *Queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	select {
	case q.ch <- s:
	default:
		q.metrics.dropped.WithLabelValues("queue_full").Inc()
	}
}

// ForceFlush exports what is queued now, waiting until done or ctx ends
// (sdktrace.SpanProcessor).
func (q *Queue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flush <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued, within ctx, and stops the exporter
// (sdktrace.SpanProcessor).
func (q *Queue) Shutdown(ctx context.Context) error {
	q.once.Do(func() { close(q.stop) })
	select {
	case <-q.done:
	case <-ctx.Done():
	}
	return q.exp.Shutdown(ctx)
}

// run drains the queue until Shutdown.
func (q *Queue) run() {
	defer close(q.done)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, batchSize)
	drain := func() {
		for len(batch) < batchSize {
			select {
			case s := <-q.ch:
				batch = append(batch, s)
			default:
				return
			}
		}
	}
	for {
		select {
		case s := <-q.ch:
			batch = append(batch, s)
			drain()
			if len(batch) < batchSize {
				continue // wait for more, or the tick
			}
		case <-tick.C:
			drain()
		case ack := <-q.flush:
			for drain(); len(batch) > 0; drain() {
				q.export(batch)
				batch = batch[:0]
			}
			close(ack)
			continue
		case <-q.stop:
			for drain(); len(batch) > 0; drain() {
				q.export(batch)
				batch = batch[:0]
			}
			return
		}
		if len(batch) > 0 {
			q.export(batch)
			batch = batch[:0]
		}
	}
}

// export sends batch, counting it exported or dropped.
func (q *Queue) export(batch []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
	err := q.exp.ExportSpans(ctx, batch)
	cancel()
	clear(batch)
	if err == nil {
		q.metrics.exported.Add(float64(len(batch)))
		return
	}
	q.metrics.dropped.WithLabelValues("export_failed").Add(float64(len(batch)))
	if now := time.Now(); now.Sub(q.lastWarn) >= warnEvery {
		q.lastWarn = now
		q.log.Warn().Err(err).Int("spans", len(batch)).
			Msg("tracing: exporting spans failed; they are dropped and counted in walpost_tracing_spans_dropped_total (no message waits for tracing); check tracing.endpoint")
	}
}

// Metrics are the tracing counters on /metrics.
type Metrics struct {
	exported prometheus.Counter
	dropped  *prometheus.CounterVec
}

// NewMetrics registers the tracing counters with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_tracing_spans_exported_total",
			Help: "Spans the OTLP exporter accepted (tracing:)."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_tracing_spans_dropped_total",
			Help: "Spans dropped: reason queue_full (the export queue, tracing.queue_size, was full) or export_failed (the exporter refused or could not be reached). No message waits for tracing."},
			[]string{"reason"}),
	}
	m.dropped.WithLabelValues("queue_full")
	m.dropped.WithLabelValues("export_failed")
	if reg != nil {
		reg.MustRegister(m.exported, m.dropped)
	}
	return m
}
