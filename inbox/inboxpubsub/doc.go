// Package inboxpubsub is the Google Cloud Pub/Sub receive loop of
// walpost's inbox: Loop drives a pubsub/v2 Subscriber, runs each
// message's effect once per outbox id through an *inbox.Inbox or
// *inbox.SQLInbox, and acks a message only after its effect's transaction
// committed.
//
// It is a package of its own so that importing inbox does not pull in
// the Google Cloud client; inbox/inboxkafka is the model the loops
// follow. Where this loop differs is the broker: Pub/Sub redelivers a
// nacked message (after the subscription's retry policy) and moves one
// that failed max_delivery_attempts times to its dead-letter topic, so a
// failing effect is not retried in place: the message is nacked, after a
// wait that grows with its delivery attempt (Options.RetryBackoff).
//
// # The message id
//
// Pub/Sub's message ID differs for each copy the relay publishes, so the
// loop reads the outbox id from the attribute id that walpost's pubsub
// sink sets (ce-id with format: cloudevents); Options.ID reads another.
//
// # Why receivers need the inbox with Pub/Sub
//
// Delivery is at least once: an ack deadline that passes, or an ack that
// is lost, redelivers a message whose effect committed, and the relay
// publishes again after a failure. Loop acks only after the commit, and
// the copy is found a Duplicate and acked without running the effect
// again.
//
// # Concurrency
//
// The Subscriber calls the callback concurrently
// (ReceiveSettings.NumGoroutines, MaxOutstandingMessages), and, on a
// subscription with message ordering, one message of an ordering key at a
// time, in order. Process is safe for concurrent use.
package inboxpubsub
