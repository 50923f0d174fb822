package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Sort is the order the rows are read in, the id last (docs/design.md,
	// "Row order from the table"); nil from readTypes.
	Sort []SortColumn
}

// SortColumn is a column rows are ordered by: its name as in the catalog
// and its SQL type (format_type).
type SortColumn struct {
	Name, Type string
}

// ErrOrderColumn is wrapped by ReadRows's error for a columns.order
// column missing from the table, of a type that does not order rows, or
// that may be NULL.
var ErrOrderColumn = errors.New("replay: columns.order cannot order the rows")

// ReadRows reads the types of t's mapped columns from the catalog, and
// the columns the rows are read in order of (Sort). An error names the
// role and column whose type it could not read, or columns.order
// (ErrOrderColumn).
func ReadRows(ctx context.Context, q Querier, t layout.Table) (*Rows, error) {
	r, err := readTypes(ctx, q, t)
	if err != nil {
		return nil, err
	}
	if err := r.readSort(ctx, q); err != nil {
		return nil, err
	}
	return r, nil
}

// readTypes is ReadRows without Sort, for decoding rows one at a time
// (cdc dead-letter resend): an order column does not matter there.
func readTypes(ctx context.Context, q Querier, t layout.Table) (*Rows, error) {
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

// readSort sets r.Sort (docs/design.md, "Row order from the table"): the
// order column (columns.order, or the default table's seq when it has
// it), else the time column (columns.time; the default table's
// created_at), then the id.
func (r *Rows) readSort(ctx context.Context, q Querier) error {
	t := r.Table
	id := SortColumn{Name: t.Columns[layout.ID], Type: r.Types[layout.ID]}
	if t.Order != "" {
		typ, notNull, err := columnType(ctx, q, t, t.Order)
		switch {
		case errors.Is(err, pgx.ErrNoRows) && t.OrderIfPresent:
			// The default layout's table made before it had seq.
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: table %s has no column %q", ErrOrderColumn, t, t.Order)
		case err != nil:
			return fmt.Errorf("reading the type of columns.order %q: %w", t.Order, err)
		case (!slices.Contains(layout.OrderTypes, typ) || !notNull) && t.OrderIfPresent:
			// Not sql/outbox.sql's seq: not taken.
		case !slices.Contains(layout.OrderTypes, typ):
			return fmt.Errorf("%w: column %q of %s has type %s; it must be one of %s (an identity or bigserial column numbers the rows as they are inserted)",
				ErrOrderColumn, t.Order, t, typ, strings.Join(layout.OrderTypes, ", "))
		case !notNull:
			// A row whose order column is NULL has no place in a keyset
			// read: it would never be published.
			return fmt.Errorf("%w: column %q of %s may be NULL; a row without a value has no place in the order: declare it NOT NULL (identity and bigserial columns are)",
				ErrOrderColumn, t.Order, t)
		default:
			if t.Order == id.Name {
				r.Sort = []SortColumn{id}
			} else {
				r.Sort = []SortColumn{{Name: t.Order, Type: typ}, id}
			}
			return nil
		}
	}
	if t.Columns.Has(layout.Time) {
		r.Sort = []SortColumn{{Name: t.Columns[layout.Time], Type: r.Types[layout.Time]}, id}
		return nil
	}
	r.Sort = []SortColumn{id}
	if t.Columns.Unscheduled().DefaultTable() {
		// sql/outbox.sql's created_at, unmapped (cdc recover).
		typ, _, err := columnType(ctx, q, t, layout.DefaultTime)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("reading the type of %s's %s: %w", t, layout.DefaultTime, err)
		case typ == "timestamp with time zone" || typ == "timestamp without time zone":
			r.Sort = []SortColumn{{Name: layout.DefaultTime, Type: typ}, id}
		}
	}
	return nil
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

// columnType returns the SQL type of t's column col (format_type, no
// modifier) and whether it is NOT NULL; pgx.ErrNoRows when t has no such
// column.
func columnType(ctx context.Context, q Querier, t layout.Table, col string) (typ string, notNull bool, err error) {
	err = q.QueryRow(ctx, "SELECT format_type(atttypid, NULL), attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped",
		t.Qualified(), col).Scan(&typ, &notNull)
	return typ, notNull, err
}

// OrderBy returns Sort's columns, quoted and joined for ORDER BY: the
// order the rows were written in as far as the table tells
// (docs/design.md, "Row order from the table").
func (r *Rows) OrderBy() string {
	return strings.Join(r.SortColumns(), ", ")
}

// SortColumns returns Sort's columns, quoted and qualified by the table:
// in an ORDER BY, a bare name would take an output column of that name
// (a sort column selected as text would then order "10" before "9").
func (r *Rows) SortColumns() []string {
	cols := make([]string, 0, len(r.Sort))
	for _, c := range r.Sort {
		cols = append(cols, r.Table.Qualified()+"."+pgx.Identifier{c.Name}.Sanitize())
	}
	return cols
}

// SortNames returns Sort's column names, for messages.
func (r *Rows) SortNames() string {
	names := make([]string, 0, len(r.Sort))
	for _, c := range r.Sort {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// After returns the condition "(Sort's columns) op (parameters $first…)",
// the parameters Sort's values as text (a key read with SortColumns
// cast to text), cast back to the columns' types: a keyset bound.
func (r *Rows) After(op string, first int) string {
	params := make([]string, 0, len(r.Sort))
	for j, c := range r.Sort {
		params = append(params, fmt.Sprintf("CAST($%d::text AS %s)", first+j, c.Type))
	}
	return fmt.Sprintf("(%s) %s (%s)", r.OrderBy(), op, strings.Join(params, ", "))
}
