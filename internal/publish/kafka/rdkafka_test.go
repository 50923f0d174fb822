package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest/rdkafkamock"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// The tests below run the sink against librdkafka's mock cluster, a Kafka
// implementation by other authors than the producer's (kfake is franz-go's
// own): docs/testing.md, "Kafka: two implementations". The mock needs the
// sink's protocol_version (rdkafkamock.ProtocolVersion), has no
// CreateTopics (the progress topic is made beforehand) and keeps no
// transaction markers, so that a read_committed consumer sees what an
// aborted transaction wrote: the exactly-once tests here check what does
// not depend on that (the transactional writes, resuming from the
// progress, fencing), and the read_committed checks run on kfake.

// mockSink opens a kafka sink on the mock cluster c.
func mockSink(t testing.TB, c *rdkafkamock.Cluster, topic string, extra ...string) *Sink {
	t.Helper()
	return newSink(t, c.Addrs(), topic, append([]string{"protocol_version: \"" + rdkafkamock.ProtocolVersion + "\""}, extra...)...)
}

func mockRead(c *rdkafkamock.Cluster, topic string) func(testing.TB) []*message.Message {
	return func(t testing.TB) []*message.Message {
		var msgs []*message.Message
		for _, r := range c.ReadAll(t, topic) {
			msgs = append(msgs, asMessage(r))
		}
		return msgs
	}
}

// TestIntegrationConformanceOnLibrdkafkaMock runs the sink conformance
// suite against three brokers of librdkafka's mock cluster; the outage
// takes every broker down (listeners and connections closed) and brings
// them back with their data.
func TestIntegrationConformanceOnLibrdkafkaMock(t *testing.T) {
	const topic = "sinktest"
	sinktest.Run(t, sinktest.Harness{
		NoRefusal: "TestIntegrationConformance proves OrderPerKeyUnderRefusal for the sink; this run checks against librdkafka's mock cluster",
		Open: func(t *testing.T) *sinktest.Target {
			c := rdkafkamock.Start(t, 3, map[string]int{topic: 4})
			return &sinktest.Target{Sink: mockSink(t, c, topic), Read: mockRead(c, topic), Outage: c.Outage}
		},
		Features: sinktest.Features{CommitTime: time.Millisecond, BinaryPayload: true, MaxPayload: 512 << 10},
	})
}

// TestIntegrationExactlyOnceResumesOnLibrdkafkaMock: with exactly_once on
// the mock, each batch is a transaction with its progress; a second
// instance refuses the first's progress (the mock gives it another
// producer id), and every message is stored once.
// (The mock does not fence: a stale instance's transaction is stored, where
// Kafka and kfake refuse it with PRODUCER_FENCED; the fencing test runs on
// kfake.)
func TestIntegrationExactlyOnceResumesOnLibrdkafkaMock(t *testing.T) {
	topic := uniqueTopic("eos")
	c := rdkafkamock.Start(t, 3, map[string]int{topic: 4, defaultProgressTopic: 1})
	first := mockSink(t, c, topic, "exactly_once: true")
	if _, ok := resume(t, first, "slot"); ok {
		t.Fatal("an empty progress topic gave a position")
	}
	g := sinktest.NewGen(70)
	a, b := g.Interleave(300, sinktest.Keys(6)...), g.Interleave(200, sinktest.Keys(6)...)
	for _, batch := range [][]*message.Message{a, b} {
		if err := first.Publish(sinktest.Context(t, 20*time.Second), batch); err != nil {
			t.Fatal(err)
		}
	}
	// The mock gives the transactional id a new producer id at each
	// start (Kafka and kfake keep it and bump the epoch): the second
	// instance cannot prove the first's progress records are the sink's
	// own, refuses them, and would resume from the progress table
	// (duplicates, never a skipped message; docs/testing.md).
	second := mockSink(t, c, topic, "exactly_once: true")
	res, err := second.Resume(sinktest.Context(t, 20*time.Second), publish.ResumeOptions{Slot: "slot"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || res.Refused != 2 {
		t.Fatalf("the second instance resumed %+v, want the first's 2 progress records refused (the mock gives a new producer id)", res)
	}
	first.Close()
	after := g.Interleave(100, sinktest.Keys(6)...)
	if err := second.Publish(sinktest.Context(t, 20*time.Second), after); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]*message.Message{}, a...), b...), after...)
	got := mockRead(c, topic)(t)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, got, nil)
	if len(got) != len(want) {
		t.Errorf("%d records for %d messages", len(got), len(want))
	}
}

// TestIntegrationBrokerErrorsOnLibrdkafkaMock: errors the mock injects per
// request type are sorted as on kfake: NOT_ENOUGH_REPLICAS is retried by
// the producer (stored once), TOPIC_AUTHORIZATION_FAILED is Permanent.
func TestIntegrationBrokerErrorsOnLibrdkafkaMock(t *testing.T) {
	topic := uniqueTopic("errs")
	c := rdkafkamock.Start(t, 1, map[string]int{topic: 1})
	s := mockSink(t, c, topic)
	g := sinktest.NewGen(71)
	warm := g.Interleave(5, "k")
	if err := s.Publish(sinktest.Context(t, 20*time.Second), warm); err != nil {
		t.Fatal(err)
	}
	c.FailNext(t, kmsg.Produce, kerr.NotEnoughReplicas, kerr.NotEnoughReplicas)
	retried := g.Interleave(5, "k")
	if err := s.Publish(sinktest.Context(t, 20*time.Second), retried); err != nil {
		t.Fatalf("NOT_ENOUGH_REPLICAS twice: %v, want the producer's retries to store the batch", err)
	}
	errs := make([]error, 20)
	for i := range errs {
		errs[i] = kerr.TopicAuthorizationFailed
	}
	c.FailNext(t, kmsg.Produce, errs...)
	err := s.Publish(sinktest.Context(t, 20*time.Second), g.Interleave(5, "k"))
	sinktest.RequirePermanent(t, err)
	want := append(append([]*message.Message{}, warm...), retried...)
	got := mockRead(c, topic)(t)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, got, nil)
	if len(got) != len(want) {
		t.Errorf("%d records for %d messages (the producer's retries wrote a copy)", len(got), len(want))
	}
}
