package coverage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/store"
)

// Row is a slot's row of the coverage table (store's coverage DDL): what
// made the publication cover the outbox when the relay last verified it
// (Seen, at VerifiedAt), a time before the commit of every transaction
// after the slot's confirmed position (SafeAt), and the stretch the stream
// may not have carried, while it is not relayed from the table (a gap).
type Row struct {
	Seen       string
	VerifiedAt time.Time
	SafeAt     time.Time // zero when unknown
	// Gap is open while GapFrom is set; GapTo is zero while the outbox
	// is not published.
	GapFrom, GapTo time.Time
	GapToLSN       pglogrepl.LSN
}

// Open reports whether a stretch the stream may not have carried is not
// relayed yet.
func (c *Row) Open() bool { return !c.GapFrom.IsZero() }

// Load reads t.Slot's coverage row: nil (and no error) when there
// is none, the table is not configured or does not exist.
func Load(ctx context.Context, conn *pgx.Conn, t store.Tables) (*Row, error) {
	if t.Coverage == "" {
		return nil, nil
	}
	if ok, err := store.TableExists(ctx, conn, t.Coverage); err != nil || !ok {
		return nil, err
	}
	var c Row
	var safe, from, to *time.Time
	var lsn *string
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT seen, verified_at, safe_at, gap_from, gap_to, gap_to_lsn::text FROM %s WHERE slot = $1", t.Coverage), t.Slot).
		Scan(&c.Seen, &c.VerifiedAt, &safe, &from, &to, &lsn)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading coverage table %s: %w", t.Coverage, err)
	}
	for _, x := range []struct {
		p   *time.Time
		dst *time.Time
	}{{safe, &c.SafeAt}, {from, &c.GapFrom}, {to, &c.GapTo}} {
		if x.p != nil {
			*x.dst = *x.p
		}
	}
	if lsn != nil {
		c.GapToLSN, _ = pglogrepl.ParseLSN(*lsn)
	}
	return &c, nil
}

// Save writes t.Slot's coverage row (nothing when the table is not
// configured).
func Save(ctx context.Context, conn *pgx.Conn, t store.Tables, c *Row) error {
	if t.Coverage == "" {
		return nil
	}
	null := func(x time.Time) *time.Time {
		if x.IsZero() {
			return nil
		}
		return &x
	}
	var lsn *string
	if c.GapToLSN != 0 {
		s := c.GapToLSN.String()
		lsn = &s
	}
	_, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, seen, verified_at, safe_at, gap_from, gap_to, gap_to_lsn, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::pg_lsn, now())
ON CONFLICT (slot) DO UPDATE SET seen = $2, verified_at = $3, safe_at = $4, gap_from = $5, gap_to = $6, gap_to_lsn = $7::pg_lsn, updated_at = now()`, t.Coverage),
		t.Slot, c.Seen, c.VerifiedAt, null(c.SafeAt), null(c.GapFrom), null(c.GapTo), lsn)
	if err != nil {
		return fmt.Errorf("writing coverage table %s: %w", t.Coverage, err)
	}
	return nil
}
