package servicebus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// These tests run against sbfake, the AMQP 1.0 stand-in (node must be
// installed), or, when WALPOST_TEST_SERVICEBUS_CONNECTION_STRING is set,
// against that namespace or emulator and the queue named by
// WALPOST_TEST_SERVICEBUS_QUEUE (a queue without sessions, which they
// empty). Tests that need what only the stand-in can do (fault injection,
// an outage, counting transfers) skip against a real namespace.

// conformanceFeatures is what a queue carries with sessions: true: the
// ordering key as SessionId (NULL keys become the id), payload bytes
// (binary too), headers; a queue of the stand-in keeps one order.
func conformanceFeatures() sinktest.Features {
	return sinktest.Features{
		GlobalOrder:   os.Getenv(envConnectionString) == "", // a real queue may be partitioned
		BinaryPayload: true,
		MaxPayload:    200 << 10, // fits Standard's 256 KiB with its properties
		// With the stand-in (OpenRefusing): an entity's refused message
		// stops its later ones in the call.
		OrderPerKeyUnderRefusal:      true,
		RefusalOrderedPerDestination: true,
	}
}

func conformanceHarness(extra ...string) sinktest.Harness {
	return conformanceHarnessReading(func(_ testing.TB, rm *azservicebus.ReceivedMessage) *message.Message { return asMessage(rm) }, extra...)
}

// conformanceHarnessReading is conformanceHarness with read mapping each
// received message back to its outbox message.
func conformanceHarnessReading(read func(testing.TB, *azservicebus.ReceivedMessage) *message.Message, extra ...string) sinktest.Harness {
	return sinktest.Harness{
		Features: conformanceFeatures(),
		Open: func(t *testing.T) *sinktest.Target {
			tg := newTarget(t, sbfake0)
			s := newSink(t, tg, "queue: "+tg.queue, append([]string{"sessions: true"}, extra...)...)
			target := &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var out []*message.Message
					for _, rm := range tg.peekAll(t, tg.queue) {
						out = append(out, read(t, rm))
					}
					return out
				},
			}
			if tg.fake != nil {
				target.Outage = tg.fake.Outage
			}
			return target
		},
		// A queue of the stand-in per type ("<queue>.{type}") that takes
		// at most 16 KiB (advertised on attach); a 20 KB message is over
		// it, the sink's batches (8 KiB unless extra says) under it.
		OpenRefusing: func(t *testing.T) *sinktest.Target {
			needFake(t, "creates a queue per type")
			tg := newTarget(t, sbfake0)
			opts := sbfake.QueueOptions{MaxMessageSize: 16 << 10}
			var queues []string
			for _, typ := range sinktest.RefusalTypes {
				queues = append(queues, tg.queue+"."+typ)
				tg.fake.CreateQueue(t, queues[len(queues)-1], opts)
			}
			settings := append([]string{"sessions: true"}, extra...)
			if !strings.Contains(strings.Join(extra, "\n"), "max_batch_bytes:") {
				settings = append(settings, "max_batch_bytes: 8192")
			}
			s := newSink(t, tg, fmt.Sprintf("entity: %q", tg.queue+".{type}"), settings...)
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					var out []*message.Message
					for _, q := range queues {
						for _, rm := range tg.peekAll(t, q) {
							out = append(out, read(t, rm))
						}
					}
					return out
				},
				Refuse: sinktest.Oversize(20000),
			}
		},
	}
}

// TestIntegrationConformance runs the sink conformance suite with sessions
// on (SessionId carries the ordering key, which the suite checks). The
// outage cuts every connection to the stand-in and refuses new ones, then
// lets them in again on the same port; the queue keeps its messages.
func TestIntegrationConformance(t *testing.T) {
	parallel(t)
	sinktest.Run(t, conformanceHarness())
}

// TestIntegrationConformanceWithSmallBatches runs the suite again with
// batches of at most 4 KiB (about 8 messages), so that every Publish call
// goes out as many batches one after another, and without the SDK's own
// retries.
func TestIntegrationConformanceWithSmallBatches(t *testing.T) {
	parallel(t)
	h := conformanceHarness("max_batch_bytes: 4096", "max_retries: 0")
	h.Features.MaxPayload = 3000
	sinktest.Run(t, h)
}

// TestIntegrationMessageCarriesIDSubjectContentTypePropertiesAndSession
// checks the mapping message by message, as a .NET receiver would see it.
func TestIntegrationMessageCarriesIDSubjectContentTypePropertiesAndSession(t *testing.T) {
	parallel(t)
	tg := newTarget(t, sbfake0)
	s := newSink(t, tg, "queue: "+tg.queue, "sessions: true")
	g := sinktest.NewGen(41)
	plain := g.Message("order-1")
	correlated := g.Message("order-1")
	correlated.Headers["correlation_id"] = "corr-1"
	correlated.Headers["correlation-id"] = "loses"
	dashed := g.Message("order-2")
	dashed.Headers["correlation-id"] = "corr-2"
	ownDiag := g.Message("order-2")
	ownDiag.Headers[PropertyDiagnosticID] = "their-own"
	nullKey := g.NullKeyMessage()
	nullKey.Headers = nil
	binary := g.Message("order-3")
	binary.Payload, binary.PayloadJSON = []byte{0, 0xff, 'x'}, false
	empty := g.Message("order-3")
	empty.Payload = []byte{}
	msgs := []*message.Message{plain, correlated, dashed, ownDiag, nullKey, binary, empty}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
		t.Fatal(err)
	}

	got := tg.peekAll(t, tg.queue)
	if len(got) != len(msgs) {
		t.Fatalf("queue holds %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		r := got[i]
		if r.MessageID != m.ID {
			t.Errorf("message %d: MessageID %q, want the outbox id %q", i, r.MessageID, m.ID)
		}
		if r.Subject == nil || *r.Subject != m.Type {
			t.Errorf("message %s: Subject %v, want the type %q", m.ID, r.Subject, m.Type)
		}
		wantCT := ContentTypeJSON
		if !m.PayloadJSON {
			wantCT = ContentTypeBinary
		}
		if r.ContentType == nil || *r.ContentType != wantCT {
			t.Errorf("message %s: ContentType %v, want %s", m.ID, r.ContentType, wantCT)
		}
		if !bytes.Equal(r.Body, m.Payload) {
			t.Errorf("message %s: Body %q, want %q", m.ID, r.Body, m.Payload)
		}
		if r.SessionID == nil || *r.SessionID != m.OrderingKey() {
			t.Errorf("message %s: SessionID %v, want the ordering key %q", m.ID, r.SessionID, m.OrderingKey())
		}
		want := map[string]any{}
		for k, v := range m.Headers {
			want[k] = v
		}
		if tp, ok := m.Headers[HeaderTraceparent]; ok && m != ownDiag {
			want[PropertyDiagnosticID] = tp
		}
		if fmt.Sprint(r.ApplicationProperties) != fmt.Sprint(want) && !(len(want) == 0 && len(r.ApplicationProperties) == 0) {
			t.Errorf("message %s: ApplicationProperties %v, want %v", m.ID, r.ApplicationProperties, want)
		}
	}
	for _, c := range []struct {
		r    *azservicebus.ReceivedMessage
		want string
	}{{got[0], ""}, {got[1], "corr-1"}, {got[2], "corr-2"}, {got[4], ""}} {
		var have string
		if c.r.CorrelationID != nil {
			have = *c.r.CorrelationID
		}
		if have != c.want {
			t.Errorf("message %s: CorrelationID %q, want %q", c.r.MessageID, have, c.want)
		}
	}
}

// TestIntegrationWithoutSessionsKeepsQueueOrderAndSetsNoSessionID: with
// sessions off nothing sets SessionId, and a queue keeps WAL order over
// many calls of many batches.
func TestIntegrationWithoutSessionsKeepsQueueOrderAndSetsNoSessionID(t *testing.T) {
	parallel(t)
	tg := newTarget(t, sbfake0)
	s := newSink(t, tg, "queue: "+tg.queue, "max_batch_bytes: 8192")
	g := sinktest.NewGen(42)
	msgs := g.Interleave(400, sinktest.Keys(5)...)
	for _, b := range g.Split(msgs, 120) {
		if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, b); err != nil {
			t.Fatal(err)
		}
	}
	got := tg.peekAll(t, tg.queue)
	if len(got) != len(msgs) {
		t.Fatalf("queue holds %d messages, want %d", len(got), len(msgs))
	}
	for i, r := range got {
		if r.SessionID != nil {
			t.Fatalf("message %s has SessionID %q with sessions off", r.MessageID, *r.SessionID)
		}
		if os.Getenv(envConnectionString) == "" && r.MessageID != msgs[i].ID {
			t.Fatalf("position %d holds %s, want %s (lsn %s): WAL order broken", i, r.MessageID, msgs[i].ID, msgs[i].LSN)
		}
	}
}

// TestIntegrationBatchesFillTheEntityLimit: 1000 messages of ~300 bytes
// go out as batches that fill the entity's 256 KiB, so two transfers, not
// a thousand.
func TestIntegrationBatchesFillTheEntityLimit(t *testing.T) {
	parallel(t)
	needFake(t, "counts transfers")
	tg := newTarget(t, sbfake0)
	s := newSink(t, tg, "queue: "+tg.queue)
	g := sinktest.NewGen(43)
	msgs := make([]*message.Message, 1000)
	for i := range msgs {
		msgs[i] = g.SizedMessage(sinktest.Keys(16)[i%16], 300)
	}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	st := tg.fake.Stats(t, tg.queue)
	if st.Stored != 1000 || st.Batches != st.Transfers || st.Transfers < 2 || st.Transfers > 3 {
		t.Fatalf("stand-in counted %+v; want 1000 stored from 2 or 3 batch transfers", st)
	}
	t.Logf("1000 messages in %d transfers", st.Transfers)
}

// TestIntegrationMessageTooLargeIsPermanentAndNamesIt: a message that does
// not fit into an empty batch stops the call with a Permanent error naming
// it; what precedes it was sent, what follows was not.
func TestIntegrationMessageTooLargeIsPermanentAndNamesIt(t *testing.T) {
	parallel(t)
	tg := newTarget(t, sbfake0)
	s := newSink(t, tg, "queue: "+tg.queue)
	g := sinktest.NewGen(44)
	before, big, after := g.Message("k"), g.SizedMessage("k", 300<<10), g.Message("k")
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{before, big, after})
	sinktest.RequirePermanent(t, err, big.ID, big.LSN.String(), tg.queue, "max message size")
	if !publish.IsRejected(err) {
		t.Errorf("error %v is not Rejected", err)
	}
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Errorf("error %v does not wrap azservicebus.ErrMessageTooLarge", err)
	}
	got := tg.readAll(t, tg.queue)
	if len(got) != 1 || got[0].ID != before.ID {
		t.Errorf("queue holds %d messages, want only the one before the large one", len(got))
	}
}

// TestIntegrationServiceRefusingABatchAsTooLargeIsPermanent: with
// max_batch_bytes above the entity's limit the service refuses full
// batches (amqp:link:message-size-exceeded); that stops the relay with a
// hint to lower max_batch_bytes.
func TestIntegrationServiceRefusingABatchAsTooLargeIsPermanent(t *testing.T) {
	parallel(t)
	needFake(t, "needs an entity with a 64 KiB limit")
	tg := newTarget(t, sbfake.QueueOptions{MaxMessageSize: 64 << 10})
	s := newSink(t, tg, "queue: "+tg.queue, "max_batch_bytes: 1048576")
	g := sinktest.NewGen(45)
	msgs := make([]*message.Message, 500)
	for i := range msgs {
		msgs[i] = g.SizedMessage("k", 300)
	}
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	sinktest.RequirePermanent(t, err, msgs[0].ID, msgs[499].ID, tg.queue, "max_batch_bytes")
	if publish.IsRejected(err) {
		t.Errorf("a batch refused for max_batch_bytes is Rejected (%v): it is the setting's fault, not a message's", err)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondMessageSizeExceeded {
		t.Errorf("error %v does not wrap amqp:link:message-size-exceeded", err)
	}
}

// TestIntegrationEntityNotFoundIsPermanent names the entity, the message
// and what to do.
func TestIntegrationEntityNotFoundIsPermanent(t *testing.T) {
	parallel(t)
	tg := newTarget(t, sbfake0)
	missing := fmt.Sprintf("walpost-missing-%d", time.Now().UnixNano())
	s := newSink(t, tg, "queue: "+missing)
	m := sinktest.NewGen(46).Message("k")
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m})
	sinktest.RequirePermanent(t, err, m.ID, m.LSN.String(), missing, "does not exist")
	if publish.IsRejected(err) {
		t.Errorf("a missing entity is Rejected (%v): parking every message would not fix it", err)
	}
}

func TestIntegrationUnauthorizedIsPermanent(t *testing.T) {
	parallel(t)
	needFake(t, "needs an entity that refuses the token")
	tg := newTarget(t, sbfake.QueueOptions{Unauthorized: true})
	s := newSink(t, tg, "queue: "+tg.queue)
	m := sinktest.NewGen(47).Message("k")
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m})
	sinktest.RequirePermanent(t, err, m.ID, tg.queue, "Data Sender")
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
		t.Errorf("error %v does not wrap an *azservicebus.Error with code %s", err, azservicebus.CodeUnauthorizedAccess)
	}
}

// TestIntegrationThrottlingIsRetried: a server-busy answer is transient.
// Without the SDK's retries Publish returns it and the relay's retry goes
// through; with them the SDK retries by itself.
func TestIntegrationThrottlingIsRetried(t *testing.T) {
	parallel(t)
	needFake(t, "injects server-busy answers")
	tg := newTarget(t, sbfake0)
	g := sinktest.NewGen(48)

	s := newSink(t, tg, "queue: "+tg.queue, "max_retries: 0", "sessions: true")
	first := g.Interleave(50, sinktest.Keys(3)...)
	tg.fake.Fail(t, tg.queue, 1, string(condServerBusy), "The request was terminated because the entity is being throttled. (sbfake)")
	err := s.Publish(sinktest.Context(t, 30*time.Second), first)
	sinktest.RequireTransient(t, err)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != condServerBusy {
		t.Errorf("error %v does not wrap com.microsoft:server-busy", err)
	}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), first); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}

	s = newSink(t, tg, "queue: "+tg.queue, "max_retries: 3", "sessions: true")
	second := g.Interleave(50, sinktest.Keys(3)...)
	tg.fake.Fail(t, tg.queue, 2, string(condServerBusy), "throttled (sbfake)")
	if err := s.Publish(sinktest.Context(t, 30*time.Second), second); err != nil {
		t.Fatalf("with max_retries 3 the SDK should ride out two server-busy answers: %v", err)
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true}, append(first, second...), tg.readAll(t, tg.queue), nil)
}

// wholeRetry hides the sink's publish.Partial reports, as the runner
// before them did: every retry sends the whole batch.
type wholeRetry struct{ publish.Sink }

func (w wholeRetry) Publish(ctx context.Context, msgs []*message.Message) error {
	if err := w.Sink.Publish(ctx, msgs); err != nil {
		return fmt.Errorf("%s", err) // transient; the report is gone
	}
	return nil
}

// TestIntegrationThrottledBatchAloneIsResent: a call of 60 messages goes
// out as several batches of at most 4 KiB, one after another; the third
// is throttled once (and the SDK does not retry). The relay's runner
// acknowledges the batches Service Bus stored at once and re-sends only
// the throttled batch and those after it, so the queue holds each message
// once. Without the report (the runner retrying the whole call) the
// stored batches came twice.
func TestIntegrationThrottledBatchAloneIsResent(t *testing.T) {
	parallel(t)
	needFake(t, "injects a server-busy answer at a given batch")
	g := sinktest.NewGen(52)
	run := func(t *testing.T, whole bool) (stored, ackedFirst int) {
		tg := newTarget(t, sbfake0)
		s := newSink(t, tg, "queue: "+tg.queue, "sessions: true", "max_retries: 0", "max_batch_bytes: 4096")
		batches := 0
		s.beforeSend = func(string) {
			if batches++; batches == 3 {
				tg.fake.Fail(t, tg.queue, 1, string(condServerBusy), "throttled (sbfake)")
			}
		}
		var sink publish.Sink = s
		if whole {
			sink = wholeRetry{s}
		}
		msgs := g.Interleave(60, sinktest.Keys(4)...)
		in := make(chan []publish.Delivery, 1)
		ds := make([]publish.Delivery, len(msgs))
		for i, m := range msgs {
			ds[i] = publish.Delivery{Msg: m}
		}
		in <- ds
		close(in)
		var acks [][]publish.Delivery
		r := publish.NewRunner(sink, in, publish.RunnerOptions{
			BatchSize: len(msgs),
			Ack:       func(b []publish.Delivery) { acks = append(acks, b) },
			Log:       testLogger(t),
		})
		if err := r.Run(sinktest.Context(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		next := 0
		for _, b := range acks {
			for _, d := range b {
				if d.Msg != msgs[next] {
					t.Fatalf("ack of %s, want %s", d.Msg.ID, msgs[next].ID)
				}
				next++
			}
		}
		if next != len(msgs) {
			t.Fatalf("%d of %d acked", next, len(msgs))
		}
		got := tg.readAll(t, tg.queue)
		dupOK := map[string]bool{}
		if whole {
			markAll(dupOK, msgs)
		}
		sinktest.CheckDelivered(t, conformanceFeatures(), msgs, got, dupOK)
		if st := tg.fake.Stats(t, tg.queue); st.Rejected != 1 {
			t.Errorf("stand-in rejected %d transfers, want the one throttled", st.Rejected)
		}
		return len(got), len(acks[0])
	}
	var stored, before int
	t.Run("Partial", func(t *testing.T) {
		stored, before = run(t, false)
		if before == 0 || before >= 60 {
			t.Fatalf("first ack of %d messages, want the batches stored before the throttled one", before)
		}
		if stored != 60 {
			t.Errorf("queue holds %d messages for 60, want each once", stored)
		}
		t.Logf("%d messages acknowledged before the throttled batch; %d stored for 60", before, stored)
	})
	t.Run("Whole", func(t *testing.T) {
		n, _ := run(t, true)
		if n != 60+before {
			t.Errorf("retrying the whole call stored %d messages, want %d (the %d stored before the throttled batch again)", n, 60+before, before)
		}
		t.Logf("retrying the whole call: %d stored for 60", n)
	})
}

// TestIntegrationPartialReportCoversEveryEntity: with an entity template
// the entities are sent to in parallel; when one entity throttles its
// second batch, the error reports every message the other entities
// stored and the first batch of the throttled one, and the retry of the
// rest leaves each queue holding each of its messages once, in order.
func TestIntegrationPartialReportCoversEveryEntity(t *testing.T) {
	parallel(t)
	needFake(t, "creates a queue per type and injects a server-busy answer")
	tg := newTarget(t, sbfake0)
	for _, typ := range sinktest.Types {
		tg.fake.CreateQueue(t, "walpost."+typ, sbfake0)
	}
	s := newSink(t, tg, `entity: "walpost.{type}"`, "sessions: true", "max_retries: 0", "max_batch_bytes: 4096")
	throttled := "walpost." + sinktest.Types[1]
	var batches atomic.Int32
	s.beforeSend = func(entity string) {
		if entity == throttled && batches.Add(1) == 2 {
			tg.fake.Fail(t, throttled, 1, string(condServerBusy), "throttled (sbfake)")
		}
	}
	msgs := sinktest.NewGen(53).Interleave(90, sinktest.Keys(4)...)
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	sinktest.RequireTransient(t, err)
	done, ok := publish.DoneOf(err)
	if !ok || len(done) != len(msgs) {
		t.Fatalf("DoneOf(%v) = %d entries, %v; want one per message of the call", err, len(done), ok)
	}
	var rest []*message.Message
	firstBatch := true
	for i, m := range msgs {
		switch {
		case "walpost."+m.Type != throttled:
			if !done[i] {
				t.Errorf("message %s to %s not reported durable: its entity did not fail", m.ID, m.Type)
			}
		case done[i] && !firstBatch:
			t.Errorf("message %s reported durable after one of its entity that was not: not a prefix", m.ID)
		case !done[i]:
			firstBatch = false
		}
		if !done[i] {
			rest = append(rest, m)
		}
	}
	if len(rest) == 0 || len(rest) == 30 {
		t.Fatalf("%d messages not durable; want the throttled entity's after its first batch", len(rest))
	}
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, rest); err != nil {
		t.Fatal(err)
	}
	for _, typ := range sinktest.Types {
		var want []*message.Message
		for _, m := range msgs {
			if m.Type == typ {
				want = append(want, m)
			}
		}
		if !sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true}, want, tg.readAll(t, "walpost."+typ), nil) {
			t.Errorf("queue walpost.%s", typ)
		}
	}
}

func markAll(set map[string]bool, msgs []*message.Message) {
	for _, m := range msgs {
		set[m.ID] = true
	}
}

// TestIntegrationTemplateSendsEachTypeToItsEntity: entity "walpost.{type}"
// sends each type to its own queue, in WAL order per queue; a type that
// makes an illegal name fails the call before anything is sent.
func TestIntegrationTemplateSendsEachTypeToItsEntity(t *testing.T) {
	parallel(t)
	needFake(t, "creates a queue per type")
	tg := newTarget(t, sbfake0)
	for _, typ := range sinktest.Types {
		tg.fake.CreateQueue(t, "walpost."+typ, sbfake0)
	}
	s := newSink(t, tg, `entity: "walpost.{type}"`, "sessions: true")
	g := sinktest.NewGen(49)
	msgs := g.Interleave(300, sinktest.Keys(4)...)
	for _, b := range g.Split(msgs, 100) {
		if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range sinktest.Types {
		var want []*message.Message
		for _, m := range msgs {
			if m.Type == typ {
				want = append(want, m)
			}
		}
		got := tg.readAll(t, "walpost."+typ)
		if !sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true}, want, got, nil) {
			t.Errorf("queue walpost.%s", typ)
		}
	}

	ok, bad := g.Message("k"), g.Message("k")
	ok.Type, bad.Type = sinktest.Types[0], "order created"
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{ok, bad})
	sinktest.RequirePermanent(t, err, bad.ID, bad.LSN.String(), `"walpost.order created"`)
	if !errors.Is(err, errIllegalEntity) {
		t.Errorf("error %v does not wrap errIllegalEntity", err)
	}
	if n := len(tg.readAll(t, "walpost."+sinktest.Types[0])); n != 100 {
		t.Errorf("walpost.%s holds %d messages, want 100: nothing of the failed call may be sent", sinktest.Types[0], n)
	}
}

// TestIntegrationDuplicateDetectionDropsAResend: with duplicate detection
// on the entity, a batch retried after its acknowledgement was lost
// reaches the queue once (what the package doc promises for the sender
// side).
func TestIntegrationDuplicateDetectionDropsAResend(t *testing.T) {
	parallel(t)
	needFake(t, "needs an entity with duplicate detection")
	tg := newTarget(t, sbfake.QueueOptions{DuplicateDetection: time.Minute})
	s := newSink(t, tg, "queue: "+tg.queue, "sessions: true")
	msgs := sinktest.NewGen(50).Interleave(100, sinktest.Keys(3)...)
	for range 2 {
		if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
			t.Fatal(err)
		}
	}
	sinktest.CheckDelivered(t, conformanceFeatures(), msgs, tg.readAll(t, tg.queue), nil)
	if st := tg.fake.Stats(t, tg.queue); st.Duplicates != 100 {
		t.Errorf("stand-in dropped %d duplicates, want 100", st.Duplicates)
	}
}

// TestIntegrationRunnerDeliversEverythingAcrossAnOutage runs the relay's
// runner over the sink while the stand-in goes away mid-stream and comes
// back on the same port: every message is acknowledged and stored, in
// order, duplicates limited to retried batches.
func TestIntegrationRunnerDeliversEverythingAcrossAnOutage(t *testing.T) {
	parallel(t)
	needFake(t, "cuts the connection")
	tg := newTarget(t, sbfake0)
	s := newSink(t, tg, "queue: "+tg.queue, "sessions: true", "timeout: 2s")
	g := sinktest.NewGen(51)
	msgs := g.Interleave(3000, sinktest.Keys(8)...)

	in := make(chan []publish.Delivery)
	var acked []publish.Delivery
	failing := make(chan bool, 16)
	r := publish.NewRunner(s, in, publish.RunnerOptions{
		BatchSize:  250,
		MaxBackoff: 200 * time.Millisecond,
		Ack:        func(b []publish.Delivery) { acked = append(acked, b...) },
		Failing:    func(f bool) { failing <- f },
		Log:        testLogger(t),
	})
	done := make(chan error, 1)
	ctx := sinktest.Context(t, 60*time.Second)
	go func() { done <- r.Run(ctx) }()

	// The feeder goes on handing batches to the runner (which takes them
	// only between publishes); the outage starts before the 11th and ends
	// once the runner reported the sink failing.
	restored := make(chan struct{})
	go func() {
		defer close(in)
		for i, b := range sinktest.Chunks(msgs, 100) {
			if i == 10 {
				restore := tg.fake.Outage(t)
				go func() {
					defer close(restored)
					defer restore()
					select {
					case <-failing:
					case <-time.After(20 * time.Second):
						t.Error("the runner did not report the sink failing during the outage")
					}
				}()
			}
			ds := make([]publish.Delivery, len(b))
			for j, m := range b {
				ds[j] = publish.Delivery{Msg: m}
			}
			select {
			case in <- ds:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := <-done; err != nil {
		t.Fatalf("runner: %v", err)
	}
	<-restored
	if len(acked) != len(msgs) {
		t.Fatalf("%d of %d messages acknowledged", len(acked), len(msgs))
	}
	for i, d := range acked {
		if d.Msg != msgs[i] {
			t.Fatalf("ack %d is %s, want %s: acks out of order", i, d.Msg.ID, msgs[i].ID)
		}
	}
	got := tg.readAll(t, tg.queue)
	dupOK := map[string]bool{}
	for _, m := range msgs {
		dupOK[m.ID] = true // any batch around the outage may have been retried
	}
	sinktest.CheckDelivered(t, conformanceFeatures(), msgs, got, dupOK)
	t.Logf("%d messages stored for %d published", len(got), len(msgs))
}

// sbfake0 is a queue with the stand-in's defaults.
var sbfake0 = sbfake.QueueOptions{}
