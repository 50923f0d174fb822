package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The marks table of relay.retention (docs/design.md, "Retention"): one
// row per (time, WAL position) mark a relay took for its slot. A mark
// says: every transaction that committed before taken_at committed
// before lsn.
const marksDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot     text        NOT NULL,
    lsn      pg_lsn      NOT NULL,
    taken_at timestamptz NOT NULL,
    PRIMARY KEY (slot, lsn)
)`

// MarksField is the setting that names the marks table.
const MarksField = "relay.retention.marks_table"

// SetupMarks creates the marks table (quoted name) when it is missing
// (`cdc init` with relay.retention).
func SetupMarks(ctx context.Context, conn *pgx.Conn, table string) (Result, error) {
	exists, err := TableExists(ctx, conn, table)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", MarksField, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, fmt.Sprintf(marksDDL, table)); err != nil {
			if !createdMeanwhile(ctx, conn, table, err) {
				return Result{}, fmt.Errorf("%s: creating %s: %w", MarksField, table, err)
			}
			return Result{Table: table}, nil
		}
	}
	return Result{Table: table, Created: !exists}, nil
}

// CheckMarks verifies that the marks table exists and that the current
// role may take, read and prune marks: SELECT, INSERT and DELETE. name is
// the table as configured, for messages.
func CheckMarks(ctx context.Context, conn *pgx.Conn, table, name string) error {
	return checkTable(ctx, conn, table, name, MarksField, []string{"SELECT", "INSERT", "DELETE"}, true, "")
}

// QuoteTable returns a configured schema.table name quoted for SQL.
func QuoteTable(name string) string { return quote(name) }
