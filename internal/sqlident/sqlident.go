// Package sqlident parses and renders SQL identifiers for the outbox and
// inbox packages: table names taken literally, and DDL that quotes a name
// only where PostgreSQL needs it.
package sqlident

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ParseTable splits a table name on its dot: "outbox" or "schema.outbox".
// Names are literal, as the relay reads them from its config: no case
// folding and no quote removal, so "Public.Outbox" names schema "Public".
// It returns an error wrapping invalid (the caller's sentinel) when the
// name is empty, has an empty part or more than two parts.
func ParseTable(name string, invalid error) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: %q has more than two dot-separated parts (want table or schema.table)", invalid, name)
	}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("%w: %q has an empty part (want table or schema.table)", invalid, name)
		}
	}
	return pgx.Identifier(parts), nil
}

// plainIdent matches identifiers that PostgreSQL reads back unchanged
// without quotes (unless they are reserved words).
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// reserved holds PostgreSQL's reserved key words (those that cannot be a
// table or column name without quotes): the "reserved" and "reserved (can
// be function or type)" categories of the SQL Key Words appendix.
var reserved = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`
		all analyse analyze and any array as asc asymmetric both case cast check
		collate column constraint create current_catalog current_date
		current_role current_time current_timestamp current_user default
		deferrable desc distinct do else end except false fetch for foreign
		from grant group having in initially intersect into lateral leading
		limit localtime localtimestamp not null offset on only or order placing
		primary references returning select session_user some symmetric
		system_user table then to trailing true union unique user using
		variadic when where window with
		authorization binary collation concurrently cross current_schema freeze
		full ilike inner is isnull join left like natural notnull outer
		overlaps right similar tablesample verbose`) {
		reserved[w] = true
	}
}

// Readable renders an identifier for DDL meant to be read by people:
// each part stays bare when PostgreSQL would read it back unchanged, and is
// quoted (as pgx.Identifier.Sanitize does) otherwise.
func Readable(parts ...string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if plainIdent.MatchString(p) && !reserved[p] {
			out[i] = p
		} else {
			out[i] = pgx.Identifier{p}.Sanitize()
		}
	}
	return strings.Join(out, ".")
}
