package relay

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/outboxdb"
)

// What the relay reads of the outbox on the server is in internal/outboxdb,
// which the other commands (internal/admin) share; these are its answers
// under the names the check (relay.go) uses.

// outboxShape is outboxdb.Shape: the outbox table's OID and columns (for
// the decoder, decoder.SetOutbox) and its time column ("" for none).
type outboxShape struct {
	oid     uint32
	cols    []decoder.Column
	timeCol string
}

// lookupOutbox is outboxdb.LookupOutbox.
func lookupOutbox(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (outboxShape, error) {
	s, err := outboxdb.LookupOutbox(ctx, conn, cfg)
	return outboxShape{oid: s.OID, cols: s.Columns, timeCol: s.TimeColumn}, err
}

// emitRisk is outboxdb.EmitRisk.
func emitRisk(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (string, error) {
	return outboxdb.EmitRisk(ctx, conn, cfg)
}
