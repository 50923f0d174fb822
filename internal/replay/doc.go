// Package replay publishes outbox messages again, outside the replication
// stream: `cdc replay` re-publishes rows still in the outbox table, and
// `cdc dead-letter resend` publishes parked messages again (README.md,
// "Replay and parked messages"; docs/design.md, "Command line").
//
// Neither touches the slot, the progress table or the outbox: the relay
// keeps running meanwhile, and receivers drop the copies by message id
// (the inbox package). Rows are read from the table as the adopt path reads
// them (Rows: the mapped columns' type oids and text values, the decoder's
// Adopted) and decoded by decoder.TableRow, so a replayed row is exactly
// the Message its INSERT gave, except for its WAL positions (0/0: the table
// does not keep them) and its commit time (unknown: a sink's event time is
// the time column's value, when one is mapped).
//
// Nothing here is safe for concurrent use; each command runs one of them.
package replay
