// Package inboxnats is the receive loop for NATS JetStream: Loop consumes
// a JetStream consumer (a stream that walpost's nats sink fills, see
// docs/sinks/nats.md) and runs each message's effect through the inbox,
// once per message id, acknowledging a message only after its effect's
// transaction committed.
//
// The message id is the Nats-Msg-Id header, which the nats sink sets to
// the outbox id: the same id the stream's duplicate window uses on the
// sending side, so that the window drops resends the relay makes, and the
// inbox drops the redeliveries JetStream makes (an ack lost, AckWait
// passed, a consumer restarted).
//
// A failing effect is not retried in place, as inbox/inboxkafka does: the
// message is Nak'ed with a delay (inbox.Backoff of its delivery count) and
// JetStream delivers it again. With the consumer's MaxAckPending at 1 the
// redelivery comes before any later message, which keeps the stream's
// order; with more, later messages go on while a failing one waits.
package inboxnats
