package ops

import (
	"context"
	"slices"
	"time"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/store"
)

// Status is the status view: cdc status --json, and each source of
// /api/v1/sources (docs/operations.md, "cdc status", documents each
// field). The fields about the slot are null when it is missing, and so
// are dead_letters and held_keys.
type Status struct {
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
	Topology           string       `json:"topology"`
	HotStandbyFeedback *bool        `json:"hot_standby_feedback"`
	Sinks              []SinkStatus `json:"sinks"`
	SlowestSink        *string      `json:"slowest_sink"`
	DeadLetters        *DeadLetters `json:"dead_letters"`
	HeldKeys           []HeldKey    `json:"held_keys"`
	// Warnings: why cdc run would refuse the slot, and what threatens it.
	Warnings []string `json:"warnings"`
	// OutboxWarnings: why outbox rows may not reach the sinks.
	OutboxWarnings []string `json:"outbox_warnings"`

	st *admin.Status
}

// SinkStatus is one sink's progress.
type SinkStatus struct {
	Name                  string  `json:"name"`
	AcknowledgedCommitLSN *string `json:"acknowledged_commit_lsn"`
	// AcknowledgedCommitTime is when that commit was made (null when
	// unknown).
	AcknowledgedCommitTime *time.Time `json:"acknowledged_commit_time"`
	// Failing: a relay recorded the sink's publishes failing
	// (FailingSince, LastError and LastErrorAt are null otherwise).
	Failing      bool    `json:"failing"`
	FailingSince *string `json:"failing_since"`
	LastError    *string `json:"last_error"`
	LastErrorAt  *string `json:"last_error_at"`
}

// DeadLetters counts the slot's parked rows, resent ones included.
type DeadLetters struct {
	Table string `json:"table"`
	// Total is every row: Unmappable, Refused and Held.
	Total      int            `json:"total"`
	Unmappable int            `json:"unmappable"`
	Refused    map[string]int `json:"refused"`
	// Held counts the valid messages parked only because their key was
	// held behind another (relay.on_invalid or on_refused: hold_key).
	Held int `json:"held"`
}

// HeldKey is a key held behind a parked message (relay.on_invalid or
// on_refused: hold_key).
type HeldKey struct {
	Sink string `json:"sink"` // "" held for every sink (relay.on_invalid)
	Key  string `json:"key"`
	// HeadID and HeadAt name the head, the message the key waits behind;
	// Head is its row (null when it was resent or dropped meanwhile).
	HeadID   string   `json:"head_id"`
	HeadAt   string   `json:"head_at"`
	Head     *Message `json:"head"`
	Messages int      `json:"messages"` // the key's rows not resent, the head included
}

func ptr[T any](v T) *T { return &v }

// Status reads the status view, read-only (admin.ReadStatusOn), each
// held key with its head row (one query, store.Heads), and with
// Options.CheckProgressTopics the cautions of the kafka sinks' progress
// topics among the warnings.
func (r *Room) Status(ctx context.Context) (*Status, error) {
	st, err := admin.ReadStatusOn(ctx, r.cfg, r.conns)
	if err != nil {
		return nil, err
	}
	v := r.statusOf(st)
	if len(st.Held) > 0 {
		heads, err := store.Heads(ctx, r.conns.State, r.t)
		if err != nil {
			return nil, err
		}
		for i := range v.HeldKeys {
			h := &v.HeldKeys[i]
			if p, ok := heads[[2]string{h.Sink, h.Key}]; ok {
				h.Head = ptr(r.message(&p))
			}
		}
	}
	if r.topics && v.Exists {
		v.Warnings = append(v.Warnings, r.redactAll(kafkaProgressCautions(ctx, r.cfg, st.Slot.CurrentWAL))...)
	}
	return v, nil
}

// Err is the error cdc status exits 1 with (admin.Status.Err); configPath
// names the configuration file in the advice.
func (v *Status) Err(configPath string) error { return v.st.Err(configPath) }

// statusOf is st as the view shows it.
func (r *Room) statusOf(st *admin.Status) *Status {
	info := st.Slot
	v := &Status{st: st, Slot: r.cfg.Postgres.Slot, Exists: info.Exists, CurrentWAL: info.CurrentWAL.String(), Sinks: []SinkStatus{}, Topology: "primary",
		Warnings: r.redactAll(append(slices.Clone(st.Warnings), st.Cautions...)), OutboxWarnings: r.redactAll(st.Coverage)}
	switch {
	case st.Topology.Standby:
		v.Topology, v.HotStandbyFeedback = "standby", ptr(st.Topology.Feedback)
	case st.Topology.Promoted:
		v.Topology = "promoted"
	}
	for _, s := range r.cfg.Sinks {
		v.Sinks = append(v.Sinks, r.sinkStatus(st, s.Name))
	}
	if !info.Exists {
		return v
	}
	v.Plugin, v.Database, v.Active = ptr(info.Plugin), ptr(info.Database), info.Active
	if info.Active {
		v.ActivePID = ptr(info.ActivePID)
	}
	v.ConfirmedLSN = ptr(info.ConfirmedFlush.String())
	v.LagBytes, v.RetainedBytes = ptr(info.LagBytes), ptr(info.RetainedBytes)
	if info.WALStatus != "" {
		v.WALStatus = ptr(info.WALStatus)
	}
	v.SafeWALSize = info.SafeWALSize
	if info.Invalidation != "" {
		v.Invalidation = ptr(info.Invalidation)
	} else if info.Invalid() {
		v.Invalidation = ptr("wal_removed") // wal_status lost on a server that gives no reason (before 17)
	}
	if s := st.Slowest(); s != "" {
		v.SlowestSink = ptr(s)
	}
	dl := &DeadLetters{Table: r.cfg.Postgres.DeadLetterTable, Refused: map[string]int{}}
	for sink, n := range st.Parked {
		dl.Total += n
		if sink == "" {
			dl.Unmappable += n
		} else {
			dl.Refused[sink] = n
		}
	}
	for _, n := range st.HeldBehind {
		dl.Total += n
		dl.Held += n
	}
	v.DeadLetters = dl
	v.HeldKeys = []HeldKey{}
	for _, h := range st.Held {
		v.HeldKeys = append(v.HeldKeys, HeldKey{Sink: h.Sink, Key: h.Key, HeadID: h.HeadID, HeadAt: store.FormatAt(h.Head.LSN, h.Head.Seq), Messages: h.Messages})
	}
	return v
}

// sinkStatus is the sink's progress and health in st.
func (r *Room) sinkStatus(st *admin.Status, name string) SinkStatus {
	s := SinkStatus{Name: name}
	if p, ok := st.Progress[name]; ok {
		s.AcknowledgedCommitLSN = ptr(p.CommitLSN.String())
		if !p.CommitTime.IsZero() {
			s.AcknowledgedCommitTime = ptr(p.CommitTime.UTC())
		}
	}
	if h, ok := st.Failing[name]; ok {
		s.Failing = true
		s.FailingSince, s.LastError = ptr(h.FailingSince.UTC().Format(time.RFC3339)), ptr(r.redact(h.LastError))
		s.LastErrorAt = ptr(h.LastErrorAt.UTC().Format(time.RFC3339))
	}
	return s
}

func (r *Room) redactAll(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, r.redact(s))
	}
	return out
}
