package kafka

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/envelope/cetest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

type fakeKafka struct {
	*kafkatest.Cluster
	addrs []string
}

// startKafka starts a cuttable kfake cluster for the test.
func startKafka(t testing.TB, opts ...kfake.Opt) *fakeKafka {
	c := kafkatest.Start(t, opts...)
	return &fakeKafka{Cluster: c, addrs: c.Addrs()}
}

func (fk *fakeKafka) outage(t testing.TB) (restore func()) { return fk.Outage(t) }

func (fk *fakeKafka) readAll(t testing.TB, topic string) []*kgo.Record { return fk.ReadAll(t, topic) }

// asMessage maps a record back to the message it was made from, as far as
// Kafka carries it: the id and type headers into ID and Type, the other
// headers into Headers, the record key into Key, the timestamp into
// CommitTime.
func asMessage(r *kgo.Record) *message.Message {
	m := &message.Message{Key: string(r.Key), HasKey: true, Payload: r.Value, CommitTime: r.Timestamp}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderID:
			m.ID = string(h.Value)
		case HeaderType:
			m.Type = string(h.Value)
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[h.Key] = string(h.Value)
		}
	}
	return m
}

// asEvent decodes a record written with format: cloudevents with the
// CloudEvents Go SDK: cetest.Binary lists the record's headers, content
// type and value (in place of the SDK's kafka_sarama binding, a separate
// module that needs sarama), and the SDK's binding and binding/spec
// packages decode and validate the event.
func asEvent(t testing.TB, r *kgo.Record) *event.Event {
	t.Helper()
	b := &cetest.Binary{Prefix: cetest.PrefixKafka, Data: r.Value}
	for _, h := range r.Headers {
		if h.Key == HeaderContentType {
			b.ContentType = string(h.Value)
			continue
		}
		b.Headers = append(b.Headers, cetest.Header{Name: h.Key, Value: h.Value})
	}
	e, err := b.Event()
	if err != nil {
		t.Fatalf("record at offset %d of %s: the SDK cannot decode it: %v", r.Offset, r.Topic, err)
	}
	return e
}

// asCloudEventMessage maps a record written with format: cloudevents back
// to its message, the CloudEvents attributes decoded by the SDK (see
// asEvent): id, type, data, time into ID, Type, Payload and CommitTime,
// the partitionkey extension into Key (HasKey false without it: a NULL
// key), and the headers that are not the binding's (no ce_ prefix, not
// content-type) into Headers.
func asCloudEventMessage(t testing.TB, r *kgo.Record) *message.Message {
	e := asEvent(t, r)
	m := &message.Message{ID: e.ID(), Type: e.Type(), Payload: e.Data(), CommitTime: e.Time()}
	if pk, ok := e.Extensions()["partitionkey"].(string); ok {
		m.Key, m.HasKey = pk, true
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	for _, h := range r.Headers {
		if reservedCloudEvents(h.Key) {
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[h.Key] = string(h.Value)
	}
	return m
}

// newSink opens a kafka sink named "events" with brokers and topic set and
// the extra YAML lines given, and closes it when the test ends.
func newSink(t testing.TB, brokers []string, topic string, extra ...string) *Sink {
	t.Helper()
	doc := fmt.Sprintf("name: events\nkind: kafka\nbrokers: [%s]\ntopic: %q\ntimeout: 5s\n%s",
		strings.Join(brokers, ", "), topic, strings.Join(extra, "\n"))
	s, err := New(sinktest.SinkConfig(t, doc), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}

var topicSeq atomic.Int64

// uniqueTopic returns a topic name no other test uses.
func uniqueTopic(prefix string) string {
	return fmt.Sprintf("%s.%d", prefix, topicSeq.Add(1))
}
