// Package pipeline is the stage between the replication stream and the
// sinks' runners, and the bookkeeping that settles what a sink is done
// with (docs/design.md, "Data flow"):
//
//	[]replication.Event ──► Pipeline.Run: decode, track, route, window ──► Out(i) × sinks
//	                                                                          │ publish.Runner
//	checkpoint.Tracker, Window, Progress ◄── Settler.Ack / Settler.Refused ◄───┘
//
// Pipeline.Run decodes each pgoutput message (decoder), tells the
// checkpoint tracker every transaction, delivery and progress point in
// stream order, sends each row to the sinks its type routes to, leaving
// out a sink that acknowledged the row's position before a restart
// (store.Position.Covers), and takes room in the Window for every
// delivery before handing it on. Deliveries are gathered per input batch
// and sent as one slice per sink. A row it cannot map goes by
// relay.on_invalid, a Policy of two choices (Options.Invalid): parked in
// the dead-letter table (DeadLetters) and passed, parked as the head of
// its key, which is then held (HoldStore; "Held keys"), or Run stops at it
// (*StopAtRow) unless `cdc skip` parked it; a forged message is never
// published. It also relays the rows the relay's
// coverage watcher reads from the table for a stretch the stream may not
// have carried (Fill; "The publication or the table changing under the
// relay").
//
// A Settler, one per sink, is that sink's runner's Ack and Refused: it
// acknowledges the batch in the tracker, frees its room in the window,
// moves the sink's progress and counts it; a message the sink refuses for
// good is parked (Refusals; relay.on_refused, SettlerOptions.Refused)
// before it is settled, and under hold_key its key is held for the sink.
//
// Invariants (docs/design.md, "Invariants and the tests that prove them"):
//   - A delivery is counted in the tracker (Tracker.Add) before a sink can
//     see it, and acknowledged there only by the Settler once the sink made
//     it durable or it was parked: the slot is never confirmed past a
//     message a sink has not acknowledged (invariant 1).
//   - Each sink's channel carries its messages in stream order, and a
//     message is in a sink's channel only while it holds room in the
//     Window; when the window is full Run first hands on what it gathered
//     (whose acknowledgements free the window) and then waits, so the
//     stream stops being read and memory stays bounded (invariant 5).
//   - A bad row is parked before its transaction is committed in the
//     tracker, or Run stops at it with everything before it handed on
//     and nothing after it tracked (invariant 6).
//   - With columns.sent_at mapped, the Marker gets a transaction's ids
//     before the tracker gets its commit (invariant 10, "sent_at and
//     adopt").
//   - A Reset (a new connection) abandons the open transaction: what of it
//     was handed on must still be acknowledged before anything after it
//     is confirmed, and the server sends it again; the rows of the replay
//     up to the last one handled before the Reset go nowhere (no sink,
//     no park, no hold), their ids stay with the transaction for the
//     Marker (invariant 21, "A reconnect inside a run").
//   - Run alone writes and closes the sinks' channels; when it returns,
//     for whatever reason, it has handed on what it gathered and closed
//     them ("Shutdown").
//
// What the pipeline needs of the rest of the relay it takes as small
// interfaces (DeadLetters, HoldStore, Refusals, Marker, Progress, Counter, Observer),
// which the relay fills with store.DeadLetter, sentat.Marker,
// store.Progress and its Prometheus counters, and the tests with fakes.
package pipeline
