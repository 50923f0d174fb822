package servicebus

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/decoder"
)

// maxEntityLen is the longest queue or topic name Service Bus accepts.
const maxEntityLen = 260

// maxSessionIDLen is the longest SessionId Service Bus accepts.
const maxSessionIDLen = 128

// errIllegalEntity is wrapped by every entity name error, so that tests and
// callers can tell it apart.
var errIllegalEntity = errors.New("servicebus: illegal entity name")

func legalEntityChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/'
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// checkEntity returns nil when Service Bus accepts name as a queue or
// topic name: 1 to 260 characters of [a-zA-Z0-9._/-], starting and ending
// with a letter or digit, with no empty path segment.
func checkEntity(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", errIllegalEntity)
	case len(name) > maxEntityLen:
		return fmt.Errorf("%w: %d characters, over Service Bus's limit of %d", errIllegalEntity, len(name), maxEntityLen)
	case !alnum(name[0]) || !alnum(name[len(name)-1]):
		return fmt.Errorf("%w: it must start and end with a letter or digit", errIllegalEntity)
	case strings.Contains(name, "//"):
		return fmt.Errorf("%w: empty path segment", errIllegalEntity)
	}
	for i := 0; i < len(name); i++ {
		if !legalEntityChar(name[i]) {
			return fmt.Errorf("%w: character %q at offset %d (Service Bus allows only a-z, A-Z, 0-9, '.', '_', '-' and '/')",
				errIllegalEntity, name[i], i)
		}
	}
	return nil
}

// A template part is either literal text or a placeholder.
type part struct {
	lit  string
	hole string // "type" or "key"; "" for a literal
}

// entityTemplate expands "outbox.{type}" into an entity name per message.
// The template is checked when the sink is configured; what a message
// brings in ({type}, {key}) is checked for every message.
//
// An entityTemplate is not safe for concurrent use (its cache); the sink
// serializes Publish.
type entityTemplate struct {
	field string // the config field it came from: queue, topic or entity
	text  string
	parts []part
	fixed bool // no placeholder: every message goes to text
	byKey bool // uses {key}: not cached
	cache map[string]string
}

// maxEntityCache bounds the per-type cache of expanded names.
const maxEntityCache = 4096

// parseEntity parses and checks an entity template from config field
// field. Errors start with the field ("queue: ...").
func parseEntity(field, text string) (*entityTemplate, error) {
	if text == "" {
		return nil, fmt.Errorf("%s: empty", field)
	}
	t := &entityTemplate{field: field, text: text, cache: map[string]string{}}
	rest := text
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, part{lit: rest[:open]})
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("%s: %q has a '}' without '{'", field, text)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%s: %q has a '{' without '}'", field, text)
		}
		hole := rest[open+1 : open+end]
		switch hole {
		case "type":
		case "key":
			t.byKey = true
		default:
			return nil, fmt.Errorf("%s: %q has the unknown placeholder {%s} (use {type} or {key})", field, text, hole)
		}
		t.parts = append(t.parts, part{hole: hole})
		rest = rest[open+end+1:]
	}
	t.fixed = len(t.parts) == 1 && t.parts[0].hole == ""
	if t.fixed {
		if err := checkEntity(text); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", field, text, err)
		}
		return t, nil
	}
	var lits strings.Builder
	for _, p := range t.parts {
		lits.WriteString(p.lit)
	}
	l := lits.String()
	for i := 0; i < len(l); i++ {
		if !legalEntityChar(l[i]) {
			return nil, fmt.Errorf("%s: template %q: %w: character %q (Service Bus allows only a-z, A-Z, 0-9, '.', '_', '-' and '/')",
				field, text, errIllegalEntity, l[i])
		}
	}
	if len(l) >= maxEntityLen {
		return nil, fmt.Errorf("%s: template %q leaves no room for its placeholders (Service Bus's limit is %d characters)", field, text, maxEntityLen)
	}
	return t, nil
}

// expand returns m's entity name, or an error (wrapping errIllegalEntity)
// when the expanded name is not one Service Bus accepts; the name is
// returned either way, for the error message.
func (t *entityTemplate) expand(m *decoder.Message) (string, error) {
	if t.fixed {
		return t.text, nil
	}
	if !t.byKey {
		if name, ok := t.cache[m.Type]; ok {
			return name, nil
		}
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.hole {
		case "":
			b.WriteString(p.lit)
		case "type":
			b.WriteString(m.Type)
		case "key":
			b.WriteString(m.OrderingKey())
		}
	}
	name := b.String()
	if err := checkEntity(name); err != nil {
		return name, err
	}
	if !t.byKey {
		if len(t.cache) >= maxEntityCache {
			clear(t.cache)
		}
		t.cache[m.Type] = name
	}
	return name, nil
}
