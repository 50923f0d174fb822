package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/coverage"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// ResyncOptions says what Resync relays.
type ResyncOptions struct {
	// Since, when set, relays the rows of the last Since instead of those
	// since the slot's confirmed position as the coverage table records it.
	Since    time.Duration
	Progress io.Writer
	Log      zerolog.Logger
}

// ResyncResult is what Resync did.
type ResyncResult struct {
	From   time.Time     // rows whose time is at or after From were relayed
	Slot   pglogrepl.LSN // the slot's confirmed position before
	Target pglogrepl.LSN // and after
	Replay replay.Result
}

// Errors of Resync.
var (
	// ErrResyncStandby: cdc resync with the slot on a standby
	// (postgres.primary_url).
	ErrResyncStandby  = errors.New("admin: cdc resync does not support a slot on a standby")
	ErrResyncNoRecord = errors.New("admin: no record of when the slot's confirmed position was written")
)

// Resync is cdc resync: the way out when the stream cannot go on from the
// slot's confirmed position (the publication dropped and created again:
// the WAL sender fails there at every start) or when rows it did not carry
// must be relayed with the relay stopped. It reads the WAL insert
// position (after a time T0 read first), relays every row of the outbox
// table whose time is at or after From through the sinks (cdc replay's
// machinery) — From is gap_margin before the coverage table's safe_at (a
// time before the commit of every transaction after the slot's confirmed
// position) or the open gap's start, whichever is earlier, or now − Since —,
// and only then moves the slot to that position
// (pg_replication_slot_advance) and records the gap as closed. A
// transaction that commits after the position is streamed; one before it
// committed after From's bound, so its row is relayed. Nothing is lost;
// rows the stream had carried are sent again (at-least-once). The slot
// must not be in use.
func Resync(stop, ctx context.Context, cfg *config.Config, o ResyncOptions) (ResyncResult, error) {
	var res ResyncResult
	if cfg.Postgres.TableLess() {
		return res, replay.ErrTableLess
	}
	if cfg.Postgres.FromStandby() {
		return res, fmt.Errorf("%w: cdc resync reads the rows and moves the slot on one server, and with postgres.primary_url the slot is on a standby; "+
			"stop every relay on the slot, then run cdc recover --since <a time before the publication changed> after dropping the slot on the standby "+
			"(SELECT pg_drop_replication_slot('%s')), or run cdc replay --since that time (docs/operations.md, \"Decoding from a standby\")", ErrResyncStandby, cfg.Postgres.Slot)
	}
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())
	info, err := checkSlotReleased(ctx, conn, cfg.Postgres.Slot)
	if err != nil {
		return res, err
	}
	if info.Active {
		return res, slotInUse("resync", cfg.Postgres.Slot, info.ActivePID)
	}
	res.Slot = info.ConfirmedFlush
	t := outboxdb.Target(cfg)
	if err := replication.CheckPublication(ctx, conn, t); err != nil {
		return res, fmt.Errorf("%w (the rows written from now on must be in the stream before resync moves the slot)", err)
	}
	shape, err := outboxdb.LookupOutbox(ctx, conn, cfg)
	if err != nil {
		return res, err
	}
	tables := store.TablesOf(cfg)
	cov, err := coverage.Load(ctx, conn, tables)
	if err != nil {
		return res, err
	}
	var serverNow time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&serverNow); err != nil {
		return res, err
	}
	readAt := time.Now()
	switch {
	case o.Since > 0:
		res.From = serverNow.Add(-o.Since)
	case cov != nil && !cov.SafeAt.IsZero():
		res.From = cov.SafeAt
		if cov.Open() && cov.GapFrom.Before(res.From) {
			res.From = cov.GapFrom
		}
		res.From = res.From.Add(-cfg.Postgres.GapMargin.D())
	default:
		return res, fmt.Errorf("%w (the coverage table %s has none for slot %q): give --since D, a duration that reaches back before the commit of every transaction after the slot's confirmed position %s",
			ErrResyncNoRecord, cfg.Postgres.CoverageTable, cfg.Postgres.Slot, info.ConfirmedFlush)
	}
	if shape.TimeColumn == "" {
		return res, fmt.Errorf("admin: table %s has no time column (columns.time, or created_at): resync cannot tell which rows were committed since the slot's confirmed position; use cdc replay --from-id, then move the slot by hand", t.Outbox)
	}
	current, err := coverage.Read(ctx, conn, t) // its time before its WAL position
	if err != nil {
		return res, err
	}
	res.Target = current.LSN
	rc := *cfg
	rc.Columns.Time = shape.TimeColumn
	// Replay's --since counts back from the server's clock when it reads
	// its bounds: as far back as From, and a margin.
	since := serverNow.Sub(res.From) + time.Since(readAt)
	fmt.Fprintf(o.Progress, "resync: relaying the rows of %s whose %s is at or after %s, then moving slot %s from %s to %s\n",
		t.Outbox, shape.TimeColumn, res.From.UTC().Format(time.RFC3339Nano), cfg.Postgres.Slot, res.Slot, res.Target)
	res.Replay, err = replay.Replay(stop, ctx, &rc, replay.Options{Since: since + 2*time.Second, Progress: o.Progress, Log: o.Log})
	if err != nil {
		return res, err
	}
	if res.Target > res.Slot {
		if _, err := conn.Exec(ctx, "SELECT pg_replication_slot_advance($1, $2::pg_lsn)", cfg.Postgres.Slot, res.Target.String()); err != nil {
			return res, fmt.Errorf("moving slot %q to %s (the rows were relayed; running cdc resync again only sends them again): %w", cfg.Postgres.Slot, res.Target, err)
		}
	}
	c := &coverage.Row{Seen: current.Seen, VerifiedAt: current.At, SafeAt: current.At}
	if err := coverage.Save(ctx, conn, tables, c); err != nil {
		return res, err
	}
	return res, nil
}
