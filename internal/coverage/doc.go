// Package coverage keeps invariant 17 (docs/design.md, "The publication or
// the table changing under the relay"): whether, and by what, the
// publication publishes the outbox's inserts. The stream cannot tell:
// pgoutput leaves out, without a word, the rows written while the table
// was not in the publication. So the relay looks at the catalog, on a
// connection of its own (Read: a Look), and records what it saw in the
// coverage table (Load, Save: a Row). Any change of what covers the outbox
// (the publication, its row for the table in pg_publication_rel, the
// table's OID), and any time the outbox is not covered, opens a gap: rows
// committed after the last time the old coverage was verified may be
// missing from the stream. Once the outbox is covered again and the
// pipeline handled the stream up to that point, the watcher reads the rows
// of the gap from the table (by the time column, from gap_margin before,
// with replay's keyset reader) and the pipeline relays those it did not
// see in the stream (a fill, pipeline.Fill), with their own ids, through
// the sinks; once they are acknowledged, the gap is closed.
//
// The decisions are in State.Observe, apart from any connection or clock
// (decide.go, tested alone); the Watcher is the loop that takes the looks
// and does what it says. It looks every second (Busy) while the outbox is
// not published or a gap is open, else every Quiet, and at once when the
// stream carries a Relation message (pipeline.Options.Relation).
//
// cdc init, cdc resync and cdc status read the catalog and the row with
// the same functions (internal/admin).
package coverage
