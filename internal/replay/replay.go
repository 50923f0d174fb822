package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgconnect"
)

// ErrInterrupted is returned by Replay when it stopped before the end of
// its range because its context ended: what was done is in the Result.
var ErrInterrupted = errors.New("replay: interrupted")

// ErrIncomplete is returned by Replay when it went through its range but
// left rows out: rows that cannot be mapped (reported on Progress).
var ErrIncomplete = errors.New("replay: some rows were not published")

// ErrTableLess is returned by Replay for a table-less outbox
// (postgres.source: messages): it keeps no rows to replay.
var ErrTableLess = errors.New("replay: a table-less outbox (postgres.source: messages) keeps no rows to replay")

// Options says what Replay re-publishes and where.
type Options struct {
	// Since selects the rows of the last Since: by the time column when
	// mapped (created_at for the default layout, see withDefaultTime),
	// else by the id read as a UUIDv7 (refused for other ids).
	Since time.Duration
	// FromID and ToID bound the range, both included, in replay order
	// (Rows.Sort); either may be "" (from the first row, to the last).
	FromID, ToID string
	// Sink, when set, publishes to that sink only (the messages its route
	// takes); else every message goes to every sink its route takes.
	Sink string
	// SkipRejected reports a message a sink refuses for good
	// (publish.Rejected) and goes on; without it Replay stops there.
	SkipRejected bool
	// Batch is how many rows are read, and published, at a time (default
	// 500).
	Batch int
	// Progress receives one line a second (rows done of total, rate) and
	// the reports of rows left out; Log the sinks' logs.
	Progress io.Writer
	Log      zerolog.Logger
}

// Result is what Replay did.
type Result struct {
	Total, Rows int64 // rows in the range at the start; rows done
	Deliveries  int64 // messages sink by sink, acknowledged
	NotRouted   int64 // rows no sink in use routes
	Invalid     int64 // rows that cannot be mapped, left out
	Rejected    int64 // messages refused with SkipRejected, left out
	Expired     int64 // rows expired (expires_at passed), left out unless relay.on_expired is send
	// Last is the id of the last row done, Next the first one left (when
	// interrupted) and End the range's last.
	Last, Next, End string
}

// Replay re-publishes the outbox rows that o selects, in Rows.Sort order, with
// their ids, a batch at a time: it reads a batch by keyset pagination,
// publishes it to the sinks (retrying as the relay does, until every
// sink acknowledged it) and goes on. It marks nothing anywhere, so
// running it again is harmless. A table-less outbox has no rows: Replay
// refuses it (ErrTableLess) before connecting. When stop ends it finishes the batch in
// flight and returns ErrInterrupted; when ctx ends it abandons the batch
// (the relay keeps running: nothing is lost, some messages may have gone
// out twice).
func Replay(stop, ctx context.Context, cfg *config.Config, o Options) (Result, error) {
	if cfg.Postgres.TableLess() {
		return Result{}, fmt.Errorf("%w: its messages are in the WAL only, until the relay delivered them; "+
			"cdc dead-letter resend publishes the parked ones again", ErrTableLess)
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.StateURL())
	if err != nil {
		return Result{}, err
	}
	defer conn.Close(context.Background())
	// The decoder reads values as the replication connection sends them,
	// whatever the database's or role's defaults: DateStyle ISO, bytea in
	// hex; timestamp columns are read as UTC.
	for _, stmt := range []string{"SET datestyle = 'ISO, MDY'", "SET timezone = 'UTC'", "SET bytea_output = 'hex'"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return Result{}, fmt.Errorf("replay: %s: %w", stmt, err)
		}
	}
	table, err := withDefaultTime(ctx, conn, cfg.Outbox())
	if err != nil {
		return Result{}, fmt.Errorf("replay: %w", err)
	}
	rows, err := ReadRows(ctx, conn, table)
	if errors.Is(err, ErrOrderColumn) {
		return Result{}, err // says "replay:" already
	}
	if err != nil {
		return Result{}, fmt.Errorf("replay: %w", err)
	}
	ss, err := newSinks(cfg, o.Sink, o.Log)
	if err != nil {
		return Result{}, err
	}
	defer ss.close()
	rp := &replayer{conn: conn, rows: rows, dec: decoder.New(table), sinks: ss, cfg: cfg, o: o}
	lo, hi, err := rp.bounds(ctx)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if lo == nil || hi == nil {
		fmt.Fprintln(o.Progress, "replay: no row of the outbox table is in the range; nothing to do")
		return res, nil
	}
	res.End = hi.id()
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s AND %s", rows.Table.Qualified(),
		rp.compare(">=", 1), rp.compare("<=", 1+len(lo))), append(lo.args(), hi.args()...)...).Scan(&res.Total); err != nil {
		return res, fmt.Errorf("replay: counting the rows: %w", err)
	}
	fmt.Fprintf(o.Progress, "replay: %d rows of %s, from id %s to id %s, in %s order, to %s\n",
		res.Total, rows.Table, lo.id(), hi.id(), rows.SortNames(), rp.sinkNames())
	// Open every sink before publishing anything: a file sink a running
	// relay holds is waited for here (stop ends the wait).
	for _, i := range ss.used() {
		if _, err := ss.get(stop, i); err != nil {
			return res, err
		}
	}
	err = rp.loop(stop, ctx, lo, hi, &res)
	return res, err
}

// withDefaultTime returns t, with sql/outbox.sql's created_at as its time
// column when t has the default layout without columns.time and the
// table has created_at as a timestamp: replay orders and bounds (--since)
// the rows by it, and a replayed message's time is its value (the commit
// time is not known here).
func withDefaultTime(ctx context.Context, q Querier, t layout.Table) (layout.Table, error) {
	if t.Columns != layout.Default {
		return t, nil
	}
	var has bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped AND atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype))",
		t.Qualified(), layout.DefaultTime).Scan(&has); err != nil {
		return t, fmt.Errorf("looking for %s's %s column: %w", t, layout.DefaultTime, err)
	}
	if has {
		t.Columns[layout.Time] = layout.DefaultTime
	}
	return t, nil
}

// replayer is one Replay's state.
type replayer struct {
	conn  *pgx.Conn
	rows  *Rows
	dec   *decoder.Decoder
	sinks *sinks
	cfg   *config.Config
	o     Options
}

// loop replays the range [lo, hi] batch by batch.
func (rp *replayer) loop(stop, ctx context.Context, lo, hi key, res *Result) error {
	start, lastPrint := time.Now(), time.Now()
	after, op := lo, ">="
	for {
		if stop.Err() != nil {
			next, err := rp.next(ctx, after, op, hi)
			if err != nil {
				return err
			}
			res.Next = next
			return ErrInterrupted
		}
		batch, last, err := rp.read(ctx, after, op, hi)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			rp.progress(res, start)
			if res.Invalid > 0 {
				return fmt.Errorf("%w: %d rows could not be mapped (reported above)", ErrIncomplete, res.Invalid)
			}
			return nil
		}
		if err := rp.publish(ctx, batch, res); err != nil {
			return err
		}
		res.Rows += int64(len(batch))
		res.Last = last.id()
		after, op = last, ">"
		if time.Since(lastPrint) >= time.Second {
			rp.progress(res, start)
			lastPrint = time.Now()
		}
	}
}

func (rp *replayer) progress(res *Result, start time.Time) {
	rate := float64(res.Rows) / max(time.Since(start).Seconds(), 1e-3)
	pct := 100.0
	if res.Total > 0 {
		pct = 100 * float64(res.Rows) / float64(res.Total)
	}
	fmt.Fprintf(rp.o.Progress, "replay: %d/%d rows (%.0f%%), %.0f rows/s, %d messages acknowledged, last id %s\n",
		res.Rows, res.Total, pct, rate, res.Deliveries, res.Last)
}

func (rp *replayer) sinkNames() string {
	var names []string
	for _, i := range rp.sinks.used() {
		names = append(names, rp.cfg.Sinks[i].Name)
	}
	return strings.Join(names, ", ")
}

// row is one row read: its key and the message it decodes to (nil when it
// cannot be mapped: err says why).
type row struct {
	key key
	msg *message.Message
	err error
}

// read reads the next batch: the rows after (op ">") or from (op ">=")
// the key after, up to hi, in order. It returns the last row's key.
func (rp *replayer) read(ctx context.Context, after key, op string, hi key) ([]row, key, error) {
	raw, err := rp.rows.Read(ctx, rp.conn, Page{After: after, Op: op, Hi: hi, Limit: rp.o.Batch})
	if err != nil {
		return nil, nil, fmt.Errorf("replay: reading the rows after id %s: %w", after.id(), err)
	}
	if len(raw) == 0 {
		return nil, nil, nil
	}
	out := make([]row, len(raw))
	for i, r := range raw {
		m, err := rp.dec.TableRow([]byte(r.Content), 0, 0, time.Time{})
		out[i] = row{key: r.Key, msg: m, err: err}
	}
	return out, out[len(out)-1].key, nil
}

// next returns the id of the first row not done: after (op ">") or from
// (op ">=", before the first batch) the key after, up to hi ("" for none).
func (rp *replayer) next(ctx context.Context, after key, op string, hi key) (string, error) {
	rows, _, err := rp.read(ctx, after, op, hi)
	if err != nil || len(rows) == 0 {
		return "", err
	}
	return rows[0].key.id(), nil
}

// key is Key (keyset.go).
type key = Key

func (k key) id() string { return k.ID() }

// keyColumns selects Rows.Sort's columns as text.
func (rp *replayer) keyColumns() string {
	cols := rp.rows.SortColumns()
	for i := range cols {
		cols[i] += "::text"
	}
	return strings.Join(cols, ", ")
}

// compare is "(sort columns) op (the key in parameters $first...)", the
// parameters cast from text to the columns' types.
func (rp *replayer) compare(op string, first int) string {
	return rp.rows.After(op, first)
}
