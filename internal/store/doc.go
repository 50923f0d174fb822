// Package store keeps the relay's own state in PostgreSQL, next to the
// outbox: per-sink progress and dead letters.
//
// Two tables, both named in the config:
//
//   - postgres.progress_table (default public.walpost_sink_progress): one
//     row per (slot, sink), the last message the sink acknowledged. The
//     slot is confirmed at the slowest sink's pace; after a restart the
//     relay does not send a sink what its row covers, so only sinks that
//     were behind get duplicates. It is an optimisation for duplicates
//     only: a position written late costs re-sends, never a loss, because
//     it is only ever set to what the sink acknowledged. The same row
//     records a sink that is failing, for cdc status (health.go).
//   - postgres.dead_letter_table (default public.walpost_dead_letter): rows
//     that cannot be mapped to a message (relay.on_invalid: dead_letter,
//     or one row parked by `cdc skip`), and messages a sink refused for
//     good (relay.on_refused: dead_letter).
//
// Setup creates both (`cdc init`, as a role allowed to create tables);
// Check verifies that they exist and that the relay's role has the grants
// it needs (`cdc run`, which creates nothing: see sql/roles.sql for the
// least privileges of a relay role). CheckOwners, run by both commands before
// anything else touches the tables, refuses a table, or a trigger on one,
// that no trusted role owns (owners.go; docs/security.md, "State tables:
// who owns them").
//
// Everything a relay reads here about its slot's state, it reads after it
// holds the slot (docs/design.md, invariant 7).
package store
