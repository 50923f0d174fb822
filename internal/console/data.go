package console

import (
	"context"

	"github.com/walpost/walpost/internal/ops"
)

// SourceView is a source as /api/v1/sources shows it: its status view
// (ops.Status, the fields of cdc status --json) and what this process
// knows of it: where a fleet runs it, each sink's throughput, how long
// the slot stalled, the lag history.
type SourceView struct {
	Name string `json:"name"`
	// State is its state in this instance's fleet (docs/fleet.md); "" outside one.
	State string `json:"state,omitempty"`
	// Error is why its status could not be read (the status is then empty).
	Error string `json:"error,omitempty"`
	ops.Status
	LagSeconds    float64 `json:"lag_seconds"` // walpost_slot_stalled_seconds
	OldestSeconds float64 `json:"oldest_inflight_seconds"`
	// Throughput is each sink's, in the order of Sinks.
	Throughput []SinkRate `json:"throughput"`
	// History is the lag over the last hour, oldest first.
	History []Sample `json:"history"`
}

// SinkRate is what this process published to a sink, and how fast.
type SinkRate struct {
	Name string `json:"name"`
	// Published counts the messages published, released ones included
	// (walpost_messages_published_total).
	Published float64 `json:"published"`
	// RatePerSecond is over the last sample interval; null before two samples.
	RatePerSecond *float64 `json:"rate_per_second"`
}

// Detail is /api/v1/sources/NAME: the source and its parked messages not
// resent, by failure (ops.ParkedGroups, the first maxShown).
type Detail struct {
	SourceView
	ops.ParkedGroups
}

// maxShown is the most parked messages a view lists.
const maxShown = 500

// detail reads src through one ops.Room: its status and, withParked,
// its parked messages by failure. Read-only.
func (c *Console) detail(ctx context.Context, src *source, withParked bool) Detail {
	v := SourceView{Name: src.Name, Status: ops.Status{Slot: src.Config.Postgres.Slot, Sinks: []ops.SinkStatus{}, HeldKeys: []ops.HeldKey{}, Warnings: []string{},
		OutboxWarnings: []string{}}, Throughput: []SinkRate{}, History: src.hist.list()}
	if c.fleet != nil {
		v.State = c.fleet().StateOf(src.Name)
	}
	met := c.metrics(src)
	v.LagSeconds, v.OldestSeconds = met.Stalled, met.Inflight
	rate := rates(v.History)
	for _, s := range src.Config.Sinks {
		sr := SinkRate{Name: s.Name, Published: met.Published[s.Name]}
		if r, ok := rate[s.Name]; ok {
			sr.RatePerSecond = &r
		}
		v.Throughput = append(v.Throughput, sr)
	}
	d := Detail{SourceView: v, ParkedGroups: ops.ParkedGroups{Groups: []ops.Group{}}}
	room, err := ops.Open(ctx, src.Config, ops.Options{Log: c.log, Redact: c.redact, Sinks: src.Sinks})
	if err != nil {
		d.Error = c.redact(err.Error())
		return d
	}
	defer room.Close()
	st, err := room.Status(ctx)
	if err != nil {
		d.Error = c.redact(err.Error())
		return d
	}
	d.Status = *st
	if !withParked || !st.Exists {
		return d
	}
	if d.ParkedGroups, err = room.ParkedGroups(ctx, maxShown); err != nil {
		d.Error = c.redact(err.Error())
	}
	return d
}
