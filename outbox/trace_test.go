package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/outbox"
)

// storedTraceparent returns the traceparent the recorded INSERT stores.
func storedTraceparent(t *testing.T, r *recorder) string {
	t.Helper()
	var stored map[string]string
	if b, ok := r.args[0][4].([]byte); ok {
		if err := json.Unmarshal(b, &stored); err != nil {
			t.Fatal(err)
		}
	}
	return stored["traceparent"]
}

// TestEnqueueRecordsAProducerSpanAndStoresItsTraceparent: with an
// OpenTelemetry SDK, Enqueue records "create <table>" as a child of the
// span in the context (or of a given traceparent) and stores the producer
// span's own traceparent; without one, the given traceparent is stored as
// before.
func TestEnqueueRecordsAProducerSpanAndStoresItsTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	w := outbox.Writer{TracerProvider: tp}
	ctx, root := tp.Tracer("app").Start(context.Background(), "place order")
	var r recorder
	if err := w.Enqueue(ctx, &r, outbox.Message{ID: "0190a7c2-0000-7000-8000-000000000001", Type: "order.placed", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	root.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "create public.outbox" || spans[0].SpanKind != trace.SpanKindProducer ||
		spans[0].Parent.SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("spans %v, want create public.outbox (producer) under place order", spans)
	}
	if got, want := storedTraceparent(t, &r), "00-"+spans[0].SpanContext.TraceID().String()+"-"+spans[0].SpanContext.SpanID().String()+"-01"; got != want {
		t.Fatalf("stored traceparent %q, want the producer span's %q", got, want)
	}

	// A given traceparent is the parent.
	exp.Reset()
	r = recorder{}
	if err := w.Enqueue(context.Background(), &r, outbox.Message{Type: "t", Payload: 1, Headers: map[string]string{"traceparent": validTP}}); err != nil {
		t.Fatal(err)
	}
	spans = exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.SpanID().String() != "00f067aa0ba902b7" || !strings.HasPrefix(storedTraceparent(t, &r), "00-4bf92f3577b34da6a3ce929d0e0e4736-") ||
		storedTraceparent(t, &r) == validTP {
		t.Fatalf("with a traceparent header: spans %v, stored %q", spans, storedTraceparent(t, &r))
	}

	// No SDK (the global provider is a no-op): stored unchanged.
	r = recorder{}
	if err := outbox.Enqueue(outbox.ContextWithTraceparent(context.Background(), validTP), &r, outbox.Message{Type: "t", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	if got := storedTraceparent(t, &r); got != validTP {
		t.Fatalf("without an SDK: stored %q, want %q", got, validTP)
	}
}
