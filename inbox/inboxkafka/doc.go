// Package inboxkafka is the Kafka receive loop of walpost's inbox: Loop
// drives a kafka-go consumer-group Reader, runs each message's effect
// once per message id through an *inbox.Inbox or *inbox.SQLInbox, and
// commits a message's offset only after its effect's transaction
// committed.
//
// It is a package of its own so that importing inbox does not pull in
// kafka-go; the Service Bus loop is inbox/inboxsb. Every loop has this
// shape (see the inbox package documentation, "Receive loops"):
//
//   - Loop(ctx, reader, processor, effect, Options) error, generic in the
//     transaction type so that one Loop serves pgx (pgx.Tx) and
//     database/sql (*sql.Tx); the effect gets the broker's own message.
//   - The message id comes from where walpost's sink puts the outbox id:
//     here the record header "id" (DefaultIDHeader).
//   - The broker is acknowledged (here: the offset committed) only after
//     Process returned inbox.Processed or inbox.Duplicate.
//   - A failing effect is retried with inbox.ProcessRetrying: in place,
//     because a Kafka offset commit covers every earlier record of its
//     partition, so moving on would lose the failed message.
//   - Poison (a record without an id, an effect that failed
//     Options.MaxAttempts times) stops the loop unless Options.OnPoison
//     decides to park it and go on: nothing is skipped silently.
//   - Options' zero value is usable; each field documents its default and
//     invalid values give errors wrapping inbox.ErrInvalidOptions that
//     name the field.
//   - Hooks (OnError, OnPoison, OnCommitted) run on the loop's goroutine.
//
// # Topics written with exactly_once
//
// A walpost kafka sink with exactly_once: true writes each batch as one
// Kafka transaction. Read such topics with isolation.level=read_committed
// through NewFranzReader (a franz-go consumer-group client with
// kgo.FetchIsolationLevel(kgo.ReadCommitted())) and Options.ReadCommitted:
// kafka-go's Reader hands transaction markers and the records of aborted
// transactions to Loop as messages, so Loop refuses it then.
//
// # Guarantees
//
// With the inbox, the effect commits once per message id however often
// the record is read: after a crash between the database commit and the
// offset commit, after a rebalance, after the relay sent it twice. Per
// partition, records are processed one at a time in offset order. See
// Loop for the details and the inbox package for what Process guarantees.
//
// # Concurrency
//
// One Loop per Reader; run several, each with its own Reader in the same
// group, for more throughput (up to the number of partitions). Loop is
// safe to run concurrently with other Loops over one inbox.
package inboxkafka
