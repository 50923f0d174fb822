package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/retention"
	"github.com/walpost/walpost/internal/store"
)

// Sentinel errors of Recover.
var (
	// ErrRecoverHealthySlot: the slot can still stream; recover never
	// drops it.
	ErrRecoverHealthySlot = errors.New("admin: cdc recover refuses a slot the server has not invalidated")
	// ErrRecoverNoBound: nothing tells which rows were delivered.
	ErrRecoverNoBound = errors.New("admin: cdc recover cannot tell which rows were delivered")
	// ErrRecoverTableLess: a table-less outbox keeps no rows to relay again.
	ErrRecoverTableLess = errors.New("admin: cdc recover needs an outbox table")
)

// RecoverOptions are cdc recover's options.
type RecoverOptions struct {
	// Since, when not zero, selects the rows whose time column is at or
	// after it, whatever else is recorded (--since TIMESTAMP).
	Since time.Time
	// SinceAgo, when > 0, is Since as the server's now() less it (--since
	// DURATION).
	SinceAgo time.Duration
	// Margin is the longest a producer's transaction takes from setting a
	// row's time to its commit (plus any clock skew when the application
	// sets the time): the bound taken from the progress table's commit
	// times is moved back by it (--margin).
	Margin time.Duration
}

// Recover replaces an invalidated slot (or a missing one: dropped, or a
// failover to a server without it) by a new slot of the same name, and in
// the snapshot the new slot exports hands to the stream every row of the
// outbox not proven delivered, as `cdc init --adopt` does (docs/design.md,
// "A lost slot"): rows committed before the new slot are relayed from the
// table, those committed after it are streamed. It refuses a slot the
// server has not invalidated, and one a process holds. It reports each
// step with report.
//
// With postgres.primary_url the slot is replaced on the standby and the
// rows are handed to it from the primary (createSlotOnStandbyEmitting).
func Recover(ctx context.Context, cfg *config.Config, opts RecoverOptions, report func(string)) error {
	conns, err := replication.OpenConns(ctx, cfg.Postgres.URL, cfg.Postgres.PrimaryURL)
	if err != nil {
		return err
	}
	defer conns.Close()
	conn, src := conns.State, conns.Slot
	t := outboxdb.Target(cfg)
	if t.TableLess {
		return fmt.Errorf("%w: postgres.source is messages: a table-less outbox keeps no rows to relay again; what was committed after the slot's confirmed position can only be emitted again by the application. "+
			"Drop the slot (SELECT pg_drop_replication_slot('%s')) and run cdc init", ErrRecoverTableLess, t.Slot)
	}
	if err := replication.CheckServer(ctx, conn, t); err != nil {
		return err
	}
	if err := replication.CheckPublication(ctx, conn, t); err != nil {
		return err
	}
	// The rows travel as logical messages, which pgoutput sends from 14 on.
	if ok, v, err := replication.SendsMessages(ctx, conn); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: cdc recover needs PostgreSQL 14 or later (the server is %d.%d): it hands the rows to the stream as logical messages; "+
			"instead, drop the slot, run cdc init, then cdc replay --since <a time before the slot's confirmed position>", ErrAdoptNeedsPG14, v/10000, v%10000)
	}
	for _, c := range conns.Topology.Cautions() {
		report("warning: " + c + " (the new slot can be invalidated again)")
	}
	old, err := replication.ReadSlot(ctx, src, t.Slot)
	if err != nil {
		return err
	}
	if err := refuseSlot(t.Slot, old); err != nil {
		return err
	}
	// What proves delivery is read before the slot is dropped: its
	// confirmed position goes with it.
	sel, err := recoverSelection(ctx, conn, cfg, old, opts)
	if err != nil {
		return err
	}
	if old.Exists {
		if _, err := src.Exec(ctx, "SELECT pg_drop_replication_slot($1)", t.Slot); err != nil {
			return fmt.Errorf("dropping the invalidated slot %q: %w (is a relay holding it? stop every relay on the slot first)", t.Slot, err)
		}
		report(fmt.Sprintf("slot %s: invalidated (wal_status %s%s, confirmed %s): dropped", t.Slot, old.WALStatus, old.ReasonNote(), old.ConfirmedFlush))
	} else {
		report(fmt.Sprintf("slot %s: missing (dropped, or a failover to a server without it)", t.Slot))
	}
	create := createSlotEmitting
	if conns.Standby() {
		create = func(ctx context.Context, conn *pgx.Conn, cfg *config.Config, sel selection) (int64, error) {
			return createSlotOnStandbyEmitting(ctx, src, conn, cfg, sel)
		}
	}
	n, err := create(ctx, conn, cfg, sel)
	if err != nil {
		again := "run cdc recover again"
		if sel.since != "" {
			again = "run cdc recover --since " + sel.since + " again (the old slot, and what it proved, is gone)"
		}
		return fmt.Errorf("%w; %s", err, again)
	}
	report(fmt.Sprintf("slot %s: created; %d row(s) of %s not proven delivered (%s) handed to the stream: cdc run relays them, then what commits after "+
		"(some may be duplicates: inboxes drop them by id)", t.Slot, n, t.Outbox, sel.what))
	if cfg.Postgres.FailoverSlot {
		report(fmt.Sprintf("slot %s: not a failover slot (created with an exported snapshot): with no relay running, run ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection", t.Slot, t.Slot))
	}
	if s := retention.SettingsOf(cfg); s != nil {
		// Marks prove delivery for the slot that passed them only.
		if ok, err := store.TableExists(ctx, conn, store.QuoteTable(s.Retention.MarksTable)); err != nil || !ok {
			return err // no marks table: cdc init makes it, empty
		}
		if _, err := retention.ForgetMarks(ctx, conn, *s); err != nil {
			return fmt.Errorf("%w; the new slot holds the rows, but relay.retention must not use the old slot's marks: run DELETE FROM %s WHERE slot = '%s' before cdc run",
				err, s.Retention.MarksTable, t.Slot)
		}
	}
	return nil
}

// refuseSlot is why cdc recover may not replace slot, as old tells it: a
// usable slot, or one a process holds; nil for an invalidated or missing
// slot.
func refuseSlot(slot string, old replication.SlotInfo) error {
	switch {
	case old.Exists && !old.Invalid():
		return fmt.Errorf("%w: slot %q is usable (wal_status %s, confirmed %s): cdc run streams everything from it. cdc recover only replaces a slot the server invalidated (wal_status lost); it never drops a usable one",
			ErrRecoverHealthySlot, slot, old.WALStatus, old.ConfirmedFlush)
	case old.Exists && old.Active:
		return slotInUse("recover", slot, old.ActivePID)
	}
	return nil
}

// recoverSelection returns the rows not proven delivered: with --since,
// those whose time is at or after it; else with columns.sent_at, those
// where it is NULL; else with relay.retention, those whose time is at or
// after the taken_at (less relay.retention.margin) of the newest mark at
// or before the old slot's confirmed position; else those whose time is
// at or after the earliest commit time the progress table holds for the
// slot's sinks, less opts.Margin. Without any, it refuses, naming --since.
func recoverSelection(ctx context.Context, conn *pgx.Conn, cfg *config.Config, old replication.SlotInfo, opts RecoverOptions) (selection, error) {
	t := cfg.Outbox()
	since, why := opts.Since, "--since"
	if opts.SinceAgo > 0 {
		if err := conn.QueryRow(ctx, "SELECT now() - $1::bigint * interval '1 microsecond'", opts.SinceAgo.Microseconds()).Scan(&since); err != nil {
			return selection{}, err
		}
		why = "--since " + opts.SinceAgo.String()
	}
	if since.IsZero() && t.Columns.Has(layout.SentAt) {
		return selection{where: t.Columns.Column(layout.SentAt) + " IS NULL", what: "whose " + t.Columns[layout.SentAt] + " is NULL"}, nil
	}
	var reasons []string
	if since.IsZero() {
		if s := retention.SettingsOf(cfg); s != nil {
			at, err := markBound(ctx, conn, s, old)
			switch {
			case err != nil:
				reasons = append(reasons, err.Error())
			default:
				since = at.Add(-s.Retention.Margin.D())
				why = fmt.Sprintf("the newest retention mark the old slot confirmed, taken %s, less relay.retention.margin %v", at.UTC().Format(time.RFC3339), s.Retention.Margin.D())
			}
		}
	}
	if since.IsZero() {
		at, err := progressBound(ctx, conn, cfg)
		switch {
		case err != nil:
			reasons = append(reasons, err.Error())
		default:
			since = at.Add(-opts.Margin)
			why = fmt.Sprintf("the last commit every sink acknowledged, at %s, less --margin %v", at.UTC().Format(time.RFC3339), opts.Margin)
		}
	}
	if since.IsZero() {
		return selection{}, fmt.Errorf("%w: columns.sent_at is not mapped, and %s. Pass --since with a time before the last delivery you are sure of "+
			"(a duration such as 24h, or a timestamp such as 2026-01-02T15:04:05Z): every row whose time is at or after it is relayed again%s",
			ErrRecoverNoBound, strings.Join(reasons, "; "), oldest(ctx, conn, cfg))
	}
	col, bound, err := timeColumn(ctx, conn, cfg)
	if err != nil {
		return selection{}, err
	}
	ts := since.UTC().Format(time.RFC3339Nano)
	return selection{where: fmt.Sprintf("(%s >= %s OR %[1]s IS NULL)", pgx.Identifier{col}.Sanitize(), bound), args: []any{since},
		what: fmt.Sprintf("whose %s is at or after %s: %s", col, ts, why), since: ts}, nil
}

// oldest says how many rows the table holds and since when, for the
// error that asks for --since ("" when it cannot tell).
func oldest(ctx context.Context, conn *pgx.Conn, cfg *config.Config) string {
	col, _, err := timeColumn(ctx, conn, cfg)
	if err != nil {
		return ""
	}
	var n int64
	var at *time.Time
	if conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*), min(%s)::timestamptz FROM %s", pgx.Identifier{col}.Sanitize(), cfg.Outbox().Qualified())).Scan(&n, &at) != nil || at == nil {
		return ""
	}
	return fmt.Sprintf(" (%s holds %d row(s), the oldest from %s: --since %s relays them all)", cfg.Outbox(), n, at.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
}

// markBound returns the taken_at of the newest retention mark at or
// before the old slot's confirmed position: every transaction committed
// before it was acknowledged by every sink.
func markBound(ctx context.Context, conn *pgx.Conn, s *retention.Settings, old replication.SlotInfo) (time.Time, error) {
	if !old.Exists {
		return time.Time{}, errors.New("the slot is gone, and with it the confirmed position that tells which retention marks were delivered")
	}
	var at time.Time
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT taken_at FROM %s WHERE slot = $1 AND lsn <= $2::pg_lsn ORDER BY lsn DESC LIMIT 1",
		store.QuoteTable(s.Retention.MarksTable)), s.Slot, old.ConfirmedFlush.String()).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return at, fmt.Errorf("%s holds no mark the slot confirmed (at %s)", s.Retention.MarksTable, old.ConfirmedFlush)
	case err != nil:
		return at, fmt.Errorf("reading %s: %w", s.Retention.MarksTable, err)
	}
	return at, nil
}

// progressBound returns the earliest, over the configured sinks, of the
// commit time of the last message each acknowledged (the progress
// table's commit_time).
func progressBound(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (time.Time, error) {
	tables := store.TablesOf(cfg)
	if tables.Progress == "" {
		return time.Time{}, errors.New(`postgres.progress_table is "-" (no per-sink progress is kept)`)
	}
	progress, err := store.LoadProgress(ctx, conn, tables) // no commit time from a table made before it
	if err != nil {
		return time.Time{}, fmt.Errorf("reading %s: %w", tables.ProgressName, err)
	}
	var sinks []string
	for _, s := range cfg.Sinks {
		sinks = append(sinks, s.Name)
	}
	min, missing := earliestAcked(sinks, progress)
	if len(missing) > 0 {
		return time.Time{}, fmt.Errorf("%s records no commit time for sink(s) %s of slot %s (nothing acknowledged yet, or saved before walpost kept it)",
			tables.ProgressName, strings.Join(missing, ", "), tables.Slot)
	}
	return min, nil
}

// earliestAcked returns the earliest commit time of the last message each
// of sinks acknowledged (progress, by sink), and, sorted, the sinks with
// no commit time recorded: the bound is then unknown (min is zero when
// every sink is missing).
func earliestAcked(sinks []string, progress map[string]store.Position) (min time.Time, missing []string) {
	for _, s := range sinks {
		at := progress[s].CommitTime
		switch {
		case at.IsZero():
			missing = append(missing, s)
		case min.IsZero() || at.Before(min):
			min = at
		}
	}
	slices.Sort(missing)
	return min, missing
}

// timeCandidates are the columns that may give a row's time, in the order
// timeColumn tries them: columns.time, relay.retention.column, created_at.
func timeCandidates(cfg *config.Config) []string {
	var out []string
	for _, c := range []string{cfg.Outbox().Columns[layout.Time], retentionColumn(cfg), layout.DefaultTime} {
		if c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// retentionColumn is relay.retention.column, "" without retention.
func retentionColumn(cfg *config.Config) string {
	if r := cfg.Relay.Retention; r != nil {
		return r.Column
	}
	return ""
}

// timeBound is the SQL of the bound $2 (a timestamptz) compared with a
// column of type typ (format_type's name), and false for a type that
// gives no time.
func timeBound(typ string) (string, bool) {
	switch typ {
	case "timestamp with time zone":
		return "$2::timestamptz", true
	case "timestamp without time zone":
		return "($2::timestamptz AT TIME ZONE 'UTC')", true // as columns.time reads it
	}
	return "", false
}

// timeColumn returns the column that gives a row's time (columns.time,
// else relay.retention.column, else created_at when the table has it, as
// the default layout does) and the SQL of the bound $2 compared with it.
func timeColumn(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (col, bound string, err error) {
	t := cfg.Outbox()
	for _, c := range timeCandidates(cfg) {
		var typ string
		err := conn.QueryRow(ctx, "SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped",
			t.Qualified(), c).Scan(&typ)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", "", fmt.Errorf("reading the columns of %s: %w", t, err)
		}
		if bound, ok := timeBound(typ); ok {
			return c, bound, nil
		}
		return "", "", fmt.Errorf("%w: column %q of %s has type %s; selecting the rows by time needs a timestamptz or timestamp column: map columns.time to one",
			ErrRecoverNoBound, c, t, typ)
	}
	return "", "", fmt.Errorf("%w: selecting the rows by time needs the row's time: map columns.time (the default layout's created_at is used when the table has it)",
		ErrRecoverNoBound)
}
