package config

import (
	"time"

	"github.com/walpost/walpost/internal/sqlident"
)

// Retention is relay.retention: the relay deletes outbox rows that every
// sink acknowledged once they are older than Keep. Off when the section
// is absent. How a row is proven delivered: docs/design.md, "Retention".
type Retention struct {
	// Keep is how long a delivered row stays in the table, measured on
	// Column (required, > 0).
	Keep Duration `yaml:"keep"`
	// Column is the timestamptz or timestamp column whose value is the
	// row's time (default columns.time when mapped, else created_at).
	// Checked at start: it must exist and be a timestamp.
	Column string `yaml:"column"`
	// Margin is the longest a transaction may take from its row's time to
	// its commit (plus any clock skew when the application sets the time)
	// for the proof of delivery to hold (default 1h; 0 or more).
	Margin *Duration `yaml:"margin"`
	// Interval is the time between two rounds (default 1m; at least 100ms).
	Interval Duration `yaml:"interval"`
	// Batch is the most rows one DELETE removes (default 1000; 1..100000).
	Batch int `yaml:"batch"`
	// Pause is the sleep between two batches of a round (default 100ms;
	// 0 or more), so that deleting never hogs the server.
	Pause *Duration `yaml:"pause"`
	// MarksTable is the state table of the relay's (time, WAL position)
	// marks, created by `cdc init` (default public.walpost_retention_marks).
	MarksTable string `yaml:"marks_table"`
}

// setRetentionDefaults fills relay.retention's unset fields, when the
// section is there.
func (c *Config) setRetentionDefaults() {
	r := c.Relay.Retention
	if r == nil {
		return
	}
	if r.Column == "" {
		r.Column = "created_at"
		if c.Columns.Time != "" && c.Columns.Time != "-" {
			r.Column = c.Columns.Time
		}
	}
	if r.Margin == nil {
		d := Duration(time.Hour)
		r.Margin = &d
	}
	if r.Interval == 0 {
		r.Interval = Duration(time.Minute)
	}
	if r.Batch == 0 {
		r.Batch = 1000
	}
	if r.Pause == nil {
		d := Duration(100 * time.Millisecond)
		r.Pause = &d
	}
	def(&r.MarksTable, c.Postgres.StateSchema+".walpost_retention_marks")
}

// validateRetention checks relay.retention, fields in struct order.
func (c *Config) validateRetention() error {
	r := c.Relay.Retention
	if r == nil {
		return nil
	}
	const at = "relay.retention."
	if r.Keep.D() <= 0 {
		return c.fail(at+"keep", "%v: set how long delivered rows stay (more than 0, e.g. 168h), or remove relay.retention", r.Keep.D())
	}
	if err := sqlident.Check(r.Column); err != nil {
		return c.fail(at+"column", "%s is not a usable column name: it is %v", c.q(at+"column", r.Column), err)
	}
	switch {
	case r.Margin != nil && r.Margin.D() < 0:
		return c.fail(at+"margin", "%v is negative", r.Margin.D())
	case r.Interval.D() < 100*time.Millisecond:
		return c.fail(at+"interval", "%v is under 100ms", r.Interval.D())
	case r.Batch < 1 || r.Batch > 100_000:
		return c.fail(at+"batch", "%d is outside 1..100000", r.Batch)
	case r.Pause != nil && r.Pause.D() < 0:
		return c.fail(at+"pause", "%v is negative", r.Pause.D())
	}
	return c.validateTable(at+"marks_table", r.MarksTable, "")
}
