package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Parked is one row of the dead-letter table: a row that could not be
// mapped (Sink "", parked for every sink) or a message Sink refused.
// `cdc dead-letter` lists, shows, resends and drops them (docs/operations.md,
// "Replay and parked messages").
type Parked struct {
	// ID is the message id; "" when the row's id could not be read.
	ID             string
	LSN, CommitLSN pglogrepl.LSN
	Seq            uint32 // the row's ordinal at LSN (message.Message.Seq)
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
	// HoldKey is the ordering key the row holds, or is held under
	// (relay.on_invalid or on_refused: hold_key); "" when none.
	HoldKey string
	// HeldBehind is set when the row was parked only because its key was
	// held: the position of the row it waited for then. RowData is then
	// the message as the file sink writes it, whatever Sink is.
	HeldBehind string
}

// Held reports whether the row belongs to a held key and is not resent:
// the key stays held while such a row is left (hold.go).
func (p *Parked) Held() bool { return p.HoldKey != "" && p.ResentAt.IsZero() }

// IsLine reports whether RowData is a message as the file sink writes it
// (a refused or held message) rather than a row's mapped columns.
func (p *Parked) IsLine() bool { return p.Sink != "" || p.HeldBehind != "" }

// Name is how commands name the parked row: its message id, or its
// position when it has none. ParkedFilter.IDs takes either.
func (p *Parked) Name() string {
	if p.ID != "" {
		return p.ID
	}
	return p.At()
}

// At is the row's position as commands print and take it: its LSN
// ("0/16B3748"), followed by ":" and its Seq when that is not 0
// ("0/16B3748:2", the third row of one multi-insert WAL record).
func (p *Parked) At() string { return FormatAt(p.LSN, p.Seq) }

// FormatAt writes a row's position as Parked.At does.
func FormatAt(lsn pglogrepl.LSN, seq uint32) string {
	if seq == 0 {
		return lsn.String()
	}
	return lsn.String() + ":" + strconv.FormatUint(uint64(seq), 10)
}

// ParseAt reads a position written by FormatAt; ok is false when s is
// not one. seq is -1 for a bare LSN, which names every row at it.
func ParseAt(s string) (lsn pglogrepl.LSN, seq int64, ok bool) {
	at, n, hasSeq := strings.Cut(s, ":")
	lsn, ok = parseLSN(at)
	if !ok {
		return 0, 0, false
	}
	if !hasSeq {
		return lsn, -1, true
	}
	v, err := strconv.ParseUint(n, 10, 32)
	if err != nil {
		return 0, 0, false
	}
	return lsn, int64(v), true
}

// parseLSN reads an LSN as PostgreSQL writes it: two hexadecimal numbers
// of 1 to 8 digits, separated by "/". pglogrepl.ParseLSN also takes
// trailing text and wraps a number over 32 bits ("0/100000000" reads as
// 1/0), which would make a mistyped position name another one.
func parseLSN(s string) (pglogrepl.LSN, bool) {
	hi, lo, found := strings.Cut(s, "/")
	if !found {
		return 0, false
	}
	var v uint64
	for _, h := range []string{hi, lo} {
		if len(h) == 0 || len(h) > 8 {
			return 0, false
		}
		n, err := strconv.ParseUint(h, 16, 32)
		if err != nil {
			return 0, false
		}
		v = v<<32 | n
	}
	return pglogrepl.LSN(v), true
}

// ParkedFilter selects parked rows of the slot.
type ParkedFilter struct {
	// IDs selects the rows whose message id, or position (an LSN,
	// 0/16B3748, for every row at it; 0/16B3748:2 for one, Parked.At), is
	// one of them; none: every row.
	IDs []string
	// Sink, when set, selects the messages that sink refused.
	Sink string
	// Unsent leaves out the rows resent already.
	Unsent bool
}

// CheckParkedTable verifies that the dead-letter table exists and has the
// current layout, with errors that say to run `cdc init`. Read-only: it
// never upgrades a table (only cdc init and cdc run do, Check), so that
// reading the parked messages (cdc dead-letter list, the console's GET)
// changes nothing.
func CheckParkedTable(ctx context.Context, conn *pgx.Conn, t Tables) error {
	ok, err := TableExists(ctx, conn, t.DeadLetter)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: postgres.dead_letter_table: table %s does not exist (nothing was ever parked); run 'cdc init' to create it", ErrMissing, t.DeadLetterName)
	}
	todo, err := pending(ctx, conn, t.DeadLetter, true)
	if err != nil || len(todo) == 0 {
		return err
	}
	return fmt.Errorf("%w: postgres.dead_letter_table: table %s was made by an older walpost and lacks %s; run 'cdc init' with this config as the table's owner "+
		"to add them (existing rows are kept; nothing was changed)", ErrUpgrade, t.DeadLetterName, strings.Join(todo, ", "))
}

// ListParked returns the slot's parked rows that f selects, in LSN order
// (then sink).
func ListParked(ctx context.Context, conn *pgx.Conn, t Tables, f ParkedFilter) ([]Parked, error) {
	where, args := parkedWhere(t, f)
	return queryParked(ctx, conn, t, fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY lsn, seq, sink`, parkedColumns, t.DeadLetter, where), args...)
}

// parkedColumns are what queryParked scans, in its order.
const parkedColumns = `coalesce(message_id, ''), lsn::text, seq, commit_lsn::text, sink, error, row_data::text, parked_at, resent_at,
	coalesce(hold_key, ''), coalesce(held_behind, '')`

// queryParked runs query, which selects parkedColumns, and scans its rows.
func queryParked(ctx context.Context, conn *pgx.Conn, t Tables, query string, args ...any) ([]Parked, error) {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", t.DeadLetterName, err)
	}
	defer rows.Close()
	var out []Parked
	for rows.Next() {
		var p Parked
		var lsn, commit, data string
		var seq int64
		var resent *time.Time
		if err := rows.Scan(&p.ID, &lsn, &seq, &commit, &p.Sink, &p.Error, &data, &p.ParkedAt, &resent, &p.HoldKey, &p.HeldBehind); err != nil {
			return nil, err
		}
		p.Seq = uint32(seq)
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
		var seqs []int64
		for _, id := range f.IDs {
			if lsn, seq, ok := ParseAt(id); ok {
				lsns, seqs = append(lsns, lsn.String()), append(seqs, seq)
			} else {
				ids = append(ids, id)
			}
		}
		args = append(args, ids, lsns, seqs)
		conds = append(conds, fmt.Sprintf(`(message_id = ANY($%d) OR EXISTS (SELECT 1 FROM unnest($%d::text[], $%d::bigint[]) AS a(l, q)
			WHERE lsn = a.l::pg_lsn AND (a.q < 0 OR seq = a.q)))`, len(args)-2, len(args)-1, len(args)))
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
	_, err := conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET resent_at = now() WHERE slot = $1 AND lsn = $2::pg_lsn AND seq = $3 AND sink = $4", t.DeadLetter),
		t.Slot, p.LSN.String(), int64(p.Seq), p.Sink)
	if err != nil {
		return fmt.Errorf("marking %s (at %s) resent in %s: %w", p.Name(), p.At(), t.DeadLetterName, err)
	}
	return nil
}

// DropParked deletes p from the dead-letter table. It reports whether
// the row was there still.
func DropParked(ctx context.Context, conn *pgx.Conn, t Tables, p *Parked) (bool, error) {
	tag, err := conn.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE slot = $1 AND lsn = $2::pg_lsn AND seq = $3 AND sink = $4", t.DeadLetter),
		t.Slot, p.LSN.String(), int64(p.Seq), p.Sink)
	if err != nil {
		return false, fmt.Errorf("dropping %s (at %s) from %s: %w", p.Name(), p.At(), t.DeadLetterName, err)
	}
	return tag.RowsAffected() == 1, nil
}
