// Package cetest decodes what a sink wrote in CloudEvents binary content
// mode with the CloudEvents Go SDK (github.com/cloudevents/sdk-go/v2), so
// that a sink's tests check its output the way a receiver using the SDK
// reads it (docs/design.md, "Formats"). Only tests import it.
//
// The SDK's protocol bindings for Kafka (protocol/kafka_sarama) and AMQP
// (protocol/amqp) are separate modules with heavy dependencies (sarama,
// a second AMQP client version); Binary stands in for their Message type
// with the SDK's own binding and binding/spec packages: a sink's test only
// lists the headers or properties it read back, and the SDK does the rest
// (the spec version lookup, which names are context attributes under the
// binding's prefix, parsing and type conversion of each value, extensions,
// validation).
package cetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
)

// The attribute name prefixes of the bindings (CloudEvents protocol
// binding specifications).
const (
	PrefixKafka = "ce_"          // Kafka protocol binding, headers
	PrefixAMQP  = "cloudEvents:" // AMQP protocol binding, application properties
	PrefixHTTP  = "ce-"          // HTTP (and NATS) binding, headers
)

// Header is one header or application property as read back from the
// broker; Value is a string, []byte or a native AMQP value.
type Header struct {
	Name  string
	Value any
}

// Binary is one message in binary content mode as a protocol carries it:
// its headers or application properties, its content type (a header of
// its own in Kafka, a message property in AMQP) and its body. It
// implements the SDK's binding.Message the way the SDK's own protocol
// bindings do.
type Binary struct {
	// Prefix is the binding's attribute prefix (PrefixKafka, ...).
	Prefix string
	// Headers are every header or property of the message, CloudEvents
	// attributes and others alike; those without Prefix are ignored, as a
	// binding does.
	Headers     []Header
	ContentType string
	Data        []byte
}

var (
	_ binding.Message               = (*Binary)(nil)
	_ binding.MessageMetadataReader = (*Binary)(nil)
)

// Event decodes m with the SDK and validates the event (required
// attributes present, spec version known, types right).
func (m *Binary) Event() (*event.Event, error) {
	e, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("cetest: not a valid CloudEvent: %w", err)
	}
	return e, nil
}

func (m *Binary) versions() *spec.Versions { return spec.WithPrefix(m.Prefix) }

func (m *Binary) lookup(name string) (any, bool) {
	for _, h := range m.Headers {
		if strings.EqualFold(h.Name, name) {
			return h.Value, true
		}
	}
	return nil, false
}

// version returns the spec version the message names, or nil.
func (m *Binary) version() spec.Version {
	vs := m.versions()
	v, ok := m.lookup(vs.PrefixedSpecVersionName())
	if !ok {
		return nil
	}
	switch v := v.(type) {
	case string:
		return vs.Version(v)
	case []byte:
		return vs.Version(string(v))
	}
	return nil
}

// ReadEncoding implements binding.MessageReader.
func (m *Binary) ReadEncoding() binding.Encoding {
	if m.version() != nil {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

// ReadStructured implements binding.MessageReader.
func (m *Binary) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

// ReadBinary implements binding.MessageReader: it hands the SDK every
// prefixed header as an attribute (or an extension when the spec version
// has no attribute of that name), the content type and the data.
func (m *Binary) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	v := m.version()
	if v == nil {
		return binding.ErrNotBinary
	}
	if m.ContentType != "" {
		if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), m.ContentType); err != nil {
			return err
		}
	}
	for _, h := range m.Headers {
		if len(h.Name) < len(m.Prefix) || !strings.EqualFold(h.Name[:len(m.Prefix)], m.Prefix) {
			continue
		}
		value := h.Value
		if b, ok := value.([]byte); ok {
			value = string(b) // Kafka header values are bytes holding the string form
		}
		var err error
		if attr := v.Attribute(h.Name); attr != nil {
			err = w.SetAttribute(attr, value)
		} else {
			err = w.SetExtension(strings.ToLower(h.Name[len(m.Prefix):]), value)
		}
		if err != nil {
			return fmt.Errorf("cetest: header %s: %w", h.Name, err)
		}
	}
	if len(m.Data) > 0 {
		return w.SetData(bytes.NewReader(m.Data))
	}
	return nil
}

// GetAttribute implements binding.MessageMetadataReader.
func (m *Binary) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	attr := v.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		return attr, m.ContentType
	}
	value, _ := m.lookup(attr.PrefixedName())
	return attr, value
}

// GetExtension implements binding.MessageMetadataReader.
func (m *Binary) GetExtension(name string) any {
	value, _ := m.lookup(m.Prefix + name)
	return value
}

// Finish implements binding.Message.
func (m *Binary) Finish(error) error { return nil }
