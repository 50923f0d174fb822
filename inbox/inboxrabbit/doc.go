// Package inboxrabbit is the RabbitMQ receive loop of walpost's inbox:
// Loop consumes a queue with manual acknowledgements and a prefetch
// limit, runs each message's effect once per message id through an
// *inbox.Inbox or *inbox.SQLInbox, and acknowledges a message only after
// its effect's transaction committed.
//
// It is a package of its own so that importing inbox does not pull in the
// AMQP client. It has the shape of every loop (inbox/inboxkafka is the
// model; see the inbox package documentation, "Receive loops"):
//
//   - Loop(ctx, channel, queue, processor, effect, Options) error,
//     generic in the transaction type (pgx.Tx or *sql.Tx); the effect
//     gets the amqp091 Delivery.
//   - The message id is the AMQP message_id property, where walpost's
//     rabbitmq sink puts the outbox id.
//   - basic.ack only after Process returned inbox.Processed or
//     inbox.Duplicate.
//   - A failing effect or database: the message is given back
//     (basic.nack with requeue) after a wait that grows with the
//     message's failures in a row (inbox.Backoff, from 100ms up to
//     Options.RetryBackoff), so that a message that keeps failing does
//     not spin between the broker and the loop. Unlike a Kafka offset, an
//     acknowledgement covers one message, so the loop need not retry in
//     place: RabbitMQ puts the message back at its place in the queue and
//     delivers it again (to this consumer or another).
//   - Poison (a message without message_id, an effect that failed
//     Options.MaxAttempts times) stops the loop unless Options.OnPoison
//     decides to park it and go on: nothing is skipped silently.
//   - Options' zero value is usable; invalid values give errors wrapping
//     inbox.ErrInvalidOptions that name the field. Hooks run on the
//     loop's goroutine.
//
// # Guarantees
//
// With the inbox, the effect commits once per message id however often
// the message is delivered: after a crash between the database commit
// and the ack (RabbitMQ redelivers what a closed channel left
// unacknowledged), after a requeue, after the relay sent it twice.
// Messages are processed one at a time, in the order delivered. A
// requeued message comes back before the messages behind it that were not
// delivered yet, but after those already prefetched (up to
// Options.Prefetch): set Prefetch to 1 when the effects of one queue must
// run strictly in order even across failures.
//
// # Connections
//
// Loop does not reconnect: when the channel or its connection closes it
// returns an error, and RabbitMQ requeues every message delivered on the
// channel and not acknowledged. Open a new connection and channel and call
// Loop again (with a backoff). Use a connection of its own for consuming,
// not the one a publisher blocks (RabbitMQ's flow control).
//
// # Concurrency
//
// One Loop per channel; for parallelism run several, each with its own
// channel (Process is safe for concurrent use), or several processes: the
// queue shares its messages between consumers and the inbox lets one
// effect per id commit.
package inboxrabbit
