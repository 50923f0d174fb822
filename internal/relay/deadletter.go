package relay

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/decoder"
)

const deadLetterDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot       text        NOT NULL,
    lsn        pg_lsn      NOT NULL,
    commit_lsn pg_lsn      NOT NULL,
    message_id text,
    error      text        NOT NULL,
    row_data   jsonb       NOT NULL,
    parked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot, lsn)
)`

// deadLetter parks rows that cannot be mapped (relay.on_invalid:
// dead_letter). A row is parked synchronously, before the pipeline goes on:
// its transaction can only be confirmed once the row is in the table, so a
// crash re-decodes and parks it again (the primary key makes that a no-op).
//
// Used by the pipeline goroutine only.
type deadLetter struct {
	url   string
	table string // quoted
	slot  string
	conn  *pgx.Conn
}

func (d *deadLetter) ensure(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf(deadLetterDDL, d.table)); err != nil {
		return fmt.Errorf("creating dead-letter table %s (postgres.dead_letter_table): %w", d.table, err)
	}
	return nil
}

func (d *deadLetter) park(ctx context.Context, e *decoder.Error) error {
	if d.conn == nil {
		c, err := pgx.Connect(ctx, d.url)
		if err != nil {
			return fmt.Errorf("dead-letter: connecting: %w", err)
		}
		d.conn = c
	}
	row, err := json.Marshal(e.Row)
	if err != nil {
		return err
	}
	var id *string
	if e.ID != "" {
		id = &e.ID
	}
	_, err = d.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, lsn, commit_lsn, message_id, error, row_data)
		VALUES ($1, $2::pg_lsn, $3::pg_lsn, $4, $5, $6) ON CONFLICT (slot, lsn) DO NOTHING`, d.table),
		d.slot, e.LSN.String(), e.CommitLSN.String(), id, e.Err.Error(), row)
	if err != nil {
		d.conn.Close(context.Background())
		d.conn = nil
		return fmt.Errorf("dead-letter: parking %v: %w", e, err)
	}
	return nil
}

func (d *deadLetter) close() {
	if d.conn != nil {
		d.conn.Close(context.Background())
	}
}
