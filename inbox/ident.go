package inbox

import (
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/sqlident"
)

// parseTable splits a table name ("outbox" or "schema.outbox"), literally;
// errors wrap ErrInvalidTable.
func parseTable(name string) (pgx.Identifier, error) {
	return sqlident.ParseTable(name, ErrInvalidTable)
}

// readableIdent renders an identifier for DDL, quoting only where needed.
func readableIdent(parts ...string) string { return sqlident.Readable(parts...) }
