// Package envelope decides how a message's identity and metadata travel
// next to its payload on a broker: in walpost's own form (format: raw, the
// default: headers id and type, or the broker's native fields), or as a
// CloudEvents 1.0 event in binary content mode (format: cloudevents), so
// that receivers using a CloudEvents SDK read messages with no custom code.
//
// Every sink's settings embed Settings inline, so that `format:` and
// `source:` are keys of every sink. A sink maps Attributes to its
// protocol's binding (see docs/design.md, "Formats"):
//
//	Kafka        headers ce_id, ce_source, … and content-type
//	HTTP         headers ce-id, ce-source, … and Content-Type
//	NATS         headers ce-id, ce-source, … and content-type (NATS
//	             headers are case-sensitive; the binding uses lower case)
//	AMQP         application properties cloudEvents:id, … and content-type
//	SQS          string attributes ce-id, ce-source, … and content-type
//	             (no official binding: the HTTP and NATS spelling)
//
// The payload is the event's data, byte for byte, in both formats.
package envelope

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/message"
)

// The formats.
const (
	Raw         = "raw"
	CloudEvents = "cloudevents"
)

// SpecVersion is the CloudEvents version walpost writes.
const SpecVersion = "1.0"

// DefaultSource is the CloudEvents source when a sink sets none.
const DefaultSource = "walpost"

// Settings are the format keys every sink accepts. A sink's settings
// struct embeds them with `yaml:",inline"`.
type Settings struct {
	// Format is raw (default) or cloudevents.
	Format string `yaml:"format"`
	// Source is the CloudEvents source attribute, a URI reference
	// (default "walpost"); only with format: cloudevents.
	Source string `yaml:"source"`
}

// SetDefaults fills in the format and, for CloudEvents, the source.
func (s *Settings) SetDefaults() {
	if s.Format == "" {
		s.Format = Raw
	}
	if s.Format == CloudEvents && s.Source == "" {
		s.Source = DefaultSource
	}
}

// Validate names the first bad setting.
func (s *Settings) Validate() error {
	switch s.Format {
	case Raw:
		if s.Source != "" {
			return fmt.Errorf("source: only used with format: cloudevents")
		}
	case CloudEvents:
		if _, err := url.Parse(s.Source); err != nil {
			return fmt.Errorf("source: %q is not a URI reference (e.g. /orders-service or urn:example:orders)", s.Source)
		}
	default:
		return fmt.Errorf("format: unknown %q (raw or cloudevents)", s.Format)
	}
	return nil
}

// IsCloudEvents reports whether messages go out as CloudEvents.
func (s *Settings) IsCloudEvents() bool { return s.Format == CloudEvents }

// Attr is one CloudEvents context attribute, by its attribute name (id,
// source, …); a binding adds its own prefix.
type Attr struct{ Name, Value string }

// Attributes returns m's CloudEvents context attributes other than
// datacontenttype (which every binding carries as its content type, see
// ContentType): id = outbox id, source, specversion, type = outbox type,
// time = the message's EventTime (the time column, else the commit time;
// RFC 3339, UTC; left out when unknown).
func (s *Settings) Attributes(m *message.Message) []Attr {
	attrs := make([]Attr, 0, 5)
	attrs = append(attrs,
		Attr{"specversion", SpecVersion},
		Attr{"id", m.ID},
		Attr{"source", s.Source},
		Attr{"type", m.Type},
	)
	if t := m.EventTime(); !t.IsZero() {
		attrs = append(attrs, Attr{"time", t.UTC().Format(time.RFC3339Nano)})
	}
	return attrs
}

// ContentType is the payload's media type: application/json for a JSON
// payload, application/octet-stream for other bytes (a bytea column).
func ContentType(m *message.Message) string {
	if m.PayloadJSON {
		return "application/json"
	}
	return "application/octet-stream"
}

// HasPrefixFold reports whether s starts with prefix in any case (ASCII
// and Unicode simple folding, as strings.EqualFold): the sinks leave out
// headers-column entries that would pass for a binding's CloudEvents
// attributes whatever their case.
func HasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
