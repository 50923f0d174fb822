package inbox

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceparentHeader and TracestateHeader are the W3C Trace Context
// headers the relay copies from the outbox row onto the broker message.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// instrumentation is the name of the tracer Process records its spans with.
const instrumentation = "github.com/walpost/walpost/inbox"

// ContextWithTraceparent returns ctx carrying the trace context of the
// W3C traceparent (and tracestate, which may be "") a message arrived
// with, so that Process's span continues the producer's trace. A
// malformed traceparent is ignored (ctx is returned as it is), as W3C
// Trace Context asks. The receive loops (inbox/inbox…) call it with the
// message's headers; call it yourself before Process when you receive
// messages another way.
func ContextWithTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := propagation.MapCarrier{TraceparentHeader: traceparent}
	if tracestate != "" {
		c[TracestateHeader] = tracestate
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// ContextFromHeaders is ContextWithTraceparent with the headers read by
// get (a message's header lookup; "" for a missing one).
func ContextFromHeaders(ctx context.Context, get func(key string) string) context.Context {
	return ContextWithTraceparent(ctx, get(TraceparentHeader), get(TracestateHeader))
}

// tracerOf returns the tracer of tp (nil: OpenTelemetry's global
// provider, which records nothing until an SDK is installed).
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(instrumentation)
}

// startProcess starts the receive span of one Process call ("process
// <table>", kind consumer): a child of the trace context in ctx (the
// message's traceparent, ContextWithTraceparent). The effect runs under
// it, so its own spans are the receive span's children.
func (c *core) startProcess(ctx context.Context, msgID string) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, "process "+c.table, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.message.id", msgID),
			attribute.String("walpost.inbox.table", c.table)))
}

// endProcess ends a Process call's span with its result or error.
func endProcess(span trace.Span, res Result, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("walpost.inbox.result", res.String()))
	}
	span.End()
}
