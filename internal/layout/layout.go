// Package layout describes the outbox table as the relay reads it: the
// table, and which column plays which role (id, type, key, payload,
// headers, and the optional time, sent_at, deliver_at and expires_at). It is the one representation of the column mapping: the
// config produces it (applying the rule that "-" means the table has no
// such column, in one place), the setup checks, the decoder and `cdc init`
// read it.
package layout

import (
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/sqlident"
)

// Omit, as the column of an optional role (key, headers) in the config's
// columns: (and in the outbox package's Columns), says the table has no
// such column.
const Omit = "-"

// Role is what a column means to the relay.
type Role int

// The roles, in the order of the columns: mapping.
const (
	ID Role = iota
	Type
	Key
	Payload
	Headers
	// Time is a timestamp column whose value is the message's time (the
	// commit time when unmapped).
	Time
	// SentAt is a nullable timestamp column the relay sets once every sink
	// acknowledged the row (off unless mapped): what a polling
	// dispatcher's "processed on" column was.
	SentAt
	// DeliverAt is a timestamp column: the message is not to be delivered
	// before it (scheduled delivery, mapped to the broker's native
	// feature; off unless mapped; NULL delivers at once).
	DeliverAt
	// ExpiresAt is a timestamp column: the message is worthless after it
	// (the broker's time to live, and relay.on_expired when the relay
	// reaches it later; off unless mapped; NULL never expires).
	ExpiresAt
	NumRoles
)

// V1Roles is how many roles the version 1 adopt message of walpost
// before deliver_at and expires_at carried (decoder.Adopted): such a
// message has neither.
const V1Roles = int(DeliverAt)

var roleNames = [NumRoles]string{"id", "type", "key", "payload", "headers", "time", "sent_at", "deliver_at", "expires_at"}

// String returns the role's name ("payload").
func (r Role) String() string { return roleNames[r] }

// Field returns the config field that maps the role ("columns.payload").
func (r Role) Field() string { return "columns." + roleNames[r] }

// Optional reports whether a table may lack the role's column: key and
// headers may be Omit, time and sent_at are off unless mapped.
func (r Role) Optional() bool { return r >= Key && r != Payload }

// OmitHint is what an error about the role's column adds about leaving it
// out.
func (r Role) OmitHint() string {
	switch r {
	case Key, Headers:
		return ` (use "-" when the table has no such column)`
	case Time, SentAt, DeliverAt, ExpiresAt:
		return " (leave it out when the table has no such column)"
	}
	return ""
}

// Columns holds each role's column name, indexed by Role; "" for an
// optional role the table lacks.
type Columns [NumRoles]string

// Default is the layout of sql/outbox.sql as the stream reads it: its
// created_at is the message's time only when mapped (columns.time);
// unmapped, the commit time is.
var Default = Columns{"id", "type", "key", "payload", "headers", "", "", "", ""}

// DefaultTime is the time column of sql/outbox.sql's table. What reads
// the table's rows rather than the stream (`cdc replay`, which has no
// commit time) takes it as the time column of the default layout
// (DefaultTable).
const DefaultTime = "created_at"

// DefaultTable reports whether c describes sql/outbox.sql's table: the
// Default layout, with or without its created_at mapped as columns.time.
// `cdc init` creates that table when it is missing.
func (c Columns) DefaultTable() bool {
	if c[Time] == DefaultTime {
		c[Time] = ""
	}
	return c == Default
}

// Unscheduled returns c without the deliver_at and expires_at roles:
// optional columns that can be added to any layout, sql/outbox.sql's
// included (whose seq, and created_at, keep their use then).
func (c Columns) Unscheduled() Columns {
	c[DeliverAt], c[ExpiresAt] = "", ""
	return c
}

// FromConfig returns the layout of the columns: mapping as written in the
// config (by role), where an optional role's column may be Omit.
func FromConfig(c Columns) Columns {
	for r := range c {
		if c[r] == Omit {
			c[r] = ""
		}
	}
	return c
}

// Has reports whether the table has a column for r.
func (c Columns) Has(r Role) bool { return c[r] != "" }

// DefaultOrder is the identity column of sql/outbox.sql's table: it
// numbers the rows in the order they were inserted. What reads the rows
// from the table (recover, resync, replay, gap fills) orders them by it
// when the default layout's table has it (Table.Order).
const DefaultOrder = "seq"

// OrderTypes are the types an order column (Table.Order) may have, as
// format_type names them: numbers (an identity or serial column),
// timestamps (clock_timestamp()) and uuid (UUIDv7). It must be NOT NULL
// too: a row without a value has no place in a keyset read.
var OrderTypes = []string{"smallint", "integer", "bigint", "numeric", "timestamp with time zone", "timestamp without time zone", "uuid"}

// Table is the outbox table and its layout.
type Table struct {
	Schema, Name string
	Columns      Columns
	// Order is the column whose values increase in the order the rows were
	// inserted (columns.order): what reads the rows from the table orders
	// them by it, then by id (docs/design.md, "Row order from the
	// table"). "" for none: the time column, then the id.
	Order string
	// OrderIfPresent says Order was not configured but is DefaultOrder,
	// taken for the default layout's table: used when the table has it,
	// else ignored.
	OrderIfPresent bool
}

// Qualified returns the quoted schema.table, to send to the server.
func (t Table) Qualified() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// String returns schema.table for messages, quoting a part only when it
// holds a dot or a quote (see sqlident.Display).
func (t Table) String() string { return sqlident.Display(t.Schema, t.Name) }

// Column returns role's column quoted, to send to the server.
func (c Columns) Column(r Role) string { return pgx.Identifier{c[r]}.Sanitize() }
