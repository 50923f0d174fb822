package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The adopt table (postgres.adopt_table) binds adopt messages to the
// command that wrote them. `cdc init --adopt` and `cdc recover` hand rows
// to a new slot as transactional logical messages with the slot's adopt
// prefix (decoder.AdoptPrefix); any role may call pg_logical_emit_message
// with that prefix, so the relay takes such a message for a row only when
// its transaction is one these commands recorded here, in that same
// transaction (docs/security.md, "Adopted rows"). Only the table's owner
// and the roles it grants INSERT to (none in sql/roles.sql) can add one.

const adoptDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot       text        NOT NULL,
    xid        xid8        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot, xid)
)`

// EnsureAdoptTable creates the adopt table when it is missing (cdc
// recover, on an outbox cdc init set up before the table), as Setup does.
func EnsureAdoptTable(ctx context.Context, conn *pgx.Conn, t Tables) error {
	_, err := ensure(ctx, conn, t.Adopt, adoptDDL, "postgres.adopt_table")
	return err
}

// RecordAdopt records tx's transaction as the one whose adopt messages
// t.Slot's relay reads as rows, and forgets the slot's earlier ones (they
// belonged to an earlier slot of that name).
func RecordAdopt(ctx context.Context, tx pgx.Tx, t Tables) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE slot = $1", t.Adopt), t.Slot); err != nil {
		return fmt.Errorf("postgres.adopt_table: %w", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (slot, xid) VALUES ($1, pg_current_xact_id())", t.Adopt), t.Slot); err != nil {
		return fmt.Errorf("postgres.adopt_table: recording the transaction in %s: %w", t.AdoptName, err)
	}
	return nil
}

// ErrNoAdoptTable is returned by LoadAdopted when the adopt table does not
// exist (a walpost before it, and cdc init not run since).
var ErrNoAdoptTable = errors.New("store: no adopt table")

// LoadAdopted returns the transactions whose adopt messages t.Slot's
// relay reads as rows, by their 32-bit xid as pgoutput's Begin carries
// it; ErrNoAdoptTable when the table does not exist.
func LoadAdopted(ctx context.Context, conn *pgx.Conn, t Tables) ([]uint32, error) {
	rows, _ := conn.Query(ctx, fmt.Sprintf("SELECT (xid::text::numeric %% 4294967296)::bigint FROM %s WHERE slot = $1", t.Adopt), t.Slot)
	xids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uint32, error) { // CollectRows returns the query's error too
		var x int64
		err := r.Scan(&x)
		return uint32(x), err
	})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			return nil, ErrNoAdoptTable
		}
		return nil, fmt.Errorf("postgres.adopt_table: reading %s: %w", t.AdoptName, err)
	}
	return xids, nil
}
