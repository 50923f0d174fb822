// Package sqlident parses and renders SQL identifiers for the outbox and
// inbox packages: table names taken literally, and DDL that quotes a name
// only where PostgreSQL needs it.
package sqlident

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// ParseTable splits a table name into "table" or "schema.table" parts.
// Names are taken as they appear in the catalog, with no case folding:
// "public.OutboxMessages" names table OutboxMessages. A part may be
// written in double quotes, as in SQL, when it holds a dot or a quote
// ("public"."Outbox.Messages", a "" inside quotes standing for one "); a
// quote inside a part that does not start with one is taken literally. It
// returns an error wrapping invalid (the caller's sentinel) when the name
// is empty, has an empty part, more than two parts, an unterminated quote,
// or a part that is not a valid identifier (see Check).
func ParseTable(name string, invalid error) (pgx.Identifier, error) {
	parts, err := Split(name)
	if err == nil && len(parts) > 2 {
		err = errors.New(`has more than two dot-separated parts (want table or schema.table; quote a name that holds a dot: "Outbox.Messages")`)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q %v", invalid, name, err)
	}
	return pgx.Identifier(parts), nil
}

// MaxIdentLen is the longest identifier PostgreSQL keeps: longer ones are
// truncated to it (NAMEDATALEN - 1 bytes).
const MaxIdentLen = 63

// Check reports why s cannot be an identifier as walpost uses them: it is
// empty, longer than MaxIdentLen bytes (PostgreSQL would truncate it, and
// the name would not match the catalog), holds a zero byte, or is not
// valid UTF-8. Any other character, quotes, dots, spaces and semicolons
// among them, is fine: walpost quotes every name it sends.
func Check(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxIdentLen:
		return fmt.Errorf("%d bytes long (PostgreSQL truncates names to %d bytes)", len(s), MaxIdentLen)
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("holding a zero byte")
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	return nil
}

// Split splits a dotted name into its parts (see ParseTable for the
// syntax) and checks each with Check. Its errors do not repeat the name:
// they read after it ("<name> has an empty part 2").
func Split(name string) ([]string, error) {
	var parts []string
	for rest := name; ; {
		part, after, err := nextPart(rest)
		if err != nil {
			return nil, err
		}
		if err := Check(part); err != nil {
			return nil, fmt.Errorf("has a part %d that is %v", len(parts)+1, err)
		}
		parts = append(parts, part)
		if after == "" {
			return parts, nil
		}
		rest = after[1:] // after starts with the dot
		if rest == "" {
			return nil, errors.New("ends with a dot")
		}
	}
}

// nextPart reads one part of a dotted name: a quoted identifier, or the
// text up to the next dot. after is "" or starts with the dot.
func nextPart(s string) (part, after string, err error) {
	if !strings.HasPrefix(s, `"`) {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			i = len(s)
		}
		return s[:i], s[i:], nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '"' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '"' {
			b.WriteByte('"')
			i++
			continue
		}
		after = s[i+1:]
		if after != "" && after[0] != '.' {
			return "", "", errors.New("has text after a closing quote (want a dot)")
		}
		return b.String(), after, nil
	}
	return "", "", errors.New("has an unterminated quote")
}

// Quote renders parts as a quoted, dotted SQL name: what to send to the
// server (pgx.Identifier.Sanitize).
func Quote(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// Display renders parts for messages and config: bare where a part holds
// no dot or quote, quoted otherwise, so that ParseTable reads it back.
func Display(parts ...string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if p != "" && !strings.ContainsAny(p, `."`) {
			out[i] = p
		} else {
			out[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
	}
	return strings.Join(out, ".")
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
