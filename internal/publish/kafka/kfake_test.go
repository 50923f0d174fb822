package kafka

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
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

// sinkConfig parses a sink's YAML mapping as the config loader would.
func sinkConfig(t testing.TB, doc string) *config.Sink {
	t.Helper()
	var s config.Sink
	if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
		t.Fatalf("parsing sink config: %v\n%s", err, doc)
	}
	return &s
}

// newSink opens a kafka sink named "events" with brokers and topic set and
// the extra YAML lines given, and closes it when the test ends.
func newSink(t testing.TB, brokers []string, topic string, extra ...string) *Sink {
	t.Helper()
	doc := fmt.Sprintf("name: events\nkind: kafka\nbrokers: [%s]\ntopic: %q\ntimeout: 5s\n%s",
		strings.Join(brokers, ", "), topic, strings.Join(extra, "\n"))
	s, err := New(sinkConfig(t, doc), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
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

// pollUntil polls cond every few milliseconds until it holds or timeout
// passes.
func pollUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
