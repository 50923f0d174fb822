package outboxdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
)

// Shape is what the relay looks up of the outbox table at start: its OID
// and columns (for the decoder, decoder.SetOutbox), and the column that
// tells a row's time (columns.time, else created_at when the table has
// one of a timestamp type; "" for none).
type Shape struct {
	OID        uint32
	Columns    []decoder.Column
	TimeColumn string
}

// LookupOutbox reads the Shape of cfg's outbox table; the zero Shape when
// the table does not exist.
func LookupOutbox(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (Shape, error) {
	var s Shape
	t := cfg.Outbox()
	var oid *int64
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::oid::int8", t.Qualified()).Scan(&oid); err != nil || oid == nil {
		return s, err
	}
	s.OID = uint32(*oid)
	rows, err := conn.Query(ctx, "SELECT attname, atttypid::int8 FROM pg_attribute WHERE attrelid = $1::int8::oid AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", *oid)
	if err != nil {
		return s, fmt.Errorf("reading the columns of %s: %w", t, err)
	}
	defer rows.Close()
	for rows.Next() {
		var c decoder.Column
		var typ int64
		if err := rows.Scan(&c.Name, &typ); err != nil {
			return s, err
		}
		c.Type = uint32(typ)
		s.Columns = append(s.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	s.TimeColumn = gapTimeColumn(cfg, s.Columns)
	return s, nil
}

// gapTimeColumn is the column that tells a row's time: columns.time, else
// created_at when cols has it with a timestamp type; "" for none.
func gapTimeColumn(cfg *config.Config, cols []decoder.Column) string {
	if c := cfg.Outbox().Columns; c.Has(layout.Time) {
		return c[layout.Time]
	}
	for _, c := range cols {
		if c.Name == layout.DefaultTime && (c.Type == 1184 || c.Type == 1114) {
			return c.Name
		}
	}
	return ""
}
