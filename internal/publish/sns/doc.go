// Package sns is the Amazon SNS sink (kind: sns): it publishes outbox
// messages with the AWS SDK for Go v2 to a standard or FIFO topic with
// PublishBatch (up to 10 messages and 256 KiB a request), one request at
// a time per topic, and reports a message durable only once SNS answered
// that it published it.
//
// The message is the sqs sink's form (awsbatch.Encode): the body is the
// payload, or its base64 with the attribute body-encoding; String
// attributes id, type, key (or the ce- attributes with format:
// cloudevents) and the headers column within SNS's 10 message attributes,
// what is left out logged once per name and reason. A FIFO topic (a name
// ending in ".fifo") gets MessageGroupId = the ordering key (awsbatch.GroupID)
// and MessageDeduplicationId = the outbox id, so SNS drops resends within
// its 5-minute window; the FIFO SQS queues subscribed to it keep the
// groups' order. Per-entry answers are partial acknowledgements, as for
// SQS: both sinks send with one batch loop (awsbatch.Batcher), which puts
// at most one entry per message group in a request to a FIFO topic.
//
// topic_arn names the topic; its name (after the last ':') may be a
// template with {type} and {key}, under SNS's name rules (1–256 of
// [a-zA-Z0-9_-] and a final ".fifo" from the template only). A topic a
// template chose that does not exist refuses the message
// (publish.Rejected, relay.on_refused); a fixed one stops the relay.
// Errors are sorted by their code (classify); throttling (Throttled,
// KMSThrottling, which the SDK's retryer is told to retry), server
// faults and network errors are transient. Credentials come from the
// default AWS chain.
//
// The tests run against snsfake, a stand-in for SNS's publishing side:
// goaws has no PublishBatch and no FIFO topics.
package sns
