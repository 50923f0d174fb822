package store

// coverageDDL is the coverage table (docs/design.md, "The publication or
// the table changing under the relay"): per slot, what made the
// publication cover the outbox when the relay last verified it (seen, at
// verified_at), a time before the commit of every transaction after the
// slot's confirmed position (safe_at), and the stretch the stream may not
// have carried, while it is not relayed from the table: rows committed
// after gap_from, up to gap_to (NULL while the outbox is not published),
// the WAL insert position when the coverage was seen back being gap_to_lsn.
// Tables made before it are created by cdc init; without it the relay
// keeps the same in memory. internal/coverage reads and writes its rows
// (coverage.Row).
const coverageDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot        text        PRIMARY KEY,
    seen        text        NOT NULL,
    verified_at timestamptz NOT NULL,
    safe_at     timestamptz,
    gap_from    timestamptz,
    gap_to      timestamptz,
    gap_to_lsn  pg_lsn,
    updated_at  timestamptz NOT NULL DEFAULT now()
)`
