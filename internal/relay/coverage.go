package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/store"
)

// Coverage: whether, and by what, the publication publishes the outbox's
// inserts (docs/design.md, "The publication or the table changing under
// the relay"). The stream cannot tell: pgoutput leaves out, without a
// word, the rows written while the table was not in the publication. So
// the relay looks, on a connection of its own, every coverageInterval,
// and records what it saw in the coverage table (store.Coverage). Any
// change of what covers the outbox (the publication, its row for the
// table in pg_publication_rel, the table's OID), and any time the outbox
// is not covered, opens a gap: rows committed after the last time the old
// coverage was verified may be missing from the stream. Once the outbox
// is covered again and the pipeline handled the stream up to that point,
// the watcher reads the rows of the gap from the table (by the time column,
// from gap_margin before) and the pipeline relays those it did not see in
// the stream (a fill), with their own ids, through the sinks; once they
// are acknowledged, the gap is closed.

// coverageInterval is how often the coverage watcher looks;
// coverageSaveEvery how often it writes the coverage table when nothing
// changed; fillBatch how many rows a fill reads at a time.
const (
	coverageInterval  = time.Second
	coverageSaveEvery = 10 * time.Second
	fillBatch         = 1000
	// fillSlack is how far past the time the outbox was seen published
	// again a fill looks: a transaction that committed while the watcher
	// read the time and then the WAL position may carry a later time.
	fillSlack = time.Second
)

// gapRows is how the rows of a gap are read: the outbox with timeCol as
// its time column.
func gapRows(ctx context.Context, conn *pgx.Conn, cfg *config.Config, timeCol string) (*replay.Rows, error) {
	t := cfg.Outbox()
	t.Columns[layout.Time] = timeCol
	for _, stmt := range []string{"SET datestyle = 'ISO, MDY'", "SET timezone = 'UTC'", "SET bytea_output = 'hex'"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return replay.ReadRows(ctx, conn, t)
}

// mark is a point in time and the WAL insert position read after it: a
// transaction whose commit is after lsn committed after at.
type mark struct {
	at  time.Time
	lsn pglogrepl.LSN
}

// watcher is the coverage watcher of one streaming cycle. It never stops
// the relay: a failing round is logged and tried again.
type watcher struct {
	r       *Relay
	tracker *checkpoint.Tracker // a fill's deliveries are acknowledged in it
	p       *pipeline.Pipeline
	shape   outboxShape
	started time.Time

	conn    *pgx.Conn
	rows    *replay.Rows
	rowsErr error // why rows could not be read (replay.ErrOrderColumn)
	dec     *decoder.Decoder
	cov     *store.Coverage
	tables  store.Tables // the coverage table "" once it proved unusable
	loaded  bool
	marks   []mark
	// fillAt is a WAL position read at least fillSlack after the gap's
	// end: the fill waits until the pipeline handled the stream up to it,
	// so that the rows it reads that the stream carries are all among the
	// ids the pipeline remembers. 0 until read.
	fillAt  pglogrepl.LSN
	saved   time.Time
	warned  map[string]bool // what was logged once: other tables by name, "" not published, "time" no time column, "order" no order
	failing time.Time       // when a failing round was last logged; zero while rounds succeed
}

// first runs the first round before the stream starts, so that what
// covers the outbox is recorded even if the stream fails at once.
func (w *watcher) first(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.try(ctx)
}

func (w *watcher) try(ctx context.Context) {
	err := w.round(ctx)
	if err == nil || ctx.Err() != nil {
		w.failing = time.Time{}
		return
	}
	// Logged when it starts failing, then every 30 s while it does (a
	// server restart fails every round until it is back).
	if w.failing.IsZero() || time.Since(w.failing) >= 30*time.Second {
		w.failing = time.Now()
		w.r.log.Error().Err(err).Msg("checking that the publication publishes the outbox failed; trying again every second")
	}
	if w.conn != nil {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}

func (w *watcher) Run(ctx context.Context) error {
	defer func() {
		if w.conn != nil {
			w.conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(coverageInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		w.try(ctx)
	}
}

func (w *watcher) round(ctx context.Context) error {
	r := w.r
	if w.conn == nil {
		conn, err := pgconnect.Connect(ctx, r.stateURL)
		if err != nil {
			return err
		}
		w.conn = conn
		if w.shape.timeCol != "" {
			w.rows, w.rowsErr = gapRows(ctx, conn, r.cfg, w.shape.timeCol)
			switch {
			case errors.Is(w.rowsErr, replay.ErrOrderColumn):
				// columns.order changed under the relay (checked at
				// start): watching goes on, a fill cannot.
			case w.rowsErr != nil:
				return w.rowsErr
			}
		}
	}
	if !w.loaded {
		w.tables = r.tables
		cov, err := store.LoadCoverage(ctx, w.conn, w.tables)
		if err = w.inMemory(err); err != nil {
			return err
		}
		w.cov, w.loaded = cov, true
		if w.cov != nil && w.cov.Open() {
			r.log.Error().Time("from", w.cov.GapFrom).Time("to", w.cov.GapTo).
				Msg("the coverage table records rows the stream may not have carried, not yet relayed from the table; relaying them once the outbox is published and the stream is past that point")
		}
	}
	cur, err := readCoverage(ctx, w.conn, r.target)
	if err != nil {
		return err
	}
	if w.warned == nil {
		w.warned = map[string]bool{}
	}
	for _, o := range cur.others {
		if !w.warned[o] {
			w.warned[o] = true
			r.log.Error().Str("publication", r.target.Publication).Str("relation", o).
				Msg("the publication publishes a table that is not the outbox: its rows are skipped; remove it from the publication (ALTER PUBLICATION ... DROP TABLE)")
		}
	}
	changed := false
	if w.cov == nil {
		verified := cur.at
		if !cur.covered {
			verified = cur.at.Add(-time.Since(w.started)) // the check at the cycle's start saw it covered
		}
		w.cov = &store.Coverage{Seen: cur.seen, VerifiedAt: verified}
		changed = true
	}
	cov := w.cov
	// The slot's confirmed position as the server has it (a crash loses
	// what the tracker confirmed but the server was not told yet).
	var confirmedText *string
	if err := w.conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", r.cfg.Postgres.Slot).Scan(&confirmedText); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("reading the slot's confirmed position: %w", err)
	}
	var confirmed pglogrepl.LSN
	if confirmedText != nil {
		confirmed, _ = pglogrepl.ParseLSN(*confirmedText)
	}
	w.marks = append(w.marks, mark{cur.at, cur.lsn})
	for ; len(w.marks) > 0 && w.marks[0].lsn <= confirmed; w.marks = w.marks[1:] {
		cov.SafeAt = w.marks[0].at
		changed = true
	}
	if n := len(w.marks); n > 1000 {
		w.marks = slices.Clone(w.marks[n-1000:])
	}
	switch {
	case !cur.covered:
		r.metrics.notPublished.Set(1)
		if !cov.Open() || !cov.GapTo.IsZero() || !w.warned[""] {
			if !cov.Open() {
				cov.GapFrom = cov.VerifiedAt
				r.metrics.gaps.Inc()
			}
			cov.GapTo, cov.GapToLSN, w.fillAt = time.Time{}, 0, 0
			changed = true
			w.warned[""] = true
			r.log.Error().Str("publication", r.target.Publication).Str("table", r.target.Outbox.String()).Str("why", cur.why).
				Time("since", cov.GapFrom).
				Msg("the publication does not publish the outbox's inserts: rows written now are not in the replication stream; they will be relayed from the table once it does again")
		}
	default:
		r.metrics.notPublished.Set(0)
		if cur.seen != cov.Seen || cov.Open() && cov.GapTo.IsZero() {
			if !cov.Open() {
				cov.GapFrom = cov.VerifiedAt
				r.metrics.gaps.Inc()
			}
			cov.GapTo, cov.GapToLSN, w.fillAt = cur.at, cur.lsn, 0
			changed = true
			delete(w.warned, "")
			r.log.Error().Str("publication", r.target.Publication).Str("table", r.target.Outbox.String()).
				Str("was", cov.Seen).Str("now", cur.seen).Time("from", cov.GapFrom).Time("to", cov.GapTo).Str("lsn", cur.lsn.String()).
				Msg("what publishes the outbox changed: rows committed in between may not be in the replication stream; relaying them from the table once the stream is past lsn")
			cov.Seen = cur.seen
		}
		cov.VerifiedAt = cur.at
	}
	if changed || time.Since(w.saved) >= coverageSaveEvery {
		if err := w.inMemory(store.SaveCoverage(ctx, w.conn, w.tables, cov)); err != nil {
			return err
		}
		w.saved = time.Now()
	}
	if cov.Open() {
		r.metrics.gapOpen.Set(1)
	} else {
		r.metrics.gapOpen.Set(0)
	}
	if !cov.Open() || cov.GapTo.IsZero() {
		return nil
	}
	if w.fillAt == 0 && !cur.at.Before(cov.GapTo.Add(fillSlack)) {
		w.fillAt = cur.lsn
	}
	if w.fillAt == 0 || w.p.Handled() < w.fillAt {
		return nil
	}
	if w.rowsErr != nil {
		if !w.warned["order"] {
			w.warned["order"] = true
			r.log.Error().Err(w.rowsErr).Str("table", r.target.Outbox.String()).
				Msg("the rows the stream may not have carried cannot be read in order: fix columns.order (cdc run checks it at start), then restart the relay")
		}
		return nil
	}
	if w.rows == nil {
		if !w.warned["time"] {
			w.warned["time"] = true
			r.log.Error().Str("table", r.target.Outbox.String()).
				Msg("the outbox table has no time column (columns.time, or created_at) to find the rows the stream may not have carried: stop the relay and run cdc resync --since D")
		}
		return nil
	}
	relayed, carried, err := w.fill(ctx, cov.GapFrom.Add(-r.cfg.Postgres.GapMargin.D()), cov.GapTo.Add(fillSlack))
	if err != nil {
		return err
	}
	r.metrics.gapRows.Add(float64(relayed))
	r.log.Warn().Time("from", cov.GapFrom).Time("to", cov.GapTo).Int("relayed", relayed).Int("carried", carried).
		Msg("rows the stream may not have carried: those it did not carry were relayed from the table, with their own ids, and acknowledged by every sink")
	cov.GapFrom, cov.GapTo, cov.GapToLSN, w.fillAt = time.Time{}, time.Time{}, 0, 0
	if err := w.inMemory(store.SaveCoverage(ctx, w.conn, w.tables, cov)); err != nil {
		return err
	}
	w.saved = time.Now()
	r.metrics.gapOpen.Set(0)
	return nil
}

// inMemory turns an error of the coverage table that will not go away (no
// privilege on it: SQLSTATE 42501) into a warning, once: the watcher keeps
// its record in memory from then on.
func (w *watcher) inMemory(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	w.r.log.Warn().Err(err).Str("table", w.r.cfg.Postgres.CoverageTable).
		Msg("the coverage table cannot be used (see sql/roles.sql); what publishes the outbox is kept in memory only: a change while no relay runs goes unnoticed")
	w.tables.Coverage = ""
	return nil
}

// fill reads the rows whose time is in [from, to] from the table, a batch
// at a time, and has the pipeline relay those the stream did not carry;
// it returns once every sink acknowledged them.
func (w *watcher) fill(ctx context.Context, from, to time.Time) (relayed, carried int, err error) {
	tc := w.rows.Table.Columns.Column(layout.Time)
	if w.dec == nil {
		w.dec = decoder.New(w.r.cfg.Outbox())
	}
	// In the order the rows were written as far as the table tells
	// (replay.Rows.Sort: columns.order, else time, then id), a batch at a
	// time after the last key read.
	keys := w.rows.SortColumns()
	for i := range keys {
		keys[i] = fmt.Sprintf("%s::text AS k_%d", keys[i], i)
	}
	var after []any
	for {
		cond := ""
		args := []any{from, to}
		if after != nil {
			cond = " AND " + w.rows.After(">", 3)
			args = append(args, after...)
		}
		q := fmt.Sprintf("SELECT %s, %s AS k_row, %s AS k_at FROM %s WHERE %s >= $1 AND %s <= $2%s ORDER BY %s LIMIT %d",
			strings.Join(keys, ", "), w.rows.Adopted(), tc, w.rows.Table.Qualified(), tc, tc, cond, w.rows.OrderBy(), fillBatch)
		rs, err := w.conn.Query(ctx, q, args...)
		if err != nil {
			return relayed, carried, fmt.Errorf("reading the rows the stream may not have carried: %w", err)
		}
		var rows []pipeline.FillRow
		n := 0
		for rs.Next() {
			key := make([]string, len(keys))
			var content string
			var at time.Time
			dest := make([]any, 0, len(key)+2)
			for i := range key {
				dest = append(dest, &key[i])
			}
			if err := rs.Scan(append(dest, &content, &at)...); err != nil {
				rs.Close()
				return relayed, carried, err
			}
			n++
			after = after[:0]
			for _, k := range key {
				after = append(after, k)
			}
			id := key[len(key)-1]
			m, err := w.dec.TableRow([]byte(content), 0, 0, at)
			var de *decoder.Error
			switch {
			case errors.As(err, &de):
				// relay.on_invalid decides, as for a bad row of the stream.
				rows = append(rows, pipeline.FillRow{Bad: de})
			case err != nil:
				rs.Close()
				return relayed, carried, fmt.Errorf("mapping row %s of the table, which the stream may not have carried: %w", id, err)
			default:
				rows = append(rows, pipeline.FillRow{Msg: m})
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return relayed, carried, err
		}
		if len(rows) > 0 {
			d, err := w.p.Fill(ctx, rows)
			if err != nil {
				return relayed, carried, err
			}
			for !d.Settled(w.tracker) {
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					return relayed, carried, ctx.Err()
				}
			}
			relayed += d.Relayed
			carried += d.Carried
		}
		if n < fillBatch {
			return relayed, carried, nil
		}
	}
}
