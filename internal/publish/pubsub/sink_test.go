package pubsub

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

func conformanceHarness(extra ...string) sinktest.Harness {
	return sinktest.Harness{
		Features: sinktest.Features{BinaryPayload: true, MaxPayload: 1 << 20,
			OrderPerKeyUnderRefusal: true, RefusalOrderedPerDestination: true},
		// A topic per type ("<name>-{type}"); the fake refuses a request
		// holding a marked message (InvalidArgument), and the client
		// pauses the message's ordering key on that topic.
		OpenRefusing: func(t *testing.T) *sinktest.Target {
			f := startFake(t)
			base := fmt.Sprintf("walpost-rf%d", topicSeq.Add(1))
			var topics []string
			for _, typ := range sinktest.RefusalTypes {
				topics = append(topics, base+"-"+typ)
				f.createTopic(t, topics[len(topics)-1])
			}
			return &sinktest.Target{
				Sink: newSink(t, f, base+"-{type}", extra...),
				Read: func(testing.TB) []*message.Message {
					var msgs []*message.Message
					for _, topic := range topics {
						msgs = append(msgs, f.read(topic)...)
					}
					return msgs
				},
				Refuse: func(m *message.Message) { m.Payload = []byte(`{"` + refuseMark + `":"` + m.ID + `"}`) },
			}
		},
		Open: func(t *testing.T) *sinktest.Target {
			f := startFake(t)
			topic := f.newTopic(t)
			return &sinktest.Target{
				Sink: newSink(t, f, topic, extra...),
				Read: func(testing.TB) []*message.Message { return f.read(topic) },
				Outage: func(testing.TB) func() {
					f.proxy.Cut()
					return func() {
						if err := f.proxy.Restore(); err != nil {
							t.Fatal(err)
						}
					}
				},
			}
		},
	}
}

// TestIntegrationConformance runs the sink conformance suite against
// pstest, the Pub/Sub module's in-process fake; the outage cuts the proxy
// in front of it.
func TestIntegrationConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, conformanceHarness())
}

// TestIntegrationConformanceWithSmallBatches: bundles of at most 7
// messages, so that a key's messages go out as many requests.
func TestIntegrationConformanceWithSmallBatches(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, conformanceHarness("batch_count: 7"))
}

// TestIntegrationThrottlingIsRiddenOut: ResourceExhausted answers are
// retried by the client within timeout; the messages arrive once each, in
// order per key.
func TestIntegrationThrottlingIsRiddenOut(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	topic := f.newTopic(t)
	s := newSink(t, f, topic)
	g := sinktest.NewGen(1)
	msgs := g.Interleave(50, sinktest.Keys(3)...)
	f.throttle.n.Store(3)
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, msgs); err != nil {
		t.Fatal(err)
	}
	if f.throttle.n.Load() >= 0 {
		t.Fatal("no request was throttled")
	}
	sinktest.CheckDelivered(t, sinktest.Features{}, msgs, f.read(topic), nil)
}

// TestIntegrationPausedKeyIsResumed: a publish that fails for a key
// pauses it in the client; the retry publishes the key again (on a new
// publisher), in order, and so does the next call.
func TestIntegrationPausedKeyIsResumed(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	topic := f.newTopic(t)
	s := newSink(t, f, topic, "timeout: 1s")
	g := sinktest.NewGen(2)
	first := []*message.Message{g.Message("k"), g.Message("k")}
	f.proxy.Cut()
	err := s.Publish(sinktest.Context(t, 10*time.Second), first)
	sinktest.RequireTransient(t, err)
	if err := f.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	second := []*message.Message{g.Message("k")}
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, first); err != nil {
		t.Fatalf("the retry of the failed key: %v", err)
	}
	if err := s.Publish(sinktest.Context(t, 10*time.Second), second); err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, sinktest.Features{}, append(first, second...), f.read(topic), map[string]bool{first[0].ID: true, first[1].ID: true})
}

// TestIntegrationMissingTopic: a configured topic that does not exist
// stops the relay; one a template chose is Rejected; a name the template
// makes illegal is Rejected before anything is sent.
func TestIntegrationMissingTopic(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	g := sinktest.NewGen(3)
	m := g.Message("k")
	err := newSink(t, f, "nope-topic").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	sinktest.RequirePermanent(t, err, "nope-topic", "does not exist")
	if publish.IsRejected(err) {
		t.Errorf("a fixed topic's absence is Rejected: %v", err)
	}
	err = newSink(t, f, "t-{type}").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
	if !publish.IsRejected(err) {
		t.Fatalf("templated missing topic: got %v, want Rejected", err)
	}
	m2 := g.Message("k")
	m2.Type = "goog"
	err = newSink(t, f, "{type}-x").Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m2})
	if !publish.IsRejected(err) || !strings.Contains(err.Error(), "goog") {
		t.Fatalf("a type reaching Google's namespace: got %v, want Rejected", err)
	}
}

// TestIntegrationAttributesAndOrderingKey: id, type and key attributes,
// the headers column (denied names and own names left out), the ordering
// key; with cloudevents the ce- attributes.
func TestIntegrationAttributesAndOrderingKey(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	topic := f.newTopic(t)
	g := sinktest.NewGen(4)
	m := g.Message("order-1")
	m.Headers["Cookie"] = "x"
	m.Headers["TYPE"] = "forged"
	m.Headers["x-tenant"] = "acme"
	n := g.NullKeyMessage()
	if err := newSink(t, f, topic).Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m, n}); err != nil {
		t.Fatal(err)
	}
	ce := newSink(t, f, topic, "format: cloudevents", "source: /orders")
	if err := ce.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
	all := f.srv.Messages()
	if len(all) != 3 {
		t.Fatalf("%d messages", len(all))
	}
	got := map[string]*pstest.Message{} // by id; the cloudevents one by ce-id
	for _, pm := range all {
		if id := pm.Attributes[AttrID]; id != "" {
			got[id] = pm
		} else {
			got["ce:"+pm.Attributes["ce-id"]] = pm
		}
	}
	want := map[string]string{AttrID: m.ID, AttrType: m.Type, AttrKey: "order-1", "traceparent": m.Headers["traceparent"], "x-tenant": "acme"}
	if g := got[m.ID]; g == nil || len(g.Attributes) != len(want) || g.OrderingKey != "order-1" {
		t.Fatalf("message %s: %+v, want attributes %v and ordering key order-1", m.ID, g, want)
	}
	for k, v := range want {
		if got[m.ID].Attributes[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, got[m.ID].Attributes[k], v)
		}
	}
	if g := got[n.ID]; g == nil || g.OrderingKey != n.ID || g.Attributes[AttrKey] != "" {
		t.Errorf("NULL key: %+v, want the id as ordering key and no key attribute", g)
	}
	if got["ce:"+m.ID] == nil {
		t.Fatal("no cloudevents message")
	}
	a := got["ce:"+m.ID].Attributes
	if a["ce-id"] != m.ID || a["ce-type"] != m.Type || a["ce-source"] != "/orders" || a["ce-specversion"] != "1.0" ||
		a["ce-partitionkey"] != "order-1" || a["content-type"] != "application/json" || a[AttrID] != "" {
		t.Errorf("cloudevents attributes %v", a)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"topic: t", "project: empty"},
		{"project: p", "topic: empty"},
		{"project: p\ntopic: projects/p/topics/t", "give the topic ID"},
		{"project: p\ntopic: 1abc", "must start with a letter"},
		{"project: p\ntopic: ttt\nemulator_host: x", "emulator_host"},
		{"project: p\ntopic: ttt\nbatch_count: 5000", "batch_count: 5000"},
	} {
		_, err := New(sinktest.SinkConfig(t, "name: s\nkind: pubsub\n"+c.doc), testLogger(t))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error naming %q", c.doc, err, c.want)
		}
	}
}

// TestIntegrationCloseIsBoundedWhilePubSubIsUnreachable: Close during an
// outage returns within closeWait and a little, not after the client's
// own timeout.
func TestIntegrationCloseIsBoundedWhilePubSubIsUnreachable(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	topic := f.newTopic(t)
	s := newSink(t, f, topic, "timeout: 1m")
	g := sinktest.NewGen(5)
	f.proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	sinktest.RequireTransient(t, s.Publish(ctx, []*message.Message{g.Message("k")}))
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > closeWait+3*time.Second {
		t.Fatalf("Close took %v", d)
	}
}
