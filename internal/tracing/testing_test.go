package tracing

import (
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newTestProvider returns a provider that records into an in-memory
// exporter, with sampler.
func newTestProvider(s Sampler) (*Provider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &Provider{tp: tp, tracer: tp.Tracer("test"), sampler: s}, exp
}

// metricsForTest returns p's counters.
func (p *Provider) metricsForTest() *Metrics { return p.metrics }
