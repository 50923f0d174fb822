// Package retention deletes outbox rows that every sink acknowledged once
// they are older than relay.retention.keep, in bounded batches, off the
// hot path, on a connection of its own (docs/design.md, "Retention", and
// invariant 13).
//
// How a row is proven delivered. Logical replication streams what the
// WAL holds, so deleting a row never changes what is delivered: it only
// removes the copy kept for replay and audit. Retention must still never
// delete the copy of a row whose message some sink has not acknowledged.
// The relay proves acknowledgement by position, with marks:
//
//   - Every round the Job takes a mark in the marks table (a state table
//     created by `cdc init`):
//     INSERT … (slot, lsn, taken_at) VALUES ($slot, pg_current_wal_insert_lsn(), now()).
//     now() is the start of that one-statement transaction, read before
//     the insert position, and a transaction's commit record is in the WAL
//     before the transaction is visible (also with synchronous_commit =
//     off, hence the insert position and not pg_current_wal_lsn, the
//     write position): every transaction that committed before taken_at
//     has its commit record before lsn.
//   - It reads the slot's confirmed_flush_lsn from pg_replication_slots
//     (the server's, not the relay's memory: a restart or a second relay
//     on the slot is covered) and takes the newest mark at or before it.
//     The slot is never confirmed past a transaction some sink has not
//     acknowledged (invariant 1), so every transaction that committed
//     before that mark's taken_at was acknowledged by every sink.
//   - A row's time (relay.retention.column) is not its commit time: a
//     transaction commits some time after it set the row's time. margin
//     bounds that time; a row whose time is before taken_at − margin
//     committed before taken_at, unless its transaction ran longer than
//     margin (or the application's clock, when it sets the time, is off
//     by more). Such a row may lose its kept copy before it is delivered;
//     its delivery is not affected (the slot still holds its WAL).
//
// A round deletes, in batches of relay.retention.batch rows with
// relay.retention.pause between them,
//
//	DELETE FROM outbox WHERE ctid = ANY(ARRAY(
//	    SELECT ctid FROM outbox WHERE column < least(now() − keep, mark.taken_at − margin) LIMIT batch))
//
// and, with columns.sent_at mapped, only rows whose sent-at column is set
// (rows a dispatcher left unsent, and invalid rows that were never sent,
// stay). Marks older than the one used are pruned. A failing round is
// logged and tried again at the next interval: retention never stops the
// relay, since delivery does not depend on it; `cdc run` checks at start
// that the column exists and is a timestamp, that the relay's role may
// delete from the outbox and use the marks table.
//
// A Job runs only while its relay holds the slot (invariant 7). It is not
// safe for concurrent use: Check, then Run from one goroutine.
package retention
