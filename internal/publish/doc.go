// Package publish holds the sinks and what drives them.
//
//   - Sink is the contract a destination implements: Publish a batch in
//     order and return only once it is durable there; mark errors a retry
//     cannot fix with Permanent.
//   - Register/Open map a config `kind:` to a sink's constructor; sink
//     packages register themselves in init (the kafka sink lives in
//     publish/kafka, the file, stdout and discard sinks here).
//   - Runner feeds one sink from a channel, one batch at a time, in WAL
//     order, retrying a failed batch whole with exponential backoff and
//     jitter (so a retry never reorders messages), and acknowledges each
//     batch to the relay.
//   - Window bounds the deliveries and bytes in flight; it is the relay's
//     back-pressure and its memory bound.
//   - AppendJSONLine is the file and stdout sinks' line format.
//
// Every sink runs the conformance suite in publish/sinktest.
package publish
