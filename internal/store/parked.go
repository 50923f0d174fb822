package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Parked is one row of the dead-letter table: a row that could not be
// mapped (Sink "", parked for every sink) or a message Sink refused.
// `cdc dead-letter` lists, shows, resends and drops them (README.md,
// "Replay and parked messages").
type Parked struct {
	// ID is the message id; "" when the row's id could not be read.
	ID             string
	LSN, CommitLSN pglogrepl.LSN
	Sink           string
	Error          string
	// RowData is the message as the file sink writes it (a refused
	// message), or the row's mapped columns by name (decoder.RowValues;
	// a row that could not be mapped), as jsonb gives it back.
	RowData  json.RawMessage
	ParkedAt time.Time
	// ResentAt is when `cdc dead-letter resend` last delivered it; zero
	// when never.
	ResentAt time.Time
}

// Name is how commands name the parked row: its message id, or its LSN
// when it has none. ParkedFilter.IDs takes either.
func (p *Parked) Name() string {
	if p.ID != "" {
		return p.ID
	}
	return p.LSN.String()
}

// ErrNoResentAt is returned when the dead-letter table predates resent_at.
var ErrNoResentAt = errors.New("store: dead-letter table without resent_at")

// ParkedFilter selects parked rows of the slot.
type ParkedFilter struct {
	// IDs selects the rows whose message id, or LSN (0/16B3748), is one of
	// them; none: every row.
	IDs []string
	// Sink, when set, selects the messages that sink refused.
	Sink string
	// Unsent leaves out the rows resent already.
	Unsent bool
}

// CheckParkedTable verifies that the dead-letter table exists and has
// resent_at, with errors that say to run `cdc init`.
func CheckParkedTable(ctx context.Context, conn *pgx.Conn, t Tables) error {
	ok, err := TableExists(ctx, conn, t.DeadLetter)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: postgres.dead_letter_table: table %s does not exist (nothing was ever parked); run 'cdc init' to create it", ErrMissing, t.DeadLetterName)
	}
	has, err := hasResentAt(ctx, conn, t.DeadLetter)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("%w: table %s has no resent_at column (it was created by an older walpost); run 'cdc init' (as the table's owner) to add it", ErrNoResentAt, t.DeadLetterName)
	}
	return nil
}

func hasResentAt(ctx context.Context, conn *pgx.Conn, table string) (bool, error) {
	var has bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'resent_at' AND NOT attisdropped)", table).Scan(&has)
	if err != nil {
		return false, fmt.Errorf("looking up %s.resent_at: %w", table, err)
	}
	return has, nil
}

// addResentAt adds resent_at to a dead-letter table made before it; it
// alters nothing (and needs no ownership) when the column is there.
func addResentAt(ctx context.Context, conn *pgx.Conn, table string) error {
	if has, err := hasResentAt(ctx, conn, table); err != nil || has {
		return err
	}
	_, err := conn.Exec(ctx, fmt.Sprintf(resentAtDDL, table))
	return err
}

// ListParked returns the slot's parked rows that f selects, in LSN order
// (then sink).
func ListParked(ctx context.Context, conn *pgx.Conn, t Tables, f ParkedFilter) ([]Parked, error) {
	where, args := parkedWhere(t, f)
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT coalesce(message_id, ''), lsn::text, commit_lsn::text, sink, error, row_data::text, parked_at, resent_at
		FROM %s WHERE %s ORDER BY lsn, sink`, t.DeadLetter, where), args...)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", t.DeadLetterName, err)
	}
	defer rows.Close()
	var out []Parked
	for rows.Next() {
		var p Parked
		var lsn, commit, data string
		var resent *time.Time
		if err := rows.Scan(&p.ID, &lsn, &commit, &p.Sink, &p.Error, &data, &p.ParkedAt, &resent); err != nil {
			return nil, err
		}
		p.LSN, _ = pglogrepl.ParseLSN(lsn)
		p.CommitLSN, _ = pglogrepl.ParseLSN(commit)
		p.RowData = json.RawMessage(data)
		if resent != nil {
			p.ResentAt = *resent
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// parkedWhere is f as a WHERE clause and its arguments.
func parkedWhere(t Tables, f ParkedFilter) (string, []any) {
	conds, args := []string{"slot = $1"}, []any{t.Slot}
	if len(f.IDs) > 0 {
		var ids, lsns []string
		for _, id := range f.IDs {
			if lsn, err := pglogrepl.ParseLSN(id); err == nil && strings.Contains(id, "/") {
				lsns = append(lsns, lsn.String())
			} else {
				ids = append(ids, id)
			}
		}
		args = append(args, ids, lsns)
		conds = append(conds, fmt.Sprintf("(message_id = ANY($%d) OR lsn = ANY($%d::text[]::pg_lsn[]))", len(args)-1, len(args)))
	}
	if f.Sink != "" {
		args = append(args, f.Sink)
		conds = append(conds, fmt.Sprintf("sink = $%d", len(args)))
	}
	if f.Unsent {
		conds = append(conds, "resent_at IS NULL")
	}
	return strings.Join(conds, " AND "), args
}

// MarkResent sets p's resent_at to now.
func MarkResent(ctx context.Context, conn *pgx.Conn, t Tables, p *Parked) error {
	_, err := conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET resent_at = now() WHERE slot = $1 AND lsn = $2::pg_lsn AND sink = $3", t.DeadLetter),
		t.Slot, p.LSN.String(), p.Sink)
	if err != nil {
		return fmt.Errorf("marking %s (lsn %s) resent in %s: %w", p.Name(), p.LSN, t.DeadLetterName, err)
	}
	return nil
}

// DropParked deletes p from the dead-letter table. It reports whether
// the row was there still.
func DropParked(ctx context.Context, conn *pgx.Conn, t Tables, p *Parked) (bool, error) {
	tag, err := conn.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE slot = $1 AND lsn = $2::pg_lsn AND sink = $3", t.DeadLetter),
		t.Slot, p.LSN.String(), p.Sink)
	if err != nil {
		return false, fmt.Errorf("dropping %s (lsn %s) from %s: %w", p.Name(), p.LSN, t.DeadLetterName, err)
	}
	return tag.RowsAffected() == 1, nil
}
