package outbox

import "strings"

// DDL returns the CREATE TABLE IF NOT EXISTS statement of an outbox table
// named table ("table" or "schema.table", taken literally; empty means
// DefaultTable) with the default columns:
//
//	id         uuid        PRIMARY KEY
//	type       text        NOT NULL
//	key        text        NULL
//	payload    jsonb       NOT NULL
//	headers    jsonb       NULL
//	created_at timestamptz NOT NULL DEFAULT now()
//
// DDL(DefaultTable) is, byte for byte, the repository's sql/outbox.sql.
// Name parts are quoted only where PostgreSQL needs it. DDL does not
// validate the name; a malformed one fails when the statement runs.
func DDL(table string) string {
	if table == "" {
		table = DefaultTable
	}
	return "CREATE TABLE IF NOT EXISTS " + readableIdent(strings.Split(table, ".")...) + ` (
    id         uuid        PRIMARY KEY,
    type       text        NOT NULL,
    key        text        NULL,
    payload    jsonb       NOT NULL,
    headers    jsonb       NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
`
}
