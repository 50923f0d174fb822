// Package sqs is the Amazon SQS sink (kind: sqs): it sends outbox
// messages with the AWS SDK for Go v2 to a standard or FIFO queue, in
// SendMessageBatch requests of up to 10 messages and max_message_bytes
// (256 KiB by default; on a FIFO queue one message per group a request),
// one request at a time per queue, and reports a
// message durable only once SQS answered that it stored it.
//
// # Mapping
//
// The body is the payload when SQS takes it as text (valid UTF-8 of the
// characters SQS allows), else its standard base64 with the attribute
// body-encoding: base64; an empty payload is the body "-" with
// body-encoding: empty (SQS needs one character). Payload decodes either.
// String message attributes carry id, type and key (none for a NULL
// key), or with format: cloudevents ce-specversion, ce-id, ce-source,
// ce-type, ce-time, ce-partitionkey and content-type (binary content
// mode, spelled as the HTTP and NATS bindings spell them). The headers
// column fills the attributes left of SQS's 10: traceparent, tracestate,
// then by name; an entry over the limit, with a name SQS refuses
// (publish.RowHeaderDenied's names, ones starting with AWS. or Amazon.,
// characters outside a-z A-Z 0-9 _ - .), an empty value, one that passes
// for the sink's own attributes, is left out with a warning once per
// name and reason (docs/sinks/sqs.md, "Attributes").
//
// On a FIFO queue (a name ending in ".fifo") MessageGroupId is the
// ordering key (the key, or the id for a NULL key; a key SQS would not
// take as a group id, over 128 characters or outside printable ASCII,
// becomes "sha256:" and its hash: awsbatch.GroupID), and MessageDeduplicationId
// is the outbox id, so that SQS drops what the relay sends again within
// its 5-minute window. A standard queue gets neither and keeps no order.
//
// # Order and partial acknowledgements
//
// The sink sends with awsbatch.Batcher, the batch loop it shares with the
// sns sink. A queue's batches go out one at a time, in WAL order; SQS
// answers per entry, and the stored entries are reported with
// publish.Partial. A request to a FIFO queue holds at most one entry per
// message group: SQS does not promise that it stores a group's entries of
// one request only up to a failed one, and a later entry it stored would
// be ahead of the failed one for good (the awsbatch package doc). After a
// failed entry the queue's later batches of the call are not sent.
//
// # Errors
//
// classify sorts the SDK's errors by their code (never their text): a
// missing queue, refused credentials, a KMS key that cannot be used,
// a batch SQS finds too long are Permanent; an entry refused for what it
// holds (InvalidMessageContents, InvalidAttributeName,
// InvalidAttributeValue, InvalidParameterValue, MessageTooLong) is
// Rejected, naming the message, and so is a queue a template chose that
// does not exist (docs/security.md); throttling, server faults, network
// errors and ended contexts are transient. Credentials come from the
// default AWS chain and are never logged.
//
// # Tests
//
// sqsfake is the stand-in the tests run against: the registries' goaws
// speaks only the query protocol, not the JSON protocol of the SDK. See
// its package doc for what it keeps and what it lacks. The conformance
// suite runs against fauxqs too (awsbatch/fauxqs), an emulator the
// project did not write.
package sqs
