// Package webhook is walpost's HTTP webhook sink: it POSTs outbox
// messages to an HTTP endpoint with the standard library's net/http and
// reports a message as delivered only once the endpoint answered its
// request with a 2xx status. Importing the package registers the sink
// kind "webhook" with the publish registry. The user reference, with
// every option, the body formats and the signature recipe for receivers,
// is docs/sinks/webhook.md.
//
// # Configuration
//
//   - name: orders-hook
//     kind: webhook
//     url: https://hooks.example.com/walpost   # http or https; required; user:password in it → Basic auth
//     mode: message                # message (default): one POST per message | batch: one POST per JSON array
//     format: raw                  # raw (default) | cloudevents (binary mode; mode: message only)
//     headers: {Authorization: "Bearer ${HOOK_TOKEN}"}   # extra headers on every request
//     secret: "${HOOK_SECRET}"     # signs every request: Walpost-Signature (inbox.VerifyRequest)
//     timeout: 10s                 # one request: connect, TLS, body, answer
//     max_retry_after: 30s         # longest Retry-After honoured (0s: ignore it)
//     batch_size: 100              # mode batch: most messages per request
//     batch_bytes: 1048576         # mode batch: most body bytes per request
//     concurrency: 1               # requests in flight at once (1..256); above 1, one at a time per ordering key
//     tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: false, server_name: ""}
//
// Errors name the field ("url: the scheme is not http or https",
// "headers.Content-Type: set by the sink itself"); the registry puts the
// sink in front. No error or log line repeats the URL (a webhook URL's
// path or query is often the credential: only its scheme and host are
// shown), the secret, or a value of headers:; the start of an error
// answer's body, quoted in errors, has each of them replaced.
//
// # Requests
//
// Mode message sends each message as one request whose body is the
// payload, byte for byte, with Content-Type application/json (or
// application/octet-stream for a bytea payload that is not JSON),
// Idempotency-Key and X-Message-Id set to the outbox id (the id header
// inbox.HTTPHandler reads), and, with format raw, X-Message-Type and
// X-Message-Key (absent for a NULL key). With format cloudevents the
// request is a CloudEvents 1.0 event in HTTP binary content mode: ce-id,
// ce-source, ce-specversion, ce-type, ce-time (the event time: the time
// column when mapped, else the commit time) and
// ce-partitionkey (the key, when not NULL) from envelope.Attributes,
// percent-encoded where the binding says, Content-Type as the
// datacontenttype. The outbox headers column travels as request headers
// (traceparent among them) in both formats; an entry the sink or
// headers: sets is left out, and one that cannot be an HTTP header (a
// name that is not a token, a control character in the value) makes the
// message a refusal (Rejected).
//
// Mode batch sends the messages of a Publish call as JSON arrays of the
// file sink's objects (publish.AppendJSONLine), at most batch_size of
// them and batch_bytes of body per request (a larger message goes
// alone), with X-Message-Count and an Idempotency-Key that is the hex
// SHA-256 of the request's ids, each followed by a newline: a retry of
// the same messages carries the same key. format: cloudevents is refused
// with mode batch.
//
// With secret: set, every request carries inbox.SignatureHeader, scheme
// v2: "t=<unix seconds>,h=<signed header names>,v2=<hex HMAC-SHA256>"
// over t, every header derived from the message (id, idempotency key,
// type, key, count, content type, ce- attributes, the headers column's
// entries; not User-Agent nor headers:) and the body (inbox.SignRequest),
// computed anew for each attempt; with signature_v1 (the default) the old
// scheme's v1 (inbox.Sign: t, Idempotency-Key and body) beside it, for
// receivers not yet upgraded. Receivers check it with inbox.VerifyRequest
// or HTTPOptions.SigningSecrets. Signing the type, key and headers keeps a
// captured request from being replayed with another type, key or id
// (docs/security.md, "Webhook signatures").
//
// Entries of the headers column that are credentials or connection
// headers (publish.KeepRowHeader) are left out, as are the names the sink
// sets itself (docs/security.md, "Row headers").
//
// # Ordering
//
// Publish calls are serialized. With concurrency 1 (the default) the
// requests of a call go out one at a time: a request is sent only after
// the one before it was answered 2xx, and when one fails Publish returns
// at once, reporting with publish.Partial the messages of the requests
// answered 2xx before it; the relay sends the others again, in order. So
// the sequence of first acknowledged deliveries is WAL order.
//
// With concurrency N (lanes.go) the unit of order is the ordering key,
// message.Message.OrderingKey: the outbox key, or the message's id when
// the key is NULL, so messages without a key are ordered by nothing, as
// on Kafka. Up to N lanes each send one request at a time; a lane that is
// free takes the waiting key whose next message comes first in the WAL,
// and a key is never on two lanes at once: its next request goes out only
// after its previous one was answered 2xx. A failed request stops its
// keys for the rest of the call, and the other keys go on (a Permanent
// failure or the end of ctx stops every lane from starting another
// request); Publish then returns the worst failure marked with
// publish.Partial for exactly the messages answered 2xx, per key a prefix
// of its messages in the call, so that the relay's retry sends each key's
// remainder in order (publish.Sink's order argument with the key as the
// unit of order). A 429 or 503 answer's Retry-After is waited out by its
// lane. A refused message (Rejected) is found by the relay's runner as
// with one lane: it publishes the messages not yet durable one at a time.
//
// Either way, per key, every message is first delivered after the first
// delivery of every earlier message of its key; a request whose answer
// was lost (a timeout, a reset, a relay killed) may have been processed,
// and a duplicate then comes as part of an in-order resend of the key
// from an earlier point (the Idempotency-Key and the inbox drop it),
// never as a message before one that preceded it in the WAL and was not
// yet delivered. Redirects are not followed.
//
// # Errors
//
// The answer's status decides (classifyStatus), never its text:
//
//   - 2xx: delivered.
//   - 5xx, 408, 425, 429, and a request with no answer (refused, reset,
//     DNS, no answer within timeout): transient; the relay retries with
//     its backoff. A 429 or 503 answer with Retry-After (seconds or a
//     date) is waited out first, inside Publish, at most max_retry_after
//     and never past the context.
//   - 3xx, 401, 403, 404, 405, 407, 410, 421, 426, 428, and TLS failures
//     that only a configuration change fixes: Permanent, the relay stops.
//     These are about the endpoint, the credentials or the receiver's
//     setup, not one message: parking every message (on_refused:
//     dead_letter) would not fix them. 428 is inbox.HTTPHandler's answer
//     to a request in which it finds no message id (mode batch, or an
//     IDHeader the sink does not send).
//   - Every other 4xx (400, 409, 413, 415, 422, ...): Rejected, the
//     receiver refuses the content. With relay.on_refused: dead_letter
//     the relay then publishes the call's messages that are not durable
//     one at a time (in mode batch, each in a request of its own) and
//     parks the one that is refused alone; with stop it stops.
//
// Every error names the message or the request's first and last message
// (id and LSN), the endpoint's scheme and host, the status, and the start
// of the answer's body.
package webhook
