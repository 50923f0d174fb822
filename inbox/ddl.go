package inbox

import "strings"

// DefaultTable is the inbox table used when Options.Table is empty, and the
// table of sql/inbox.sql.
const DefaultTable = "public.inbox"

// DDL returns the statements that create an inbox table named table
// ("table" or "schema.table", taken literally; empty means DefaultTable)
// if it is missing:
//
//	id           text        PRIMARY KEY
//	processed_at timestamptz NOT NULL DEFAULT now()
//
// plus an index on processed_at, named after the table, for Cleanup. The
// id is text: walpost's ids are UUIDs, but a receiver may also take
// messages from senders with other ids. DDL(DefaultTable) is, byte for
// byte, the repository's sql/inbox.sql. Name parts are quoted only where
// PostgreSQL needs it. DDL does not validate the name; New does.
func DDL(table string) string {
	return strings.Join(ddlStatements(table), ";\n") + ";\n"
}

// ddlStatements returns DDL's statements, without terminating semicolons.
func ddlStatements(table string) []string {
	if table == "" {
		table = DefaultTable
	}
	parts := strings.Split(table, ".")
	name := readableIdent(parts...)
	return []string{
		"CREATE TABLE IF NOT EXISTS " + name + ` (
    id           text        PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
)`,
		"CREATE INDEX IF NOT EXISTS " + readableIdent(parts[len(parts)-1]+"_processed_at_idx") + " ON " + name + " (processed_at)",
	}
}
