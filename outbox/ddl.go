package outbox

import (
	"strings"

	"github.com/walpost/walpost/internal/sqlident"
)

// DDL returns the CREATE TABLE IF NOT EXISTS statement of an outbox table
// named table ("table" or "schema.table", taken as in the catalog, a part
// in double quotes when it holds a dot; empty means DefaultTable) with the default columns:
//
//	id         uuid        PRIMARY KEY
//	type       text        NOT NULL
//	key        text        NULL
//	payload    jsonb       NOT NULL
//	headers    jsonb       NULL
//	created_at timestamptz NOT NULL DEFAULT now()
//	seq        bigint      GENERATED ALWAYS AS IDENTITY
//
// DDL(DefaultTable) is, byte for byte, the repository's sql/outbox.sql.
// Name parts are quoted only where PostgreSQL needs it. DDL does not
// validate the name; a malformed one fails when the statement runs.
func DDL(table string) string {
	if table == "" {
		table = DefaultTable
	}
	parts, err := sqlident.Split(table)
	if err != nil {
		parts = strings.Split(table, ".") // fails when the statement runs
	}
	return "CREATE TABLE IF NOT EXISTS " + readableIdent(parts...) + ` (
    id         uuid        PRIMARY KEY,
    type       text        NOT NULL,
    key        text        NULL,
    payload    jsonb       NOT NULL,
    headers    jsonb       NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    seq        bigint      GENERATED ALWAYS AS IDENTITY
);
`
}
