package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// slowPartitioning is a producer hook that sleeps as each record reaches
// its partition's buffer: what the race detector does to the producer's
// goroutines, made reliable.
type slowPartitioning time.Duration

func (d slowPartitioning) OnProduceRecordPartitioned(*kgo.Record, int32) {
	time.Sleep(time.Duration(d))
}

// TestIntegrationRefusedBatchOnATopicsFirstCallKeepsThePartitionsOrder:
// on the first call to a topic (its partitions not known yet) the
// producer moves the records into their partition one at a time as
// metadata comes; a 10 KB message the broker refuses (message.max.bytes
// 4096) among small ones of the same key fails every message of the
// partition after it, and none of them is stored after it: what Kafka
// holds of the call is a prefix of it, whatever the producer's pace
// (docs/testing.md, "Known intermittent failures").
func TestIntegrationRefusedBatchOnATopicsFirstCallKeepsThePartitionsOrder(t *testing.T) {
	topic := uniqueTopic("first")
	fk := startKafka(t, kfake.SeedTopics(1, topic), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	s := newSink(t, fk.addrs, topic)
	var reordered counter
	s.SetSinkCounters(publish.SinkCounters{Reordered: &reordered})
	s.client.Close()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, s.opts...), kgo.WithHooks(slowPartitioning(2*time.Millisecond)))...)
	if err != nil {
		t.Fatal(err)
	}
	s.client = cl
	g := sinktest.NewGen(68)
	var msgs []*message.Message
	for i := range 12 {
		if i == 4 {
			msgs = append(msgs, g.SizedMessage("k", 10<<10))
			continue
		}
		msgs = append(msgs, g.Message("k"))
	}
	err = s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	if err == nil {
		t.Fatal("a 10 KB message over message.max.bytes was acknowledged")
	}
	t.Logf("Publish: %v", err)
	index := map[string]int{}
	for i, m := range msgs {
		index[m.ID] = i
	}
	var stored []int
	for _, r := range fk.readAll(t, topic) {
		stored = append(stored, index[asMessage(r).ID])
	}
	for i, at := range stored {
		if at != i {
			t.Fatalf("the partition holds the call's messages %v: not a prefix of the call (a message stored after an earlier one failed)", stored)
		}
	}
	if reordered.n != 0 {
		t.Errorf("%v messages reported stored out of order", reordered.n)
	}
}

// TestCheckOrderCountsAMessageStoredAfterAFailedOneOfItsPartition: a
// record acknowledged after an earlier record of its partition failed in
// the same call is counted (and logged); one of another partition is not.
func TestCheckOrderCountsAMessageStoredAfterAFailedOneOfItsPartition(t *testing.T) {
	s := newSink(t, []string{"127.0.0.1:9"}, "t")
	var reordered counter
	s.SetSinkCounters(publish.SinkCounters{Reordered: &reordered})
	msgs := sinktest.NewGen(69).Interleave(5, "k")
	recs := make([]kgo.Record, len(msgs))
	for i := range recs {
		recs[i].Topic = "t"
	}
	c := newCall(len(msgs))
	copy(c.part, []int32{0, 0, 1, 0, -1})
	s.checkOrder(c, msgs, recs, []error{nil, kerr.MessageTooLarge, nil, nil, kerr.UnknownTopicOrPartition})
	if reordered.n != 1 {
		t.Errorf("counted %v messages stored out of order, want 1", reordered.n)
	}
}
