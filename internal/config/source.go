package config

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The sources of outbox messages (postgres.source).
const (
	// SourceTable: the messages are the INSERTs into postgres.table.
	SourceTable = "table"
	// SourceMessages: a table-less outbox. The application writes no row;
	// in its transaction it calls pg_logical_emit_message(true,
	// postgres.message_prefix, envelope) (outbox.Emit), and walpost relays
	// the envelope (docs/design.md, "Table-less outbox").
	SourceMessages = "messages"
)

// MinMessageKey is the shortest postgres.message_keys entry, in bytes.
const MinMessageKey = 16

// DefaultMessagePrefix is postgres.message_prefix's default.
const DefaultMessagePrefix = "walpost"

// reservedPrefixes are the starts of the logical message prefixes walpost
// itself writes: the heartbeat (decoder.HeartbeatPrefix) and cdc init
// --adopt (decoder.AdoptPrefix). A table-less outbox's prefix may not
// start with them.
var reservedPrefixes = []string{"walpost_heartbeat", "walpost.adopt."}

// TableLess reports whether the outbox is table-less (postgres.source:
// messages): no outbox table, columns: unused, an empty publication.
func (p Postgres) TableLess() bool { return p.Source == SourceMessages }

// StateURL is where walpost writes and keeps its state: postgres.primary_url
// when the slot is read on a standby, else postgres.url.
func (p Postgres) StateURL() string {
	if p.PrimaryURL != "" {
		return p.PrimaryURL
	}
	return p.URL
}

// FromStandby reports whether the slot is read on a standby
// (postgres.primary_url is set).
func (p Postgres) FromStandby() bool { return p.PrimaryURL != "" }

// setSourceDefaults fills postgres.source and, for a table-less outbox,
// postgres.message_prefix.
func (c *Config) setSourceDefaults() {
	p := &c.Postgres
	def(&p.Source, SourceTable)
	if p.Source == SourceMessages {
		def(&p.MessagePrefix, DefaultMessagePrefix)
	}
}

// validateSource checks postgres.source and postgres.message_prefix, and
// refuses, for a table-less outbox, the settings that only a table has
// when they are set (in the file or by a CDC_* variable): they would do
// nothing, and their presence suggests the table is read.
func (c *Config) validateSource() error {
	p := c.Postgres
	switch p.Source {
	case SourceTable:
		for _, f := range []string{"postgres.message_prefix", "postgres.message_keys"} {
			if c.isSet(f) {
				return c.fail(f, "only used with postgres.source: messages (postgres.source is table)")
			}
		}
		return c.validateMessageRoles()
	case SourceMessages:
	default:
		return c.fail("postgres.source", "%s is not %s or %s", c.q("postgres.source", p.Source), SourceTable, SourceMessages)
	}
	const field = "postgres.message_prefix"
	switch pre := p.MessagePrefix; {
	case pre == "":
		return c.fail(field, "empty (the prefix the application passes to pg_logical_emit_message; default walpost)")
	case !utf8.ValidString(pre) || strings.ContainsRune(pre, 0):
		return c.fail(field, "%s is not text PostgreSQL can pass as a prefix (invalid UTF-8 or a NUL)", c.q(field, pre))
	}
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(p.MessagePrefix, r) {
			return c.fail(field, "%s starts with %q, which walpost's own messages use; choose another prefix", c.q(field, p.MessagePrefix), r)
		}
	}
	for i, k := range p.MessageKeys {
		if len(k) < MinMessageKey {
			return c.fail(fmt.Sprintf("postgres.message_keys[%d]", i), "%d bytes; a key needs at least %d (e.g. the output of openssl rand -hex 32)", len(k), MinMessageKey)
		}
	}
	if err := c.validateMessageRoles(); err != nil {
		return err
	}
	for _, f := range []string{"postgres.table", "columns", "relay.retention"} {
		if c.isSet(f) {
			return c.fail(f, "not used with postgres.source: messages (a table-less outbox: the envelopes carry every field and there is no table); remove it")
		}
	}
	return nil
}

// validateMessageRoles checks postgres.message_roles: role names.
func (c *Config) validateMessageRoles() error {
	for i, r := range c.Postgres.MessageRoles {
		if r == "" || strings.ContainsRune(r, 0) || !utf8.ValidString(r) {
			return c.fail(fmt.Sprintf("postgres.message_roles[%d]", i), "not a role name")
		}
	}
	return nil
}

// isSet reports whether the setting at field, or one under it, was given
// in the file or by a CDC_* variable.
func (c *Config) isSet(field string) bool {
	for p := range c.src {
		if p == field || strings.HasPrefix(p, field+".") {
			return true
		}
	}
	return false
}
