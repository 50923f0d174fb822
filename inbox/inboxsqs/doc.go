// Package inboxsqs is the Amazon SQS receive loop of walpost's inbox: Loop
// receives from a queue with the AWS SDK for Go v2, runs each message's
// effect once per outbox id through an *inbox.Inbox or *inbox.SQLInbox,
// deletes a message only after its effect's transaction committed, and
// keeps the messages it holds invisible while their effects run.
//
// It is a package of its own so that importing inbox does not pull in
// the AWS SDK; the Kafka loop is inbox/inboxkafka, the model the loops
// follow. Where this loop differs is the broker: SQS hands a message out
// again once its visibility timeout passes, and its redrive policy moves
// one received maxReceiveCount times to a dead-letter queue, so a failing
// effect is not retried in place and there is no poison policy here: the
// message's visibility is set to a backoff that grows with its receive
// count, and SQS does the rest.
//
// # The message id
//
// SQS's own MessageId differs for each copy the relay sends, so the loop
// reads the outbox id from the message attribute id that walpost's sqs
// sink sets (ce-id with format: cloudevents); Options.ID reads another.
//
// # Why receivers need the inbox with SQS
//
// A FIFO queue drops the relay's resends within its 5-minute
// deduplication window, but not the copies SQS makes itself: a
// visibility timeout that passes after the effect committed and before
// the delete brings the message back, and a standard queue delivers at
// least once anyway. Loop deletes only after the commit, and the copy is
// found a Duplicate and deleted without running the effect again.
//
// # Concurrency
//
// One Loop per goroutine; for parallelism run several on the same queue
// (Process is safe for concurrent use). Messages of one Loop are
// processed one at a time, in the order received, which keeps the order
// of a FIFO queue's message group: after a message of a group fails, the
// batch's later messages of the group are given back unprocessed.
package inboxsqs
