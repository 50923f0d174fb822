package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

func toAttrs(m map[string]string) map[string]types.MessageAttributeValue {
	out := map[string]types.MessageAttributeValue{}
	for k, v := range m {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}

func conformanceHarness(fifo bool, extra ...string) sinktest.Harness {
	return sinktest.Harness{
		Features: sinktest.Features{
			// One standard queue of the stand-in keeps one order (SQS's own
			// does not); a FIFO queue's order is per group: a request holds
			// one entry per group, the other groups fill it (awsbatch).
			GlobalOrder:                  !fifo,
			BinaryPayload:                true,
			MaxPayload:                   200 << 10,
			OrderPerKeyUnderRefusal:      true,
			RefusalOrderedPerDestination: fifo,
		},
		Open: func(t *testing.T) *sinktest.Target {
			srv := sqsfake.Start(t)
			q := newQueue(srv, fifo, sqsfake.QueueOptions{})
			return &sinktest.Target{
				Sink:   newSink(t, srv, q, extra...),
				Read:   func(t testing.TB) []*message.Message { return readQueue(t, srv, q) },
				Outage: func(t testing.TB) func() { return srv.Outage(t) },
			}
		},
		// A queue per type ("<name>-{type}", ".fifo" for FIFO); the
		// stand-in refuses a marked message's entry alone
		// (InvalidMessageContents, a sender fault), the others of the
		// request stored.
		OpenRefusing: func(t *testing.T) *sinktest.Target {
			srv := sqsfake.Start(t)
			srv.FailEntries(func(_, body string) (string, bool) {
				if strings.Contains(body, refuseMark) {
					return "InvalidMessageContents", true
				}
				return "", false
			})
			base := fmt.Sprintf("walpost-rf%d", queueSeq.Add(1))
			suffix := ""
			if fifo {
				suffix = ".fifo"
			}
			var queues []string
			for _, typ := range sinktest.RefusalTypes {
				q := base + "-" + typ + suffix
				srv.CreateQueue(q, sqsfake.QueueOptions{})
				queues = append(queues, q)
			}
			return &sinktest.Target{
				Sink: newSink(t, srv, base+"-{type}"+suffix, extra...),
				Read: func(t testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, q := range queues {
						msgs = append(msgs, readQueue(t, srv, q)...)
					}
					return msgs
				},
				Refuse: func(m *message.Message) { m.Payload = []byte(`{"` + refuseMark + `":"` + m.ID + `"}`) },
			}
		},
	}
}

// refuseMark in a body makes the refusal harness's stand-in refuse it.
const refuseMark = "refuse-this-entry"

// TestIntegrationConformanceFIFO runs the sink conformance suite against a
// FIFO queue of the stand-in: group = the ordering key, deduplication id
// = the outbox id. The outage stops the stand-in's listener and closes
// its connections, then listens again on the same port, the queue kept.
func TestIntegrationConformanceFIFO(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, conformanceHarness(true))
}

// TestIntegrationConformanceStandard runs the suite against a standard
// queue (no group, no deduplication id).
func TestIntegrationConformanceStandard(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, conformanceHarness(false))
}

// TestIntegrationConformanceWithSmallMessages runs the suite again with
// max_message_bytes 4096, so that batches end on size, not on count.
func TestIntegrationConformanceWithSmallMessages(t *testing.T) {
	t.Parallel()
	h := conformanceHarness(true, "max_message_bytes: 4096")
	h.Features.MaxPayload = 3000
	sinktest.Run(t, h)
}

// TestIntegrationBatchesHoldTenMessagesAndStayUnderTheSizeLimit: 95 small messages over 10
// keys are 10 SendMessageBatch requests, and 3 of 100 KiB (of three keys)
// need one request each beyond 256 KiB per batch; 10 messages of one key
// to the FIFO queue are 10 requests (one entry per group a request).
func TestIntegrationBatchesHoldTenMessagesAndStayUnderTheSizeLimit(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	g := sinktest.NewGen(1)
	keys := sinktest.Keys(10)
	var msgs []*message.Message
	for i := range 95 {
		msgs = append(msgs, g.Message(keys[i%10]))
	}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	if n := srv.Requests("SendMessageBatch"); n != 10 {
		t.Errorf("%d SendMessageBatch requests for 95 messages, want 10", n)
	}
	big := []*message.Message{g.SizedMessage("k1", 100<<10), g.SizedMessage("k2", 100<<10), g.SizedMessage("k3", 100<<10)}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), big); err != nil {
		t.Fatal(err)
	}
	if n := srv.Requests("SendMessageBatch"); n != 12 {
		t.Errorf("%d SendMessageBatch requests after three 100 KiB messages, want 12 (two in the first batch, one in the next)", n)
	}
	one := g.Interleave(10, "one")
	if err := s.Publish(sinktest.Context(t, 10*time.Second), one); err != nil {
		t.Fatal(err)
	}
	if n := srv.Requests("SendMessageBatch"); n != 22 {
		t.Errorf("%d SendMessageBatch requests after 10 messages of one key, want 22 (one each)", n)
	}
	sinktest.CheckDelivered(t, sinktest.Features{}, append(append(msgs, big...), one...), readQueue(t, srv, q), nil)
}

// TestIntegrationFailedEntriesArePartialAcksPerGroup: SQS fails one entry
// of a batch; the entries it stored are reported durable; on a FIFO
// queue the failed entry's group sends nothing after it (one entry per
// group a request), and the retry sends the rest.
func TestIntegrationFailedEntriesArePartialAcksPerGroup(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	g := sinktest.NewGen(2)
	a1, b1, a2, b2, a3 := g.Message("a"), g.Message("b"), g.Message("a"), g.Message("b"), g.Message("a")
	msgs := []*message.Message{a1, b1, a2, b2, a3}
	failing := string(a2.Payload)
	srv.FailEntries(func(_, body string) (string, bool) {
		if body == failing {
			return "InternalError", false
		}
		return "", false
	})
	err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	sinktest.RequireTransient(t, err)
	done, ok := publish.DoneOf(err)
	if !ok {
		t.Fatalf("error %v reports no durable messages", err)
	}
	want := []bool{true, true, false, true, false} // a3 waits for a2
	for i := range want {
		if done[i] != want[i] {
			t.Fatalf("done %v, want %v", done, want)
		}
	}
	if !strings.Contains(err.Error(), a2.ID) || !strings.Contains(err.Error(), "InternalError") {
		t.Errorf("error %q does not name message %s and the code", err, a2.ID)
	}
	srv.FailEntries(nil)
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{a2, a3}); err != nil {
		t.Fatal(err)
	}
	got := readQueue(t, srv, q)
	if len(got) != 5 {
		t.Fatalf("queue holds %d messages, want 5", len(got))
	}
}

// TestIntegrationRefusedEntryIsRejected: an entry SQS refuses for what it
// holds is Rejected, naming the message; the others are durable.
func TestIntegrationRefusedEntryIsRejected(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, false, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	g := sinktest.NewGen(3)
	msgs := []*message.Message{g.Message("a"), g.Message("a"), g.Message("a")}
	bad := string(msgs[1].Payload)
	srv.FailEntries(func(_, body string) (string, bool) {
		if body == bad {
			return "InvalidAttributeValue", true
		}
		return "", false
	})
	err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), msgs[1].ID) {
		t.Fatalf("got %v, want Rejected naming %s", err, msgs[1].ID)
	}
	if done, _ := publish.DoneOf(err); len(done) != 3 || !done[0] || done[1] || !done[2] {
		t.Fatalf("done %v, want the first and last (a standard queue has no order to keep)", done)
	}
}

// TestIntegrationTooLargeMessageIsRejectedBeforeSending: a message over
// max_message_bytes with its attributes is refused, naming it, and nothing
// of the call is sent.
func TestIntegrationTooLargeMessageIsRejectedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	g := sinktest.NewGen(4)
	big := g.SizedMessage("k", 256<<10)
	err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{g.Message("k"), big})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), big.ID) || !strings.Contains(err.Error(), "max_message_bytes") {
		t.Fatalf("got %v, want Rejected naming %s and max_message_bytes", err, big.ID)
	}
	if n := srv.Requests("SendMessageBatch"); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestIntegrationThrottlingIsRetried: RequestThrottled answers are
// transient; the SDK's own retries ride them out when allowed.
func TestIntegrationThrottlingIsRetried(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	g := sinktest.NewGen(5)
	s := newSink(t, srv, q)
	srv.Throttle(1)
	msgs := []*message.Message{g.Message("k")}
	sinktest.RequireTransient(t, s.Publish(sinktest.Context(t, 10*time.Second), msgs))
	retrying := newSink(t, srv, q, "max_retries: 3")
	srv.Throttle(2)
	if err := retrying.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
		t.Fatalf("with max_retries 3 two throttled answers: %v", err)
	}
}

// TestIntegrationMissingQueue: a configured queue that does not exist
// stops the relay (Permanent); one a template chose is Rejected.
func TestIntegrationMissingQueue(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	g := sinktest.NewGen(6)
	m := g.Message("k")
	err := newSink(t, srv, "nope.fifo").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	sinktest.RequirePermanent(t, err, "nope.fifo", "does not exist")
	if publish.IsRejected(err) {
		t.Errorf("a fixed queue's absence is Rejected: %v", err)
	}
	srv.CreateQueue("outbox-"+m.Type, sqsfake.QueueOptions{})
	s := newSink(t, srv, "outbox-{type}-x")
	err = s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	if !publish.IsRejected(err) {
		t.Fatalf("templated missing queue: got %v, want Rejected", err)
	}
	m2 := g.Message("k")
	m2.Type = "has.dot"
	err = newSink(t, srv, "outbox-{type}").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m2})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), "fifo") {
		t.Fatalf("a type with '.': got %v, want Rejected", err)
	}
}

// TestIntegrationAttributes: id, type and key as attributes, headers
// after them up to SQS's 10, traceparent first, the rest dropped; names
// SQS refuses and denied headers never sent.
func TestIntegrationAttributes(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, false, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	g := sinktest.NewGen(7)
	m := g.Message("k")
	for _, h := range []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"} {
		m.Headers[h] = "v-" + h
	}
	m.Headers["Authorization"] = "Bearer x"
	m.Headers["AWS.trace"] = "x"
	m.Headers["bad name"] = "x"
	m.Headers["empty"] = ""
	m.Headers["ID"] = "forged"
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
	got := srv.Messages(q)[0].Attributes
	want := map[string]string{AttrID: m.ID, AttrType: m.Type, AttrKey: "k", "traceparent": m.Headers["traceparent"],
		"h1": "v-h1", "h2": "v-h2", "h3": "v-h3", "h4": "v-h4", "h5": "v-h5", "h6": "v-h6"}
	if len(got) != len(want) {
		t.Fatalf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, got[k], v)
		}
	}
}

// TestIntegrationCloudEvents: format: cloudevents sets the ce- attributes
// and content-type instead of id and type.
func TestIntegrationCloudEvents(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(t, srv, q, "format: cloudevents", "source: /orders")
	g := sinktest.NewGen(8)
	m := g.Message("k")
	m.Headers["ce-id"] = "forged"
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
	got := srv.Messages(q)[0].Attributes
	want := map[string]string{"ce-specversion": "1.0", "ce-id": m.ID, "ce-source": "/orders", "ce-type": m.Type,
		"ce-time": m.CommitTime.UTC().Format(time.RFC3339Nano), "ce-partitionkey": "k", "content-type": "application/json",
		"traceparent": m.Headers["traceparent"]}
	if len(got) != len(want) {
		t.Fatalf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, got[k], v)
		}
	}
}

// TestIntegrationCanceledContext: an ended context is returned promptly.
func TestIntegrationCanceledContext(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(t, srv, q)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Publish(ctx, []*message.Message{sinktest.NewGen(9).Message("k")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}
