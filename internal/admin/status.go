package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/coverage"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// Status is what cdc status found: the slot, and when it exists each
// sink's progress and the parked messages. cmd/cdc prints it.
type Status struct {
	Slot       replication.SlotInfo
	Progress   map[string]store.Position // by sink
	Parked     map[string]int            // by sink; "" for rows that could not be mapped; held ones not included
	HeldBehind map[string]int            // by sink: valid messages parked only because their key is held
	Held       []store.Hold              // keys held behind a parked message (relay.on_invalid or on_refused: hold_key)
	Warnings   []string                  // why cdc run would refuse the slot
	Cautions   []string                  // what threatens the slot or the stream (wal_status unreserved, outboxdb.EmitRisk); not a refusal
	Coverage   []string                  // why rows may not reach the sinks (coverageWarnings)
	Failing    map[string]store.Health   // by sink: the sinks a relay recorded failing (store.LoadHealth)
	// Topology is where the slot is read: on a standby with
	// postgres.primary_url (replication.CheckTopology).
	Topology replication.Topology

	cfg *config.Config
}

// ReadStatus reads the slot and, when it exists, what cdc run would
// refuse, what threatens the slot, what keeps outbox rows from the
// sinks, each sink's progress and the parked messages (cdc status).
func ReadStatus(ctx context.Context, cfg *config.Config) (*Status, error) {
	conns, err := replication.OpenConns(ctx, cfg.Postgres.URL, cfg.Postgres.PrimaryURL)
	if err != nil {
		return nil, err
	}
	defer conns.Close()
	return ReadStatusOn(ctx, cfg, conns)
}

// ReadStatusOn is ReadStatus on connections the caller opened
// (replication.OpenConns) and closes. Read-only.
func ReadStatusOn(ctx context.Context, cfg *config.Config, conns *replication.Conns) (*Status, error) {
	// The slot is read on postgres.url, the rest where the state tables
	// are (postgres.primary_url when the slot is on a standby).
	src, conn := conns.Slot, conns.State
	st := &Status{cfg: cfg, Topology: conns.Topology}
	var err error
	if st.Slot, err = replication.ReadSlot(ctx, src, cfg.Postgres.Slot); err != nil {
		return nil, err
	}
	if !st.Slot.Exists {
		return st, nil
	}
	if st.Warnings, err = slotWarnings(ctx, src, cfg); err != nil {
		return nil, err
	}
	st.Cautions = append(st.Cautions, st.Topology.Cautions()...)
	if risk, err := outboxdb.EmitRisk(ctx, conn, cfg); err != nil {
		return nil, err
	} else if risk != "" {
		st.Cautions = append(st.Cautions, risk)
	}
	if w, err := outdatedWarnings(ctx, conn, cfg); err != nil {
		return nil, err
	} else {
		st.Warnings = append(st.Warnings, w...)
	}
	if st.Slot.WALStatus == "unreserved" {
		st.Cautions = append(st.Cautions, "wal_status unreserved: the WAL the slot still needs is beyond max_slot_wal_keep_size, and the next checkpoint may remove it "+
			"and invalidate the slot; let the relay catch up (is it running?) or raise max_slot_wal_keep_size")
	}
	if len(st.Warnings) == 0 {
		if st.Coverage, err = coverageWarnings(ctx, conn, cfg); err != nil {
			return nil, err
		}
	}
	if st.Progress, err = store.LoadProgress(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, fmt.Errorf("reading sink progress: %w", err)
	}
	if st.Parked, st.HeldBehind, err = store.ParkedCounts(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, fmt.Errorf("reading the dead-letter table: %w", err)
	}
	if st.Held, err = store.ListHolds(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, err
	}
	if st.Failing, err = store.LoadHealth(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, err
	}
	if missing, err := store.MissingHealth(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, err
	} else if missing {
		st.Cautions = append(st.Cautions, fmt.Sprintf("table %s lacks the columns in which the relay records a failing sink (failing_since, last_error, last_error_at): "+
			"this status cannot show one; run cdc init (as the table's owner) to add them", cfg.Postgres.ProgressTable))
	}
	return st, nil
}

// Err is the error cdc status exits 1 with, after printing st: the slot
// is missing, invalidated, or refused by cdc run, or outbox rows may not
// reach the sinks; nil when none of them. configPath names the
// configuration file in the advice.
func (st *Status) Err(configPath string) error {
	slot := st.cfg.Postgres.Slot
	switch {
	case !st.Slot.Exists:
		return fmt.Errorf("slot %q is missing: run cdc init", slot)
	case st.Slot.Invalid():
		return fmt.Errorf("slot %q was invalidated by the server (wal_status %s): %s; cdc run cannot stream from it. Stop every relay on it and run cdc recover --config %s "+
			"(a new slot; every outbox row not proven delivered is relayed again)", slot, st.Slot.WALStatus, st.Slot.InvalidReason(), configPath)
	case len(st.Warnings) > 0:
		return fmt.Errorf("slot %q cannot be used by cdc run: %s", slot, st.Warnings[0])
	case len(st.Coverage) > 0:
		return fmt.Errorf("outbox rows may not reach the sinks: %s", st.Coverage[0])
	}
	for _, s := range st.cfg.Sinks {
		if h, ok := st.Failing[s.Name]; ok {
			state := "the relay retries; the slot does not advance past what it has not acknowledged"
			if !st.Slot.Active {
				state = "as recorded by the last relay on the slot, which is not running now; a relay that starts clears it"
			}
			return fmt.Errorf("sink %s is failing since %s (%s): %s; check the broker and the sink's settings (the relay's log says more)",
				s.Name, h.FailingSince.UTC().Format(time.RFC3339), state, h.LastError)
		}
	}
	return nil
}

// outdatedWarnings names the state tables made by an older walpost: cdc
// run stops at them unless its role owns them (store.checkUpgraded).
func outdatedWarnings(ctx context.Context, conn *pgx.Conn, cfg *config.Config) ([]string, error) {
	old, err := store.Outdated(ctx, conn, store.TablesOf(cfg))
	if err != nil {
		return nil, fmt.Errorf("reading the state tables: %w", err)
	}
	var w []string
	for _, name := range slices.Sorted(maps.Keys(old)) {
		w = append(w, fmt.Sprintf("table %s was made by an older walpost and lacks %s: run cdc init (as its owner) to add them", name, strings.Join(old[name], ", ")))
	}
	return w, nil
}

// slotWarnings says why cdc run would refuse the slot, and how to fix it:
// the errors of the checks cdc run makes (replication.CheckSlot, and
// CheckFailoverSlot with postgres.failover_slot). An error that is no
// such refusal (the server could not be read) is returned.
func slotWarnings(ctx context.Context, conn *pgx.Conn, cfg *config.Config) ([]string, error) {
	var w []string
	refusal := func(err error, kinds ...error) error {
		for _, k := range kinds {
			if errors.Is(err, k) {
				w = append(w, err.Error())
				return nil
			}
		}
		return err
	}
	slot := cfg.Postgres.Slot
	if _, err := replication.CheckSlot(ctx, conn, slot); err != nil {
		if err := refusal(err, replication.ErrSlotMissing, replication.ErrSlotPlugin, replication.ErrSlotDatabase, replication.ErrSlotInvalidated); err != nil {
			return nil, err
		}
	}
	if cfg.Postgres.FailoverSlot {
		if err := replication.CheckFailoverSlot(ctx, conn, slot); err != nil {
			if err := refusal(err, replication.ErrFailoverUnsupported, replication.ErrNotFailoverSlot); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// coverageWarnings says what keeps outbox rows from the stream: the
// publication not publishing the outbox, a stretch the stream may not have
// carried that is not relayed yet, other tables in the publication
// (CoverageWarnings; docs/design.md, "The publication or the table
// changing under the relay").
func coverageWarnings(ctx context.Context, conn *pgx.Conn, cfg *config.Config) ([]string, error) {
	w, err := CoverageWarnings(ctx, conn, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading what publishes the outbox: %w", err)
	}
	return w, nil
}

// CoverageWarnings says, for cdc status, what keeps the outbox from being
// relayed whole: the publication not publishing it now, a stretch the
// stream may not have carried that is not relayed yet (or a change of
// what publishes it since a relay last looked), other tables in the
// publication. None for a table-less outbox.
func CoverageWarnings(ctx context.Context, conn *pgx.Conn, cfg *config.Config) ([]string, error) {
	if cfg.Postgres.TableLess() {
		return nil, nil
	}
	t := outboxdb.Target(cfg)
	cur, err := coverage.Read(ctx, conn, t)
	if err != nil {
		return nil, err
	}
	var w []string
	if !cur.Covered {
		w = append(w, fmt.Sprintf("the outbox is not published: %s; rows written now are not in the replication stream (a running relay relays them from the table once it is published again)", cur.Why))
	}
	cov, err := coverage.Load(ctx, conn, store.TablesOf(cfg))
	if err != nil {
		return nil, err
	}
	switch {
	case cov == nil:
	case cov.Open():
		to := "now"
		if !cov.GapTo.IsZero() {
			to = cov.GapTo.UTC().Format(time.RFC3339)
		}
		w = append(w, fmt.Sprintf("rows committed from %s to %s may not be in the replication stream and are not relayed yet: cdc run relays them from the table (if it is stopped at an error, follow its advice: cdc resync)",
			cov.GapFrom.UTC().Format(time.RFC3339), to))
	case cur.Covered && cov.Seen != cur.Seen:
		w = append(w, fmt.Sprintf("what publishes the outbox changed since a relay last looked (%s): rows committed since %s may not be in the replication stream; cdc run relays them from the table",
			cov.VerifiedAt.UTC().Format(time.RFC3339), cov.VerifiedAt.UTC().Format(time.RFC3339)))
	}
	if len(cur.Others) > 0 {
		w = append(w, fmt.Sprintf("publication %q also publishes %s: those rows are in the replication stream and skipped; remove them from the publication", t.Publication, strings.Join(cur.Others, ", ")))
	}
	return w, nil
}

// Slowest returns the configured sink that acknowledged the least, "" when
// none saved progress.
func (st *Status) Slowest() string {
	var name string
	var min pglogrepl.LSN
	for _, s := range st.cfg.Sinks {
		if p, ok := st.Progress[s.Name]; ok && (name == "" || p.CommitLSN < min) {
			name, min = s.Name, p.CommitLSN
		}
	}
	return name
}
