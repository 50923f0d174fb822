package kafka

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestRawRecordIsUnchangedByTheFormatOption: format: raw (and no format)
// writes the headers id, type and the headers column, and no ce_ header.
func TestRawRecordIsUnchangedByTheFormatOption(t *testing.T) {
	for _, extra := range []string{"", "format: raw"} {
		s := newSink(t, []string{"127.0.0.1:9"}, "t", extra)
		if s.env.IsCloudEvents() || s.env.Format != envelope.Raw {
			t.Fatalf("%q: format %q, want raw", extra, s.env.Format)
		}
	}
	m := sinktest.NewGen(50).Message("k")
	var hs []string
	for _, h := range record(m, "t").Headers {
		hs = append(hs, h.Key)
	}
	if got := strings.Join(hs, " "); got != "id type traceparent" {
		t.Errorf("raw headers %q, want id type traceparent", got)
	}
}

// TestCloudEventsRecordCarriesTheBindingHeaders checks the record of
// format: cloudevents header by header: the context attributes as ce_
// headers, content-type, ce_partitionkey for a key, the headers column
// after them less the entries that would spoof the binding's, and no raw
// id or type header; key, value and timestamp as with raw.
func TestCloudEventsRecordCarriesTheBindingHeaders(t *testing.T) {
	g := sinktest.NewGen(51)
	m := g.Message("order-1")
	m.Headers = map[string]string{"traceparent": "tp", "CE_ID": "spoof", "Content-Type": "text/plain", "id": "kept", "b": "2"}
	env := envelope.Settings{Format: envelope.CloudEvents, Source: "/orders"}
	r := cloudEventsRecord(m, "t", &env)
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	want := []string{
		"ce_specversion=1.0", "ce_id=" + m.ID, "ce_source=/orders", "ce_type=" + m.Type,
		"ce_time=" + m.CommitTime.UTC().Format(time.RFC3339Nano), "content-type=application/json",
		"ce_partitionkey=order-1", "b=2", "id=kept", "traceparent=tp",
	}
	if got := strings.Join(hs, " "); got != strings.Join(want, " ") {
		t.Errorf("headers\n%s\nwant\n%s", got, strings.Join(want, " "))
	}
	raw := record(m, "t")
	if string(r.Key) != "order-1" || !bytes.Equal(r.Value, m.Payload) || !r.Timestamp.Equal(raw.Timestamp) || r.Topic != "t" {
		t.Errorf("key %q value %q time %s topic %q differ from raw's", r.Key, r.Value, r.Timestamp, r.Topic)
	}

	n := g.NullKeyMessage()
	n.Payload, n.PayloadJSON, n.Headers, n.CommitTime = nil, false, nil, time.Time{}
	r = cloudEventsRecord(n, "t", &env)
	hs = hs[:0]
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	want = []string{"ce_specversion=1.0", "ce_id=" + n.ID, "ce_source=/orders", "ce_type=" + n.Type, "content-type=application/octet-stream"}
	if got := strings.Join(hs, " "); got != strings.Join(want, " ") {
		t.Errorf("NULL key, unknown commit time, bytes: headers %q, want %q", got, strings.Join(want, " "))
	}
	if string(r.Key) != n.ID || r.Value == nil {
		t.Errorf("NULL key: record key %q (want the id), value %#v (want empty, not a tombstone)", r.Key, r.Value)
	}
}

// TestIntegrationCloudEventsRecordsDecodeWithTheSDK publishes through
// the in-process broker with format: cloudevents and decodes every record
// read back with the CloudEvents Go SDK (asEvent): id, source, type, time
// (the commit time, to the microsecond), datacontenttype, data byte for
// byte (a binary payload too), the partitionkey extension only for a
// key; the record key stays the ordering key.
func TestIntegrationCloudEventsRecordsDecodeWithTheSDK(t *testing.T) {
	topic := uniqueTopic("ce")
	fk := startKafka(t, kfake.SeedTopics(3, topic))
	s := newSink(t, fk.addrs, topic, "format: cloudevents", "source: urn:example:orders")
	g := sinktest.NewGen(52)
	binary := g.Message("order-2")
	binary.Payload, binary.PayloadJSON = []byte{0, 0xff, '{'}, false
	micro := g.Message("order-1")
	micro.CommitTime = time.Date(2026, 12, 3, 9, 5, 49, 123456000, time.FixedZone("CET", 3600))
	msgs := []*message.Message{g.Message("order-1"), g.NullKeyMessage(), binary, micro}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	byID := map[string]*kgo.Record{}
	for _, r := range fk.readAll(t, topic) {
		byID[asEvent(t, r).ID()] = r
	}
	for _, m := range msgs {
		r := byID[m.ID]
		if r == nil {
			t.Fatalf("message %s: no record with ce_id %s", m.ID, m.ID)
		}
		e := asEvent(t, r)
		wantCT := "application/json"
		if !m.PayloadJSON {
			wantCT = "application/octet-stream"
		}
		switch {
		case e.SpecVersion() != "1.0", e.Source() != "urn:example:orders", e.Type() != m.Type:
			t.Errorf("message %s: specversion %q source %q type %q", m.ID, e.SpecVersion(), e.Source(), e.Type())
		case !e.Time().Equal(m.CommitTime):
			t.Errorf("message %s: time %s, want the commit time %s", m.ID, e.Time(), m.CommitTime)
		case e.DataContentType() != wantCT:
			t.Errorf("message %s: datacontenttype %q, want %q", m.ID, e.DataContentType(), wantCT)
		case !bytes.Equal(e.Data(), m.Payload):
			t.Errorf("message %s: data %q, want the payload %q", m.ID, e.Data(), m.Payload)
		case string(r.Key) != m.OrderingKey():
			t.Errorf("message %s: record key %q, want the ordering key %q", m.ID, r.Key, m.OrderingKey())
		}
		pk, has := e.Extensions()["partitionkey"]
		if has != m.HasKey || has && pk != m.Key {
			t.Errorf("message %s: partitionkey %v (present %v), want %q only for a key (key present %v)", m.ID, pk, has, m.Key, m.HasKey)
		}
		for _, h := range r.Headers {
			if h.Key == HeaderID || h.Key == HeaderType {
				t.Errorf("message %s: raw header %s written with format: cloudevents", m.ID, h.Key)
			}
		}
	}
}

// TestIntegrationConformanceCloudEvents runs the conformance suite with
// format: cloudevents, reading every record back through the SDK
// (asCloudEventMessage): the NULL key comes back (no partitionkey) and the
// commit time to the microsecond.
func TestIntegrationConformanceCloudEvents(t *testing.T) {
	const topic = "sinktest"
	sinktest.Run(t, sinktest.Harness{
		NoRefusal: "TestIntegrationConformance proves OrderPerKeyUnderRefusal for the sink; this run checks the cloudevents format",
		Open: func(t *testing.T) *sinktest.Target {
			fk := startKafka(t, kfake.SeedTopics(4, topic),
				kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(4 << 20)}))
			s := newSink(t, fk.addrs, topic, "batch_bytes: 2097152", "format: cloudevents")
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, r := range fk.readAll(t, topic) {
						msgs = append(msgs, asCloudEventMessage(t, r))
					}
					return msgs
				},
				Outage: fk.outage,
			}
		},
		Features: sinktest.Features{
			NullKey:       true,
			CommitTime:    time.Microsecond,
			BinaryPayload: true,
			MaxPayload:    1 << 20,
		},
	})
}
