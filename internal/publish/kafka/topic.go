package kafka

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/decoder"
)

// maxTopicLen is the longest topic name Kafka accepts.
const maxTopicLen = 249

// legalTopicChar reports whether Kafka accepts c in a topic name.
func legalTopicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// errIllegalTopic is wrapped by every topic name error, so that tests and
// callers can tell it apart.
var errIllegalTopic = errors.New("kafka: illegal topic name")

// checkTopic returns nil when Kafka accepts name as a topic name: 1 to 249
// characters of [a-zA-Z0-9._-], and neither "." nor "..".
func checkTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", errIllegalTopic)
	case len(name) > maxTopicLen:
		return fmt.Errorf("%w: %d characters, over Kafka's limit of %d", errIllegalTopic, len(name), maxTopicLen)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is reserved", errIllegalTopic, name)
	}
	for i := 0; i < len(name); i++ {
		if !legalTopicChar(name[i]) {
			return fmt.Errorf("%w: character %q at offset %d (Kafka allows only a-z, A-Z, 0-9, '.', '_' and '-')",
				errIllegalTopic, name[i], i)
		}
	}
	return nil
}

// A template part is either literal text or a placeholder.
type part struct {
	lit  string
	hole string // "type" or "key"; "" for a literal
}

// topicTemplate expands "outbox.{type}" into a topic per message. The
// template is checked when the sink is configured; what a message brings
// in ({type}, {key}) is checked for every message, since Kafka rejects a
// name with, say, a '/' in it.
//
// A topicTemplate is not safe for concurrent use (its cache); the sink
// serializes Publish.
type topicTemplate struct {
	text  string
	parts []part
	fixed bool // no placeholder: every message goes to text
	byKey bool // uses {key}: not cached
	cache map[string]string
}

// maxTopicCache bounds the per-type cache of expanded topic names.
const maxTopicCache = 4096

// parseTopic parses and checks a topic template. Errors start with the
// field, "topic: ...".
func parseTopic(text string) (*topicTemplate, error) {
	if text == "" {
		return nil, errors.New(`topic: empty (set a topic, or a template such as "outbox.{type}")`)
	}
	t := &topicTemplate{text: text, cache: map[string]string{}}
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
			return nil, fmt.Errorf("topic: %q has a '}' without '{'", text)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("topic: %q has a '{' without '}'", text)
		}
		hole := rest[open+1 : open+end]
		switch hole {
		case "type":
		case "key":
			t.byKey = true
		default:
			return nil, fmt.Errorf("topic: %q has the unknown placeholder {%s} (use {type} or {key})", text, hole)
		}
		t.parts = append(t.parts, part{hole: hole})
		rest = rest[open+end+1:]
	}
	var lits strings.Builder
	for _, p := range t.parts {
		lits.WriteString(p.lit)
	}
	t.fixed = len(t.parts) == 1 && t.parts[0].hole == ""
	if t.fixed {
		if err := checkTopic(text); err != nil {
			return nil, fmt.Errorf("topic: %q: %w", text, err)
		}
		return t, nil
	}
	// The literal parts alone must be legal and leave room for what the
	// placeholders bring in.
	l := lits.String()
	for i := 0; i < len(l); i++ {
		if !legalTopicChar(l[i]) {
			return nil, fmt.Errorf("topic: template %q: %w: character %q (Kafka allows only a-z, A-Z, 0-9, '.', '_' and '-')",
				text, errIllegalTopic, l[i])
		}
	}
	if len(l) >= maxTopicLen {
		return nil, fmt.Errorf("topic: template %q leaves no room for its placeholders (Kafka's limit is %d characters)", text, maxTopicLen)
	}
	return t, nil
}

// expand returns m's topic, or an error (wrapping errIllegalTopic) when
// the expanded name is not one Kafka accepts; the name is returned either
// way, for the error message.
func (t *topicTemplate) expand(m *decoder.Message) (string, error) {
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
	if err := checkTopic(name); err != nil {
		return name, err
	}
	if !t.byKey {
		if len(t.cache) >= maxTopicCache {
			clear(t.cache)
		}
		t.cache[m.Type] = name
	}
	return name, nil
}
