package servicebus

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/envelope/cetest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestCloudEventsMappingAddsTheAMQPBindingProperties checks the Service
// Bus message of format: cloudevents property by property: the context
// attributes under cloudEvents:, partitionkey for a key, ContentType as
// the datacontenttype, MessageId, Subject, SessionId, CorrelationId and
// the headers column as with raw, less an entry that would spoof an
// attribute.
func TestCloudEventsMappingAddsTheAMQPBindingProperties(t *testing.T) {
	g := sinktest.NewGen(63)
	m := g.Message("order-7")
	m.Headers["correlation-id"] = "dash"
	m.Headers["CLOUDEVENTS:id"] = "spoof"
	env := envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}
	sm := toMessage(m, true, &env)
	want := map[string]any{
		"cloudEvents:specversion":  "1.0",
		"cloudEvents:id":           m.ID,
		"cloudEvents:source":       "/orders",
		"cloudEvents:type":         m.Type,
		"cloudEvents:time":         m.CommitTime.UTC().Format(time.RFC3339Nano),
		"cloudEvents:partitionkey": "order-7",
		HeaderTraceparent:          m.Headers[HeaderTraceparent],
		PropertyDiagnosticID:       m.Headers[HeaderTraceparent],
		"correlation-id":           "dash",
	}
	if len(sm.ApplicationProperties) != len(want) {
		t.Errorf("ApplicationProperties %v, want %v", sm.ApplicationProperties, want)
	}
	for k, v := range want {
		if sm.ApplicationProperties[k] != v {
			t.Errorf("property %s = %v, want %v", k, sm.ApplicationProperties[k], v)
		}
	}
	raw := toMessage(m, true, nil)
	switch {
	case *sm.MessageID != m.ID, *sm.Subject != m.Type, *sm.ContentType != ContentTypeJSON, !bytes.Equal(sm.Body, m.Payload):
		t.Errorf("id, subject, content type or body wrong: %+v", sm)
	case *sm.SessionID != *raw.SessionID, *sm.CorrelationID != "dash":
		t.Errorf("SessionID %q CorrelationID %q, want as with raw", *sm.SessionID, *sm.CorrelationID)
	}
	if _, ok := raw.ApplicationProperties["cloudEvents:id"]; ok {
		t.Errorf("format: raw wrote CloudEvents properties: %v", raw.ApplicationProperties)
	}

	n := g.NullKeyMessage()
	n.Payload, n.PayloadJSON, n.Headers, n.CommitTime = nil, false, nil, time.Time{}
	sm = toMessage(n, false, &env)
	if _, ok := sm.ApplicationProperties[PropertyPartitionKey]; ok {
		t.Errorf("NULL key: partitionkey set: %v", sm.ApplicationProperties)
	}
	if _, ok := sm.ApplicationProperties["cloudEvents:time"]; ok || len(sm.ApplicationProperties) != 4 || *sm.ContentType != ContentTypeBinary {
		t.Errorf("bare message: properties %v content type %q, want the 4 attributes without time, octet-stream", sm.ApplicationProperties, *sm.ContentType)
	}
}

// asEvent decodes a received message with the CloudEvents Go SDK:
// cetest.Binary lists its application properties, content type and body
// (in place of the SDK's AMQP binding, a separate module on another
// go-amqp version), and the SDK's binding packages decode and validate
// the event.
func asEvent(t testing.TB, rm *azservicebus.ReceivedMessage) *event.Event {
	t.Helper()
	b := &cetest.Binary{Prefix: cetest.PrefixAMQP, Data: rm.Body}
	if rm.ContentType != nil {
		b.ContentType = *rm.ContentType
	}
	for k, v := range rm.ApplicationProperties {
		b.Headers = append(b.Headers, cetest.Header{Name: k, Value: v})
	}
	e, err := b.Event()
	if err != nil {
		t.Fatalf("message %s: the SDK cannot decode it: %v", rm.MessageID, err)
	}
	return e
}

// asCloudEventMessage maps a message of format: cloudevents back to its
// outbox message: the event's id, type and data, SessionId as Key, and
// the application properties that are not the binding's as Headers (see
// asMessage).
func asCloudEventMessage(t testing.TB, rm *azservicebus.ReceivedMessage) *message.Message {
	e := asEvent(t, rm)
	m := asMessage(rm)
	m.ID, m.Type, m.Payload = e.ID(), e.Type(), e.Data()
	for k := range m.Headers {
		if strings.HasPrefix(k, PrefixCloudEvents) {
			delete(m.Headers, k)
		}
	}
	if len(m.Headers) == 0 {
		m.Headers = nil
	}
	return m
}

// TestIntegrationCloudEventsPropertiesDecodeWithTheSDK publishes with
// format: cloudevents through the stand-in and decodes each message peeked
// back with the SDK: id, source, type, time (the commit time), the
// datacontenttype from the AMQP content-type, data byte for byte, the
// partitionkey extension for a key only; MessageId and Subject as with raw.
func TestIntegrationCloudEventsPropertiesDecodeWithTheSDK(t *testing.T) {
	parallel(t)
	tg := newTarget(t, sbfake0)
	s := newSink(t, tg, "queue: "+tg.queue, "format: cloudevents", "source: urn:example:orders")
	g := sinktest.NewGen(64)
	binary := g.Message("order-3")
	binary.Payload, binary.PayloadJSON = []byte{0, 0xff, 'x'}, false
	msgs := []*message.Message{g.Message("order-1"), g.NullKeyMessage(), binary}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	got := tg.peekAll(t, tg.queue)
	if len(got) != len(msgs) {
		t.Fatalf("queue holds %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		rm := got[i]
		e := asEvent(t, rm)
		wantCT := ContentTypeJSON
		if !m.PayloadJSON {
			wantCT = ContentTypeBinary
		}
		switch {
		case e.ID() != m.ID, rm.MessageID != m.ID, e.Type() != m.Type, rm.Subject == nil || *rm.Subject != m.Type:
			t.Errorf("message %s: event id %q type %q, MessageId %q Subject %v", m.ID, e.ID(), e.Type(), rm.MessageID, rm.Subject)
		case e.SpecVersion() != "1.0", e.Source() != "urn:example:orders":
			t.Errorf("message %s: specversion %q source %q", m.ID, e.SpecVersion(), e.Source())
		case !e.Time().Equal(m.CommitTime):
			t.Errorf("message %s: time %s, want the commit time %s", m.ID, e.Time(), m.CommitTime)
		case e.DataContentType() != wantCT:
			t.Errorf("message %s: datacontenttype %q, want %q", m.ID, e.DataContentType(), wantCT)
		case !bytes.Equal(e.Data(), m.Payload):
			t.Errorf("message %s: data %q, want the payload %q", m.ID, e.Data(), m.Payload)
		}
		pk, has := e.Extensions()["partitionkey"]
		if has != m.HasKey || has && pk != m.Key {
			t.Errorf("message %s: partitionkey %v (present %v), want %q only for a key", m.ID, pk, has, m.Key)
		}
	}
}

// TestIntegrationConformanceCloudEvents runs the conformance suite with
// format: cloudevents, reading each message back through the SDK
// (asCloudEventMessage).
func TestIntegrationConformanceCloudEvents(t *testing.T) {
	parallel(t)
	sinktest.Run(t, conformanceHarnessReading(asCloudEventMessage, "format: cloudevents"))
}
