// Package inboxsb is the Azure Service Bus receive loop of walpost's
// inbox: Loop drives an azservicebus receiver in peek-lock mode, runs each
// message's effect once per MessageId through an *inbox.Inbox or
// *inbox.SQLInbox, and completes a message only after its effect's
// transaction committed.
//
// It is a package of its own so that importing inbox does not pull in
// the Azure SDK; the Kafka loop is inbox/inboxkafka, the model the loops
// follow (see its package documentation). Where this loop differs is
// the broker: Service Bus redelivers a message given back (abandoned) and
// dead-letters one that failed the entity's MaxDeliveryCount, so a
// failing effect is not retried in place and there is no poison policy
// here; the message is abandoned, after a wait that grows with its
// delivery count (Options.RetryBackoff), and the broker does the rest.
//
// # Why receivers need the inbox with Service Bus
//
// Duplicate detection on the entity drops resends from the sender within
// its window, but not the copies Service Bus makes itself: a lock that
// expires after the effect committed and before Complete brings the
// message back. Loop completes only after the commit, and the
// redelivery is found a Duplicate and completed without running the
// effect again.
//
// # Concurrency
//
// One Loop per receiver; for parallelism run several, each with its own
// receiver (Process is safe for concurrent use). Messages of one Loop are
// processed one at a time, in the order received, which keeps the order
// of a session (use an *azservicebus.SessionReceiver for a
// session-enabled entity).
package inboxsb
