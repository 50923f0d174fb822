package replay

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/layout"
)

// Querier is what Rows reads the catalog with: a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Rows says how to read the outbox table's rows as the decoder reads an
// adopt message (decoder.Adopted): `cdc init --adopt` emits them so
// (internal/admin/adopt.go), `cdc replay` and `cdc dead-letter resend`
// decode them with decoder.TableRow. sent_at is never carried (the
// decoder takes it as NULL).
type Rows struct {
	Table layout.Table
	// OIDs and Types are, by role, the mapped column's type oid and SQL
	// type (format_type); 0 and "" when unmapped, and for sent_at.
	OIDs  []int64
	Types []string
}

// ReadRows reads the types of t's mapped columns from the catalog. An
// error names the role and column whose type it could not read.
func ReadRows(ctx context.Context, q Querier, t layout.Table) (*Rows, error) {
	r := &Rows{Table: t, OIDs: make([]int64, layout.NumRoles), Types: make([]string, layout.NumRoles)}
	for role := range layout.NumRoles {
		if !t.Columns.Has(role) || role == layout.SentAt {
			continue
		}
		if err := q.QueryRow(ctx, "SELECT atttypid::int8, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped",
			t.Qualified(), t.Columns[role]).Scan(&r.OIDs[role], &r.Types[role]); err != nil {
			return nil, fmt.Errorf("reading the type of %s %q: %w", role.Field(), t.Columns[role], err)
		}
	}
	return r, nil
}

// Adopted returns the SQL expression that gives a row of the table as the
// text of decoder.Adopted: {"v": 1, "oids": [...], "values": [...]}, the
// values by role, as text, NULL for a NULL or unmapped column.
func (r *Rows) Adopted() string {
	oids := make([]string, len(r.OIDs))
	values := make([]string, len(r.OIDs))
	for role, oid := range r.OIDs {
		oids[role] = strconv.FormatInt(oid, 10)
		values[role] = "NULL"
		if oid != 0 {
			values[role] = r.Table.Columns.Column(layout.Role(role)) + "::text"
		}
	}
	return fmt.Sprintf("json_build_object('v', 1, 'oids', ARRAY[%s]::int8[], 'values', json_build_array(%s))::text",
		strings.Join(oids, ", "), strings.Join(values, ", "))
}

// Order returns the roles the rows are ordered by, the order they were
// written in as far as the table tells: the time column then the id when
// columns.time is mapped, else the id alone (time order too for UUIDv7
// ids, as the outbox package and most writers make them).
func (r *Rows) Order() []layout.Role {
	if r.Table.Columns.Has(layout.Time) {
		return []layout.Role{layout.Time, layout.ID}
	}
	return []layout.Role{layout.ID}
}

// OrderBy returns Order's columns, quoted and joined for ORDER BY.
func (r *Rows) OrderBy() string {
	cols := make([]string, 0, 2)
	for _, role := range r.Order() {
		cols = append(cols, r.Table.Columns.Column(role))
	}
	return strings.Join(cols, ", ")
}
