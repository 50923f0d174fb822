package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// readCommitted returns what a read_committed consumer sees of topic, as
// messages.
func readCommitted(t testing.TB, fk *fakeKafka, topic string) []*message.Message {
	t.Helper()
	var got []*message.Message
	for _, r := range fk.ReadCommitted(t, topic) {
		got = append(got, asMessage(r))
	}
	return got
}

func resume(t testing.TB, s *Sink, slot string) (publish.Position, bool) {
	t.Helper()
	res, err := s.Resume(sinktest.Context(t, 20*time.Second), publish.ResumeOptions{Slot: slot})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if res.Refused > 0 {
		t.Fatalf("Resume refused %d progress records", res.Refused)
	}
	return res.Pos, res.Found
}

// TestIntegrationExactlyOnceResumesFromTheCommittedProgress: with
// exactly_once each batch commits its progress with it; a new instance
// resumes from the last committed batch, and a read_committed consumer
// sees every message once.
func TestIntegrationExactlyOnceResumesFromTheCommittedProgress(t *testing.T) {
	topic := uniqueTopic("eos")
	fk := startKafka(t, kfake.SeedTopics(4, topic))
	s := newSink(t, fk.addrs, topic, "exactly_once: true")
	if _, ok := resume(t, s, "slot_a"); ok {
		t.Fatal("a fresh progress topic gave a position")
	}
	g := sinktest.NewGen(60)
	first, second := g.Interleave(300, sinktest.Keys(6)...), g.Interleave(200, sinktest.Keys(6)...)
	for _, b := range [][]*message.Message{first, second} {
		if err := s.Publish(sinktest.Context(t, 10*time.Second), b); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	again := newSink(t, fk.addrs, topic, "exactly_once: true")
	pos, ok := resume(t, again, "slot_a")
	if last := second[len(second)-1]; !ok || pos != publish.PositionOf(last) {
		t.Fatalf("resumed at %+v (found %v), want the last message's position %+v", pos, ok, publish.PositionOf(last))
	}
	if _, ok := resume(t, newSink(t, fk.addrs, topic, "exactly_once: true"), "slot_b"); ok {
		t.Error("another slot's sink found this slot's progress")
	}
	want := append(append([]*message.Message{}, first...), second...)
	got := readCommitted(t, fk, topic)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, got, nil)
	if len(got) != len(want) {
		t.Errorf("%d records for %d messages", len(got), len(want))
	}
}

// TestIntegrationExactlyOnceFencesTheOtherInstance: a second instance on
// the same slot and sink name fences the first when it resumes; the
// first's next batch fails Permanent (the relay stops), and nothing of it
// is visible to a read_committed consumer.
func TestIntegrationExactlyOnceFencesTheOtherInstance(t *testing.T) {
	topic := uniqueTopic("fence")
	fk := startKafka(t, kfake.SeedTopics(2, topic))
	g := sinktest.NewGen(61)
	old := newSink(t, fk.addrs, topic, "exactly_once: true")
	resume(t, old, "slot")
	before := g.Interleave(50, sinktest.Keys(3)...)
	if err := old.Publish(sinktest.Context(t, 10*time.Second), before); err != nil {
		t.Fatal(err)
	}

	standby := newSink(t, fk.addrs, topic, "exactly_once: true")
	if pos, ok := resume(t, standby, "slot"); !ok || pos != publish.PositionOf(before[len(before)-1]) {
		t.Fatalf("the standby resumed at %+v (found %v)", pos, ok)
	}
	stale := g.Interleave(50, sinktest.Keys(3)...)
	err := old.Publish(sinktest.Context(t, 10*time.Second), stale)
	sinktest.RequirePermanent(t, err, "another instance took over")
	t.Logf("the fenced instance: %v", err)

	after := g.Interleave(50, sinktest.Keys(3)...)
	if err := standby.Publish(sinktest.Context(t, 10*time.Second), after); err != nil {
		t.Fatal(err)
	}
	want := append(append([]*message.Message{}, before...), after...)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, readCommitted(t, fk, topic), nil)
	for _, m := range readCommitted(t, fk, topic) {
		for _, s := range stale {
			if m.ID == s.ID {
				t.Fatalf("the fenced instance's message %s is visible to read_committed", s.ID)
			}
		}
	}
}

// TestIntegrationExactlyOnceFailedBatchIsAbortedAndSentOnce: a batch
// whose records cannot all be stored within timeout is aborted (what was
// stored of it stays invisible to read_committed), and the retry stores
// it once.
func TestIntegrationExactlyOnceFailedBatchIsAbortedAndSentOnce(t *testing.T) {
	topic := uniqueTopic("abort")
	fk := startKafka(t, kfake.SeedTopics(4, topic))
	s := newSink(t, fk.addrs, topic, "exactly_once: true")
	resume(t, s, "slot")
	g := sinktest.NewGen(62)
	batch := g.Interleave(200, sinktest.Keys(8)...)
	fault := fk.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{1},
		Err: kerr.NotEnoughReplicas, Count: -1})
	err := s.Publish(sinktest.Context(t, 20*time.Second), batch)
	sinktest.RequireTransient(t, err)
	if done, ok := publish.DoneOf(err); ok {
		t.Errorf("a failed transaction reported %d messages durable", len(done))
	}
	t.Logf("first attempt: %v", err)
	fault.Remove()
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, batch); err != nil {
		t.Fatal(err)
	}
	got := readCommitted(t, fk, topic)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, batch, got, nil)
	if len(got) != len(batch) {
		t.Errorf("read_committed sees %d records for %d messages", len(got), len(batch))
	}
	if pi := fk.PartitionInfos(topic); pi != nil {
		var hw int64
		for _, p := range pi {
			hw += p.HighWatermark
		}
		t.Logf("the partitions hold %d offsets (records of the aborted attempt and markers included) for %d messages", hw, len(batch))
	}
}

// TestIntegrationExactlyOnceCommitOfUnknownOutcomeIsNotRepeated: when the
// answer to a commit does not come, the next call starts a new producer
// (aborting whatever was open), reads the committed progress, and sends
// only what it does not cover.
func TestIntegrationExactlyOnceCommitOfUnknownOutcomeIsNotRepeated(t *testing.T) {
	topic := uniqueTopic("endtxn")
	fk := startKafka(t, kfake.SeedTopics(2, topic))
	s := newSink(t, fk.addrs, topic, "exactly_once: true")
	resume(t, s, "slot")
	g := sinktest.NewGen(63)
	batch := g.Interleave(40, sinktest.Keys(3)...)
	fk.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, TopLevel: true, Count: 1})
	err := s.Publish(sinktest.Context(t, 20*time.Second), batch)
	if err == nil {
		t.Fatal("the commit failed, and Publish returned nil")
	}
	sinktest.RequireTransient(t, err)
	t.Logf("first attempt: %v", err)
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, batch); err != nil {
		t.Fatal(err)
	}

	// A commit that Kafka made but whose answer was lost leaves the sink
	// in the same state: the relay sends the batch again, and the sink
	// finds it committed.
	more := g.Interleave(40, sinktest.Keys(3)...)
	if err := s.Publish(sinktest.Context(t, 20*time.Second), more); err != nil {
		t.Fatal(err)
	}
	s.txn.broken = true // as after a commit whose answer did not come
	if err := s.Publish(sinktest.Context(t, 20*time.Second), more); err != nil {
		t.Fatalf("the batch again after a commit of unknown outcome: %v", err)
	}
	want := append(append([]*message.Message{}, batch...), more...)
	got := readCommitted(t, fk, topic)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, got, nil)
	if len(got) != len(want) {
		t.Errorf("read_committed sees %d records for %d messages", len(got), len(want))
	}
}

// TestResumeWithoutExactlyOnceDoesNothing: a sink without exactly_once
// keeps no progress at the destination.
func TestResumeWithoutExactlyOnceDoesNothing(t *testing.T) {
	s := newSink(t, []string{"127.0.0.1:9"}, "t")
	res, err := s.Resume(context.Background(), publish.ResumeOptions{Slot: "slot"})
	if err != nil || res != (publish.Resumed{}) {
		t.Fatalf("Resume = %+v, %v; want nothing", res, err)
	}
}

// TestTransactionalIDIsTheSlotAndSink: two sinks, or one sink on two
// slots, never share a transactional id.
func TestTransactionalIDIsTheSlotAndSink(t *testing.T) {
	if a, b := TransactionalID("s", "k"), TransactionalID("s", "k2"); a == b || !strings.Contains(a, "s") {
		t.Errorf("ids %q, %q", a, b)
	}
}

// TestIntegrationConformanceExactlyOnce runs the sink conformance suite
// against the sink with exactly_once, resumed, read as a read_committed
// consumer reads.
func TestIntegrationConformanceExactlyOnce(t *testing.T) {
	const topic = "sinktest"
	sinktest.Run(t, sinktest.Harness{
		NoRefusal: "TestIntegrationConformance proves OrderPerKeyUnderRefusal for the sink; this run checks exactly_once",
		Open: func(t *testing.T) *sinktest.Target {
			fk := startKafka(t, kfake.SeedTopics(4, topic),
				kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4194304"}))
			s := newSink(t, fk.addrs, topic, "batch_bytes: 2097152", "exactly_once: true")
			resume(t, s, "slot")
			return &sinktest.Target{
				Sink:   s,
				Read:   func(t testing.TB) []*message.Message { return readCommitted(t, fk, topic) },
				Outage: fk.outage,
			}
		},
		Features: sinktest.Features{
			CommitTime:    time.Millisecond,
			BinaryPayload: true,
			ExactlyOnce:   true,
			MaxPayload:    1 << 20,
		},
	})
}

// TestIntegrationExactlyOnceResumeWaitsForAnOpenTransaction: another
// producer's transaction open on the progress topic's partition holds its
// last stable offset back, before this sink's last progress; Resume waits
// for it to end instead of returning the older progress (which would send
// the last batch again).
func TestIntegrationExactlyOnceResumeWaitsForAnOpenTransaction(t *testing.T) {
	topic := uniqueTopic("open")
	fk := startKafka(t, kfake.SeedTopics(1, topic))
	s := newSink(t, fk.addrs, topic, "exactly_once: true")
	resume(t, s, "slot")
	g := sinktest.NewGen(64)
	first, second := g.Interleave(10, "k"), g.Interleave(10, "k")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), first); err != nil {
		t.Fatal(err)
	}
	other, err := kgo.NewClient(kgo.SeedBrokers(fk.addrs...), kgo.TransactionalID("walpost.other.sink"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := sinktest.Context(t, 10*time.Second)
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: defaultProgressTopic, Key: []byte("other/sink"), Value: []byte(`{}`)}
	if err := other.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), second); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, func() { other.EndTransaction(context.Background(), kgo.TryCommit) })
	start := time.Now()
	pos, ok := resume(t, newSink(t, fk.addrs, topic, "exactly_once: true"), "slot")
	if want := publish.PositionOf(second[len(second)-1]); !ok || pos != want {
		t.Fatalf("resumed at %+v (found %v), want the last batch's %+v", pos, ok, want)
	}
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Errorf("Resume returned after %s, before the other transaction ended", waited)
	}
}

// TestIntegrationExactlyOnceRefusedMessageAbortsItsBatch: a message to a
// topic from the template that does not exist makes its batch's
// transaction abort: the error is Rejected (relay.on_refused then
// publishes the messages one at a time and parks the refused one),
// nothing of the batch is visible, and the others go through after.
func TestIntegrationExactlyOnceRefusedMessageAbortsItsBatch(t *testing.T) {
	fk := startKafka(t, kfake.SeedTopics(2, "eo.ok"))
	s := newSink(t, fk.addrs, "eo.{type}", "exactly_once: true")
	resume(t, s, "slot")
	g := sinktest.NewGen(65)
	batch := g.Interleave(20, sinktest.Keys(3)...)
	for _, m := range batch {
		m.Type = "ok"
	}
	batch[7].Type = "missing"
	err := s.Publish(sinktest.Context(t, 10*time.Second), batch)
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), batch[7].ID) {
		t.Fatalf("got %v, want Rejected naming %s", err, batch[7].ID)
	}
	if _, ok := publish.DoneOf(err); ok {
		t.Errorf("an aborted transaction reported messages durable: %v", err)
	}
	rest := append(append([]*message.Message{}, batch[:7]...), batch[8:]...)
	for _, m := range rest { // as the runner does with on_refused: one at a time
		if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	got := readCommitted(t, fk, "eo.ok")
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, rest, got, nil)
	if len(got) != len(rest) {
		t.Errorf("read_committed sees %d records for %d messages", len(got), len(rest))
	}
}

// forge writes a progress record for slot/events with cl (a plain
// producer, or one with its own transactional id) at commit LSN at.
func forge(t testing.TB, fk *fakeKafka, opts []kgo.Opt, slot, at string) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(fk.addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := sinktest.Context(t, 10*time.Second)
	txn := cl.OptValue(kgo.TransactionalID) != ""
	if txn {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	v := fmt.Sprintf(`{"slot":%q,"sink":"events","commit_lsn":%q,"lsn":%q,"seq":0}`, slot, at, at)
	r := &kgo.Record{Topic: defaultProgressTopic, Key: []byte(slot + "/events"), Value: []byte(v)}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if txn {
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIntegrationExactlyOnceResumeRefusesForgedProgress: a progress
// record the sink's own transactional producer did not write (a plain
// producer's; another transactional id's; one past the server's WAL
// position) is refused and counted: Resume returns the sink's last own
// progress before it, never the forged position.
func TestIntegrationExactlyOnceResumeRefusesForgedProgress(t *testing.T) {
	topic := uniqueTopic("forged")
	fk := startKafka(t, kfake.SeedTopics(1, topic))
	g := sinktest.NewGen(66)
	batch := g.Interleave(10, "k")
	real := publish.PositionOf(batch[len(batch)-1])
	s := newSink(t, fk.addrs, topic, "exactly_once: true")
	resume(t, s, "slot")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), batch); err != nil {
		t.Fatal(err)
	}
	wal := real.CommitLSN + 1<<20
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		at   string
	}{
		{"a plain producer's", nil, "FFFFFFF0/0"},
		{"another transactional id's", []kgo.Opt{kgo.TransactionalID("walpost.other.events")}, "FFFFFFF0/0"},
		{"the sink's own, past the WAL", []kgo.Opt{kgo.TransactionalID(TransactionalID("slot", "events"))}, (wal + 1).String()},
	} {
		forge(t, fk, tc.opts, "slot", tc.at)
		res, err := newSink(t, fk.addrs, topic, "exactly_once: true").Resume(sinktest.Context(t, 20*time.Second),
			publish.ResumeOptions{Slot: "slot", WALEnd: wal})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Found || res.Pos != real || res.Refused == 0 {
			t.Errorf("after %s forged record: resumed %+v, want the real position %+v and the record refused", tc.name, res, real)
		}
	}
}

// TestIntegrationExactlyOnceReplayIsDroppedByTheGuard: messages handed to
// the sink again after it committed them (a replay after the replication
// connection dropped inside a transaction) are not committed again: a
// read_committed consumer sees each message once, the guard counts them,
// and the progress does not go back.
func TestIntegrationExactlyOnceReplayIsDroppedByTheGuard(t *testing.T) {
	topic := uniqueTopic("guard")
	fk := startKafka(t, kfake.SeedTopics(2, topic))
	s := newSink(t, fk.addrs, topic, "exactly_once: true")
	var guarded counter
	s.SetSinkCounters(publish.SinkCounters{ReplaysDropped: &guarded})
	resume(t, s, "slot")
	g := sinktest.NewGen(67)
	first, second := g.Interleave(30, sinktest.Keys(3)...), g.Interleave(30, sinktest.Keys(3)...)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), first); err != nil {
		t.Fatal(err)
	}
	replay := append(append([]*message.Message{}, first[10:]...), second...)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), replay); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), first[:5]); err != nil { // all of it replayed
		t.Fatal(err)
	}
	if guarded.n != 25 {
		t.Errorf("the guard counted %v messages, want 25", guarded.n)
	}
	want := append(append([]*message.Message{}, first...), second...)
	got := readCommitted(t, fk, topic)
	sinktest.CheckDelivered(t, sinktest.Features{CommitTime: time.Millisecond}, want, got, nil)
	if len(got) != len(want) {
		t.Errorf("read_committed sees %d records for %d messages", len(got), len(want))
	}
	if pos, ok := resume(t, newSink(t, fk.addrs, topic, "exactly_once: true"), "slot"); !ok || pos != publish.PositionOf(second[len(second)-1]) {
		t.Errorf("resumed at %+v, want the last message's position: the progress went back", pos)
	}
}

type counter struct{ n float64 }

func (c *counter) Add(v float64) { c.n += v }
