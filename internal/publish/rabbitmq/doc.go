// Package rabbitmq is walpost's RabbitMQ sink: it publishes outbox
// messages over AMQP 0-9-1 with github.com/rabbitmq/amqp091-go and reports
// a batch as delivered only once RabbitMQ confirmed every message of it.
// Importing the package registers the sink kind "rabbitmq" with the
// publish registry. The user reference, with every option and its
// default, is docs/sinks/rabbitmq.md.
//
// # Configuration
//
// The kind's settings sit in the sink's YAML mapping beside name, kind and
// route, and are decoded strictly (an unknown key is an error):
//
//   - name: events
//     kind: rabbitmq
//     url: "amqps://walpost:${RABBITMQ_PASSWORD}@rabbitmq.internal:5671/prod"   # required
//     exchange: "outbox"           # a name, or a template with {type} and {key}; required
//     routing_key: "{type}"        # a key or a template (default {type})
//     declare_exchange: false      # declare missing exchanges (default false: a missing one is an error)
//     declare_exchanges: []        # with a template: the exchanges it may declare ("outbox.*": a prefix)
//     exchange_type: topic         # with declare_exchange: topic (default) | direct | fanout | headers
//     max_in_flight: 1000          # unconfirmed messages on the channel (default 1000)
//     max_message_bytes: 16777216  # largest body sent (default 16 MiB)
//     timeout: 10s                 # connect, and the wait for each confirm
//     heartbeat: 10s               # AMQP heartbeat
//     tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: false, server_name: ""}
//     format: raw                  # raw (default) | cloudevents
//     source: /orders-service      # CloudEvents source (format: cloudevents only)
//
// Errors name the field ("url: empty", "routing_key: ... unknown
// placeholder {tpye}"); the registry puts the sink in front. No error and
// no log line holds the URL's password: the URL is shown through
// redact.URL, the client's own URL parse errors (which quote pieces of the
// URL) are not shown, and every error Publish returns passes a redact.Set
// of the password as a second line of defence (internal/redact).
//
// TLS is on exactly when the URL's scheme is amqps; the tls keys are an
// error with amqp://. tls.insecure_skip_verify is logged as a warning.
//
// # Mapping
//
// Each outbox message is one basic.publish with mandatory set:
//
//   - exchange: the exchange template, {type} = message type, {key} =
//     ordering key (the id when the key is NULL); names are checked
//     against AMQP's rules (1–255 of a-z A-Z 0-9 - _ . :).
//   - routing key: the routing_key template (default {type}), 1–255
//     bytes of printable UTF-8.
//   - properties: delivery_mode 2 (persistent), message_id = outbox id,
//     type = outbox type, content_type application/json for a JSON
//     payload and application/octet-stream for other bytes (a bytea
//     column), timestamp = commit time (AMQP timestamps have whole
//     seconds), app_id walpost.
//   - headers: the entries of the headers column (traceparent travels),
//     and "key" = the ordering key unless it is NULL (an entry named
//     "key" in the column is left out: the message's own key wins).
//   - body: the payload as stored.
//
// With format: cloudevents the message is also a CloudEvents 1.0 event in
// binary mode, per the AMQP binding: the headers cloudEvents:specversion,
// cloudEvents:id, cloudEvents:source, cloudEvents:type and cloudEvents:time
// (envelope.Attributes) and cloudEvents:partitionkey (the key, unless
// NULL: the Partitioning extension) are added, a headers entry whose name
// starts with cloudEvents: (any case) is left out, content_type is the
// datacontenttype (envelope.ContentType), and the body is the data; the
// properties and the "key" header stay as with raw. This is the mapping
// of docs/design.md, "Formats", for AMQP.
//
// # Publisher confirms and returns
//
// The sink opens one connection and one channel in confirm mode. Publish
// sends the batch's messages in order, at most max_in_flight unconfirmed
// at a time, and waits for their confirms in order. Confirms are thus
// pipelined: the sink does not wait a round trip per message, and several
// channels publishing different keys at once (the webhook sink's lanes)
// measured no faster, the broker bounding the rate (docs/sinks/rabbitmq.md,
// "Throughput"). A message counts as
// delivered only when RabbitMQ acked it: for a persistent message routed
// to durable queues that is after every queue accepted it (and, for
// classic queues, wrote it to disk; for quorum queues, after a majority
// of replicas did). A nack (a queue refused it: a full queue with
// x-overflow: reject-publish, a queue failure) is a transient error: the
// relay sends the message again.
//
// mandatory makes an unroutable message (no queue bound for its routing
// key) come back as basic.return instead of being dropped. RabbitMQ sends
// the return before the ack of the same message, and the client hands it
// on before it resolves the ack; the return buffer holds max_in_flight,
// so it never overflows. Each confirm is checked against the returns
// received so far (in publish order, matched by message id, exchange and
// routing key): a returned message is an error naming the message, the
// exchange and the routing key. When the exchange or the routing key
// comes from a template ({type}, {key}), the route depends on the message
// and others may go through: the error is publish.Rejected, so that
// relay.on_refused decides (stop, or park it and go on). When both are
// fixed, every message would come back (a binding is missing), and
// parking them all would drop them silently: the error is Permanent. A
// missing fixed exchange is Permanent too: every message to it would
// fail, so the error says to create the exchange or to set
// declare_exchange: true. The sink checks each exchange once per
// connection (exchange.declare, passive unless declare_exchange) before
// the first message to it is sent. An exchange from the template is
// declared only when declare_exchanges allows it, and RabbitMQ refusing
// it (404, 403, 406) is publish.Rejected: a message's type chose the
// name, and must not stop the relay for good (docs/security.md).
//
// # Ordering and Partial
//
// Messages published on one channel reach each queue in publish order,
// and the sink uses one channel at a time and publishes a batch in order.
// On a failure Publish reports with publish.Partial only the confirmed
// prefix of the batch: the messages before the first one that was not
// acked (or returned). Messages after it may have been stored too; they
// are sent again, as duplicates after their first copies. When the
// connection fails, the server has received a prefix of what was sent
// (TCP delivers in order), so what a queue holds is a prefix of the batch
// followed by the retry from the first unconfirmed message: duplicates,
// no reordering.
//
// One case breaks this: a nack of message k while a later message of the
// same queue was acked (a reject-publish queue that gained room between
// the two). The retry then puts k behind that later message. RabbitMQ
// nacks only for queue overflow with reject-publish and for internal
// queue errors; if such a queue must keep strict order, set
// max_in_flight: 1 (each message waits for the confirm of the one before
// it, at the cost of one round trip and disk write per message).
//
// # Reconnects
//
// The sink connects at its first Publish, not when it is opened, so that a
// server that is down at start is a transient error and not a failed
// start. After any failure — a closed connection or channel, a nack, a
// return, a confirm that did not come within timeout, the context ending —
// the session (connection and channel) is dropped, since publishes may
// remain whose outcome is unknown; the next Publish dials a new one. A
// heartbeat (default 10s) finds a server that went silent. While the
// server is away, Publish fails with transient errors and the relay's
// runner retries with backoff; refused credentials (403 ACCESS_REFUSED),
// an unknown or forbidden vhost (530 NOT_ALLOWED), a conflicting exchange
// declaration (406 PRECONDITION_FAILED) and TLS failures are Permanent
// (see classify). The client's experimental automatic recovery is not
// used: the relay already retries whole batches, which is what the
// ordering argument needs.
//
// When its context ends, Publish returns at once with an error wrapping
// ctx.Err(): the socket is closed under the client, which does not take a
// context for publishing (a connection RabbitMQ blocks for a memory or
// disk alarm would otherwise block the write). A write that blocks for
// longer than timeout, and a confirm that does not come within timeout,
// close the session the same way (the relay's runner gives Publish no
// deadline of its own); the error is transient and says when RabbitMQ
// had blocked the connection.
//
// # Tests
//
// The tests run against the machine's RabbitMQ (package rabbittest, which
// skips without one): the conformance suite (internal/publish/sinktest)
// with the outage cut by internal/tcpproxy, and one test per guarantee
// above (TestIntegration…). BenchmarkRabbitMQPublish measures catch-up
// throughput.
package rabbitmq
