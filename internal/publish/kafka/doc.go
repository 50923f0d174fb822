// Package kafka is walpost's Kafka sink: it publishes outbox messages with
// franz-go's producer (github.com/twmb/franz-go/pkg/kgo), idempotent with
// acks: all, and reports a batch as delivered only once Kafka
// acknowledged every message of it. Importing the package registers
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
//     batch_size: 1000             # most messages buffered, then sent together (default 1000)
//     linger: 0s                   # accepted for old configurations; no effect (Publish flushes)
//     compression: none            # none (default) | gzip | snappy | lz4 | zstd
//     client_id: walpost           # default walpost
//     auto_create_topics: false    # let brokers create missing topics (default false)
//     tls: {enabled: true, ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: false, server_name: ""}
//     sasl: {mechanism: SCRAM-SHA-512, username: walpost, password: "${KAFKA_PASSWORD}"}
//     # or PLAIN; OAUTHBEARER with token or token_file;
//     # AWS_MSK_IAM with access_key_id, secret_access_key,
//     # session_token, or the AWS_* environment (sasl.go)
//     exactly_once: false          # each batch one transaction with the progress (exactlyonce.go)
//     progress_topic: walpost.progress # with exactly_once
//     timeout: 10s                 # bounds one publish attempt's wait for acknowledgements
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
//   - Partition: murmur2 of the key (kgo.StickyKeyPartitioner with its
//     default hasher, over all partitions), the Java client's default
//     partitioner, so a key lands on the same partition as a Java
//     producer would put it.
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
// # Ordering and duplicates
//
// With acks: all the producer is idempotent (Kafka's producer id and
// per-partition sequence numbers, KIP-98): the broker appends a batch only
// after the one before it of the same producer and partition, and drops
// one it already has. So the producer may keep several requests in flight
// per partition (up to five) and retry any of them, after a lost answer,
// a reset connection, a leader change or a retriable error code, without
// a second copy and without reordering. The sink keeps WAL order per key
// and adds no duplicate of its own while one sink instance runs:
//
//  1. The relay makes one Publish call at a time per sink, with the
//     messages in WAL order, and the messages of a failed batch that were
//     not acknowledged are retried, in their order, before anything after
//     the batch is sent (the sink also serializes Publish itself).
//  2. Within a call, the messages go out in groups of at most batch_size.
//     The producer flushes by hand: a group's records are all in their
//     partitions' buffers before any is sent (for a topic whose
//     partitions the producer does not know yet, the flush waits until
//     metadata came and every record was moved in: call.waitPlaced), and
//     the next group only once every record of the one before has its
//     outcome. When the producer gives up on a
//     record (timeout, or an error no retry fixes) it fails every record
//     buffered after it in its partition (its "gapless ordering"), so no
//     record of a group is stored after an earlier one of its partition
//     that failed (were one ever, checkOrder logs it at error level and
//     counts it: walpost_reordered_messages_total).
//  3. When records fail, Publish reports with publish.Partial what Kafka
//     acknowledged: per topic, the records before the first that failed
//     or is still unanswered. By 2 that is, per partition, a prefix of
//     the call's messages for it; the relay sends only the rest again.
//
// Duplicates remain possible where the producer id changes: the relay
// re-sends what a crashed or restarted process had sent and not seen
// acknowledged (a new process is a new producer), and a Publish that
// returns with records still in flight (its context ended, or timeout
// passed while a broker was cut off: the producer does not give up on a
// record it sent until it gets an answer, so that its sequence numbers
// stay right) is sent again by the relay as new records behind them.
// Receivers dedupe by id (the inbox does). One caveat is Kafka's own:
// adding partitions to a topic moves keys to other partitions.
//
// acks: leader and none turn the idempotent producer off (Kafka requires
// acks=all for it): the producer then keeps one request in flight per
// broker, so order holds, and a retry can store a record twice.
//
// # Errors
//
// Publish decides by error type and Kafka error code, never by text
// (classify):
//
//   - Retried by the producer itself, with the same sequence numbers,
//     until the call's timeout: retriable Kafka codes
//     (NotLeaderForPartition, LeaderNotAvailable, NotEnoughReplicas,
//     RequestTimedOut, ...) and network errors (refused, reset). What
//     is still not acknowledged at timeout fails the call transiently.
//   - Transient, returned so that the relay retries what Kafka did not
//     acknowledge, with backoff: the call's timeout (naming the last
//     failed connection to a broker, when there is one), an ended
//     context, and anything not known to be permanent. After a transient
//     error the sink asks for fresh cluster metadata.
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
// The producer's own backoff applies between its retries within a call;
// the relay's between calls, starting again at its minimum after any
// attempt that made progress.
//
// TLS and SASL failures reach the sink through a connection hook
// (connErrs): the producer retries connecting itself, so its records would
// only time out. A failure classify calls permanent (a certificate that
// does not verify, SASL credentials or a mechanism the brokers reject)
// ends the waiting call at once, and the error names it: Permanent. A
// transient one (refused, reset) is named by the call's timeout error.
package kafka
