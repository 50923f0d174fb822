// Package pubsub is the Google Cloud Pub/Sub sink (kind: pubsub): it
// publishes outbox messages with cloud.google.com/go/pubsub/v2 to a topic
// (or a topic per {type} or {key}), with message ordering on, and reports
// a message durable only once Pub/Sub acknowledged it.
//
// # Mapping
//
// The data is the payload, byte for byte. The ordering key is the outbox
// key (the id for a NULL key; a key over Pub/Sub's 1024 bytes becomes
// "sha256:" and its hash: OrderingKey). Attributes carry id, type and key
// (none for a NULL key), or with format: cloudevents ce-specversion,
// ce-id, ce-source, ce-type, ce-time, ce-partitionkey and content-type
// (the CloudEvents Pub/Sub protocol binding, binary mode). The headers
// column follows, by name, within Pub/Sub's 100 attributes; an entry with
// a denied name (publish.RowHeaderDenied), one of the sink's own names,
// a name over 256 bytes or starting with "goog", a value over 1024
// bytes, or beyond the limit is left out with a warning once per name and
// reason.
//
// # Order, pauses and partial acknowledgements
//
// The client bundles each key's messages and sends a key's bundles one at
// a time; after a failure it pauses the key and fails its later messages
// (ErrPublishingPaused) until ResumePublish. Publish waits for every
// result and reports the acknowledged messages with publish.Partial, per
// topic and key those before the key's first failure. The publisher of a
// topic with a failure is then retired instead of resumed: it may still
// hold messages of the call, and resuming the key would let one out before
// the retry of an earlier one. What a retired publisher still sends it
// sends in order, so per key the first appearances stay in WAL order;
// the copies are duplicates for the inbox.
//
// # Errors
//
// classify sorts errors by kind and gRPC code: a message over the
// client's limit and InvalidArgument refuse the message
// (publish.Rejected); NotFound, PermissionDenied, Unauthenticated and
// FailedPrecondition stop the relay (a topic a template chose that does
// not exist is Rejected instead: docs/security.md); everything else is
// transient. The client retries Unavailable, ResourceExhausted
// (throttling) and the like itself within timeout.
//
// Credentials come from ADC (application default credentials), found
// when the first Publish makes the client; emulator_host sends to an
// emulator without them. The tests run against pstest, the module's
// in-process fake, behind internal/tcpproxy for outages.
package pubsub
