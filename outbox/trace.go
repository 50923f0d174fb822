package outbox

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name of the tracer Enqueue and Emit record their
// producer spans with.
const instrumentation = "github.com/walpost/walpost/outbox"

type producerKey struct{}

// startCreate starts the producer span of msg ("create <table>", kind
// producer), following the messaging semantic conventions, through tp
// (nil: OpenTelemetry's global provider). Its parent is the traceparent
// given for the message (Message.Headers, Writer.Traceparent,
// ContextWithTraceparent, in that order) or else the span active in ctx.
// When the span records (an OpenTelemetry SDK is installed and samples
// it), the returned ctx carries its traceparent, which headers then
// stores in the row: the relay's publish span and the receiver's span
// continue it. Without an SDK nothing changes: the given traceparent is
// stored as before.
func startCreate(ctx context.Context, tp trace.TracerProvider, explicit func() string, id, typ, key, dest string) (context.Context, trace.Span) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	parent := ctx
	if given := explicit(); given != "" && ValidateTraceparent(given) == nil {
		parent = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{TraceparentHeader: given})
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "walpost"),
		attribute.String("messaging.operation.type", "create"),
		attribute.String("messaging.operation.name", "create"),
		attribute.String("messaging.destination.name", dest),
		attribute.String("messaging.message.id", id),
		attribute.String("walpost.outbox.id", id),
		attribute.String("walpost.outbox.type", typ),
	}
	if key != "" {
		attrs = append(attrs, attribute.String("walpost.outbox.key", key))
	}
	ctx2, span := tp.Tracer(instrumentation).Start(parent, "create "+dest,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		return ctx, span // no SDK, or not sampled: the given traceparent as before
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx2, carrier)
	return context.WithValue(ctx2, producerKey{}, carrier.Get(TraceparentHeader)), span
}

// producerTraceparent returns the traceparent of the producer span
// startCreate put in ctx, "" when none records.
func producerTraceparent(ctx context.Context) string {
	tp, _ := ctx.Value(producerKey{}).(string)
	return tp
}

// endCreate ends the producer span, with err as its status.
func endCreate(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
