// Package publish holds the sinks and what drives them.
//
//   - Sink is the contract a destination implements: Publish a batch in
//     order and return only once it is durable there; mark errors a retry
//     cannot fix with Permanent (Rejected when one message is the cause),
//     and report with Partial which messages of a failed call are durable.
//   - Register/Prepare map a config `kind:` to a sink kind's Factory, which
//     validates the settings without I/O and returns an Opener; the relay
//     opens sinks only once it holds the replication slot (a standby opens
//     nothing). Sink packages register themselves in init (the kafka sink
//     lives in publish/kafka, the file, stdout and discard sinks in
//     publish/file); cmd/cdc imports each of them.
//   - Runner feeds one sink from a channel, one batch at a time, in WAL
//     order, retrying what a failed call did not make durable with
//     exponential backoff and jitter (so a retry never reorders messages
//     of one key), and acknowledges the durable prefix to the relay.
//   - AppendJSONLine is the file and stdout sinks' line format, also the
//     webhook sink's objects and the dead-letter table's row_data;
//     AppendCloudEventLine is their line of format: cloudevents.
//
// Every sink runs the conformance suite in publish/sinktest.
package publish
