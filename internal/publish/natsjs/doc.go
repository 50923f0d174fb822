// Package natsjs is walpost's NATS JetStream sink: it publishes outbox
// messages with github.com/nats-io/nats.go (its jetstream package) and
// reports a message as delivered only once JetStream answered it with a
// PubAck, that is, once the stream stored it. Importing the package
// registers the sink kind "nats" with the publish registry. Every option,
// its default and an example are in docs/sinks/nats.md.
//
// # Mapping
//
//   - Subject: the template (subject: "outbox.{type}") with {type}
//     replaced by the message type and {key} by the ordering key. A
//     subject NATS cannot take (white space, '*', '>', an empty token from
//     a type like "a..b") is refused as publish.Rejected naming the
//     message, before anything of the call is sent; so is a subject in
//     NATS's control plane that the type or key chose: one starting with
//     '$' ("$JS.API.STREAM.PURGE.…") or _INBOX, or a token of the type or
//     key starting with '$' (subjectValue, reservedSubject;
//     docs/security.md).
//   - Data: the payload bytes as stored.
//   - Nats-Msg-Id: the outbox id. JetStream drops a message whose id it
//     stored within the stream's duplicate window (2 minutes by default),
//     so the resends of a retry are not stored twice.
//   - Format raw (default): Walpost-Type = the type. Format cloudevents
//     (CloudEvents 1.0 NATS binding, binary mode): ce-specversion, ce-id,
//     ce-source, ce-type, ce-time and content-type (lower case: NATS
//     headers are case-sensitive, and the binding looks for that name),
//     from envelope.Attributes and envelope.ContentType.
//   - Walpost-Key: the ordering key, in both formats; absent when the key
//     is NULL.
//   - Then every entry of the headers column (traceparent travels), with
//     its name's case kept. Names starting with Nats- or Walpost- (any
//     case) are left out: the server acts on Nats-Rollup, Nats-TTL and
//     Nats-Expected-*, and the sink's and the relay's own headers
//     (message.RelayHeaders: a claim check's walpost-claim-check, -size
//     and -sha256, written last) win. With cloudevents,
//     ce-* and content-type (any case) of the column are left out too. A name NATS
//     cannot carry is refused as publish.Rejected. nats.go replaces a
//     value's line breaks with spaces and trims white space around it, so
//     a value it would change (a headers-column value, the key, the type
//     or the id with a line break, or white space at an end) is refused
//     as publish.Rejected too, naming the message and the header, rather
//     than delivered altered.
//   - With stream.name set, every message carries Nats-Expected-Stream,
//     which the server keeps with the message.
//
// # Ordering
//
// The sink keeps WAL order within a stream (so per subject, and per key
// across subjects of one stream) — duplicates possible, reordering not —
// as long as the server stores or loses a prefix of what a connection
// sent (a failed connection, a relay that stops), because:
//
//  1. The relay makes one Publish call at a time, in WAL order, and
//     retries what was not reported durable, in order, before anything
//     after it (the sink also serializes Publish).
//  2. Within a call, messages go out in order on one connection, at most
//     max_pending without a PubAck. A stream stores the messages of one
//     connection in the order they arrive, and TCP delivers them in the
//     order sent: when a connection is lost, what the server got of it is
//     a prefix.
//  3. A call never uses two connections. nats.go's reconnect is off
//     (NoReconnect, no reconnect buffer): a lost connection fails the
//     call, and the next call opens a new one. With nats.go's reconnect, a
//     later message could be sent on the new connection after an earlier
//     one was lost with the old.
//  4. nats.go's own resend of a message answered "no responders" is off
//     (WithRetryAttempts(0)): it would come after later messages.
//  5. Publish reports with publish.Partial only the longest prefix of the
//     call whose messages all got PubAcks. That is a prefix of every
//     subject's share (what the Partial contract asks), and also of every
//     stream's, so a key whose types map to several subjects keeps its
//     order too. Messages after the first one without a PubAck are sent
//     again even if they were stored; the duplicate window drops them, so
//     the stream holds each once as long as retries come within it.
//
// What this does not cover: on a live connection the server may refuse
// or drop message k and store k+1, which was already in flight. A
// transient refusal — insufficient resources (10023), a 5xx API error,
// "no responders" from a stream electing a leader — or a PubAck that does
// not come during a leader change fails the call at k, and the retry
// sends k again, now after k+1; the resent k+1 is then dropped by the
// duplicate window, so the stream holds k+1 before k. Points 2 and 5
// bound what is reported durable, not what the server stored after a
// gap. With max_pending: 1 no message is in flight behind k, so such a
// refusal cannot reorder: set it for strict per-key order under
// server-side refusals (at the cost of a round trip per message). The
// sink does not turn these refusals into a stop: they are what a healthy
// cluster answers for seconds during a leader change.
//
// For a message over max_msg_size the refusal is of that message
// (Rejected: it is parked or stops the relay, and never stored); a stream
// full under discard: new (error 10077) is Permanent, so the relay stops
// instead of storing later messages around a refused one. A resend after
// the duplicate window has passed (a relay down for longer than the
// window with messages in flight) is stored again: set duplicate_window
// to more than your longest outage, or rely on the inbox, which drops the
// duplicates anyway.
//
// # Acknowledgements
//
// Publish returns nil only when every message got a PubAck. It waits for
// each at most ack_timeout after sending it; a PubAck that does not come
// fails the call (transient) and drops the connection. When the context
// ends, Publish returns at once with an error wrapping ctx.Err(); messages
// already sent may still be stored, and the retry's resends are dropped
// by the duplicate window.
//
// # Errors
//
// Publish decides by error value, type and JetStream error code, never by
// text (classify):
//
//   - Rejected (relay.on_refused applies): a message over the server's
//     max_payload (refused by the client before sending) or the stream's
//     max_msg_size (10054), an illegal subject, a header name NATS cannot
//     carry, a header value NATS would change.
//   - Permanent (the relay stops): no stream covers the subject (the
//     server answers "no responders", and JetStream, asked once which
//     stream covers the subject, names none; create a stream or set
//     stream.create), bad credentials, a permissions violation on publish
//     or on the reply inbox, TLS settings that cannot work, JetStream not
//     enabled, the wrong stream (10060), a stream that refuses to store
//     (10077: limits with discard: new), other API errors with a 4xx
//     status, a stream.create that the server refuses.
//   - Transient, retried by the relay: a server that cannot be reached, a
//     connection lost, a PubAck that did not come, insufficient resources
//     (10023), 5xx API errors, "no responders" on a subject a stream
//     covers (a clustered stream electing a leader) or when the lookup
//     fails, anything unknown.
//
// Every error names the message it concerns (id, LSN, subject) and how
// many of the call's messages were not acknowledged, and is marked with
// publish.Partial when a prefix of the call got PubAcks.
//
// No error or log line holds a password, token, or the contents of a
// credentials or seed file: servers are shown through redact.URL when they
// hold userinfo, and nats.go's own errors do not repeat credentials
// (TestIntegrationBadCredentialsArePermanentAndNeverPrinted). The relay's
// log filter (internal/redact) is the second line of defence.
//
// # Streams
//
// By default the sink creates nothing: the stream is the operator's, as a
// Kafka topic is. With stream: {name: OUTBOX, create: true} the sink
// creates the stream on its first connection when it is missing, on
// stream.subjects (default: the template's wildcard form, "outbox.{type}"
// → "outbox.>"), with the storage, replicas and duplicate window given;
// an existing stream is used as it is and never changed. NATS refuses a
// stream whose subjects overlap another stream's; that is Permanent.
//
// The duplicate window is the stream's: nats stream add --dupe-window, or
// stream.duplicate_window with create. Keep it longer than the time a
// retry can take (the relay's retry_backoff, 30 s by default, and a
// restart of the relay); 2 minutes is JetStream's default.
package natsjs
