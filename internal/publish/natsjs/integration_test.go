package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestIntegrationConformance runs the sink conformance suite against a
// real NATS server, the outage made by cutting a proxy in front of it.
// The stream keeps one total order, and the sink reports only a prefix of
// a call as durable, so the suite checks global order.
func TestIntegrationConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Open: func(t *testing.T) *sinktest.Target {
			tg := newTarget(t, jetstream.StreamConfig{})
			s := tg.sink(t)
			return &sinktest.Target{
				Sink: s,
				Read: tg.read,
				Outage: func(testing.TB) func() {
					tg.proxy.Cut()
					return func() {
						if err := tg.proxy.Restore(); err != nil {
							t.Errorf("restoring the proxy: %v", err)
						}
					}
				},
			}
		},
		// The subject template "<prefix>.outbox.{type}" sends each type to
		// its own subject of the stream; max_msg_size refuses an 8 KB
		// message. JetStream acknowledges each message on its own, so a
		// refusal is not ordered within a subject.
		OpenRefusing: func(t *testing.T) *sinktest.Target {
			tg := newTarget(t, jetstream.StreamConfig{MaxMsgSize: 4096})
			return &sinktest.Target{Sink: tg.sink(t), Read: tg.read, Refuse: sinktest.Oversize(8000)}
		},
		Features: sinktest.Features{GlobalOrder: true, NullKey: true, BinaryPayload: true, MaxPayload: 512 << 10,
			OrderPerKeyUnderRefusal: true},
	})
}

// TestIntegrationMessageOverMaxMsgSizeIsRejected: a message larger than
// the stream's max_msg_size is refused by the server; Publish says so
// with a Rejected error naming the message and the setting, reports the
// messages before it durable, and those are stored, once each; the
// message itself and the ones after it are not reported.
func TestIntegrationMessageOverMaxMsgSizeIsRejected(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{MaxMsgSize: 4096})
	s := tg.sink(t)
	g := sinktest.NewGen(7)
	msgs := []*message.Message{g.Message("k1"), g.Message("k2"), g.SizedMessage("k1", 8000), g.Message("k1")}
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	if !publish.IsRejected(err) {
		t.Fatalf("Publish = %v, want a Rejected error", err)
	}
	for _, want := range []string{msgs[2].ID, "max_msg_size", "relay.on_refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	done, ok := publish.DoneOf(err)
	if !ok || len(done) != 4 || !done[0] || !done[1] || done[2] || done[3] {
		t.Errorf("Partial done = %v (%v), want [true true false false]", done, ok)
	}
	// Alone, as relay.on_refused: dead_letter tries it: Rejected again.
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs[2:3]); !publish.IsRejected(err) {
		t.Errorf("Publish of the large message alone = %v, want Rejected", err)
	}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs[3:]); err != nil {
		t.Fatalf("Publish of the rest: %v", err)
	}
	want := []*message.Message{msgs[0], msgs[1], msgs[3]}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true}, want, tg.read(t), nil)
}

// TestIntegrationMessageOverMaxPayloadIsRejected: a message larger than
// the server's max_payload is refused by the client before it is sent:
// Rejected, naming max_payload.
func TestIntegrationMessageOverMaxPayloadIsRejected(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{})
	s := tg.sink(t)
	g := sinktest.NewGen(8)
	first := g.Message("k")
	big := g.SizedMessage("k", 2<<20)
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{first, big})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), "max_payload") || !strings.Contains(err.Error(), big.ID) {
		t.Fatalf("Publish = %v, want a Rejected error naming %s and max_payload", err, big.ID)
	}
	if done, _ := publish.DoneOf(err); len(done) != 2 || !done[0] || done[1] {
		t.Errorf("Partial done = %v, want [true false]", done)
	}
}

// TestIntegrationSubjectWithoutStreamIsPermanent: a subject no stream
// covers is a Permanent error (not Rejected: parking every message would
// not help) that names the subject and says to create the stream or set
// stream.create, and it comes back at once, not after ack_timeout.
func TestIntegrationSubjectWithoutStreamIsPermanent(t *testing.T) {
	u := natstest.Start(t)
	prefix := natstest.Unique(t)
	s := newSink(t, "servers: [\""+u+"\"]\nsubject: "+prefix+".outbox.{type}\n")
	m := sinktest.NewGen(9).Message("k")
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m})
	if !publish.IsPermanent(err) || publish.IsRejected(err) {
		t.Fatalf("Publish = %v, want a Permanent error that is not Rejected", err)
	}
	for _, want := range []string{prefix + ".outbox." + m.Type, "no stream", "stream.create", m.ID} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %s", el)
	}
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("error does not wrap jetstream.ErrNoStreamResponse: %v", err)
	}
}

// TestIntegrationStreamCreateMakesTheStreamOnTheWildcard: with
// stream.create the first Publish creates the stream on the template's
// wildcard form, with the duplicate window configured, and the messages
// land in it; a resend of the same messages is dropped by the window.
func TestIntegrationStreamCreateMakesTheStreamOnTheWildcard(t *testing.T) {
	u := natstest.Start(t)
	prefix := natstest.Unique(t)
	natstest.DeleteStreamAtEnd(t, u, prefix)
	s := newSink(t, "servers: [\""+u+"\"]\nsubject: "+prefix+".outbox.{type}\nstream: {name: "+prefix+", create: true, storage: memory, duplicate_window: 5m}\n")
	msgs := sinktest.NewGen(10).Interleave(20, sinktest.Keys(3)...)
	for range 2 {
		if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
			t.Fatal(err)
		}
	}
	st, err := natstest.JetStream(t, u).Stream(sinktest.Context(t, 30*time.Second), prefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if len(cfg.Subjects) != 1 || cfg.Subjects[0] != prefix+".outbox.>" || cfg.Duplicates != 5*time.Minute || cfg.Storage != jetstream.MemoryStorage {
		t.Errorf("stream config: subjects %v, duplicates %s, storage %v", cfg.Subjects, cfg.Duplicates, cfg.Storage)
	}
	var got []*message.Message
	for _, m := range natstest.Read(t, u, prefix) {
		got = append(got, asMessage(m))
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true}, msgs, got, nil)
}

// TestIntegrationWrongStreamIsPermanent: with stream.name set, a message
// whose subject another stream covers is refused by the server
// (Nats-Expected-Stream) and Publish returns a Permanent error.
func TestIntegrationWrongStreamIsPermanent(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{})
	s := tg.sink(t, "stream: {name: "+tg.stream+"x}")
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{sinktest.NewGen(11).Message("k")})
	if !publish.IsPermanent(err) || !strings.Contains(err.Error(), "stream.name") {
		t.Fatalf("Publish = %v, want a Permanent error naming stream.name", err)
	}
}

// TestIntegrationConnectionCutMidCallLosesNothingAndKeepsOrder: the
// connection is reset while a call of 20,000 messages is in flight. The
// call fails with an error that is not Permanent, and what it reports
// durable is in the stream; the runner's retry then delivers the rest:
// nothing lost, and the first appearances in the stream are in publish
// order (a call never continues on a second connection).
func TestIntegrationConnectionCutMidCallLosesNothingAndKeepsOrder(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{})
	s := tg.sink(t)
	msgs := sinktest.NewGen(12).Interleave(20000, sinktest.Keys(8)...)
	js := natstest.JetStream(t, tg.url)
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		st, err := js.Stream(context.Background(), tg.stream)
		if err != nil {
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if info, err := st.Info(context.Background()); err == nil && info.State.Msgs >= 2000 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		tg.proxy.Cut()
	}()
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	<-cut
	if err == nil {
		t.Skip("the call finished before the cut; nothing to check")
	}
	if publish.IsPermanent(err) {
		t.Fatalf("Publish with the connection cut = %v, want a transient error", err)
	}
	done, _ := publish.DoneOf(err)
	n := 0
	for n < len(done) && done[n] {
		n++
	}
	t.Logf("cut after %d acknowledged messages: %v", n, err)
	stored := map[string]bool{}
	for _, m := range tg.read(t) {
		stored[m.ID] = true
	}
	for i := range n {
		if !stored[msgs[i].ID] {
			t.Fatalf("message %d (%s) was reported durable but is not in the stream", i, msgs[i].ID)
		}
	}
	if err := tg.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := (sinktest.Retry{}).Publish(sinktest.Context(t, 30*time.Second), s, msgs[n:]); err != nil {
		t.Fatalf("retry after the cut: %v", err)
	}
	dupOK := map[string]bool{}
	for _, m := range msgs[n:] {
		dupOK[m.ID] = true
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true}, msgs, tg.read(t), dupOK)
}

// TestIntegrationMaxPendingAboveTheClientDefaultIsHonoured: with
// max_pending above nats.go's own cap on PubAcks in flight (4000) the
// sink keeps sending while the PubAcks are slow to come: the connection
// is frozen, so none comes, for longer than nats.go waits for room
// (200ms) before it fails a publish with ErrTooManyStalledMsgs. The call
// succeeds once the PubAcks arrive, and the stream holds every message in
// order.
func TestIntegrationMaxPendingAboveTheClientDefaultIsHonoured(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{Storage: jetstream.MemoryStorage})
	s := tg.sink(t, "max_pending: 6000")
	g := sinktest.NewGen(15)
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatal(err) // connected
	}
	msgs := make([]*message.Message, 5000)
	for i := range msgs {
		msgs[i] = g.Message(sinktest.Keys(4)[i%4])
		msgs[i].Payload = []byte(`{}`) // small: what is held fits the socket buffers
	}
	tg.proxy.Freeze()
	thawed := make(chan struct{})
	go func() {
		defer close(thawed)
		time.Sleep(time.Second) // the freeze must outlast nats.go's 200ms stall wait
		tg.proxy.Thaw()
	}()
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	<-thawed
	if err != nil {
		t.Fatalf("Publish of %d messages with max_pending 6000 and the PubAcks held back: %v", len(msgs), err)
	}
	if got := tg.read(t); len(got) != len(msgs)+1 {
		t.Fatalf("stream holds %d messages, want %d", len(got), len(msgs)+1)
	}
}

// TestIntegrationNoRespondersIsPermanentOnlyWithoutAStream: "no
// responders" to a publish is Permanent only when JetStream says no stream
// covers the subject; for a subject a stream covers (a clustered stream
// answers no one while it moves its leader) it is retried. A lookup that
// fails is retried too.
func TestIntegrationNoRespondersIsPermanentOnlyWithoutAStream(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{})
	s := tg.sink(t)
	g := sinktest.NewGen(16)
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{g.Message("k")}); err != nil {
		t.Fatal(err) // connected
	}
	sess, err := s.session(sinktest.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	noResp := fmt.Errorf("publishing: %w", jetstream.ErrNoStreamResponse)
	msgs := []*message.Message{g.Message("k")}
	covered := []*nats.Msg{{Subject: tg.prefix + ".outbox.order.created"}}
	err = s.failed(sinktest.Context(t, 30*time.Second), sess, noResp, msgs, covered, 0)
	if publish.IsPermanent(err) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("no responders on a subject stream %s covers: %v, want a transient error", tg.stream, err)
	}
	orphan := []*nats.Msg{{Subject: natstest.Unique(t) + ".outbox.order.created"}}
	err = s.failed(sinktest.Context(t, 30*time.Second), sess, noResp, msgs, orphan, 0)
	// Stream tg.stream takes the template's subjects: this one is the
	// message's to answer for (relay.on_refused).
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), "no stream covers the subject") {
		t.Errorf("no responders on a subject no stream covers, while %s takes template %q's: %v, want Rejected saying so", tg.stream, s.subject.Text(), err)
	}
	if v := noRespondersVerdict(context.DeadlineExceeded, true); v.permanent {
		t.Errorf("a failed lookup: %+v, want transient", v)
	}
	if v := noRespondersVerdict(jetstream.ErrStreamNotFound, false); !v.permanent || v.rejected {
		t.Errorf("no stream for a fixed subject, or any of the template's: %+v, want permanent, not rejected (the configuration's)", v)
	}
	if v := noRespondersVerdict(jetstream.ErrStreamNotFound, true); !v.rejected {
		t.Errorf("no stream for this subject of a template other streams take: %+v, want rejected (the message's: relay.on_refused applies)", v)
	}
}
