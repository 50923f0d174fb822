// Package servicebus is walpost's Azure Service Bus sink: it publishes
// outbox messages with the Azure SDK for Go
// (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus) and
// reports a batch as delivered only once Service Bus acknowledged every
// message of it. Importing the package registers the sink kind
// "servicebus" with the publish registry.
//
// # Configuration
//
// The kind's settings sit in the sink's YAML mapping beside name, kind and
// route, and are decoded strictly (an unknown key is an error):
//
//   - name: bus
//     kind: servicebus
//     connection_string: "${SERVICEBUS_CONNECTION_STRING}"  # shared access key or signature; or:
//     namespace: walpost.servicebus.windows.net            # Azure AD: workload identity, managed identity, az login
//     queue: orders                # or topic: events, or entity: "outbox.{type}"; {type} and {key} are replaced
//     sessions: false              # true: SessionId = the ordering key (for session-enabled entities)
//     max_retries: 3               # the SDK's own retries of one operation (0: none); the relay retries after
//     retry_delay: 500ms           # the SDK's first wait between retries, doubling ...
//     max_retry_delay: 10s         # ... up to this
//     max_batch_bytes: 0           # 0: the entity's limit (256 KiB Standard, 1 MiB Premium)
//     max_message_bytes: 262144    # the entity's largest message; a claim check's threshold less 16 KiB
//     timeout: 1m                  # bounds one Publish call, the SDK's retries included
//     format: raw                  # raw (default) | cloudevents (see "Mapping")
//     source: /orders-service      # CloudEvents source, only with format: cloudevents (default walpost)
//
// The user reference, every option with its default, is
// docs/sinks/servicebus.md.
//
// Exactly one of connection_string and namespace is set, and exactly one
// of queue, topic and entity (a sender does not tell queues and topics
// apart; the three keys only say what the name is). With namespace the
// sink authenticates with azidentity's DefaultAzureCredential, which tries
// environment credentials, workload identity (AKS), managed identity and
// the Azure CLI in turn; give the identity the role "Azure Service Bus
// Data Sender" on the entity or namespace. A connection string needs the
// Send right, and belongs in the environment (${VAR}), not in the file.
//
// Errors name the field ("queue: empty", "namespace: ... is not fully
// qualified"); the registry puts the sink in front ("sinks[1] (bus): ").
// The connection string is never repeated in errors or logs.
//
// The SDK's defaults for retries are 3 retries starting at 4s and capped
// at 2m; walpost's are shorter (500ms, 10s) because the relay retries a
// failed batch itself, forever, with its own backoff, and reports the sink
// as failing meanwhile: the SDK's retries only need to cover short blips,
// such as a link the service detached while idle. The SDK's retry state
// is per operation: each SendMessageBatch call starts again at
// retry_delay (azservicebus v1.11, internal/utils.Retry counts attempts
// within the call), so no backoff carries over from one batch or call to
// the next; the relay's own starts again at its minimum after any attempt
// that made progress.
//
// # Mapping
//
// Chosen so that .NET receivers (MassTransit, NServiceBus, Wolverine, a
// plain ServiceBusProcessor) read the messages naturally:
//
//   - MessageId: the outbox id. Service Bus duplicate detection keys on it.
//   - Subject (Label in older SDKs): the message type.
//   - ContentType: application/json when the payload is JSON (json, jsonb
//     and text columns, and bytea holding JSON); application/octet-stream
//     otherwise.
//   - Body: the payload bytes as stored, as one data section.
//   - ApplicationProperties: every entry of the headers column (string
//     values), traceparent and tracestate among them; and Diagnostic-Id =
//     traceparent, which the Service Bus SDKs read for distributed tracing
//     (an entry of the headers column named Diagnostic-Id wins).
//   - CorrelationId: the headers column entry correlation_id, else
//     correlation-id, when one is present and not empty.
//   - SessionId, with sessions: true: the ordering key, that is the key,
//     or the id when the key is NULL (message.Message.OrderingKey). A key
//     over 128 characters (Service Bus's limit for a session id) is a
//     Permanent error naming the message.
//   - Entity: the queue, topic or entity template with {type} replaced by
//     the message type and {key} by the ordering key. A name Service Bus
//     does not accept (empty, over 260 characters, characters other than
//     letters, digits, '.', '_', '-' and '/', not starting and ending with
//     a letter or digit) is a Permanent error naming the message id, LSN
//     and name, raised before anything of the call is sent.
//
// ScheduledEnqueueTime is the message's deliver_at when that is still to
// come (columns.deliver_at: Service Bus enqueues it then), TimeToLive the
// time from then (or now) to its expires_at (columns.expires_at); without
// them, and for PartitionKey and ReplyTo, the entity's defaults apply.
//
// With format: cloudevents (the CloudEvents AMQP protocol binding, binary
// content mode; docs/design.md, "Formats") everything above stays, and the
// application properties also carry cloudEvents:specversion,
// cloudEvents:id, cloudEvents:source, cloudEvents:type, cloudEvents:time
// (when known) and cloudEvents:partitionkey (the outbox key; not for a
// NULL key), all as strings (the binding allows the canonical string form;
// it keeps the time's microseconds, which an AMQP timestamp would cut to
// milliseconds). ContentType is the datacontenttype. A headers column
// entry whose name starts with cloudEvents: (any case) is left out. The
// binding also allows the prefix cloudEvents_ (which its current text
// prefers for JMS clients); walpost writes cloudEvents:, the prefix the Go
// SDK's AMQP binding reads.
//
// # Duplicate detection and why receivers still need an inbox
//
// Delivery is at-least-once: a batch whose acknowledgement was lost (a
// connection reset, a timeout, a relay crash before the slot was
// confirmed) is sent again. With duplicate detection enabled on the entity
// (RequiresDuplicateDetection, with a DuplicateDetectionHistoryTimeWindow
// between 20 seconds and 7 days; set when the entity is created, and not
// available in the Basic tier), Service Bus drops a message whose
// MessageId it stored within the window, so such a resend does not reach
// receivers. It helps the sender side only, and only within its window.
//
// Receivers still see copies: in peek-lock mode a receiver that committed
// its effect but whose lock expired (or whose process died) before it
// called Complete gets the message again, with a higher delivery count;
// detection does not apply, since the message was stored once. Receivers
// therefore record the MessageId with their effect in one transaction and
// complete only after the commit: walpost's inbox package does that
// (inboxsb.Loop).
//
// # Batching and ordering
//
// Publish groups the messages of the call by entity, keeping their order,
// and sends each entity's messages in batches (Sender.NewMessageBatch,
// SendMessageBatch) as large as the entity allows: the SDK sizes a batch
// by the max-message-size the entity advertises on the link (or
// max_batch_bytes). When a message does not fit, the batch goes out and
// the message starts the next one; a message that does not fit into an
// empty batch is a Permanent error naming it. A batch travels as one AMQP
// transfer and is stored whole, in order, or refused.
//
// Within an entity, Service Bus stores messages in the order it receives
// them and hands them to receivers in that order (per session, when
// sessions are on). The sink keeps WAL order per entity, and so per
// SessionId — duplicates possible, reordering not — because:
//
//  1. The relay makes one Publish call at a time per sink, with the
//     messages in WAL order, and the messages of a failed call that were
//     not acknowledged are retried, in their order, before anything after
//     the call is sent (the sink also serializes Publish itself).
//  2. Within a call, the batches of one entity go out one at a time: a
//     batch is sent only after Service Bus acknowledged the one before it,
//     so everything an earlier batch holds was stored before a later batch
//     left. When a batch fails, the entity's later batches of the call are
//     not sent.
//  3. The SDK's own retries resend the same batch before returning, never
//     a later one.
//  4. When a batch fails, Publish reports with publish.Partial every
//     message of every batch that Service Bus acknowledged: per entity,
//     the batches before the failed one, a prefix of the entity's
//     messages of the call (by 2). The relay sends only the rest again,
//     in order, so each entity gets its remainder after its acknowledged
//     prefix.
//
// Hence per entity the sequence of first stored copies is WAL order. A
// retry re-sends only messages of the failed batch and after it; that
// batch may have been stored (an acknowledgement lost to a timeout or a
// reset connection), so receivers can see duplicates (duplicate detection
// or the inbox drops them), never a message before one that preceded it
// in the WAL. Batches are not
// pipelined within an entity: with two batches in flight, a throttled
// first batch and an accepted second one would reorder on retry. Different
// entities (an entity template) are independent and are sent to in
// parallel, up to 8 at once; order across entities is not defined, as it
// is not for a receiver reading two queues.
//
// With sessions: true the unit of order is the session, and batches of
// disjoint sessions could be in flight at once without reordering any
// (the webhook sink's lanes). The sink does not do it: a batch already
// carries hundreds of messages of many sessions per round trip, and
// against the stand-in, 2 or 4 senders sending disjoint sessions at once
// were no faster than one (docs/sinks/servicebus.md, "Throughput"); a
// real namespace was not at hand to measure.
//
// On a partitioned entity Service Bus keeps order per partition only, and
// without a SessionId (or PartitionKey) it spreads messages over the
// partitions: use sessions: true there when receivers rely on order.
//
// When the context of a Publish ends (or timeout passes), Publish returns
// promptly, but a batch already sent may still be stored. Its retry comes
// after it, so it too can only duplicate.
//
// # Errors
//
// Publish decides by error type and code, never by text (classify):
//
//   - Transient, returned so that the relay retries what Service Bus did
//     not acknowledge, with backoff: throttling (com.microsoft:server-busy), service timeouts,
//     connection loss (azservicebus.CodeConnectionLost), link and
//     connection errors, network errors, an entity that is full
//     (amqp:resource-limit-exceeded: receivers must catch up), an ended
//     context or the timeout, and anything not known to be permanent.
//   - Permanent, marked with publish.Permanent so that the relay stops
//     instead of retrying: a message too large for the entity
//     (azservicebus.ErrMessageTooLarge for an empty batch, or
//     amqp:link:message-size-exceeded from the service), an entity that
//     does not exist (azservicebus.CodeNotFound, amqp:not-found), missing
//     rights (CodeUnauthorizedAccess, amqp:unauthorized-access), a
//     disabled entity, a send the service does not allow (amqp:not-allowed:
//     e.g. a session-enabled entity without sessions: true), Azure AD
//     refusing the credential or no credential being available, and an
//     illegal entity name or session id. An illegal name, a session id
//     and a message too large are publish.Rejected, and so is an entity
//     from the template that does not exist (a message chose the name,
//     docs/security.md).
//   - Of those, the ones a message causes by itself are marked with
//     publish.Rejected instead: one message too large for the entity, and
//     an illegal entity name or session id from its type or key. With
//     relay.on_refused: dead_letter the relay publishes the call's
//     messages that were not acknowledged one at a time, parks the one
//     refused alone and goes on. A batch the service refuses as too large stays Permanent:
//     max_batch_bytes is above the entity's limit.
//
// After a transient failure that is not the service's own answer on a
// working link (throttling, a service timeout, a full entity), the next
// Publish starts with a new connection: the SDK recovers a broken
// connection or link only between its own retries of one operation, and
// would otherwise hand the dead link to the next call (with max_retries 0,
// forever).
//
// Every error names the message it concerns (id and LSN; for a batch its
// first and last message), the entity, how many of the call's messages
// the entity did not acknowledge, and, for permanent ones, what to do;
// and is marked with publish.Partial when Service Bus acknowledged some
// of the call's messages, so that the relay confirms those and sends only
// the others again.
//
// # Testing
//
// There is no Service Bus broker for the test machines (the official
// emulator needs Docker), so the tests run against sbfake, a small AMQP
// 1.0 stand-in written for them (sbfake/testdata/server.js, on the rhea
// library, run by Node.js): it speaks the part of the protocol the SDK
// uses — SASL ANONYMOUS, claims-based auth on $cbs, batches, peek-lock
// receiving and settlement, peek — with Service Bus's semantics where the
// tests depend on them. It is a test fixture, not an emulator: passing
// against it shows that the sink drives the SDK correctly and keeps its
// guarantees given those semantics, not that every service behaviour is
// covered. The same tests run against a real namespace or the official
// emulator when WALPOST_TEST_SERVICEBUS_CONNECTION_STRING is set (see
// integration_test.go).
package servicebus
