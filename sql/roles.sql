-- The least privileges of a walpost relay role: what `cdc run` (and
-- `cdc status`, `cdc skip`) need, nothing more. `cdc init` runs once as a
-- role that may create objects (the outbox table's owner, with REPLICATION:
-- it creates the publication, the slot, and the two state tables below);
-- the relay then runs as this role and creates nothing.
--
-- Run as a superuser (or a role with CREATEROLE), after `cdc init`. The
-- names are walpost's defaults: change walpost_relay, the password and the
-- table names to yours (postgres.table, postgres.progress_table,
-- postgres.dead_letter_table). A password from this file belongs in a
-- secret store, not in cdc.yaml: reference it there as ${PGPASSWORD} or
-- similar.

-- REPLICATION: START_REPLICATION on the slot. LOGIN: connect.
CREATE ROLE walpost_relay WITH LOGIN REPLICATION PASSWORD 'change-me';

-- The schema holding the tables below.
GRANT USAGE ON SCHEMA public TO walpost_relay;

-- The outbox: the startup check reads its columns; logical replication
-- itself needs no table privilege.
GRANT SELECT ON public.outbox TO walpost_relay;

-- Only with columns.sent_at (a dispatcher's "processed on" column that
-- the relay fills in once every sink acknowledged a row), e.g.:
--   GRANT UPDATE ("ProcessedOnUtc") ON public."OutboxMessages" TO walpost_relay;

-- Only with relay.retention (the relay deletes delivered rows: docs/configuration.md,
-- "Keeping the outbox small"): DELETE on the outbox, and its marks table
-- (created by `cdc init`, relay.retention.marks_table):
--   GRANT DELETE ON public.outbox TO walpost_relay;
--   GRANT SELECT, INSERT, DELETE ON public.walpost_retention_marks TO walpost_relay;

-- Per-sink progress: read at takeover, written as sinks acknowledge.
GRANT SELECT, INSERT, UPDATE ON public.walpost_sink_progress TO walpost_relay;

-- Adopt records (postgres.adopt_table, created by `cdc init`): the
-- transactions of `cdc init --adopt` and `cdc recover`, the only ones whose
-- adopt messages the relay takes for rows. Read only: whoever may insert
-- here may hand the relay rows.
GRANT SELECT ON public.walpost_adopt TO walpost_relay;

-- Dead letters: rows parked by relay.on_invalid / relay.on_refused:
-- dead_letter or by `cdc skip`, read back to go past a skipped row.
GRANT SELECT, INSERT ON public.walpost_dead_letter TO walpost_relay;

-- What publishes the outbox, and stretches the stream may not have
-- carried (postgres.coverage_table; without these grants the relay keeps
-- it in memory only, and says so).
GRANT SELECT, INSERT, UPDATE ON public.walpost_coverage TO walpost_relay;

-- pg_hba.conf must let the role connect to the database (a logical
-- replication connection matches the database's name, not the
-- "replication" keyword), e.g.:
--   hostssl app walpost_relay 10.0.0.0/8 scram-sha-256

-- Decoding from a standby (postgres.primary_url, PostgreSQL 16+): run
-- these grants on the primary (the standby replicates them). The role
-- that runs `cdc init` and `cdc recover`, when not a superuser, may be
-- allowed to make the standby's new slot reach its starting point at once
-- (docs/operations.md, "Decoding from a standby"):
--   GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO walpost_admin;
