package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// ErrAdoptNeedsSentAt is returned by Setup with Adopt when columns.sent_at
// is not mapped: it is what tells the rows a dispatcher has not sent.
var ErrAdoptNeedsSentAt = errors.New("admin: --adopt needs columns.sent_at")

// ErrAdoptSlotExists is returned by Setup with Adopt when the slot exists
// already: rows committed before it were either adopted then or are
// streamed by it, and adopting them now would be guessing.
var ErrAdoptSlotExists = errors.New("admin: --adopt needs a new slot")

// ErrAdoptNeedsPG14 is returned by Setup with Adopt on a server older
// than PostgreSQL 14.
var ErrAdoptNeedsPG14 = errors.New("admin: --adopt needs PostgreSQL 14")

// ErrAdoptTableLess is returned by Setup with Adopt for a table-less
// outbox (postgres.source: messages): it has no rows to adopt.
var ErrAdoptTableLess = errors.New("admin: --adopt needs an outbox table")

// ErrAdoptFailover: cdc init --adopt creates the slot on a replication
// connection (CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT), without failover.
var ErrAdoptFailover = errors.New("admin: cdc init --adopt does not create failover slots")

// ErrAdoptStandby: cdc init --adopt with postgres.primary_url; the
// slot's exported snapshot, on a standby, cannot be used to write the
// adopt messages on the primary.
var ErrAdoptStandby = errors.New("admin: cdc init --adopt does not create a slot on a standby")

// IsSetupConfigError reports whether err, returned by Setup, is a
// configuration error that Setup found before it did anything (`cdc init`
// exits 2 for it).
func IsSetupConfigError(err error) bool {
	return errors.Is(err, ErrAdoptNeedsSentAt) || errors.Is(err, ErrAdoptTableLess) || errors.Is(err, ErrAdoptFailover) || errors.Is(err, ErrAdoptStandby)
}

// checkAdoptConfig refuses, before Setup connects, a configuration that
// --adopt cannot work with.
func checkAdoptConfig(cfg *config.Config) error {
	switch {
	case cfg.Postgres.TableLess():
		return fmt.Errorf("%w: postgres.source: messages has no table whose unsent rows --adopt could hand to the stream; run cdc init without --adopt", ErrAdoptTableLess)
	case !cfg.Outbox().Columns.Has(layout.SentAt):
		return fmt.Errorf("%w: map the column a dispatcher set once it sent a row (e.g. columns: {sent_at: ProcessedOnUtc}): rows where it is NULL are adopted", ErrAdoptNeedsSentAt)
	case cfg.Postgres.FromStandby():
		return fmt.Errorf("%w: the rows are handed to the stream in the snapshot the new slot exports, and a standby's snapshot cannot be used on the primary, where they are written; "+
			"run cdc init --adopt with the slot on the primary (without postgres.primary_url), or stop the writers and run cdc init then cdc replay", ErrAdoptStandby)
	case cfg.Postgres.FailoverSlot:
		return fmt.Errorf("%w: run cdc init --adopt with postgres.failover_slot: false, then, with no relay running, "+
			"ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection, and set postgres.failover_slot: true again", ErrAdoptFailover, cfg.Postgres.Slot)
	}
	return nil
}

// checkAdoptServer refuses, before Setup creates anything, a server or a
// slot that --adopt cannot work with: a server before PostgreSQL 14, an
// existing slot.
func checkAdoptServer(ctx context.Context, conn *pgx.Conn, cfg *config.Config) error {
	// Adopted rows travel as logical messages, which pgoutput sends from
	// PostgreSQL 14 on: on an older server they would be lost.
	if ok, v, err := replication.SendsMessages(ctx, conn); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: --adopt needs PostgreSQL 14 or later (the server is %d.%d): it hands the rows to the stream as logical messages, which pgoutput sends from 14 on",
			ErrAdoptNeedsPG14, v/10000, v%10000)
	}
	info, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot)
	if err != nil {
		return err
	}
	if info.Exists {
		return fmt.Errorf("%w: slot %q exists (confirmed %s); rows committed before it were not adopted then. If no relay has run on it yet, drop it (SELECT pg_drop_replication_slot('%s')) and run cdc init --adopt again; otherwise run cdc init without --adopt",
			ErrAdoptSlotExists, cfg.Postgres.Slot, info.ConfirmedFlush, cfg.Postgres.Slot)
	}
	return nil
}

// createSlotAdopting creates the slot and, in one transaction that sees
// the database exactly as the slot starts (the snapshot the slot exports),
// emits every row whose sent-at column is NULL as a transactional logical
// message that the slot's relay reads as that row (decoder.AdoptPrefix):
// rows committed before the slot and not sent are relayed once, rows
// committed after it are streamed as usual, and no row is both. It
// returns how many rows it adopted.
func createSlotAdopting(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (int64, error) {
	// checkAdoptConfig and checkAdoptServer ran before Setup created
	// anything.
	t := cfg.Outbox()
	return createSlotEmitting(ctx, conn, cfg, selection{
		where: t.Columns.Column(layout.SentAt) + " IS NULL",
		what:  "whose " + t.Columns[layout.SentAt] + " is NULL",
	})
}

// selection is the rows of the outbox table that a new slot's first
// transaction hands to the stream: `cdc init --adopt` the unsent ones,
// `cdc recover` those not proven delivered (recover.go).
type selection struct {
	where string // an SQL condition on the table; its parameters are $2, $3, …
	args  []any
	what  string // the rows in words, for reports ("whose sent_at is NULL")
	since string // for rows selected by time, the bound (RFC 3339), for --since
}

// createSlotEmitting creates the slot with an exported snapshot and, in a
// transaction on that snapshot, emits an adopt message for each row of
// sel (see createSlotAdopting). If emitting fails, the slot is dropped
// again. It returns how many rows it emitted.
func createSlotEmitting(ctx context.Context, conn *pgx.Conn, cfg *config.Config, sel selection) (int64, error) {
	// Where the emitting transaction records itself (emitRows), before
	// the slot's snapshot.
	if err := store.EnsureAdoptTable(ctx, conn, store.TablesOf(cfg)); err != nil {
		return 0, err
	}
	rc, err := pgconnect.ReplicationConfig(cfg.Postgres.URL)
	if err != nil {
		return 0, err
	}
	repl, err := pgconn.ConnectConfig(ctx, rc)
	if err != nil {
		return 0, fmt.Errorf("connecting for replication to %s: %w", pgconnect.Describe(rc), err)
	}
	// The exported snapshot lives as long as this connection runs no
	// other command: close it only once the emitting transaction is done.
	defer repl.Close(context.Background())
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, cfg.Postgres.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return 0, fmt.Errorf("creating replication slot %q: %w", cfg.Postgres.Slot, err)
	}
	n, err := emitRows(ctx, conn, cfg, slot.SnapshotName, sel)
	if err != nil {
		_, derr := conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", cfg.Postgres.Slot)
		if derr != nil {
			return 0, fmt.Errorf("%w (and dropping the slot again failed: %v; drop it before retrying)", err, derr)
		}
		return 0, fmt.Errorf("%w (the slot was dropped again: nothing changed)", err)
	}
	return n, nil
}

// createSlotOnStandbyEmitting creates the slot on the standby src
// (replication.EnsureSlotOnStandby) and then, on the primary conn, emits
// an adopt message for each row of sel in a snapshot taken after the
// slot's start: a standby's exported snapshot cannot be used on the
// primary, where the messages must be written. Every row committed
// before the slot's start is in that snapshot; a row committed between
// the slot's start and the snapshot is both streamed and handed over
// (a duplicate, later than its first copy: inboxes drop it by id). If
// emitting fails, the slot is dropped again.
func createSlotOnStandbyEmitting(ctx context.Context, src, conn *pgx.Conn, cfg *config.Config, sel selection) (int64, error) {
	if err := store.EnsureAdoptTable(ctx, conn, store.TablesOf(cfg)); err != nil {
		return 0, err
	}
	if _, _, err := replication.EnsureSlotOnStandby(ctx, src, conn, cfg.Postgres.Slot); err != nil {
		return 0, fmt.Errorf("creating replication slot %q on the standby: %w", cfg.Postgres.Slot, err)
	}
	n, err := emitRows(ctx, conn, cfg, "", sel)
	if err != nil {
		_, derr := src.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", cfg.Postgres.Slot)
		if derr != nil {
			return 0, fmt.Errorf("%w (and dropping the slot on the standby again failed: %v; drop it before retrying)", err, derr)
		}
		return 0, fmt.Errorf("%w (the slot was dropped again: nothing changed)", err)
	}
	return n, nil
}

// emitRows emits, in the snapshot (a new one when ""), an adopt message
// per row of sel, in the order of the time column (when mapped) and the
// id.
func emitRows(ctx context.Context, conn *pgx.Conn, cfg *config.Config, snapshot string, sel selection) (int64, error) {
	t := cfg.Outbox()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	stmts := []string{"SET LOCAL datestyle = 'ISO, MDY'", "SET LOCAL timezone = 'UTC'", "SET LOCAL bytea_output = 'hex'"}
	if snapshot != "" {
		stmts = append([]string{"SET TRANSACTION SNAPSHOT '" + strings.ReplaceAll(snapshot, "'", "''") + "'"}, stmts...)
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return 0, fmt.Errorf("adopting: %s: %w", stmt, err)
		}
	}
	rows, err := replay.ReadRows(ctx, tx, t)
	if err != nil {
		return 0, fmt.Errorf("adopting: %w", err)
	}
	// The relay takes adopt messages for rows only from a transaction
	// recorded so (docs/security.md, "Adopted rows").
	if err := store.RecordAdopt(ctx, tx, store.TablesOf(cfg)); err != nil {
		return 0, err
	}
	// The outer SELECT evaluates pg_logical_emit_message over the sorted
	// rows, in their order.
	q := fmt.Sprintf(`SELECT count(pg_logical_emit_message(true, $1, %s))
		FROM (SELECT * FROM %s WHERE %s ORDER BY %s) selected`,
		rows.Adopted(), t.Qualified(), sel.where, rows.OrderBy())
	var n int64
	if err := tx.QueryRow(ctx, q, append([]any{decoder.AdoptPrefix(cfg.Postgres.Slot)}, sel.args...)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("handing the rows of %s %s to the stream: %w", t, sel.what, err)
	}
	return n, tx.Commit(ctx)
}
