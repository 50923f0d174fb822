package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// status is what cdc status found: the slot, and when it exists each
// sink's progress and the parked messages.
type status struct {
	cfg      *config.Config
	slot     replication.SlotInfo
	progress map[string]store.Position // by sink
	parked   map[string]int            // by sink; "" for rows that could not be mapped
	warnings []string                  // why cdc run would refuse the slot
	cautions []string                  // what threatens the slot or the stream (wal_status unreserved, relay.EmitRisk); not a refusal
	coverage []string                  // why rows may not reach the sinks (coverageWarnings)
}

// statusCmd is cdc status [--json]. It exits 1 (an error) when the slot is
// missing or cdc run would refuse it, after printing what it found.
func statusCmd(e *cmdEnv) error {
	st, err := readStatus(e)
	if err != nil {
		return err
	}
	if e.opts.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st.jsonReport()); err != nil {
			return err
		}
	} else {
		st.printText(e.stdout)
	}
	slot := e.cfg.Postgres.Slot
	switch {
	case !st.slot.Exists:
		return fmt.Errorf("slot %q is missing: run cdc init", slot)
	case st.slot.Invalid():
		return fmt.Errorf("slot %q was invalidated by the server (wal_status %s): %s; cdc run cannot stream from it. Stop every relay on it and run cdc recover --config %s "+
			"(a new slot; every outbox row not proven delivered is relayed again)", slot, st.slot.WALStatus, st.slot.InvalidReason(), e.opts.config)
	case len(st.warnings) > 0:
		return fmt.Errorf("slot %q cannot be used by cdc run: %s", slot, st.warnings[0])
	case len(st.coverage) > 0:
		return fmt.Errorf("outbox rows may not reach the sinks: %s", st.coverage[0])
	}
	return nil
}

func readStatus(e *cmdEnv) (*status, error) {
	ctx, cfg := e.ctx, e.cfg
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	st := &status{cfg: cfg}
	if st.slot, err = replication.ReadSlot(ctx, conn, cfg.Postgres.Slot); err != nil {
		return nil, err
	}
	if !st.slot.Exists {
		return st, nil
	}
	if st.warnings, err = slotWarnings(ctx, conn, cfg); err != nil {
		return nil, err
	}
	if risk, err := relay.EmitRisk(ctx, conn, cfg); err != nil {
		return nil, err
	} else if risk != "" {
		st.cautions = append(st.cautions, risk)
	}
	if w, err := outdatedWarnings(ctx, conn, cfg); err != nil {
		return nil, err
	} else {
		st.warnings = append(st.warnings, w...)
	}
	if st.slot.WALStatus == "unreserved" {
		st.cautions = append(st.cautions, "wal_status unreserved: the WAL the slot still needs is beyond max_slot_wal_keep_size, and the next checkpoint may remove it "+
			"and invalidate the slot; let the relay catch up (is it running?) or raise max_slot_wal_keep_size")
	}
	if len(st.warnings) == 0 {
		if st.coverage, err = coverageWarnings(ctx, conn, cfg); err != nil {
			return nil, err
		}
	}
	if st.progress, err = store.LoadProgress(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, fmt.Errorf("reading sink progress: %w", err)
	}
	if st.parked, err = store.DeadLetterCounts(ctx, conn, store.TablesOf(cfg)); err != nil {
		return nil, fmt.Errorf("reading the dead-letter table: %w", err)
	}
	return st, nil
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
// (relay.CoverageWarnings; docs/design.md, "The publication or the table
// changing under the relay").
func coverageWarnings(ctx context.Context, conn *pgx.Conn, cfg *config.Config) ([]string, error) {
	w, err := relay.CoverageWarnings(ctx, conn, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading what publishes the outbox: %w", err)
	}
	return w, nil
}

// slowest returns the configured sink that acknowledged the least, "" when
// none saved progress.
func (st *status) slowest() string {
	var name string
	var min pglogrepl.LSN
	for _, s := range st.cfg.Sinks {
		if p, ok := st.progress[s.Name]; ok && (name == "" || p.CommitLSN < min) {
			name, min = s.Name, p.CommitLSN
		}
	}
	return name
}

func (st *status) printText(w io.Writer) {
	cfg, info := st.cfg, st.slot
	if !info.Exists {
		fmt.Fprintf(w, "slot %s: missing (run cdc init)\ncurrent WAL: %s\n", cfg.Postgres.Slot, info.CurrentWAL)
		return
	}
	active := "no"
	if info.Active {
		active = fmt.Sprintf("yes (pid %d)", info.ActivePID)
	}
	fmt.Fprintf(w, "slot:          %s (plugin %s, database %s)\n", cfg.Postgres.Slot, info.Plugin, info.Database)
	fmt.Fprintf(w, "active:        %s\n", active)
	fmt.Fprintf(w, "confirmed LSN: %s\n", info.ConfirmedFlush)
	fmt.Fprintf(w, "current WAL:   %s\n", info.CurrentWAL)
	fmt.Fprintf(w, "lag:           %s (current WAL - confirmed)\n", humanBytes(info.LagBytes))
	if info.Invalid() {
		fmt.Fprintf(w, "retained WAL:  none: the slot is invalidated (%s)\n", info.InvalidReason())
	} else {
		fmt.Fprintf(w, "retained WAL:  %s (current WAL - restart LSN)\n", humanBytes(info.RetainedBytes))
	}
	if info.WALStatus != "" {
		safe := ""
		if info.SafeWALSize != nil {
			safe = fmt.Sprintf(" (safe WAL size %s: what may still be written before max_slot_wal_keep_size threatens the slot)", humanBytes(*info.SafeWALSize))
		}
		fmt.Fprintf(w, "WAL status:    %s%s\n", info.WALStatus, safe)
	}
	for _, s := range cfg.Sinks {
		p, ok := st.progress[s.Name]
		switch {
		case !ok:
			fmt.Fprintf(w, "sink %-8s  no progress saved yet\n", s.Name+":")
		case p.CommitLSN < info.ConfirmedFlush:
			fmt.Fprintf(w, "sink %-8s  acknowledged up to commit %s (at the slot)\n", s.Name+":", p.CommitLSN)
		default:
			fmt.Fprintf(w, "sink %-8s  acknowledged up to commit %s\n", s.Name+":", p.CommitLSN)
		}
	}
	if slowest := st.slowest(); len(cfg.Sinks) > 1 && slowest != "" && info.LagBytes > 0 {
		fmt.Fprintf(w, "slowest sink:  %s (the slot advances at its pace)\n", slowest)
	}
	if len(st.parked) > 0 {
		var parts []string
		total := 0
		for _, sink := range slices.Sorted(maps.Keys(st.parked)) {
			total += st.parked[sink]
			if sink == "" {
				parts = append(parts, fmt.Sprintf("rows that could not be mapped: %d", st.parked[sink]))
			} else {
				parts = append(parts, fmt.Sprintf("refused by sink %s: %d", sink, st.parked[sink]))
			}
		}
		fmt.Fprintf(w, "dead letters:  %d in %s (%s)\n", total, cfg.Postgres.DeadLetterTable, strings.Join(parts, ", "))
	}
	for _, warning := range append(append(slices.Clone(st.warnings), st.coverage...), st.cautions...) {
		fmt.Fprintf(w, "warning:       %s\n", warning)
	}
}

// humanBytes writes n in binary units (1 KiB = 1024 B) with one decimal:
// "512 B", "1.5 KiB", "12.3 MiB".
func humanBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for (v >= 1024 || v <= -1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// statusJSON is cdc status --json; README.md ("Use it") documents each
// field. Fields about the slot are null when it is missing.
type statusJSON struct {
	Slot          string          `json:"slot"`
	Exists        bool            `json:"exists"`
	Plugin        *string         `json:"plugin"`
	Database      *string         `json:"database"`
	Active        bool            `json:"active"`
	ActivePID     *int32          `json:"active_pid"`
	ConfirmedLSN  *string         `json:"confirmed_lsn"`
	CurrentWAL    string          `json:"current_wal"`
	LagBytes      *int64          `json:"lag_bytes"`
	RetainedBytes *int64          `json:"retained_bytes"`
	WALStatus     *string         `json:"wal_status"`
	SafeWALSize   *int64          `json:"safe_wal_size"`
	Invalidation  *string         `json:"invalidation_reason"`
	Sinks         []sinkJSON      `json:"sinks"`
	SlowestSink   *string         `json:"slowest_sink"`
	DeadLetters   *deadLettersRep `json:"dead_letters"`
	Warnings      []string        `json:"warnings"`
	// OutboxWarnings: why outbox rows may not reach the sinks
	// (coverageWarnings).
	OutboxWarnings []string `json:"outbox_warnings"`
}

type sinkJSON struct {
	Name                  string  `json:"name"`
	AcknowledgedCommitLSN *string `json:"acknowledged_commit_lsn"`
}

type deadLettersRep struct {
	Table      string         `json:"table"`
	Total      int            `json:"total"`
	Unmappable int            `json:"unmappable"`
	Refused    map[string]int `json:"refused"`
}

func ptr[T any](v T) *T { return &v }

func (st *status) jsonReport() statusJSON {
	info := st.slot
	r := statusJSON{Slot: st.cfg.Postgres.Slot, Exists: info.Exists, CurrentWAL: info.CurrentWAL.String(),
		Sinks: []sinkJSON{}, Warnings: append(append([]string{}, st.warnings...), st.cautions...), OutboxWarnings: append([]string{}, st.coverage...)}
	for _, s := range st.cfg.Sinks {
		sj := sinkJSON{Name: s.Name}
		if p, ok := st.progress[s.Name]; ok {
			sj.AcknowledgedCommitLSN = ptr(p.CommitLSN.String())
		}
		r.Sinks = append(r.Sinks, sj)
	}
	if !info.Exists {
		return r
	}
	r.Plugin, r.Database, r.Active = ptr(info.Plugin), ptr(info.Database), info.Active
	if info.Active {
		r.ActivePID = ptr(info.ActivePID)
	}
	r.ConfirmedLSN = ptr(info.ConfirmedFlush.String())
	r.LagBytes, r.RetainedBytes = ptr(info.LagBytes), ptr(info.RetainedBytes)
	if info.WALStatus != "" {
		r.WALStatus = ptr(info.WALStatus)
	}
	r.SafeWALSize = info.SafeWALSize
	if info.Invalidation != "" {
		r.Invalidation = ptr(info.Invalidation)
	} else if info.Invalid() {
		r.Invalidation = ptr("wal_removed") // wal_status lost on a server that gives no reason (before 17)
	}
	if s := st.slowest(); s != "" {
		r.SlowestSink = ptr(s)
	}
	dl := &deadLettersRep{Table: st.cfg.Postgres.DeadLetterTable, Refused: map[string]int{}}
	for sink, n := range st.parked {
		dl.Total += n
		if sink == "" {
			dl.Unmappable += n
		} else {
			dl.Refused[sink] = n
		}
	}
	r.DeadLetters = dl
	return r
}
