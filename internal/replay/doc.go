// Package replay publishes outbox messages again, outside the replication
// stream: the rows of cdc replay, and parked messages resent
// (docs/operations.md, "Replay and parked messages"; docs/design.md,
// "Command line"):
//
//	cdc replay        replay.go, bounds.go, publish.go (Replay): rows still
//	                  in the outbox table, published again
//	cdc dead-letter   resend.go (Resender: parked messages published
//	                  again), which internal/ops drives for it and the
//	                  console
//
// cmd/cdc parses their flags and prints their results. cdc resync
// (internal/admin) publishes through Replay; the relay's gap fills and
// cdc init --adopt read rows as Rows says.
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
// Every path that publishes rows from the table (cdc recover and cdc init
// --adopt, cdc resync, cdc replay, the relay's gap fills) reads them in
// Rows.Sort order, one rule for all (docs/design.md, "Row order from the
// table"): the order column (columns.order, or sql/outbox.sql's seq),
// else the time column, then the id.
//
// Nothing here is safe for concurrent use; each command runs one of them.
package replay
