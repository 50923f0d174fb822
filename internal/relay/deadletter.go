package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish"
)

// deadLetterDDL is the dead-letter table. sink is ” for a row that
// cannot be mapped (parked for every sink), or the name of the sink that
// refused the message; row_data is then the message as the file sink
// writes it (id, type, key, payload, headers, lsn, ...).
const deadLetterDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot       text        NOT NULL,
    lsn        pg_lsn      NOT NULL,
    sink       text        NOT NULL DEFAULT '',
    commit_lsn pg_lsn      NOT NULL,
    message_id text,
    error      text        NOT NULL,
    row_data   jsonb       NOT NULL,
    parked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot, lsn, sink)
)`

// deadLetter parks rows that cannot be mapped (relay.on_invalid:
// dead_letter) and messages a sink refuses (relay.on_refused:
// dead_letter). A row or message is parked synchronously, before the
// relay goes on: its transaction can only be confirmed once it is in the
// table, so a crash decodes or refuses it again and parks it again (the
// primary key makes that a no-op).
//
// A deadLetter is used by one goroutine: the pipeline's, or one sink
// runner's; each has its own.
type deadLetter struct {
	url   string
	table string // quoted
	slot  string
	conn  *pgx.Conn
}

// ensure creates the table, and brings one made by a walpost without the
// sink column up to date (the column added with ” for the rows in it,
// and the primary key extended to it).
func (d *deadLetter) ensure(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf(deadLetterDDL, d.table)); err != nil {
		return fmt.Errorf("creating dead-letter table %s (postgres.dead_letter_table): %w", d.table, err)
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if has, err := hasSinkColumn(ctx, tx, d.table); err != nil || has {
			return err
		}
		// Another instance may be doing the same: take the table, then
		// look again.
		if _, err := tx.Exec(ctx, "LOCK TABLE "+d.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		if has, err := hasSinkColumn(ctx, tx, d.table); err != nil || has {
			return err
		}
		var pkey string
		if err := tx.QueryRow(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, d.table).Scan(&pkey); err != nil {
			return fmt.Errorf("finding its primary key: %w", err)
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN sink text NOT NULL DEFAULT '', DROP CONSTRAINT %s, ADD PRIMARY KEY (slot, lsn, sink)`,
			d.table, pgx.Identifier{pkey}.Sanitize()))
		return err
	})
	if err != nil {
		return fmt.Errorf("adding the sink column to dead-letter table %s (postgres.dead_letter_table): %w", d.table, err)
	}
	return nil
}

// hasSinkColumn reports whether the dead-letter table (quoted) has the
// sink column that walpost versions before relay.on_refused lacked.
func hasSinkColumn(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) (bool, error) {
	var has bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'sink' AND NOT attisdropped)`,
		table).Scan(&has)
	return has, err
}

// park parks a row that cannot be mapped, for every sink.
func (d *deadLetter) park(ctx context.Context, e *decoder.Error) error {
	row, err := json.Marshal(e.Row)
	if err != nil {
		return err
	}
	var id *string
	if e.ID != "" {
		id = &e.ID
	}
	if err := d.insert(ctx, e.LSN.String(), "", e.CommitLSN.String(), id, e.Err.Error(), row); err != nil {
		return fmt.Errorf("dead-letter: parking %v: %w", e, err)
	}
	return nil
}

// parkRefused parks a message that sink refused for good with cause.
func (d *deadLetter) parkRefused(ctx context.Context, sink string, m *decoder.Message, cause error) error {
	row := bytes.TrimSuffix(publish.AppendJSONLine(nil, m), []byte("\n"))
	if err := d.insert(ctx, m.LSN.String(), sink, m.CommitLSN.String(), &m.ID, cause.Error(), row); err != nil {
		return fmt.Errorf("dead-letter: parking message %s (lsn %s) refused by sink %s: %w", m.ID, m.LSN, sink, err)
	}
	return nil
}

func (d *deadLetter) insert(ctx context.Context, lsn, sink, commitLSN string, id *string, errText string, row []byte) error {
	if d.conn == nil {
		c, err := pgx.Connect(ctx, d.url)
		if err != nil {
			return fmt.Errorf("connecting: %w", err)
		}
		d.conn = c
	}
	_, err := d.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, lsn, sink, commit_lsn, message_id, error, row_data)
		VALUES ($1, $2::pg_lsn, $3, $4::pg_lsn, $5, $6, $7) ON CONFLICT (slot, lsn, sink) DO NOTHING`, d.table),
		d.slot, lsn, sink, commitLSN, id, errText, row)
	if err != nil {
		d.conn.Close(context.Background())
		d.conn = nil
		return err
	}
	return nil
}

func (d *deadLetter) close() {
	if d.conn != nil {
		d.conn.Close(context.Background())
	}
}

// DeadLetterCounts returns how many messages are parked for the slot, per
// sink ("" for rows that could not be mapped); nil when the dead-letter
// table does not exist.
func DeadLetterCounts(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (map[string]int, error) {
	table := quoteTable(cfg.Postgres.DeadLetterTable)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	hasSink, err := hasSinkColumn(ctx, conn, table)
	if err != nil {
		return nil, err
	}
	sink := "''"
	if hasSink {
		sink = "sink"
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s, count(*) FROM %s WHERE slot = $1 GROUP BY 1", sink, table), cfg.Postgres.Slot)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, err
		}
		counts[s] = n
	}
	return counts, rows.Err()
}
