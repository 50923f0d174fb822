// Package tracing records the relay's deliveries as OpenTelemetry spans and
// exports them over OTLP (grpc or http/protobuf) with the official Go SDK
// (docs/operations.md, "Tracing"; docs/design.md, "Tracing").
//
// One publish span per message and sink, recorded after the fact: the
// runner tells a Sink tracer (publish.Tracer) when a batch starts, when a
// Publish call failed and is retried, when the broker acknowledged, when a
// message was refused for good or parked behind a held key; the span is
// built at the end, with its start at the transaction's commit time (so
// the time the message waited in the outbox is the span's head) and its end
// at the acknowledgement. Nothing is started before the end: a relay
// killed mid-batch leaves no half-open span behind, and the next run
// records the message's span when it delivers it.
//
// The span is a child of the row's traceparent (the producer's span, which
// package outbox writes there): one message has one producer, and a child
// keeps producer, publish and receiver in one waterfall. The broker
// message carries the row's headers unchanged, so a receiver's span (package
// inbox) is the publish span's sibling under the producer's.
//
// Sampling is decided here, before any span exists, from the row alone
// (Sampler): by the sampled flag of its traceparent, by its trace id
// against a ratio, or, for a row without traceparent, by a hash of its id
// against the ratio. A message not sampled costs one header lookup and no
// allocation.
//
// Export never holds up a message: finished spans go to a bounded queue
// (Queue) that one goroutine drains to the exporter; a span that finds the
// queue full is dropped and counted (walpost_tracing_spans_dropped_total).
//
// A Provider is safe for concurrent use; a Sink tracer is used by its
// runner's goroutine only.
package tracing
