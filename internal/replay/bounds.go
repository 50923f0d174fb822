package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/layout"
)

// ErrSinceNeedsTime is returned for --since on a table without
// columns.time whose ids are not UUIDv7: nothing tells the rows' age.
var ErrSinceNeedsTime = errors.New("replay: --since needs columns.time or UUIDv7 ids")

// bounds returns the keys of the first and the last row of the range, nil
// when the table has no row there. The last row is fixed at the start:
// rows committed meanwhile are the relay's to stream.
func (rp *replayer) bounds(ctx context.Context) (lo, hi key, err error) {
	if rp.o.ToID != "" {
		hi, err = rp.keyOf(ctx, "--to-id", rp.o.ToID)
	} else {
		hi, err = rp.edge(ctx, "true", nil, " DESC")
	}
	if err != nil || hi == nil {
		return nil, nil, err
	}
	switch {
	case rp.o.FromID != "":
		lo, err = rp.keyOf(ctx, "--from-id", rp.o.FromID)
	case rp.o.Since > 0:
		lo, err = rp.since(ctx, hi)
	default:
		lo, err = rp.edge(ctx, "true", nil, "")
	}
	return lo, hi, err
}

// keyOf returns the key of the row with id; flag names it in errors.
func (rp *replayer) keyOf(ctx context.Context, flag, id string) (key, error) {
	k, err := rp.edge(ctx, rp.rows.Table.Columns.Column(layout.ID)+" = CAST($1::text AS "+rp.rows.Types[layout.ID]+")", []any{id}, "")
	if err != nil {
		return nil, fmt.Errorf("replay: %s %s: %w", flag, id, err)
	}
	if k == nil {
		why := "deleted since, or mistyped"
		if len(rp.rows.Sort) > 1 {
			why += "; or its " + rp.rows.Sort[0].Name + " is NULL, which has no place in the order"
		}
		return nil, fmt.Errorf("replay: %s %s: no row of %s has that id (%s)", flag, id, rp.rows.Table, why)
	}
	return k, nil
}

// since returns the key of the first row of the last o.Since: by the time
// column (the server's clock), or by the instant a UUIDv7 id holds. hi is
// the last row's key.
func (rp *replayer) since(ctx context.Context, hi key) (key, error) {
	cols, secs := rp.rows.Table.Columns, rp.o.Since.Seconds()
	if cols.Has(layout.Time) {
		return rp.edge(ctx, cols.Column(layout.Time)+" >= now() - make_interval(secs => $1)", []any{secs}, "")
	}
	if id := hi.id(); len(id) != 36 || id[14] != '7' {
		return nil, fmt.Errorf("%w: the last row's id %s is not a UUIDv7, so its age is unknown; map columns.time, or give --from-id and --to-id", ErrSinceNeedsTime, id)
	}
	var ms int64
	if err := rp.conn.QueryRow(ctx, "SELECT (extract(epoch FROM now() - make_interval(secs => $1)) * 1000)::int8", secs).Scan(&ms); err != nil {
		return nil, fmt.Errorf("replay: reading the server's clock: %w", err)
	}
	bound := fmt.Sprintf("%08x-%04x-7000-8000-000000000000", uint64(ms)>>16, uint64(ms)&0xffff)
	return rp.edge(ctx, cols.Column(layout.ID)+" >= CAST($1::text AS "+rp.rows.Types[layout.ID]+")", []any{bound}, "")
}

// edge returns the key of the first row (dir "") or the last (" DESC")
// in replay order of those where cond holds; nil for none. Rows whose
// sort column (Rows.Sort) is NULL have no place in the order and are left
// out.
func (rp *replayer) edge(ctx context.Context, cond string, args []any, dir string) (key, error) {
	order := rp.rows.SortColumns()
	for i, col := range order {
		order[i] = col + dir
		cond += " AND " + col + " IS NOT NULL"
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT 1", rp.keyColumns(), rp.rows.Table.Qualified(), cond, strings.Join(order, ", "))
	k := make(key, len(order))
	dest := make([]any, len(k))
	for i := range k {
		dest[i] = &k[i]
	}
	err := rp.conn.QueryRow(ctx, q, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replay: reading the range's bounds: %w", err)
	}
	return k, nil
}
