package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/store"
)

// statusCmd is cdc status [--json]. It exits 1 (an error) when the slot is
// missing or cdc run would refuse it, after printing what it found
// (admin.Status.Err).
func statusCmd(e *cmdEnv) error {
	st, err := admin.ReadStatus(e.ctx, e.cfg)
	if err != nil {
		return err
	}
	if st.Slot.Exists {
		st.Cautions = append(st.Cautions, kafkaProgressCautions(e.ctx, e.cfg, st)...)
	}
	if e.opts.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(statusReport(e.cfg, st)); err != nil {
			return err
		}
	} else {
		printStatus(e.stdout, e.cfg, st)
	}
	return st.Err(e.opts.config)
}

// printStatus prints st as text.
func printStatus(w io.Writer, cfg *config.Config, st *admin.Status) {
	info := st.Slot
	if !info.Exists {
		fmt.Fprintf(w, "slot %s: missing (run cdc init)\ncurrent WAL: %s\n", cfg.Postgres.Slot, info.CurrentWAL)
		return
	}
	active := "no"
	if info.Active {
		active = fmt.Sprintf("yes (pid %d)", info.ActivePID)
	}
	fmt.Fprintf(w, "slot:          %s (plugin %s, database %s)\n", cfg.Postgres.Slot, info.Plugin, info.Database)
	if st.Topology.Standby || st.Topology.Promoted {
		fmt.Fprintf(w, "topology:      %s\n", st.Topology.Describe())
	}
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
		if h, ok := st.Failing[s.Name]; ok {
			fmt.Fprintf(w, "sink %-8s  FAILING since %s, last error at %s: %s\n", s.Name+":",
				h.FailingSince.UTC().Format(time.RFC3339), h.LastErrorAt.UTC().Format(time.RFC3339), h.LastError)
		}
		p, ok := st.Progress[s.Name]
		switch {
		case !ok:
			fmt.Fprintf(w, "sink %-8s  no progress saved yet\n", s.Name+":")
		case p.CommitLSN < info.ConfirmedFlush:
			fmt.Fprintf(w, "sink %-8s  acknowledged up to commit %s (at the slot)\n", s.Name+":", p.CommitLSN)
		default:
			fmt.Fprintf(w, "sink %-8s  acknowledged up to commit %s\n", s.Name+":", p.CommitLSN)
		}
	}
	if slowest := st.Slowest(); len(cfg.Sinks) > 1 && slowest != "" && info.LagBytes > 0 {
		fmt.Fprintf(w, "slowest sink:  %s (the slot advances at its pace)\n", slowest)
	}
	if len(st.Parked) > 0 {
		var parts []string
		total := 0
		for _, sink := range slices.Sorted(maps.Keys(st.Parked)) {
			total += st.Parked[sink]
			if sink == "" {
				parts = append(parts, fmt.Sprintf("rows that could not be mapped: %d", st.Parked[sink]))
			} else {
				parts = append(parts, fmt.Sprintf("refused by sink %s: %d", sink, st.Parked[sink]))
			}
		}
		fmt.Fprintf(w, "dead letters:  %d in %s (%s)\n", total, cfg.Postgres.DeadLetterTable, strings.Join(parts, ", "))
	}
	if len(st.Held) > 0 {
		fmt.Fprintf(w, "held keys:     %d (their messages are parked behind the first; cdc dead-letter resend or drop of it releases the key in order)\n", len(st.Held))
		for i, h := range st.Held {
			if i == 10 {
				fmt.Fprintf(w, "               ... and %d more (cdc dead-letter list)\n", len(st.Held)-i)
				break
			}
			head := store.FormatAt(h.Head.LSN, h.Head.Seq)
			if h.HeadID != "" {
				head = h.HeadID + " at " + head
			}
			fmt.Fprintf(w, "               key %q, sink %s: %d parked, behind %s\n", h.Key, sinkLabel(h.Sink), h.Messages, head)
		}
	}
	for _, warning := range append(append(slices.Clone(st.Warnings), st.Coverage...), st.Cautions...) {
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

// statusJSON is cdc status --json; docs/operations.md ("cdc status") documents each
// field. Fields about the slot are null when it is missing.
type statusJSON struct {
	Slot          string  `json:"slot"`
	Exists        bool    `json:"exists"`
	Plugin        *string `json:"plugin"`
	Database      *string `json:"database"`
	Active        bool    `json:"active"`
	ActivePID     *int32  `json:"active_pid"`
	ConfirmedLSN  *string `json:"confirmed_lsn"`
	CurrentWAL    string  `json:"current_wal"`
	LagBytes      *int64  `json:"lag_bytes"`
	RetainedBytes *int64  `json:"retained_bytes"`
	WALStatus     *string `json:"wal_status"`
	SafeWALSize   *int64  `json:"safe_wal_size"`
	Invalidation  *string `json:"invalidation_reason"`
	// Topology: "primary" (the slot on the primary), "standby" (read on
	// a standby, state on postgres.primary_url) or "promoted" (that
	// standby was promoted: everything on postgres.url);
	// HotStandbyFeedback is the standby's setting, null otherwise.
	Topology           string          `json:"topology"`
	HotStandbyFeedback *bool           `json:"hot_standby_feedback"`
	Sinks              []sinkJSON      `json:"sinks"`
	SlowestSink        *string         `json:"slowest_sink"`
	DeadLetters        *deadLettersRep `json:"dead_letters"`
	HeldKeys           []heldKeyRep    `json:"held_keys"`
	Warnings           []string        `json:"warnings"`
	// OutboxWarnings: why outbox rows may not reach the sinks
	// (admin.Status.Coverage).
	OutboxWarnings []string `json:"outbox_warnings"`
}

type sinkJSON struct {
	Name                  string  `json:"name"`
	AcknowledgedCommitLSN *string `json:"acknowledged_commit_lsn"`
	// Failing: a relay recorded the sink's publishes failing
	// (FailingSince, LastError and LastErrorAt are null otherwise).
	Failing      bool    `json:"failing"`
	FailingSince *string `json:"failing_since"`
	LastError    *string `json:"last_error"`
	LastErrorAt  *string `json:"last_error_at"`
}

type deadLettersRep struct {
	Table      string         `json:"table"`
	Total      int            `json:"total"`
	Unmappable int            `json:"unmappable"`
	Refused    map[string]int `json:"refused"`
}

// heldKeyRep is a held key in --json output.
type heldKeyRep struct {
	Sink     string `json:"sink"` // "" held for every sink (relay.on_invalid)
	Key      string `json:"key"`
	HeadID   string `json:"head_id"`
	HeadAt   string `json:"head_at"`
	Messages int    `json:"messages"`
}

func ptr[T any](v T) *T { return &v }

// statusReport is st as cdc status --json prints it.
func statusReport(cfg *config.Config, st *admin.Status) statusJSON {
	info := st.Slot
	r := statusJSON{Slot: cfg.Postgres.Slot, Exists: info.Exists, CurrentWAL: info.CurrentWAL.String(),
		Sinks: []sinkJSON{}, Warnings: append(append([]string{}, st.Warnings...), st.Cautions...), OutboxWarnings: append([]string{}, st.Coverage...),
		Topology: "primary"}
	switch {
	case st.Topology.Standby:
		r.Topology, r.HotStandbyFeedback = "standby", ptr(st.Topology.Feedback)
	case st.Topology.Promoted:
		r.Topology = "promoted"
	}
	for _, s := range cfg.Sinks {
		sj := sinkJSON{Name: s.Name}
		if p, ok := st.Progress[s.Name]; ok {
			sj.AcknowledgedCommitLSN = ptr(p.CommitLSN.String())
		}
		if h, ok := st.Failing[s.Name]; ok {
			sj.Failing = true
			sj.FailingSince, sj.LastError = ptr(h.FailingSince.UTC().Format(time.RFC3339)), ptr(h.LastError)
			sj.LastErrorAt = ptr(h.LastErrorAt.UTC().Format(time.RFC3339))
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
	if s := st.Slowest(); s != "" {
		r.SlowestSink = ptr(s)
	}
	dl := &deadLettersRep{Table: cfg.Postgres.DeadLetterTable, Refused: map[string]int{}}
	for sink, n := range st.Parked {
		dl.Total += n
		if sink == "" {
			dl.Unmappable += n
		} else {
			dl.Refused[sink] = n
		}
	}
	r.DeadLetters = dl
	r.HeldKeys = []heldKeyRep{}
	for _, h := range st.Held {
		r.HeldKeys = append(r.HeldKeys, heldKeyRep{Sink: h.Sink, Key: h.Key, HeadID: h.HeadID, HeadAt: store.FormatAt(h.Head.LSN, h.Head.Seq), Messages: h.Messages})
	}
	return r
}
