// Package nametmpl expands destination-name templates such as
// "outbox.{type}" into a name per message, for the sinks whose topic,
// queue or entity may depend on the message: {type} is the message type,
// {key} its ordering key (the id when the key is NULL).
//
// A template is checked when the sink is configured: its braces, its
// placeholders, and its literal parts against the broker's Rules. What a
// message brings in is checked for every expanded name, since a broker
// rejects a name with, say, a '/' in it.
//
// A row's writer chooses its type and key, so a placeholder lets the
// writer choose a destination. A value may only choose a name inside what
// the operator's template fixes: Rules.Value refuses a value that would
// change the name's structure (a NATS subject's tokens, a Service Bus
// path), and Rules.Reserved a name in the broker's own namespace (NATS
// "$JS.API.…", RabbitMQ "amq.…", Kafka "__…") unless the template's
// leading literal is itself in it: the operator chose it, not the row.
// See docs/security.md, "Row values that choose a destination".
package nametmpl

import (
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/message"
)

// Rules say which names a broker accepts.
type Rules struct {
	// Broker names the broker in errors ("Kafka").
	Broker string
	// MaxLen is the longest name accepted.
	MaxLen int
	// LegalChar reports whether c may appear in a name; Allowed lists the
	// legal characters for error messages ("a-z, A-Z, 0-9, '.', '_' and '-'").
	LegalChar func(c byte) bool
	Allowed   string
	// Illegal is the sentinel that errors about names wrap.
	Illegal error
	// Extra, if set, checks what the broker requires beyond length and
	// characters (reserved names, where a character may stand); its
	// errors wrap Illegal.
	Extra func(name string) error
	// Value, if set, checks what one placeholder brings into a name (a
	// message's type or key), beyond the checks of the whole name: a
	// value must not change the name's structure. Its errors wrap
	// Illegal.
	Value func(v string) error
	// Reserved, if set, refuses a name in the broker's own namespace (its
	// control plane, its internal topics). It applies to expanded names
	// only, and not when the template's leading literal is reserved
	// itself: then the operator, not the message, chose the namespace.
	// Its errors wrap Illegal.
	Reserved func(name string) error
}

// Check returns nil when the broker accepts name (a whole, expanded name):
// 1 to MaxLen legal characters that pass Extra. Its errors wrap Illegal.
func (r Rules) Check(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", r.Illegal)
	case len(name) > r.MaxLen:
		return fmt.Errorf("%w: %d characters, over %s's limit of %d", r.Illegal, len(name), r.Broker, r.MaxLen)
	}
	if r.Extra != nil {
		if err := r.Extra(name); err != nil {
			return err
		}
	}
	for i := 0; i < len(name); i++ {
		if !r.LegalChar(name[i]) {
			return fmt.Errorf("%w: character %q at offset %d (%s allows only %s)", r.Illegal, name[i], i, r.Broker, r.Allowed)
		}
	}
	return nil
}

// A template part is either literal text or a placeholder.
type part struct {
	lit  string
	hole string // "type" or "key"; "" for a literal
}

// Template is a parsed name template. It is not safe for concurrent use
// (it caches expanded names per type); sinks serialize Publish.
type Template struct {
	field string // the config field it came from, for errors
	text  string
	rules Rules
	parts []part
	fixed bool // no placeholder: every message goes to text
	// lead is the literal text before the first placeholder; leadReserved
	// whether Rules.Reserved refuses it, i.e. whether the operator chose
	// the reserved namespace.
	lead         string
	leadReserved bool
	byKey        bool // uses {key}: not cached
	cache        map[string]string
}

// refusedHint says what to do about a message refused for the name it
// chose.
const refusedHint = "the message is refused: park it with relay.on_refused: dead_letter, and fix what writes such rows"

// maxCache bounds the per-type cache of expanded names.
const maxCache = 4096

// Parse parses and checks the template text of config field field.
// Errors start with the field ("topic: …").
func Parse(field, text string, r Rules) (*Template, error) {
	if text == "" {
		return nil, fmt.Errorf(`%s: empty (set a name, or a template such as "outbox.{type}")`, field)
	}
	t := &Template{field: field, text: text, rules: r, cache: map[string]string{}}
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
		if err := r.Check(text); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", field, text, err)
		}
		return t, nil
	}
	if t.parts[0].hole == "" {
		t.lead = t.parts[0].lit
	}
	t.leadReserved = r.Reserved != nil && t.lead != "" && r.Reserved(t.lead) != nil
	// The literal parts alone must be legal and leave room for what the
	// placeholders bring in.
	var lits strings.Builder
	for _, p := range t.parts {
		lits.WriteString(p.lit)
	}
	l := lits.String()
	for i := 0; i < len(l); i++ {
		if !r.LegalChar(l[i]) {
			return nil, fmt.Errorf("%s: template %q: %w: character %q (%s allows only %s)",
				field, text, r.Illegal, l[i], r.Broker, r.Allowed)
		}
	}
	if len(l) >= r.MaxLen {
		return nil, fmt.Errorf("%s: template %q leaves no room for its placeholders (%s's limit is %d characters)", field, text, r.Broker, r.MaxLen)
	}
	return t, nil
}

// Field is the config field the template came from.
func (t *Template) Field() string { return t.field }

// Fixed reports whether the template has no placeholder: every message
// goes to the same name, which the operator chose. A broker refusing a
// fixed name refuses every message alike (Permanent); refusing a name a
// message chose refuses that message (publish.Rejected).
func (t *Template) Fixed() bool { return t.fixed }

// Text is the template as written.
func (t *Template) Text() string { return t.text }

// Expand returns m's name, or an error (wrapping Rules.Illegal) when the
// expanded name is not one the broker accepts, when a placeholder's value
// fails Rules.Value, or when the name is one Rules.Reserved refuses and
// the template's leading literal did not choose that namespace; the name
// is returned either way, for the error message.
func (t *Template) Expand(m *message.Message) (string, error) {
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
	if err := t.rules.Check(name); err != nil {
		return name, err
	}
	if t.rules.Value != nil {
		for _, p := range t.parts {
			v := m.Type
			switch p.hole {
			case "":
				continue
			case "key":
				v = m.OrderingKey()
			}
			if err := t.rules.Value(v); err != nil {
				return name, fmt.Errorf("{%s} %q: %w (%s)", p.hole, v, err, refusedHint)
			}
		}
	}
	if t.rules.Reserved != nil && !t.leadReserved {
		if err := t.rules.Reserved(name); err != nil {
			return name, fmt.Errorf("%w (a message's type or key may not choose it, only the template's own leading text may; %s)", err, refusedHint)
		}
	}
	if !t.byKey {
		if len(t.cache) >= maxCache {
			clear(t.cache)
		}
		t.cache[m.Type] = name
	}
	return name, nil
}
