package inbox

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestProcessSpanContinuesTheMessagesTrace: ContextFromHeaders takes the
// message's traceparent, and the span Process starts is its child, of
// kind consumer, with the effect's context carrying it; a malformed
// traceparent is ignored.
func TestProcessSpanContinuesTheMessagesTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	c, err := newCore(Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx := ContextFromHeaders(context.Background(), func(k string) string { return headers[k] })
	ctx, span := c.startProcess(ctx, "id-1")
	effect := trace.SpanContextFromContext(ctx)
	endProcess(span, Processed, nil)
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "process public.inbox" || spans[0].SpanKind != trace.SpanKindConsumer ||
		spans[0].Parent.SpanID().String() != "00f067aa0ba902b7" || spans[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		effect.SpanID() != spans[0].SpanContext.SpanID() {
		t.Fatalf("spans %+v", spans)
	}
	if got := ContextWithTraceparent(context.Background(), "00-garbage", ""); trace.SpanContextFromContext(got).IsValid() {
		t.Fatal("a malformed traceparent was taken")
	}
}
