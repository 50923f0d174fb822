package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/publish"
)

// DeadLetter parks rows that cannot be mapped (relay.on_invalid:
// dead_letter) and messages a sink refuses (relay.on_refused:
// dead_letter). A row or message is parked synchronously, before the
// relay goes on: its transaction can only be confirmed once it is in the
// table, so a crash decodes or refuses it again and parks it again (the
// primary key makes that a no-op).
//
// A DeadLetter is used by one goroutine: the pipeline's, or one sink
// runner's; each has its own. It connects on first use.
type DeadLetter struct {
	url  string
	t    Tables
	conn *pgx.Conn
}

// NewDeadLetter returns a dead-letter writer for t.
func NewDeadLetter(url string, t Tables) *DeadLetter { return &DeadLetter{url: url, t: t} }

// SkippedPrefix starts the error recorded for a row parked by `cdc skip`.
const SkippedPrefix = "parked by cdc skip: "

// Park parks a row that cannot be mapped, for every sink. errText is
// recorded as its error (e.Err's text when empty).
func (d *DeadLetter) Park(ctx context.Context, e *decoder.Error, errText string) error {
	return d.parkRow(ctx, e, errText, nil)
}

// parkRow parks e's row for every sink, holding holdKey when it is set
// (hold.go).
func (d *DeadLetter) parkRow(ctx context.Context, e *decoder.Error, errText string, holdKey *string) error {
	row, err := json.Marshal(e.Row)
	if err != nil {
		return err
	}
	var id *string
	if e.ID != "" {
		id = &e.ID
	}
	if errText == "" {
		errText = e.Err.Error()
	}
	r := parkedRow{lsn: e.LSN.String(), seq: e.Seq, commitLSN: e.CommitLSN.String(), id: id, errText: errText, row: row, holdKey: holdKey}
	if err := d.insert(ctx, nil, r); err != nil {
		return fmt.Errorf("dead-letter: parking %v: %w", e, err)
	}
	return nil
}

// ParkRefused parks a message that sink refused for good with cause.
func (d *DeadLetter) ParkRefused(ctx context.Context, sink string, m *message.Message, cause error) error {
	return d.parkRefused(ctx, sink, m, cause, nil)
}

// parkRefused parks m, refused by sink, holding holdKey when it is set
// (hold.go).
func (d *DeadLetter) parkRefused(ctx context.Context, sink string, m *message.Message, cause error, holdKey *string) error {
	r := parkedRow{lsn: m.LSN.String(), seq: m.Seq, sink: sink, commitLSN: m.CommitLSN.String(), id: &m.ID,
		errText: cause.Error(), row: MessageLine(m), holdKey: holdKey}
	if err := d.insert(ctx, nil, r); err != nil {
		return fmt.Errorf("dead-letter: parking message %s (at %s) refused by sink %s: %w", m.ID, FormatAt(m.LSN, m.Seq), sink, err)
	}
	return nil
}

// MessageLine is m as the file sink writes it, without the newline: the
// row_data of a refused or held message. A message with a deliver_at or
// an expires_at (message.Message.DeliverAt, ExpiresAt) gets them as two
// more fields, "deliver_at" and "expires_at" (RFC 3339, UTC, to the
// nanosecond), which `cdc dead-letter resend` restores
// (replay.MessageOfLine); the file sink's own lines have neither.
func MessageLine(m *message.Message) []byte {
	line := bytes.TrimSuffix(publish.AppendJSONLine(nil, m), []byte("\n"))
	if m.DeliverAt.IsZero() && m.ExpiresAt.IsZero() {
		return line
	}
	line = line[:len(line)-1] // the closing brace
	for _, f := range []struct {
		name string
		at   time.Time
	}{{"deliver_at", m.DeliverAt}, {"expires_at", m.ExpiresAt}} {
		if !f.at.IsZero() {
			line = append(line, `,"`+f.name+`":"`...)
			line = f.at.UTC().AppendFormat(line, time.RFC3339Nano)
			line = append(line, '"')
		}
	}
	return append(line, '}')
}

// Parked reports whether the row at (lsn, seq) is parked for every sink
// (by relay.on_invalid: dead_letter or by `cdc skip`). A missing table
// parks nothing.
func (d *DeadLetter) Parked(ctx context.Context, lsn pglogrepl.LSN, seq uint32) (bool, error) {
	if err := d.connect(ctx); err != nil {
		return false, err
	}
	if ok, err := TableExists(ctx, d.conn, d.t.DeadLetter); err != nil || !ok {
		return false, err
	}
	var parked bool
	err := d.conn.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE slot = $1 AND lsn = $2::pg_lsn AND seq = $3 AND sink = '')", d.t.DeadLetter),
		d.t.Slot, lsn.String(), int64(seq)).Scan(&parked)
	if err != nil {
		d.reset()
		return false, fmt.Errorf("dead-letter: looking up %s in %s: %w", FormatAt(lsn, seq), d.t.DeadLetter, err)
	}
	return parked, nil
}

func (d *DeadLetter) connect(ctx context.Context) error {
	if d.conn != nil {
		return nil
	}
	c, err := pgconnect.Connect(ctx, d.url)
	if err != nil {
		return err
	}
	d.conn = c
	return nil
}

func (d *DeadLetter) reset() {
	if d.conn != nil {
		d.conn.Close(context.Background())
		d.conn = nil
	}
}

// parkedRow is one row to insert into the dead-letter table.
type parkedRow struct {
	lsn       string
	seq       uint32
	sink      string
	commitLSN string
	id        *string
	errText   string
	row       []byte
	// holdKey and heldBehind: hold.go (nil: NULL).
	holdKey, heldBehind *string
}

// insert inserts r on q (d.conn, or a transaction of it), connecting
// first when q is nil; a row parked already stays as it is.
func (d *DeadLetter) insert(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, r parkedRow) error {
	if q == nil {
		if err := d.connect(ctx); err != nil {
			return err
		}
		q = d.conn
	}
	_, err := q.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, lsn, seq, sink, commit_lsn, message_id, error, row_data, hold_key, held_behind)
		VALUES ($1, $2::pg_lsn, $3, $4, $5::pg_lsn, $6, $7, $8, $9, $10) ON CONFLICT (slot, lsn, seq, sink) DO NOTHING`, d.t.DeadLetter),
		d.t.Slot, r.lsn, int64(r.seq), r.sink, r.commitLSN, r.id, r.errText, r.row, r.holdKey, r.heldBehind)
	if err != nil {
		d.reset()
		return err
	}
	return nil
}

// Close closes the connection, if any.
func (d *DeadLetter) Close() { d.reset() }

// DeadLetterCounts returns how many messages are parked for the slot, per
// sink ("" for rows that could not be mapped); nil when the dead-letter
// table does not exist.
func DeadLetterCounts(ctx context.Context, conn *pgx.Conn, t Tables) (map[string]int, error) {
	if ok, err := TableExists(ctx, conn, t.DeadLetter); err != nil || !ok {
		return nil, err
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT sink, count(*) FROM %s WHERE slot = $1 GROUP BY 1", t.DeadLetter), t.Slot)
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

// ParkedCounts counts the slot's parked rows by sink ("" for rows parked
// for every sink): parked for themselves (could not be mapped, refused),
// and held, parked only because their key was held behind another
// (held_behind set; a table made before it has none).
func ParkedCounts(ctx context.Context, conn *pgx.Conn, t Tables) (parked, held map[string]int, err error) {
	if ok, err := TableExists(ctx, conn, t.DeadLetter); err != nil || !ok {
		return nil, nil, err
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT sink, (to_jsonb(d) ->> 'held_behind') IS NOT NULL, count(*) FROM %s d WHERE slot = $1 GROUP BY 1, 2`,
		t.DeadLetter), t.Slot)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", t.DeadLetterName, err)
	}
	defer rows.Close()
	parked, held = map[string]int{}, map[string]int{}
	for rows.Next() {
		var s string
		var behind bool
		var n int
		if err := rows.Scan(&s, &behind, &n); err != nil {
			return nil, nil, err
		}
		if behind {
			held[s] = n
		} else {
			parked[s] = n
		}
	}
	return parked, held, rows.Err()
}
