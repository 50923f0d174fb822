// Package kafka is walpost's Kafka sink: it publishes outbox messages with
// github.com/segmentio/kafka-go and reports a batch as delivered only once
// Kafka acknowledged every message of it. Importing the package registers
// the sink kind "kafka" with the publish registry.
//
// # Configuration
//
// The kind's settings sit in the sink's YAML mapping beside name, kind and
// route, and are decoded strictly (an unknown key is an error):
//
//   - name: events
//     kind: kafka
//     brokers: ["127.0.0.1:9092"]  # bootstrap brokers, host:port; required
//     topic: "outbox.{type}"       # a topic, or a template: {type} and {key} are replaced; required
//     acks: all                    # all (default) | leader | none
//     batch_bytes: 1048576         # most bytes in one produce request (default 1 MiB)
//     batch_size: 1000             # most messages in one produce request (default 1000)
//     linger: 0s                   # wait for more messages before a request (default 0s: send at once)
//     compression: none            # none (default) | gzip | snappy | lz4 | zstd
//     client_id: walpost           # default walpost
//     auto_create_topics: false    # let brokers create missing topics (default false)
//     tls: {enabled: true, ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: false, server_name: ""}
//     sasl: {mechanism: SCRAM-SHA-512, username: walpost, password: "${KAFKA_PASSWORD}"}
//     timeout: 10s                 # bounds one write attempt: dial, metadata, produce and ack
//     format: raw                  # raw (default) | cloudevents (see "Mapping")
//     source: /orders-service      # CloudEvents source, only with format: cloudevents (default walpost)
//
// The user reference, every option with its default, is
// docs/sinks/kafka.md.
//
// Errors name the field ("brokers: empty", "topic: ... unknown placeholder
// {tpye}"); the registry puts the sink in front ("sinks[0] (events): ").
// batch_bytes must not exceed the topics' max.message.bytes (Kafka's
// default is 1048588), or Kafka rejects full batches as too large. A fixed
// topic is checked when the sink is configured; a template's literal parts
// are, and each expanded name is checked per message.
//
// acks: none gives up the relay's guarantee: Kafka does not answer, so
// the slot may be confirmed past messages that a broker failure then
// loses. The sink logs a warning for it.
//
// tls.insecure_skip_verify turns off the check of the brokers'
// certificates: the connection is encrypted, but to whoever answers, so a
// man-in-the-middle can read and alter messages and credentials. The sink
// logs a warning for it when it opens; give tls.ca_file instead.
//
// The brokers' sockets are read and written with raw system calls
// (internal/rawnet), which at low rates spare the Go runtime a thread
// wake-up per request. WALPOST_RAWNET=off, read once when the process
// starts and logged at info when the sink opens, leaves them to net.Conn.
// Records are built with ordinary allocations: an arena for their header
// slices and values cut the allocations per call but moved neither rate
// nor CPU in a catch-up, and was removed (BENCHMARKS.md, "What each
// optimisation bought").
//
// # Mapping
//
//   - Record key: the outbox key; the message id when the key is NULL
//     (message.Message.OrderingKey), so that every message has a key and
//     lands on a partition chosen by its key.
//   - Partition: murmur2 of the key (kafka.Murmur2Balancer with Consistent
//     set), the Java client's default partitioner, so a key lands on the
//     same partition as a Java producer would put it.
//   - Value: the payload bytes as stored (an empty payload is an empty
//     value, never a tombstone).
//   - Headers, format: raw: "id", "type", then every entry of the headers
//     column in key order (so traceparent travels); an entry named "id"
//     or "type" is left out, the message's own id and type win.
//   - Headers, format: cloudevents (the CloudEvents Kafka protocol
//     binding, binary content mode; docs/design.md, "Formats"):
//     ce_specversion, ce_id, ce_source, ce_type, ce_time (the time of
//     envelope.Attributes, when known), content-type (application/json
//     or application/octet-stream), ce_partitionkey (the outbox key; not
//     written for a NULL key), then the headers column in key order less
//     entries named content-type or starting with ce_ (any case). No "id"
//     or "type" header: a sink writes one form. Key, value, timestamp and
//     partition are the same in both formats.
//   - Timestamp: the commit time of the message's transaction.
//   - Topic: the template with {type} replaced by the message type and
//     {key} by the ordering key. A name Kafka does not accept (empty, over
//     249 characters, a character outside [a-zA-Z0-9._-], "." or "..") is a
//     Permanent error naming the message id, LSN and topic, raised before
//     anything of the batch is sent. Topics per {key} create a topic per
//     aggregate: rarely what one wants.
//
// # Ordering
//
// Within a partition, Kafka stores records in the order it receives them,
// and kafka-go sends the requests of one partition one at a time. The sink
// keeps WAL order per key — duplicates possible, reordering not — because:
//
//  1. The relay makes one Publish call at a time per sink, with the
//     messages in WAL order, and the messages of a failed batch that were
//     not acknowledged are retried, in their order, before anything after
//     the batch is sent (the sink also serializes Publish itself).
//  2. Within a call, the messages go out in groups, one WriteMessages call
//     per group, each group only after the one before was acknowledged. A
//     group is cut small enough (batch_size messages; batch_bytes in all,
//     counting record overhead) that kafka-go puts each partition's share
//     of it into a single produce request, and a produce request is
//     appended whole or not at all. So no request of a partition can
//     succeed after an earlier request of the same partition failed.
//  3. kafka-go's own retries are off (MaxAttempts 1): they would resend a
//     failed request after a later one of the same call had succeeded.
//  4. When a group fails, Publish reports with publish.Partial what Kafka
//     acknowledged: every earlier group, and the messages of the failed
//     group whose partition's request succeeded (kafka-go's WriteErrors
//     holds nil for them). Per partition that is a prefix of the call's
//     messages for it: where a partition's request of the group failed,
//     none of its messages in the group was appended (by 2) and none in
//     a later group was sent. The relay sends only the rest again, in
//     order, so each partition gets its remainder after its acknowledged
//     prefix.
//
// Hence within a partition the sequence of first successful writes is WAL
// order. A retry re-sends only messages whose request failed or whose
// answer was lost (a timeout, a connection reset); the latter may have
// been stored, so receivers can see duplicates (the inbox drops them),
// never a message before one that preceded it in the WAL. One caveat is
// Kafka's own: adding partitions to a topic moves keys to other
// partitions.
//
// When the context of a Publish ends, Publish returns at once, but a
// produce request already sent may still complete. A retry queues behind
// it on the same partition, so it too can only duplicate.
//
// # Errors
//
// Publish decides by error type and Kafka error code, never by text
// (classify):
//
//   - Transient, returned so that the relay retries what Kafka did not
//     acknowledge, with backoff: retriable Kafka codes (NotLeaderForPartition,
//     LeaderNotAvailable, NotEnoughReplicas, RequestTimedOut, ...),
//     network errors (refused, reset, timeouts), an ended context, and
//     anything not known to be permanent. After a transient error the
//     cached cluster metadata is dropped so that the retry finds moved
//     leaders and restarted brokers at once.
//   - Permanent, marked with publish.Permanent so that the relay stops
//     instead of retrying: MessageSizeTooLarge (from the broker, or a
//     message over batch_bytes), RecordListTooLarge, InvalidTopic and an
//     illegal expanded topic name, TopicAuthorizationFailed,
//     ClusterAuthorizationFailed, SASL authentication failures,
//     UnknownTopicOrPartition when auto_create_topics is false, a few
//     configuration rejections (acks, compression, record validation), and
//     TLS failures that only a configuration change fixes (a certificate
//     that does not verify, a handshake the broker refuses with an alert,
//     a listener answering in plain text).
//   - Of those, the ones a message causes by itself are marked with
//     publish.Rejected instead: MessageSizeTooLarge (from the broker, or
//     a message over batch_bytes), an illegal expanded topic name, and,
//     for a topic from the template (a message chose the name,
//     docs/security.md), UnknownTopicOrPartition, TopicAuthorizationFailed
//     and InvalidTopic. With
//     relay.on_refused: dead_letter the relay then publishes the batch's
//     messages that Kafka did not acknowledge one at a time and parks the
//     message that is refused alone; the others stop the relay whatever
//     on_refused says.
//
// Every error names the message it concerns (id and LSN), its topic, how
// many messages of the call were not acknowledged, and, for permanent
// ones, what to do; and is marked with publish.Partial when Kafka
// acknowledged some of the call's messages, transient or not, so that
// the relay confirms those and sends only the others again.
//
// The sink keeps no backoff of its own: kafka-go's (WriteBackoffMin and
// WriteBackoffMax) applies between the attempts of one write, and there
// is one. The relay's backoff starts again at its minimum after any
// attempt that made progress.
package kafka
