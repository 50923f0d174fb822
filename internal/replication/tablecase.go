package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/sqlident"
)

// CaseVariants returns the tables (as postgres.table writes them: names as
// in the catalog) whose schema and name differ from t's outbox only in
// case: the table an application created quoted ("OutboxMessages", as
// Entity Framework does) while the config names it unquoted, or the other
// way round. PostgreSQL tells them apart, so cdc init would create a
// second, empty table beside it.
func CaseVariants(ctx context.Context, conn *pgx.Conn, t Target) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE lower(n.nspname) = lower($1) AND lower(c.relname) = lower($2) AND c.relkind IN ('r', 'p')
			AND (n.nspname <> $1 OR c.relname <> $2)
		ORDER BY 1, 2`, t.Outbox.Schema, t.Outbox.Name)
	if err != nil {
		return nil, fmt.Errorf("looking up tables named like %s: %w", t.name(), err)
	}
	var out []string
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			return nil, err
		}
		out = append(out, sqlident.Display(schema, name))
	}
	return out, rows.Err()
}

// CaseHint is what a missing outbox table's error says when tables of its
// name in another case exist (CaseVariants): which one to name, and why not
// cdc init.
func CaseHint(t Target, variants []string) string {
	return fmt.Sprintf("table %s does not exist, but %s does: names in postgres.table are case-sensitive, as in the catalog; "+
		"if that is your outbox, set postgres.table: %s (cdc init would create a second, empty table %s beside it, and the relay would read that one)",
		t.name(), strings.Join(variants, " and "), variants[0], t.name())
}

// ColumnCaseHint is what the error for a mapped column (field, e.g.
// columns.sent_at) that the table lacks says when the table has columns
// of its name in another case (have: the table's columns): the column
// created without quotes ("InviatoIl" stored as inviatoil, as EF Core's
// migrations do without quoting, or hand-written DDL) or the other way
// round, and the mapping to write. "" when there is none.
func ColumnCaseHint(field, col string, have []string) string {
	var variants []string
	for _, h := range have {
		if h != col && strings.EqualFold(h, col) {
			variants = append(variants, fmt.Sprintf("%q", h))
		}
	}
	if len(variants) == 0 {
		return ""
	}
	return fmt.Sprintf("but it has %s: column names under columns: are case-sensitive, as in the catalog "+
		"(a column created without quotes is stored in lower case); if that is the column, set %s: %s",
		strings.Join(variants, " and "), field, strings.Trim(variants[0], `"`))
}
