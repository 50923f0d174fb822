package rabbitmq

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// ceDelivery reads an AMQP 0-9-1 delivery as a CloudEvents binary-mode
// message, the way the SDK's AMQP binding reads application properties:
// content_type is datacontenttype, each "cloudEvents:"-prefixed header an
// attribute (or extension), the body the data. The SDK has no AMQP 0-9-1
// binding of its own; this adapter only moves values, the SDK parses and
// validates them.
type ceDelivery struct {
	d       amqp.Delivery
	version spec.Version
}

func newCEDelivery(d amqp.Delivery) *ceDelivery {
	sv, _ := d.Headers[CloudEventsPrefix+"specversion"].(string)
	return &ceDelivery{d: d, version: spec.VS.Version(sv)}
}

func (m *ceDelivery) ReadEncoding() binding.Encoding {
	if m.version == nil {
		return binding.EncodingUnknown
	}
	return binding.EncodingBinary
}

func (m *ceDelivery) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *ceDelivery) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.d.ContentType != "" {
		if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), m.d.ContentType); err != nil {
			return err
		}
	}
	for k, v := range m.d.Headers {
		name, ok := strings.CutPrefix(k, CloudEventsPrefix)
		if !ok || name == "specversion" {
			continue
		}
		var err error
		if attr := m.version.Attribute(name); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(name, v)
		}
		if err != nil {
			return err
		}
	}
	if len(m.d.Body) > 0 {
		return w.SetData(bytes.NewReader(m.d.Body))
	}
	return nil
}

func (m *ceDelivery) Finish(error) error { return nil }

// GetAttribute and GetExtension make the delivery a
// binding.MessageMetadataReader, which ToEvent requires.
func (m *ceDelivery) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		return attr, m.d.ContentType
	}
	return attr, m.d.Headers[CloudEventsPrefix+attr.Name()]
}

func (m *ceDelivery) GetExtension(name string) interface{} {
	return m.d.Headers[CloudEventsPrefix+name]
}

// TestIntegrationCloudEventsDecodeWithTheSDK: with format: cloudevents, a
// message read back from RabbitMQ decodes with the CloudEvents Go SDK into
// a valid event whose id, source, type, time, content type, data and
// partitionkey extension are the outbox message's.
func TestIntegrationCloudEventsDecodeWithTheSDK(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	s := newSink(t, url, tp.Exchange, "format: cloudevents", "source: /orders-service")
	g := sinktest.NewGen(21)
	js := g.Message("order-1")
	js.CommitTime = time.Date(2026, 3, 4, 5, 6, 7, 123_456_000, time.UTC)
	bin := g.Message("order-1")
	bin.Payload, bin.PayloadJSON = []byte{0, 0xff, 0x10}, false
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{js, bin}); err != nil {
		t.Fatal(err)
	}
	got := rabbittest.Await(t, url, tp.Queue, 2, 10*time.Second)
	for i, want := range []*message.Message{js, bin} {
		e, err := binding.ToEvent(t.Context(), newCEDelivery(got[i]))
		if err != nil {
			t.Fatalf("message %d: the SDK cannot read it: %v", i, err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("message %d: not a valid event: %v", i, err)
		}
		wantCT := "application/json"
		if !want.PayloadJSON {
			wantCT = "application/octet-stream"
		}
		if e.SpecVersion() != "1.0" || e.ID() != want.ID || e.Source() != "/orders-service" || e.Type() != want.Type ||
			!e.Time().Equal(want.CommitTime) || e.DataContentType() != wantCT || !bytes.Equal(e.Data(), want.Payload) {
			t.Errorf("message %d: event %s\nwant id %s, type %s, time %s, content type %s, data %q",
				i, e, want.ID, want.Type, want.CommitTime, wantCT, want.Payload)
		}
		if pk := e.Extensions()["partitionkey"]; pk != want.Key {
			t.Errorf("message %d: partitionkey extension %v, want %q", i, pk, want.Key)
		}
		if tp, _ := got[i].Headers["traceparent"].(string); tp != want.Headers["traceparent"] {
			t.Errorf("message %d: traceparent %q, want %q", i, tp, want.Headers["traceparent"])
		}
	}
}
