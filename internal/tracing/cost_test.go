package tracing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// nopSink acknowledges every batch at once.
type nopSink struct{}

func (nopSink) Name() string                                               { return "nop" }
func (nopSink) Close() error                                               { return nil }
func (nopSink) Publish(context.Context, []*message.Message) error          { return nil }
func (nopSink) DeliverAt(context.Context, []*message.Message) error        { return nil }
func (nopSink) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopSink) Shutdown(context.Context) error                             { return nil }

// traffic returns batches of size messages, each with a traceparent of a
// random, sampled trace (as an application with tracing writes them).
func traffic(batches, size int) [][]publish.Delivery {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([][]publish.Delivery, batches)
	for i := range out {
		out[i] = make([]publish.Delivery, size)
		for j := range out[i] {
			tp := fmt.Sprintf("00-%016x%016x-%016x-01", r.Uint64(), r.Uint64(), r.Uint64()|1)
			out[i][j] = publish.Delivery{Msg: &message.Message{ID: fmt.Sprintf("id-%d-%d", i, j), Type: "orders",
				Headers: map[string]string{TraceparentHeader: tp}, CommitTime: time.Now()}}
		}
	}
	return out
}

// relayBatches runs a publish.Runner with tr (nil: tracing off) over
// batches, as the relay does.
func relayBatches(tb testing.TB, tr publish.Tracer, batches [][]publish.Delivery) {
	in := make(chan []publish.Delivery, len(batches))
	for _, b := range batches {
		in <- b
	}
	close(in)
	r := publish.NewRunner(nopSink{}, in, publish.RunnerOptions{BatchSize: len(batches[0]), Ack: func([]publish.Delivery) {},
		Trace: tr, Log: zerolog.Nop()})
	if err := r.Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// providerOf is a provider exporting nowhere through the real queue.
func providerOf(sampler string, ratio float64) *Provider {
	q := NewQueue(nopSink{}, 2048, NewMetrics(nil), zerolog.Nop())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &Provider{tp: tp, tracer: tp.Tracer("bench"), sampler: NewSampler(sampler, ratio)}
}

// TestTracingOffAllocatesNothingPerMessage: with tracing off (no tracer
// given to the runner), and with tracing on for messages it does not
// sample, relaying 10,000 messages allocates no more than relaying one
// batch does: nothing per message.
func TestTracingOffAllocatesNothingPerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own: allocations are counted without it (make test's first step)")
	}
	const batches, size = 10, 1000
	sink := providerOf("traceidratio", 0).Sink(sinkConfig(t, "{name: nop, kind: kafka, topic: t}"), Relay)
	for _, c := range []struct {
		name string
		tr   publish.Tracer
	}{{"off", nil}, {"on, not sampled", sink}} {
		perRun := testing.AllocsPerRun(5, func() { relayBatches(t, c.tr, traffic(batches, size)) })
		traffic := testing.AllocsPerRun(5, func() { traffic(batches, size) })
		if extra := perRun - traffic; extra > 20 {
			t.Errorf("tracing %s: %.0f allocations to relay %d messages (beyond building them): some are per message", c.name, extra, batches*size)
		}
	}
}

// BenchmarkRelayTracing is the runner's cost per message with tracing off,
// and on at 1% and 100% sampling (the spans exported nowhere through the
// real queue, which drops what does not fit): ns/msg and allocs/msg.
func BenchmarkRelayTracing(b *testing.B) {
	const size = 1000
	for _, c := range []struct {
		name string
		p    *Provider
	}{{"off", nil}, {"ratio=0.01", providerOf("traceidratio", 0.01)}, {"ratio=1", providerOf("traceidratio", 1)}} {
		b.Run(c.name, func(b *testing.B) {
			tr := c.p.Sink(sinkConfig(b, "{name: nop, kind: kafka, topic: t}"), Relay)
			batches := traffic(8, size)
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				relayBatches(b, tr, batches)
			}
			if c.p != nil {
				c.p.ForceFlush(context.Background()) // the queue's export is the relay's CPU too
			}
			msgs := float64(b.N * 8 * size)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
			// CPU time of the process (every goroutine, the GC and the
			// export included), which a loaded machine does not inflate as
			// it does the wall time.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/msgs, "cpu-ns/msg")
		})
	}
}
