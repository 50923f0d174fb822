package replay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/layout"
)

// The keyset reader: the outbox's rows a batch at a time, in the order
// they were written as far as the table tells (Rows.Sort), each batch
// after the last key read. cdc replay reads its range with it, and so does
// the relay's coverage watcher the rows of a gap (internal/coverage).

// Reader is what a Page is read with: a *pgx.Conn or a pgx.Tx.
type Reader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Key is a row's position in the order rows are read in: Rows.Sort's
// columns as text, the id last.
type Key []string

// ID is the row's id.
func (k Key) ID() string { return k[len(k)-1] }

func (k Key) args() []any {
	a := make([]any, len(k))
	for i, v := range k {
		a[i] = v
	}
	return a
}

// Page says which rows to read.
type Page struct {
	// After is the key the rows come after (Op ">") or from (Op ">=");
	// nil for the first rows.
	After Key
	Op    string
	// Hi, when set, is the last key read.
	Hi Key
	// From and To, when set, bound the rows' time column (columns.time):
	// from From to To, both included; At reads it with each row.
	From, To time.Time
	At       bool
	Limit    int
}

// RawRow is a row a Page read: its key, its text as decoder.TableRow
// takes it (Rows.Adopted), and, with Page.At, its time column.
type RawRow struct {
	Key     Key
	Content string
	At      time.Time
}

// Read reads the rows p says, in order.
func (r *Rows) Read(ctx context.Context, q Reader, p Page) ([]RawRow, error) {
	sortCols := r.SortColumns()
	cols := make([]string, len(sortCols))
	for i, c := range sortCols {
		cols[i] = c + "::text"
	}
	cols = append(cols, r.Adopted())
	tc := r.Table.Columns.Column(layout.Time)
	if p.At {
		cols = append(cols, tc)
	}
	var conds []string
	var args []any
	bound := func(cond string, vals ...any) {
		conds = append(conds, cond)
		args = append(args, vals...)
	}
	if p.After != nil {
		bound(r.After(p.Op, len(args)+1), p.After.args()...)
	}
	if p.Hi != nil {
		bound(r.After("<=", len(args)+1), p.Hi.args()...)
	}
	if !p.From.IsZero() {
		bound(fmt.Sprintf("%s >= $%d", tc, len(args)+1), p.From)
	}
	if !p.To.IsZero() {
		bound(fmt.Sprintf("%s <= $%d", tc, len(args)+1), p.To)
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	q2 := fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s LIMIT %d",
		strings.Join(cols, ", "), r.Table.Qualified(), where, r.OrderBy(), p.Limit)
	rs, err := q.Query(ctx, q2, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []RawRow
	for rs.Next() {
		row := RawRow{Key: make(Key, len(sortCols))}
		dest := make([]any, 0, len(cols))
		for i := range row.Key {
			dest = append(dest, &row.Key[i])
		}
		dest = append(dest, &row.Content)
		if p.At {
			dest = append(dest, &row.At)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rs.Err()
}
