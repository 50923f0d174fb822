// Package fleet runs several sources in one `cdc run`, and lets identical
// instances share them without a coordinator (docs/fleet.md for users).
//
// A source is one configuration file: its own database, slot, sinks,
// progress and dead-letter tables. Load reads the files the --config
// arguments name (a file, or every *.yaml and *.yml of a directory), one
// source per file, named after the file. Each source runs its own
// relay.Relay under a supervisor (Fleet.runSource): a relay that stops
// with an error (a missing slot, a bad row under relay.on_invalid: stop,
// a database that is gone) is logged, counted and shown, and started
// again after a long backoff (30 s doubling to 5 min), while the others go
// on: nothing is shared between sources but the process's Gate, HTTP
// listener, log and tracing exporter. Each source's metrics are the
// relay's, registered through prometheus.WrapRegistererWith with
// source=<name>; each source's publish spans carry walpost.source=<name>
// (tracing.Provider.WithSource).
//
// Spreading sources over instances uses what a slot already is: held by
// one process at a time (START_REPLICATION on a slot held elsewhere fails,
// SQLSTATE 55006), so every instance may try every source and the slot
// decides. The Gate bounds how many slots one instance holds at once
// (--max-active): a source's stream enters it before each attempt to
// take its slot (replication.Gate, in Stream.Acquire) and leaves it after
// an attempt that did not get the slot and when it lets the slot go, so
// that a standby waits without holding capacity, and a source that finds
// the Gate full waits without trying its slot (it looks every few seconds
// whether any process holds the slot; if none does, the fleet lacks
// capacity: walpost_source_unowned and a warning). To spread sources, an
// attempt waits first for standby_poll/2 × used/capacity: of the
// instances polling a slot that became free, the one with fewer active
// sources tends to win it. The spread is best effort: nothing moves a
// source from a busy instance to an idle one while both live.
//
// Readiness of a process of several sources: ready once every source got
// past its first check (it streams, waits for its slot or for capacity,
// or failed) or 30 s passed, unless every source failed or the process is
// stopping. One source's failure shows in /readyz?verbose, /sources and
// walpost_source_failed, not in readiness: an unready instance would hold
// up the rollout that may be what repairs the source.
package fleet
