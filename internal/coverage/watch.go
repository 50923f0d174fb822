package coverage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// Pipeline is what the watcher needs of the pipeline (*pipeline.Pipeline).
type Pipeline interface {
	Fill(ctx context.Context, rows []pipeline.FillRow) (pipeline.FillDone, error)
	Handled() pglogrepl.LSN
}

// Metrics are the watcher's metrics (the relay registers them).
type Metrics struct {
	Gaps         prometheus.Counter // walpost_stream_gaps_total
	GapRows      prometheus.Counter // walpost_gap_rows_relayed_total
	NotPublished prometheus.Gauge   // walpost_outbox_not_published
	GapOpen      prometheus.Gauge   // walpost_stream_gap_open
}

// Options are a watcher's dependencies.
type Options struct {
	Config *config.Config
	// URL is where the coverage table is and the outbox is read
	// (postgres.url, or postgres.primary_url when the slot is on a
	// standby).
	URL    string
	Target replication.Target
	Tables store.Tables
	// TimeColumn is the outbox's time column, "" for none
	// (outboxdb.Shape).
	TimeColumn string
	Pipeline   Pipeline
	// Tracker is where a fill's deliveries are acknowledged.
	Tracker *checkpoint.Tracker
	// Relations, when set, gets a value on every Relation message of the
	// stream (pipeline.Options.Relation): the watcher looks at once.
	Relations <-chan struct{}
	Metrics   Metrics
	Log       zerolog.Logger
}

// Watcher is the coverage watcher of one streaming cycle. It never stops
// the relay: a failing look is logged and tried again.
type Watcher struct {
	o     Options
	state *State

	conn    *pgx.Conn
	rows    *replay.Rows
	rowsErr error // why rows could not be read (replay.ErrOrderColumn)
	dec     *decoder.Decoder
	tables  store.Tables // Coverage "" once the table proved unusable
	loaded  bool
	next    time.Duration
	warned  map[string]bool // logged once: other tables by name, "time" no time column, "order" no order
	failing time.Time       // when a failing look was last logged; zero while looks succeed
}

// New returns the watcher of a streaming cycle that starts now.
func New(o Options) *Watcher {
	return &Watcher{o: o, tables: o.Tables, next: Busy, warned: map[string]bool{},
		state: NewState(nil, time.Now(), o.Config.Postgres.GapMargin.D())}
}

// First takes the first look before the stream starts, so that what
// covers the outbox is recorded even if the stream fails at once.
func (w *Watcher) First(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.try(ctx)
}

// Run looks until ctx ends: every Busy or Quiet (Actions.Next), and at
// once on a Relation message.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.close()
	t := time.NewTimer(w.next)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-w.o.Relations:
			t.Stop()
		}
		w.try(ctx)
		t.Reset(w.next)
	}
}

func (w *Watcher) close() {
	if w.conn != nil {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}

func (w *Watcher) try(ctx context.Context) {
	err := w.look(ctx)
	if err == nil || ctx.Err() != nil {
		w.failing = time.Time{}
		return
	}
	w.next = Busy
	// Logged when it starts failing, then every 30 s while it does (a
	// server restart fails every look until it is back).
	if w.failing.IsZero() || time.Since(w.failing) >= 30*time.Second {
		w.failing = time.Now()
		w.o.Log.Error().Err(err).Msg("checking that the publication publishes the outbox failed; trying again every second")
	}
	w.close()
}

// look reads the catalog and the slot, and does what State.Observe says.
func (w *Watcher) look(ctx context.Context) error {
	if err := w.connect(ctx); err != nil {
		return err
	}
	look, err := Read(ctx, w.conn, w.o.Target)
	if err != nil {
		return err
	}
	w.others(look.Others)
	slot, err := replication.ReadSlot(ctx, w.conn, w.o.Config.Postgres.Slot)
	if err != nil {
		return fmt.Errorf("reading the slot's confirmed position: %w", err)
	}
	a := w.state.Observe(Observation{Look: look, Confirmed: slot.ConfirmedFlush, Handled: w.o.Pipeline.Handled(), Now: time.Now()})
	w.next = a.Next
	w.report(look, a)
	if a.Save {
		if err := w.save(ctx); err != nil {
			return err
		}
	}
	if a.Fill == nil || !w.canFill() {
		return nil
	}
	return w.relayGap(ctx, *a.Fill)
}

// connect opens the watcher's connection and loads the coverage row,
// once.
func (w *Watcher) connect(ctx context.Context) error {
	if w.conn == nil {
		conn, err := pgconnect.Connect(ctx, w.o.URL)
		if err != nil {
			return err
		}
		w.conn = conn
		if w.o.TimeColumn != "" {
			w.rows, w.rowsErr = gapRows(ctx, conn, w.o.Config, w.o.TimeColumn)
			// replay.ErrOrderColumn: columns.order changed under the
			// relay (checked at start): watching goes on, a fill cannot.
			if w.rowsErr != nil && !errors.Is(w.rowsErr, replay.ErrOrderColumn) {
				return w.rowsErr
			}
		}
	}
	if w.loaded {
		return nil
	}
	row, err := Load(ctx, w.conn, w.tables)
	if err = w.inMemory(err); err != nil {
		return err
	}
	w.state.Row, w.loaded = row, true
	if row != nil && row.Open() {
		w.o.Log.Error().Time("from", row.GapFrom).Time("to", row.GapTo).
			Msg("the coverage table records rows the stream may not have carried, not yet relayed from the table; relaying them once the outbox is published and the stream is past that point")
	}
	return nil
}

// others logs, once each, the other tables the publication publishes.
func (w *Watcher) others(others []string) {
	for _, o := range others {
		if !w.warned[o] {
			w.warned[o] = true
			w.o.Log.Error().Str("publication", w.o.Target.Publication).Str("relation", o).
				Msg("the publication publishes a table that is not the outbox: its rows are skipped; remove it from the publication (ALTER PUBLICATION ... DROP TABLE)")
		}
	}
}

// report sets the metrics and logs what a look found.
func (w *Watcher) report(look Look, a Actions) {
	m, row := w.o.Metrics, w.state.Row
	if a.Published {
		m.NotPublished.Set(0)
	} else {
		m.NotPublished.Set(1)
	}
	if a.Opened {
		m.Gaps.Inc()
	}
	if a.GapOpen {
		m.GapOpen.Set(1)
	} else {
		m.GapOpen.Set(0)
	}
	t := w.o.Target
	if a.NotPublished {
		w.o.Log.Error().Str("publication", t.Publication).Str("table", t.Outbox.String()).Str("why", look.Why).
			Time("since", row.GapFrom).
			Msg("the publication does not publish the outbox's inserts: rows written now are not in the replication stream; they will be relayed from the table once it does again")
	}
	if a.Changed {
		w.o.Log.Error().Str("publication", t.Publication).Str("table", t.Outbox.String()).
			Str("was", a.Was).Str("now", look.Seen).Time("from", row.GapFrom).Time("to", row.GapTo).Str("lsn", look.LSN.String()).
			Msg("what publishes the outbox changed: rows committed in between may not be in the replication stream; relaying them from the table once the stream is past lsn")
	}
}

// save writes the row.
func (w *Watcher) save(ctx context.Context) error {
	if err := w.inMemory(Save(ctx, w.conn, w.tables, w.state.Row)); err != nil {
		return err
	}
	w.state.Saved(time.Now())
	return nil
}

// canFill reports whether the rows of a gap can be read, logging once
// why not.
func (w *Watcher) canFill() bool {
	table := w.o.Target.Outbox.String()
	switch {
	case w.rowsErr != nil:
		if !w.warned["order"] {
			w.warned["order"] = true
			w.o.Log.Error().Err(w.rowsErr).Str("table", table).
				Msg("the rows the stream may not have carried cannot be read in order: fix columns.order (cdc run checks it at start), then restart the relay")
		}
		return false
	case w.rows == nil:
		if !w.warned["time"] {
			w.warned["time"] = true
			w.o.Log.Error().Str("table", table).
				Msg("the outbox table has no time column (columns.time, or created_at) to find the rows the stream may not have carried: stop the relay and run cdc resync --since D")
		}
		return false
	}
	return true
}

// relayGap relays the rows of the gap in win the stream did not carry,
// then closes the gap.
func (w *Watcher) relayGap(ctx context.Context, win Window) error {
	relayed, carried, err := w.fill(ctx, win)
	if err != nil {
		return err
	}
	w.o.Metrics.GapRows.Add(float64(relayed))
	row := w.state.Row
	w.o.Log.Warn().Time("from", row.GapFrom).Time("to", row.GapTo).Int("relayed", relayed).Int("carried", carried).
		Msg("rows the stream may not have carried: those it did not carry were relayed from the table, with their own ids, and acknowledged by every sink")
	w.state.Filled()
	if err := w.save(ctx); err != nil {
		return err
	}
	w.o.Metrics.GapOpen.Set(0)
	w.next = Quiet
	return nil
}

// inMemory turns an error of the coverage table that will not go away (no
// privilege on it: SQLSTATE 42501) into a warning, once: the watcher keeps
// its record in memory from then on.
func (w *Watcher) inMemory(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	w.o.Log.Warn().Err(err).Str("table", w.o.Config.Postgres.CoverageTable).
		Msg("the coverage table cannot be used (see sql/roles.sql); what publishes the outbox is kept in memory only: a change while no relay runs goes unnoticed")
	w.tables.Coverage = ""
	return nil
}
