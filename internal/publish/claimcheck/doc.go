// Package claimcheck is the claim check of relay.claim_check (or a sink's
// own claim_check): a decorator of any publish.Sink that stores each
// payload larger than the sink's threshold in Azure Blob Storage or S3,
// then hands the sink the message with an empty body and the object's
// reference in message.Message.ClaimCheck, which every sink writes as
// three headers after the headers column's entries (walpost-claim-check:
// its URL, walpost-claim-check-size, walpost-claim-check-sha256;
// inbox.HeaderClaimCheck and the others; message.RelayHeaders). The
// reference never travels in the headers column, whose walpost-* entries
// every sink leaves out: a row cannot set it (docs/security.md, "The
// relay's headers"). Receivers resolve them with inbox.WithClaimCheck
// (docs/claim-check.md).
//
// Guarantees:
//
//   - The upload is durable before the broker sees the message: Publish
//     uploads a batch's large payloads first, DefaultUploads at a time,
//     and calls the sink only once every upload succeeded.
//   - An upload is idempotent by message: the object is named
//     <prefix><slot>/<sink>/<message id>, so the retry of a batch, or the
//     replay after a crash (kill -9 mid-upload), writes the same object
//     again with the same bytes. A half-written object is never
//     visible: a blob or S3 object appears whole or not at all.
//   - A failed upload is an ordinary, retryable Publish error: the runner
//     retries the batch with its backoff, forever, and confirms nothing
//     past it. It is never Permanent nor Rejected, so never parked.
//   - walpost never deletes an object (see docs/claim-check.md,
//     "Retention": lifecycle rules on the container or bucket do).
//
// Register (from init) hooks Wrap into publish.Prepare; cmd/cdc imports
// the package.
package claimcheck
