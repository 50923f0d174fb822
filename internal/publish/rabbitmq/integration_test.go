package rabbitmq

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// TestIntegrationConformance runs the sink conformance suite against the
// machine's RabbitMQ: a topic exchange of the test's own, one queue bound
// with "#", the sink connected through a tcpproxy that the outage test
// cuts (the shared server is never touched). One queue keeps one total
// order, and the "key" header tells a NULL key apart.
func TestIntegrationConformance(t *testing.T) {
	url := rabbittest.Start(t)
	sinktest.Run(t, sinktest.Harness{
		Open: func(t *testing.T) *sinktest.Target {
			tp := rabbittest.Declare(t, url, rabbittest.Topology{})
			proxy, err := tcpproxy.New(rabbittest.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			s := newSink(t, proxyURL(proxy.Addr()), tp.Exchange, "timeout: 2s", "max_message_bytes: 2097152")
			var got []*message.Message // what the queue held: Read drains it
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					for _, d := range rabbittest.Drain(t, url, tp.Queue) {
						got = append(got, asMessage(t, d))
					}
					return got
				},
				Outage: func(t testing.TB) func() {
					proxy.Cut()
					return func() {
						if err := proxy.Restore(); err != nil {
							t.Fatalf("restoring the proxy: %v", err)
						}
					}
				},
			}
		},
		// The routing key is the type; the queue is bound with "*", so a
		// type of one word ("created") is routed and a refused message's
		// type of two ("refused.created") comes back unroutable
		// (mandatory): a destination that refuses.
		OpenRefusing: func(t *testing.T) *sinktest.Target {
			tp := rabbittest.Declare(t, url, rabbittest.Topology{BindingKey: "*"})
			s := newSink(t, url, tp.Exchange, "timeout: 5s")
			var got []*message.Message
			return &sinktest.Target{
				Sink: s,
				Read: func(t testing.TB) []*message.Message {
					for _, d := range rabbittest.Drain(t, url, tp.Queue) {
						got = append(got, asMessage(t, d))
					}
					return got
				},
				Refuse: func(m *message.Message) { m.Type = "refused." + m.Type },
			}
		},
		Features: sinktest.Features{
			GlobalOrder:                  true,
			NullKey:                      true,
			CommitTime:                   time.Second, // the AMQP timestamp has whole seconds
			BinaryPayload:                true,
			MaxPayload:                   1 << 20,
			OrderPerKeyUnderRefusal:      true,
			RefusalOrderedPerDestination: true,
		},
	})
}

// TestIntegrationUnroutableMessageIsRejectedNamingExchangeAndRoutingKey:
// with mandatory set, a message no queue is bound for comes back
// (basic.return) and Publish reports it as Rejected, naming the message,
// the exchange and the routing key, with the messages before it reported
// durable (Partial) and nothing after it: never a silent drop.
func TestIntegrationUnroutableMessageIsRejectedNamingExchangeAndRoutingKey(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{BindingKey: "order.#"})
	s := newSink(t, url, tp.Exchange)
	g := sinktest.NewGen(11)
	msgs := []*message.Message{g.Message("k1"), g.Message("k1"), g.Message("k2"), g.Message("k1")}
	msgs[0].Type, msgs[1].Type, msgs[2].Type, msgs[3].Type = "order.created", "order.paid", "invoice.sent", "order.shipped"

	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	if !publish.IsRejected(err) {
		t.Fatalf("Publish = %v, want a Rejected error", err)
	}
	for _, want := range []string{msgs[2].ID, tp.Exchange, `routing key "invoice.sent"`, "unroutable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	done, ok := publish.DoneOf(err)
	if !ok || len(done) != 4 || !done[0] || !done[1] || done[2] || done[3] {
		t.Errorf("DoneOf = %v, %v; want [true true false false]", done, ok)
	}
	got := rabbittest.Await(t, url, tp.Queue, 2, 10*time.Second)
	if got[0].MessageId != msgs[0].ID || got[1].MessageId != msgs[1].ID {
		t.Errorf("queue starts with %s, %s; want %s, %s", got[0].MessageId, got[1].MessageId, msgs[0].ID, msgs[1].ID)
	}

	// Alone (as relay.on_refused: dead_letter retries it), the message is
	// still refused, and the sink publishes the next batch after that.
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs[2:3]); !publish.IsRejected(err) {
		t.Fatalf("Publish of the unroutable message alone = %v, want Rejected", err)
	}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs[3:]); err != nil {
		t.Fatalf("Publish after a refusal: %v", err)
	}
}

// TestIntegrationUnroutableWithFixedNamesIsPermanent: with a fixed
// exchange and routing key every message goes the same way, so a
// returned one means a missing binding: Publish reports it Permanent (not
// Rejected: relay.on_refused: dead_letter would park every message),
// naming the message, exchange and routing key and saying to bind a
// queue, with the messages before it durable.
func TestIntegrationUnroutableWithFixedNamesIsPermanent(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{BindingKey: "order.#"})
	g := sinktest.NewGen(14)

	// The binding matches the fixed key: delivered.
	ok := newSink(t, url, tp.Exchange, `routing_key: "order.fixed"`)
	if err := ok.Publish(sinktest.Context(t, 30*time.Second), g.Interleave(2, "k1")); err != nil {
		t.Fatalf("Publish with a bound fixed routing key: %v", err)
	}
	rabbittest.Await(t, url, tp.Queue, 2, 10*time.Second)

	s := newSink(t, url, tp.Exchange, `routing_key: "invoice.fixed"`)
	msgs := g.Interleave(3, "k1")
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	if !publish.IsPermanent(err) || publish.IsRejected(err) {
		t.Fatalf("Publish = %v, want a Permanent error that is not Rejected", err)
	}
	for _, want := range []string{msgs[0].ID, tp.Exchange, `routing key "invoice.fixed"`, "unroutable", "bind a queue"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "dead_letter") {
		t.Errorf("error %q suggests parking the message", err)
	}
	if _, ok := publish.DoneOf(err); ok {
		t.Errorf("error reports messages durable: %v", err)
	}
	// Alone (as a retry would send it), still Permanent.
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs[:1]); !publish.IsPermanent(err) || publish.IsRejected(err) {
		t.Fatalf("Publish of one message = %v, want Permanent, not Rejected", err)
	}
}

// TestIntegrationMissingExchangeIsPermanentAndSaysToCreateIt: without
// declare_exchange a missing exchange stops the relay (Permanent, not
// Rejected: parking every message would not help) with an error naming
// the exchange and saying what to do; nothing is published.
func TestIntegrationMissingExchangeIsPermanentAndSaysToCreateIt(t *testing.T) {
	url := rabbittest.Start(t)
	name := rabbittest.Name("walpost.test.missing")
	s := newSink(t, url, name)
	g := sinktest.NewGen(12)
	err := s.Publish(sinktest.Context(t, 30*time.Second), g.Interleave(3, "a"))
	if !publish.IsPermanent(err) || publish.IsRejected(err) {
		t.Fatalf("Publish = %v, want a Permanent error that is not Rejected", err)
	}
	if _, ok := publish.DoneOf(err); ok {
		t.Errorf("error reports messages durable: %v", err)
	}
	for _, want := range []string{name, "does not exist", "declare_exchange: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if rabbittest.ExchangeExists(t, url, name) {
		t.Error("the sink created the exchange without declare_exchange")
	}
}

// TestIntegrationDeclareExchangeCreatesItDurable: with declare_exchange the
// sink declares a missing exchange (durable, of exchange_type) at first
// use; a message with no queue bound yet is still refused as unroutable,
// and once a queue is bound the messages arrive.
func TestIntegrationDeclareExchangeCreatesItDurable(t *testing.T) {
	url := rabbittest.Start(t)
	name := rabbittest.Name("walpost.test.declared")
	queue := rabbittest.Name("walpost.test.q")
	t.Cleanup(func() {
		rabbittest.DeleteQueue(t, url, queue)
		rabbittest.DeleteExchange(t, url, name)
	})
	s := newSink(t, url, name, "declare_exchange: true", "exchange_type: direct")
	g := sinktest.NewGen(13)
	m := g.Message("a")
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m}); !publish.IsRejected(err) {
		t.Fatalf("Publish to the new exchange without a queue = %v, want Rejected (unroutable)", err)
	}
	if !rabbittest.ExchangeExists(t, url, name) {
		t.Fatal("the exchange was not declared")
	}
	rabbittest.With(t, url, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclarePassive(name, "direct", true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(queue, m.Type, name, false, nil)
	})
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
	if got := rabbittest.Drain(t, url, queue); len(got) != 1 || got[0].MessageId != m.ID {
		t.Fatalf("queue holds %d messages, want %s alone", len(got), m.ID)
	}
	// A declaration that conflicts with the exchange (another type) is a
	// Permanent error naming exchange_type.
	s2 := newSink(t, url, name, "declare_exchange: true", "exchange_type: fanout")
	err := s2.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m})
	if !publish.IsPermanent(err) || !strings.Contains(err.Error(), "exchange_type") {
		t.Fatalf("Publish declaring the exchange with another type = %v, want Permanent naming exchange_type", err)
	}
}

// TestIntegrationNackIsRetriedAndOnlyTheConfirmedPrefixIsDone: a queue full
// under x-overflow: reject-publish makes RabbitMQ nack; Publish returns a
// transient error reporting exactly the acknowledged prefix durable, and
// once the queue has room the retry delivers the rest.
func TestIntegrationNackIsRetriedAndOnlyTheConfirmedPrefixIsDone(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{QueueArgs: amqp.Table{"x-max-length": int32(5), "x-overflow": "reject-publish"}})
	s := newSink(t, url, tp.Exchange)
	g := sinktest.NewGen(14)
	msgs := g.Interleave(8, "a", "b")

	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	if err == nil || publish.IsPermanent(err) || !errors.Is(err, errNack) {
		t.Fatalf("Publish into a full queue = %v, want a transient nack error", err)
	}
	if !strings.Contains(err.Error(), msgs[5].ID) {
		t.Errorf("error %q does not name the first nacked message %s", err, msgs[5].ID)
	}
	done, ok := publish.DoneOf(err)
	if !ok || len(done) != 8 {
		t.Fatalf("DoneOf = %v, %v; want 8 entries", done, ok)
	}
	for i, d := range done {
		if d != (i < 5) {
			t.Fatalf("DoneOf = %v, want the first 5 durable and no other", done)
		}
	}
	first := rabbittest.Drain(t, url, tp.Queue)
	if len(first) != 5 {
		t.Fatalf("queue held %d messages, want 5", len(first))
	}
	if err := (sinktest.Retry{}).Publish(sinktest.Context(t, 30*time.Second), s, msgs[5:]); err != nil {
		t.Fatalf("retry after the queue has room: %v", err)
	}
	var got []*message.Message
	for _, d := range append(first, rabbittest.Drain(t, url, tp.Queue)...) {
		got = append(got, asMessage(t, d))
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true}, msgs, got, nil)
}

// TestIntegrationConfirmTimeoutIsRetried: when the confirms stop coming
// (the path from the server stalls) Publish gives up after timeout with a
// transient error and reports nothing durable; the next Publish connects
// anew and delivers, duplicates limited to the unconfirmed batch.
func TestIntegrationConfirmTimeoutIsRetried(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	proxy := newStallProxy(t, rabbittest.Addr)
	s := newSink(t, proxyURL(proxy.Addr()), tp.Exchange, "timeout: 500ms")
	g := sinktest.NewGen(15)
	a, b := g.Interleave(10, "a", "b"), g.Interleave(10, "a", "b")
	if err := s.Publish(sinktest.Context(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}

	proxy.Stall()
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 30*time.Second), b)
	el := time.Since(start)
	if err == nil || publish.IsPermanent(err) || !errors.Is(err, errNoConfirm) {
		t.Fatalf("Publish with the confirms held back = %v, want a transient no-confirm error", err)
	}
	if _, ok := publish.DoneOf(err); ok {
		t.Errorf("error reports messages durable: %v", err)
	}
	if el < 500*time.Millisecond || el > 3*time.Second {
		t.Errorf("Publish gave up after %s, want about the 500ms timeout", el)
	}
	proxy.Resume()
	if err := (sinktest.Retry{}).Publish(sinktest.Context(t, 30*time.Second), s, b); err != nil {
		t.Fatalf("retry: %v", err)
	}
	var got []*message.Message
	for _, d := range rabbittest.Drain(t, url, tp.Queue) {
		got = append(got, asMessage(t, d))
	}
	dupOK := map[string]bool{}
	for _, m := range b {
		dupOK[m.ID] = true
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true}, append(a, b...), got, dupOK)
}

// TestIntegrationBlockedWritesTimeOut: when the path to the server stops
// taking bytes (as RabbitMQ does with a connection it blocks for a memory
// or disk alarm), a Publish blocked in a write gives up after timeout with
// a transient error, and the retry delivers once the path is back.
func TestIntegrationBlockedWritesTimeOut(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	proxy := newStallProxy(t, rabbittest.Addr)
	s := newSink(t, proxyURL(proxy.Addr()), tp.Exchange, "timeout: 500ms")
	g := sinktest.NewGen(18)
	if err := s.Publish(sinktest.Context(t, 30*time.Second), g.Interleave(1, "a")); err != nil { // connect
		t.Fatal(err)
	}
	big := make([]*message.Message, 400) // 25 MB: more than the socket buffers hold
	for i := range big {
		big[i] = g.SizedMessage("a", 64<<10)
	}
	proxy.StallUp()
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 30*time.Second), big)
	el := time.Since(start)
	if err == nil || publish.IsPermanent(err) || !errors.Is(err, errNoConfirm) || !strings.Contains(err.Error(), "sending it took longer") {
		t.Fatalf("Publish with the writes blocked = %v, want a transient error about sending", err)
	}
	if el > 3*time.Second {
		t.Errorf("Publish with the writes blocked returned after %s, want about the 500ms timeout", el)
	}
	proxy.Resume()
	if err := (sinktest.Retry{}).Publish(sinktest.Context(t, 30*time.Second), s, big); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// TestIntegrationRefusedCredentialsArePermanent: a wrong password, an
// unknown vhost and amqps:// on the plain port are Permanent errors saying
// what to check, without the password.
func TestIntegrationRefusedCredentialsArePermanent(t *testing.T) {
	rabbittest.Start(t)
	const pw = "s3cretWRONG"
	for _, c := range []struct{ url, want string }{
		{"amqp://guest:" + pw + "@" + rabbittest.Addr + "/", "check the user and password"},
		{"amqp://guest:guest@" + rabbittest.Addr + "/walpost-no-such-vhost", "vhost"},
		{"amqps://guest:" + pw + "@" + rabbittest.Addr + "/", "does not speak TLS"},
	} {
		s := newSink(t, c.url, "amq.topic")
		err := s.Publish(sinktest.Context(t, 30*time.Second), sinktest.NewGen(16).Interleave(1, "a"))
		if !publish.IsPermanent(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Publish = %v, want Permanent saying %q", redactForLog(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("%s: error holds the password: %v", redactForLog(c.url), err)
		}
	}
}

func redactForLog(u string) string { return strings.ReplaceAll(u, "s3cretWRONG", "xxxxx") }

// TestIntegrationServerClosingTheConnectionIsRetriedOnANewOne: when the
// connection goes away between two calls (the proxy resets it), the next
// Publish fails at most once, transiently, and then publishes on a new
// connection.
func TestIntegrationServerClosingTheConnectionIsRetriedOnANewOne(t *testing.T) {
	url := rabbittest.Start(t)
	tp := rabbittest.Declare(t, url, rabbittest.Topology{})
	proxy, err := tcpproxy.New(rabbittest.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	s := newSink(t, proxyURL(proxy.Addr()), tp.Exchange)
	g := sinktest.NewGen(17)
	a, b := g.Interleave(5, "a"), g.Interleave(5, "a")
	if err := s.Publish(sinktest.Context(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	err = s.Publish(sinktest.Context(t, 30*time.Second), b)
	if err != nil {
		if publish.IsPermanent(err) {
			t.Fatalf("Publish after the connection was reset: Permanent %v", err)
		}
		t.Logf("first Publish after the reset: %v", err)
		if err := s.Publish(sinktest.Context(t, 30*time.Second), b); err != nil {
			t.Fatalf("second Publish after the reset: %v", err)
		}
	}
	if got := rabbittest.Drain(t, url, tp.Queue); len(got) != 10 {
		t.Fatalf("queue holds %d messages, want 10", len(got))
	}
}
