package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestIntegrationConformance runs the sink conformance suite against the
// Kafka sink and an in-process broker. The outage takes the broker off the
// network (its socket closed, connections reset) and brings it back on the
// same port with its data.
func TestIntegrationConformance(t *testing.T) {
	const topic = "sinktest"
	sinktest.Run(t, sinktest.Harness{
		Open: func(t *testing.T) *sinktest.Target {
			fk := startKafka(t, kfake.SeedTopics(4, topic),
				kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(4 << 20)}))
			s := newSink(t, fk.addrs, topic, "batch_bytes: 2097152")
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, r := range fk.readAll(t, topic) {
						msgs = append(msgs, asMessage(r))
					}
					return msgs
				},
				Outage: fk.outage,
			}
		},
		OpenRefusing: openRefusing(),
		Features: sinktest.Features{
			CommitTime:                   time.Millisecond,
			BinaryPayload:                true,
			MaxPayload:                   1 << 20,
			OrderPerKeyUnderRefusal:      true,
			RefusalOrderedPerDestination: true,
		},
	})
}

// openRefusing is the kafka harness's destinations for the refusal
// subtest: a topic per type ("rf.{type}"), 2 partitions each, on a broker
// whose message.max.bytes (64 KiB) refuses a 100 KB message with
// MESSAGE_TOO_LARGE when the sink's batch_bytes (default 1 MiB) lets it
// through; a sink with a lower batch_bytes (extra) refuses it itself.
func openRefusing(extra ...string) func(t *testing.T) *sinktest.Target {
	return func(t *testing.T) *sinktest.Target { return openRefusingWith(t, extra...) }
}

func openRefusingWith(t *testing.T, extra ...string) *sinktest.Target {
	var topics []string
	for _, typ := range sinktest.RefusalTypes {
		topics = append(topics, "rf."+typ)
	}
	fk := startKafka(t, kfake.SeedTopics(2, topics...),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(64 << 10)}))
	return &sinktest.Target{
		Sink: newSink(t, fk.addrs, "rf.{type}", extra...),
		Read: func(t testing.TB) []*message.Message {
			var msgs []*message.Message
			for _, topic := range topics {
				for _, r := range fk.readAll(t, topic) {
					msgs = append(msgs, asMessage(r))
				}
			}
			return msgs
		},
		Refuse: sinktest.Oversize(100 << 10),
	}
}

// TestIntegrationConformanceWithSmallCompressedRequests runs the suite
// again with requests of at most 7 messages and 4 KiB, compressed, so that
// every Publish call goes out in many groups one after another. (snappy:
// pierrec/lz4 is ~100 times slower under the race detector.)
func TestIntegrationConformanceWithSmallCompressedRequests(t *testing.T) {
	const topic = "sinktest"
	sinktest.Run(t, sinktest.Harness{
		Open: func(t *testing.T) *sinktest.Target {
			fk := startKafka(t, kfake.SeedTopics(3, topic))
			s := newSink(t, fk.addrs, topic, "batch_size: 7", "batch_bytes: 4096", "compression: snappy", "linger: 0s")
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, r := range fk.readAll(t, topic) {
						msgs = append(msgs, asMessage(r))
					}
					return msgs
				},
				Outage: fk.outage,
			}
		},
		OpenRefusing: openRefusing("batch_size: 7", "batch_bytes: 4096", "compression: snappy", "linger: 0s"),
		Features: sinktest.Features{CommitTime: time.Millisecond, BinaryPayload: true, MaxPayload: 3000,
			OrderPerKeyUnderRefusal: true, RefusalOrderedPerDestination: true},
	})
}

func TestIntegrationEveryCompressionRoundTrips(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(2, "none", "gzip", "snappy", "lz4", "zstd"))
	g := sinktest.NewGen(32)
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		s := newSink(t, fk.addrs, codec, "compression: "+codec)
		msgs := g.Interleave(100, sinktest.Keys(3)...)
		if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		var got []*message.Message
		for _, r := range fk.readAll(t, codec) {
			got = append(got, asMessage(r))
		}
		if !sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, msgs, got, nil) {
			t.Errorf("compression %s", codec)
		}
	}
}

// TestIntegrationRecordCarriesKeyValueHeadersAndTimestamp checks the
// mapping record by record: key (the id for a NULL key), value bytes,
// headers id, type and the headers column in key order, the commit time as
// timestamp, the topic from the template, and the partition a Java
// producer would choose for the key (murmur2, as franz-go's default
// partitioner computes it).
func TestIntegrationRecordCarriesKeyValueHeadersAndTimestamp(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(6, "walpost.order.created", "walpost.order.paid", "walpost.order.shipped"))
	s := newSink(t, fk.addrs, "walpost.{type}")
	g := sinktest.NewGen(21)
	msgs := []*message.Message{g.Message("order-1"), g.NullKeyMessage(), g.Message("order-2"), g.Message("order-1")}
	msgs[2].Headers["id"] = "spoofed" // the message's own id wins
	msgs[2].Headers["zz-last"], msgs[2].Headers["aa-first"] = "z", "a"
	msgs[3].Headers = nil
	if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}

	byID := map[string]*kgo.Record{}
	for _, typ := range sinktest.Types {
		for _, r := range fk.readAll(t, "walpost."+typ) {
			byID[asMessage(r).ID] = r
		}
	}
	if len(byID) != len(msgs) {
		t.Fatalf("read %d records, want %d", len(byID), len(msgs))
	}
	partitioner := kgo.StickyKeyPartitioner(nil)
	for _, m := range msgs {
		r := byID[m.ID]
		if r == nil {
			t.Fatalf("message %s not found", m.ID)
		}
		if r.Topic != "walpost."+m.Type {
			t.Errorf("message %s went to topic %q, want walpost.%s", m.ID, r.Topic, m.Type)
		}
		if string(r.Key) != m.OrderingKey() {
			t.Errorf("message %s has key %q, want %q", m.ID, r.Key, m.OrderingKey())
		}
		if !bytes.Equal(r.Value, m.Payload) {
			t.Errorf("message %s has value %q, want %q", m.ID, r.Value, m.Payload)
		}
		if !r.Timestamp.Equal(m.CommitTime) {
			t.Errorf("message %s has timestamp %s, want the commit time %s", m.ID, r.Timestamp, m.CommitTime)
		}
		want := []string{"id=" + m.ID, "type=" + m.Type}
		for _, k := range sortedKeys(m.Headers) {
			if k != "id" && k != "type" {
				want = append(want, k+"="+m.Headers[k])
			}
		}
		var got []string
		for _, h := range r.Headers {
			got = append(got, h.Key+"="+string(h.Value))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("message %s has headers %q, want %q", m.ID, got, want)
		}
		if p := partitioner.ForTopic(r.Topic).Partition(&kgo.Record{Key: r.Key}, 6); int32(p) != r.Partition {
			t.Errorf("key %q landed on partition %d; a Java producer would use %d", r.Key, r.Partition, p)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func TestIntegrationIllegalTopicFromTemplateIsPermanentAndSendsNothing(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "walpost.order.created"))
	s := newSink(t, fk.addrs, "walpost.{type}")
	g := sinktest.NewGen(22)
	ok := g.Message("k")
	ok.Type = "order.created"
	bad := g.Message("k")
	bad.Type = "order/created"
	err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{ok, bad})
	sinktest.RequirePermanent(t, err, bad.ID, bad.LSN.String(), `"walpost.order/created"`)
	if !publish.IsRejected(err) {
		t.Errorf("error %v is not Rejected: the message's own type makes the name illegal", err)
	}
	if !errors.Is(err, errIllegalTopic) {
		t.Errorf("error %v does not wrap errIllegalTopic", err)
	}
	if n := fk.PartitionInfo("walpost.order.created", 0).HighWatermark; n != 0 {
		t.Errorf("%d records were sent although the batch failed before sending", n)
	}
}

// TestIntegrationMessageTooLargeIsPermanentAndNamesIt: the broker refuses
// a request over its message.max.bytes with MESSAGE_TOO_LARGE for the
// whole request; the error names the largest message in it. A message over
// batch_bytes is refused before sending.
func TestIntegrationMessageTooLargeIsPermanentAndNamesIt(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "big"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	g := sinktest.NewGen(23)
	big := g.SizedMessage("k", 10_000)
	msgs := []*message.Message{g.Message("k"), g.Message("k"), big, g.Message("k")}

	s := newSink(t, fk.addrs, "big")
	err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	sinktest.RequirePermanent(t, err, big.ID, big.LSN.String(), `"big"`, "max.message.bytes")
	if !publish.IsRejected(err) {
		t.Errorf("error %v is not Rejected", err)
	}
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("error %v does not wrap kerr.MessageTooLarge", err)
	}

	small := newSink(t, fk.addrs, "big", "batch_bytes: 2048")
	err = small.Publish(sinktest.Context(t, 10*time.Second), msgs)
	sinktest.RequirePermanent(t, err, big.ID, big.LSN.String(), "batch_bytes 2048")
	if !publish.IsRejected(err) {
		t.Errorf("error %v is not Rejected", err)
	}
	if n := fk.PartitionInfo("big", 0).HighWatermark; n != 0 {
		t.Errorf("%d records stored, want none", n)
	}
}

// TestIntegrationUnknownTopicIsPermanentWithoutAutoCreate also checks that
// with several topics in a batch the error names the first message of the
// missing topic.
func TestIntegrationUnknownTopicIsPermanentWithoutAutoCreate(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "walpost.order.created"))
	g := sinktest.NewGen(24)

	s := newSink(t, fk.addrs, "nowhere")
	m := g.Message("k")
	err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	sinktest.RequirePermanent(t, err, m.ID, m.LSN.String(), `"nowhere"`, "auto_create_topics")
	if publish.IsRejected(err) {
		t.Errorf("a missing topic is Rejected (%v): parking every message would not fix it", err)
	}

	s = newSink(t, fk.addrs, "walpost.{type}")
	a, b := g.Message("k"), g.Message("k")
	a.Type, b.Type = "order.created", "order.paid"
	err = s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{a, b})
	sinktest.RequirePermanent(t, err, b.ID, b.LSN.String(), `"walpost.order.paid"`)
}

func TestIntegrationAutoCreateCreatesMissingTopic(t *testing.T) {
	fk := startKafka(t, kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
	s := newSink(t, fk.addrs, "created.on.demand", "auto_create_topics: true")
	g := sinktest.NewGen(25)
	msgs := g.Interleave(20, sinktest.Keys(3)...)
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 20*time.Second), s, msgs); err != nil {
		t.Fatal(err)
	}
	var got []*message.Message
	for _, r := range fk.readAll(t, "created.on.demand") {
		got = append(got, asMessage(r))
	}
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, msgs, got, nil)
}

// TestIntegrationRetriableErrorIsRetriedByTheProducer: one partition
// answers NOT_LEADER_FOR_PARTITION twice while the others store their
// share. The idempotent producer retries that partition's request itself,
// with the same producer id and sequence numbers, so the call succeeds,
// nothing is stored twice, and per key the order is publish order. (With
// kafka-go's Writer the call failed, reported the other partitions with
// publish.Partial, and the relay re-sent the failed partition's share.)
func TestIntegrationRetriableErrorIsRetriedByTheProducer(t *testing.T) {
	const topic = "partial"
	fk := startKafka(t, kfake.SeedTopics(4, topic))
	s := newSink(t, fk.addrs, topic)
	g := sinktest.NewGen(26)
	before := g.Interleave(100, sinktest.Keys(8)...)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), before); err != nil {
		t.Fatal(err)
	}

	fault := fk.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{2},
		Err: kerr.NotLeaderForPartition, Count: 2})
	batch := g.Interleave(200, sinktest.Keys(8)...)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), batch); err != nil {
		t.Fatalf("the producer did not retry the retriable error itself: %v", err)
	}
	if fault.Hits() != 2 {
		t.Errorf("the fault answered %d requests, want 2", fault.Hits())
	}
	after := g.Interleave(100, sinktest.Keys(8)...)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), after); err != nil {
		t.Fatal(err)
	}

	var got []*message.Message
	for _, r := range fk.readAll(t, topic) {
		got = append(got, asMessage(r))
	}
	want := append(append(append([]*message.Message{}, before...), batch...), after...)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, got, nil)
	if len(got) != len(want) {
		t.Errorf("%d records for %d messages, want each once", len(got), len(want))
	}
}

// failNthProduce makes the broker answer the nth produce request (from
// now on, counting from 1) with NOT_LEADER_FOR_PARTITION for each of its
// partitions, without storing anything of it.
func failNthProduce(fk *fakeKafka, n int32) {
	var seen atomic.Int32
	fk.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if seen.Add(1) != n {
			return nil, nil, false // the broker answers
		}
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range preq.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// TestIntegrationFailedRequestIsRetriedInOrderAndOnce: a call of 50
// messages to one partition goes out in requests of at most 10 (batch_size
// bounds the records in flight); the third request fails once. The
// producer retries it, and the requests after it, in order, so the
// relay's runner acknowledges all 50 at once and the partition holds each
// message once, in publish order. (With kafka-go's Writer the runner
// acknowledged the first 20 and re-sent the other 30; without partial
// acknowledgements it stored 20 duplicates.)
func TestIntegrationFailedRequestIsRetriedInOrderAndOnce(t *testing.T) {
	g := sinktest.NewGen(33)
	topic := uniqueTopic("requests")
	fk := startKafka(t, kfake.SeedTopics(1, topic))
	s := newSink(t, fk.addrs, topic, "batch_size: 10")
	msgs := g.Interleave(50, sinktest.Keys(3)...)
	failNthProduce(fk, 3)
	in := make(chan []publish.Delivery, 1)
	ds := make([]publish.Delivery, len(msgs))
	for i, m := range msgs {
		ds[i] = publish.Delivery{Msg: m}
	}
	in <- ds
	close(in)
	var acks [][]publish.Delivery
	r := publish.NewRunner(s, in, publish.RunnerOptions{
		BatchSize: len(msgs),
		Ack:       func(b []publish.Delivery) { acks = append(acks, b) },
		Log:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	if err := r.Run(sinktest.Context(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(acks) != 1 || len(acks[0]) != len(msgs) {
		t.Errorf("%d acks, want one of all 50", len(acks))
	}
	var got []*message.Message
	for _, r := range fk.readAll(t, topic) {
		got = append(got, asMessage(r))
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, CommitTime: time.Millisecond}, msgs, got, nil)
	if len(got) != 50 {
		t.Errorf("the partition holds %d records for 50 messages, want each once", len(got))
	}
}

// TestIntegrationLeaderMoveIsFoundOnRetry: after a partition's leader
// moves, the first write fails transiently and the retry, which starts from
// fresh metadata, goes to the new leader.
func TestIntegrationLeaderMoveIsFoundOnRetry(t *testing.T) {
	const topic = "moving"
	fk := startKafka(t, kfake.NumBrokers(3), kfake.SeedTopics(1, topic))
	s := newSink(t, fk.addrs, topic)
	g := sinktest.NewGen(27)
	first := g.Interleave(50, sinktest.Keys(3)...)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), first); err != nil {
		t.Fatal(err)
	}
	leader := fk.LeaderFor(topic, 0)
	if err := fk.MoveTopicPartition(topic, 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	second := g.Interleave(50, sinktest.Keys(3)...)
	attempts := 0
	start := time.Now()
	r := sinktest.Retry{OnError: func(n int, err error) {
		attempts = n
		sinktest.RequireTransient(t, err)
		t.Logf("attempt %d: %v", n, err)
	}}
	if err := r.Publish(sinktest.Context(t, 20*time.Second), s, second); err != nil {
		t.Fatal(err)
	}
	t.Logf("delivered after %d failed attempts in %s", attempts, time.Since(start).Round(time.Millisecond))
	if attempts > 2 {
		t.Errorf("%d failed attempts: the retry should find the new leader at once", attempts)
	}
	var got []*message.Message
	for _, r := range fk.readAll(t, topic) {
		got = append(got, asMessage(r))
	}
	dupOK := map[string]bool{}
	for _, m := range second {
		dupOK[m.ID] = true
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, CommitTime: time.Millisecond},
		append(append([]*message.Message{}, first...), second...), got, dupOK)
}

func TestIntegrationTopicAuthorizationFailureIsPermanent(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "secret"))
	fk.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.TopicAuthorizationFailed, Count: -1})
	s := newSink(t, fk.addrs, "secret")
	m := sinktest.NewGen(28).Message("k")
	sinktest.RequirePermanent(t, s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}), m.ID, `"secret"`, "WRITE")
}

// TestIntegrationNotEnoughReplicasIsRetriedThenTransient: a retriable
// code is retried by the producer (once: the call succeeds, each message
// stored once); one that lasts past timeout fails the call with an error
// that is not Permanent, and the relay's retry then delivers.
func TestIntegrationNotEnoughReplicasIsRetriedThenTransient(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "replicas"))
	fault := fk.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: 1})
	s := newSink(t, fk.addrs, "replicas")
	g := sinktest.NewGen(29)
	msgs := g.Interleave(10, "k")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatalf("the producer did not retry NOT_ENOUGH_REPLICAS itself: %v", err)
	}
	if fault.Hits() != 1 {
		t.Errorf("the fault answered %d requests, want 1", fault.Hits())
	}

	lasting := fk.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	more := g.Interleave(10, "k")
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 20*time.Second), more)
	sinktest.RequireTransient(t, err)
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
	lasting.Remove()
	if err := s.Publish(sinktest.Context(t, 10*time.Second), more); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}
	if n := len(fk.readAll(t, "replicas")); n != 20 {
		t.Errorf("%d records for 20 messages, want each once", n)
	}
}

func TestIntegrationSASLAuthenticates(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			fk := startKafka(t, kfake.EnableSASL(), kfake.Superuser(mech, "walpost", "s3cret"), kfake.SeedTopics(1, "auth"))
			s := newSink(t, fk.addrs, "auth", "sasl: {mechanism: "+mech+", username: walpost, password: s3cret}")
			if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{sinktest.NewGen(30).Message("k")}); err != nil {
				t.Fatalf("with the right password: %v", err)
			}
		})
	}
}

// TestIntegrationSASLFailureIsPermanent: a broker answers a failed
// authentication with SASL_AUTHENTICATION_FAILED and one that does not
// offer the mechanism with UNSUPPORTED_SASL_MECHANISM; both stop the
// relay. (kfake itself just closes the connection on a wrong password,
// which the sink must treat as the network error it looks like; the
// control below answers as Kafka does.)
func TestIntegrationSASLFailureIsPermanent(t *testing.T) {
	g := sinktest.NewGen(31)
	t.Run("WrongPassword", func(t *testing.T) {
		fk := startKafka(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "walpost", "s3cret"), kfake.SeedTopics(1, "auth"))
		fk.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
			fk.KeepControl()
			resp := req.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "Authentication failed: Invalid username or password"
			resp.ErrorMessage = &msg
			return resp, nil, true
		})
		s := newSink(t, fk.addrs, "auth", "sasl: {mechanism: PLAIN, username: walpost, password: wrong}")
		m := g.Message("k")
		err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
		sinktest.RequirePermanent(t, err, m.ID, "sasl.password")
	})
	t.Run("UnsupportedMechanism", func(t *testing.T) {
		fk := startKafka(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "walpost", "s3cret"), kfake.SeedTopics(1, "auth"))
		fk.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
			fk.KeepControl()
			resp := req.(*kmsg.SASLHandshakeRequest).ResponseKind().(*kmsg.SASLHandshakeResponse)
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
			resp.SupportedMechanisms = []string{"SCRAM-SHA-512"}
			return resp, nil, true
		})
		s := newSink(t, fk.addrs, "auth", "sasl: {mechanism: PLAIN, username: walpost, password: s3cret}")
		m := g.Message("k")
		err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
		sinktest.RequirePermanent(t, err, m.ID, "sasl.mechanism")
	})
}

// TestIntegrationTopicCreatedWhileRunningIsFound: a message to a topic
// from the template that does not exist is refused; once the topic is
// created, the same sink delivers to it at the next attempt (the producer
// looks up a topic it does not know again; kafka-go's Writer kept the
// answer until its metadata refresh).
func TestIntegrationTopicCreatedWhileRunningIsFound(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(1, "late.known"))
	s := newSink(t, fk.addrs, "late.{type}")
	g := sinktest.NewGen(73)
	m := g.Message("k")
	m.Type = "created"
	err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	if !publish.IsRejected(err) {
		t.Fatalf("a missing topic from the template gave %v, want Rejected", err)
	}
	if err := fk.CreateTopic("late.created", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}); err != nil {
		t.Fatalf("after the topic was created: %v", err)
	}
}

// TestIntegrationAcksLeaderAndNoneDeliver: without acks: all the producer
// is not idempotent (Kafka requires acks=all for it); it still delivers,
// in order.
func TestIntegrationAcksLeaderAndNoneDeliver(t *testing.T) {
	for _, acks := range []string{"leader", "none"} {
		t.Run(acks, func(t *testing.T) {
			topic := uniqueTopic("acks")
			fk := startKafka(t, kfake.SeedTopics(2, topic))
			s := newSink(t, fk.addrs, topic, "acks: "+acks)
			msgs := sinktest.NewGen(74).Interleave(60, sinktest.Keys(4)...)
			for _, b := range sinktest.Chunks(msgs, 20) {
				if err := s.Publish(sinktest.Context(t, 10*time.Second), b); err != nil {
					t.Fatal(err)
				}
			}
			var got []*message.Message
			deadline := time.Now().Add(10 * time.Second)
			for len(got) < len(msgs) && time.Now().Before(deadline) {
				got = got[:0]
				var n int64
				for _, pi := range fk.PartitionInfos(topic) {
					n += pi.HighWatermark
				}
				if n < int64(len(msgs)) {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for _, r := range fk.readAll(t, topic) {
					got = append(got, asMessage(r))
				}
			}
			sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, msgs, got, nil)
		})
	}
}
