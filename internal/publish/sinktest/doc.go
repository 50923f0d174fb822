// Package sinktest is the conformance suite that every publish.Sink runs.
//
// A sink package hooks itself in with a Harness: Open sets up a fresh,
// isolated destination (its own topic, its own file) for one subtest and
// returns a Target holding the sink, a way to read back what the
// destination holds, and, when the harness can simulate one, an outage of
// the destination. Features says what the destination can carry and keep
// (one total order or order per key, NULL keys, LSNs, timestamps, binary
// payloads), and so which checks apply. Run then proves, as subtests named
// after the guarantee:
//
//   - RoundTripKeepsEveryField: id, type, key, payload bytes and headers
//     (traceparent among them) come back as published.
//   - OrderKeptPerKeyAcrossBatches: messages of several keys interleaved
//     over many Publish calls come back in publish order per ordering key,
//     and in one total order when Features.GlobalOrder.
//   - AckedMessagesAreReadable: once Publish returned nil the messages are
//     readable, at once, without polling.
//   - CanceledContextFailsPromptly: Publish returns promptly with an error
//     wrapping ctx.Err() when its context ends, and a retry of the whole
//     batch then delivers it, duplicates limited to that batch.
//   - OutageLosesNothingAndKeepsOrder: during an outage Publish fails with
//     an error that is not Permanent (or blocks until its context ends); a
//     caller-level retry of the whole batch succeeds after the destination
//     is back; nothing is lost, per-key order holds, and only the retried
//     batch may be duplicated.
//   - With Features.ExactlyOnce, the last two allow no duplicate at all:
//     the retries after a canceled call or an outage store nothing twice
//     (as Read reads it: the kafka sink with exactly_once, read_committed).
//   - LargeBatchesAllDelivered: 5,000 messages in batches of 1,000, and one
//     payload of Features.MaxPayload bytes when set.
//   - RefusalHoldsTheKeyOnEveryDestination, with
//     Features.OrderPerKeyUnderRefusal (else skipped, Harness.NoRefusal
//     saying why): through publish.Runner under relay.on_refused:
//     hold_key semantics (a Holder that holds a refused message's key),
//     messages of six keys over several destinations (Harness.OpenRefusing
//     routes by type, RefusalTypes), three keys' heads refused
//     (Target.Refuse): no message of such a key reaches any destination
//     after its parked head, every later one is held in order, the other
//     keys flow; and the sink's publish.RefusalUnits says what
//     Features.RefusalOrderedPerDestination says.
//
// Features states the order guarantees a run proves: per ordering key
// always, GlobalOrder, OrderPerKeyUnderRefusal and
// RefusalOrderedPerDestination (docs/testing.md has the table per sink).
//
// The suite emulates the relay's runner: after an error not marked
// publish.Permanent it publishes again, with backoff, the messages of the
// batch that the sink did not report durable with publish.Partial (all of
// them without it), in batch order (Retry and PublishWithRetry). That is
// what makes "duplicates possible, reordering not" the property to check:
// the order of first appearances of the message ids per ordering key must
// equal the publish order. A sink that reports a message durable that the
// destination did not store loses it, and the check fails.
//
// Messages come from a Gen: valid UUIDv7 ids, JSON payloads, increasing
// LSNs, millisecond commit times. ReadJSONLines parses the JSON-lines form
// that the file and stdout sinks write (publish.AppendJSONLine, base64
// payloads included), so that their harness's Read is a few lines:
//
//	Read: func(t testing.TB) []*message.Message {
//		f, err := os.Open(path)
//		if err != nil {
//			t.Fatal(err)
//		}
//		defer f.Close()
//		msgs, err := sinktest.ReadJSONLines(f)
//		if err != nil {
//			t.Fatal(err)
//		}
//		return msgs
//	},
//
// with Features{GlobalOrder: true, NullKey: true, LSN: true,
// BinaryPayload: true, ReencodesJSON: true}. A sink of package publish
// itself runs the suite from an external test package (package
// publish_test): sinktest imports publish, so publish's own tests cannot
// import sinktest.
//
// Nothing in this package is safe for concurrent use unless its doc says
// so; the suite runs its subtests one after another.
package sinktest
