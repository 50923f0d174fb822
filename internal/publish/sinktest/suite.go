package sinktest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish"
)

// Features says what a destination carries and keeps, and so which checks
// of the suite apply.
type Features struct {
	// GlobalOrder: the destination keeps one total order over all messages
	// (a file, stdout). Without it order is checked per ordering key only
	// (Kafka keeps order per partition, and a key maps to one partition).
	GlobalOrder bool
	// NullKey: Read tells a NULL key (HasKey false) apart from a key, and
	// returns Key and HasKey as published. Without it only the ordering key
	// is compared (Kafka's record key is the id when the key is NULL).
	NullKey bool
	// LSN: Read returns LSN and CommitLSN as published.
	LSN bool
	// CommitTime is the precision with which Read returns CommitTime
	// (time.Millisecond for Kafka record timestamps); 0 means the
	// destination does not carry it.
	CommitTime time.Duration
	// BinaryPayload: the sink carries a payload that is not JSON (a bytea
	// column) byte for byte; the round-trip test then publishes one.
	BinaryPayload bool
	// ReencodesJSON: the sink may re-encode a JSON payload (spacing, key
	// order), so JSON payloads are compared by value, not byte for byte.
	ReencodesJSON bool
	// ExactlyOnce: what Read returns holds every message once, even the
	// ones published again after a canceled call or during an outage
	// (the kafka sink with exactly_once, read as read_committed). Without
	// it those may appear twice.
	ExactlyOnce bool
	// OrderPerKeyUnderRefusal: under relay.on_refused: hold_key, with a
	// key's messages spread over several destinations (a template over
	// {type}) and one of them refused for good, no later message of the
	// key reaches any destination ahead of its parked head, and the other
	// keys flow (RefusalHoldsTheKeyOnEveryDestination, through
	// publish.Runner; needs Harness.OpenRefusing). Without it that subtest
	// is skipped with Harness.NoRefusal as the reason.
	OrderPerKeyUnderRefusal bool
	// RefusalOrderedPerDestination: refusing a message of a Publish call,
	// the sink stores none of the call's later messages of that key and
	// destination (Kafka: a partition's later records fail with it), as
	// its publish.RefusalUnits says; the runner may then keep a key's
	// messages for one destination in one call. Without it the sink
	// acknowledges each message on its own (NATS JetStream), and the
	// runner sends no two messages of a key in one call. The refusal
	// subtest checks that the sink's RefusalUnit says what this says.
	RefusalOrderedPerDestination bool
	// MaxPayload is the size, in bytes, of the one large payload that
	// LargeBatchesAllDelivered publishes alone; 0 leaves it out. Set it to
	// what the sink, as Open configures it, must accept (1 MiB for Kafka
	// with batch_bytes and the broker's message.max.bytes above that).
	MaxPayload int
}

// Target is one isolated destination set up by Harness.Open.
type Target struct {
	// Sink publishes to the destination. The suite closes it at the end of
	// the subtest and requires Close to return nil.
	Sink publish.Sink
	// Read returns what the destination holds now, in destination order
	// (at least per ordering key; in total order with
	// Features.GlobalOrder), as messages: id, type, key, payload and
	// headers, plus what Features says the destination carries. A sink
	// that maps the id and type to headers (Kafka) puts them back into ID
	// and Type, and leaves them out of Headers. Read fails the test itself
	// when the destination cannot be read. It is called only while the
	// destination is reachable, and also after the sink was closed.
	Read func(t testing.TB) []*message.Message
	// Refuse, set by Harness.OpenRefusing, turns m (keeping its id and
	// key) into a message the sink refuses for good (publish.IsRejected):
	// over its destination's size limit (Oversize), or marked for a fake
	// to refuse, keeping its type; or with a type naming a destination
	// that refuses it (one that does not exist, or an unroutable routing
	// key).
	Refuse func(m *message.Message)
	// Outage, if non-nil, makes the destination unreachable for the sink
	// until the returned restore function is called (once). Nil skips the
	// outage test.
	Outage func(t testing.TB) (restore func())
}

// Harness hooks a sink into the suite.
type Harness struct {
	// Open sets up a fresh destination (its own topic, its own file) for
	// one subtest, registers its teardown with t.Cleanup, and returns it.
	Open func(t *testing.T) *Target
	// OpenRefusing, needed with Features.OrderPerKeyUnderRefusal, sets up
	// like Open destinations for the refusal subtest: the sink sends each
	// message to a destination named after its Type (a template over
	// {type}: one destination per entry of RefusalTypes), Read returns what all
	// of them hold (each in its own order, Type set), and Refuse makes a
	// message refused.
	OpenRefusing func(t *testing.T) *Target
	// NoRefusal says why the harness cannot prove
	// OrderPerKeyUnderRefusal (the skip message of the refusal subtest).
	NoRefusal string
	// Features selects the checks that apply.
	Features Features
}

// Run runs the conformance suite against the harness's sink, one subtest
// per guarantee (see the package doc). Subtests run one after another.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("sinktest: Harness.Open is nil")
	}
	s := &suite{h: h, closed: map[*Target]bool{}}
	t.Run("RoundTripKeepsEveryField", s.roundTrip)
	t.Run("OrderKeptPerKeyAcrossBatches", s.ordering)
	t.Run("AckedMessagesAreReadable", s.acks)
	t.Run("CanceledContextFailsPromptly", s.cancel)
	t.Run("OutageLosesNothingAndKeepsOrder", s.outage)
	t.Run("LargeBatchesAllDelivered", s.large)
	t.Run("RefusalHoldsTheKeyOnEveryDestination", s.refusal)
}

type suite struct {
	h      Harness
	closed map[*Target]bool // sinks the subtest closed itself
}

// promptly is how long after its context ended a Publish may take to
// return.
const promptly = 3 * time.Second

func (s *suite) open(t *testing.T) *Target {
	t.Helper()
	return s.openWith(t, s.h.Open)
}

// openWith opens a Target with open (Harness.Open or OpenRefusing).
func (s *suite) openWith(t *testing.T, open func(t *testing.T) *Target) *Target {
	t.Helper()
	tg := open(t)
	if tg == nil || tg.Sink == nil || tg.Read == nil {
		t.Fatal("sinktest: Open returned no Target, Sink or Read")
	}
	if tg.Sink.Name() == "" {
		t.Error("Sink.Name() is empty")
	}
	// A subtest that stops early still closes the sink, once.
	t.Cleanup(func() {
		if !s.closed[tg] {
			tg.Sink.Close()
		}
		delete(s.closed, tg)
	})
	return tg
}

// closeSink closes the sink at the end of a subtest and requires nil.
func (s *suite) closeSink(t *testing.T, tg *Target) {
	t.Helper()
	s.closed[tg] = true
	if err := tg.Sink.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func mustPublish(t *testing.T, sink publish.Sink, msgs []*message.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := PublishWithRetry(ctx, sink, msgs); err != nil {
		t.Fatalf("publishing %d messages (first %s, lsn %s): %v", len(msgs), msgs[0].ID, msgs[0].LSN, err)
	}
}

func (s *suite) roundTrip(t *testing.T) {
	tg := s.open(t)
	g := NewGen(1)
	var msgs []*message.Message
	msgs = append(msgs, g.Message("order-1"))
	m := g.Message("order-1")
	m.Headers["tracestate"] = "vendor=1,other=x"
	m.Headers["x-tenant"] = "acme GmbH ✓"
	msgs = append(msgs, m)
	m = g.Message("order-2")
	m.Headers = nil
	msgs = append(msgs, m)
	msgs = append(msgs, g.NullKeyMessage())
	m = g.Message("kunde/äöü 1")
	m.Payload = []byte(`[1,2.5,"drei",{"vier":null},true]`)
	msgs = append(msgs, m)
	m = g.Message("order-3")
	m.Payload = []byte(`{}`)
	m.Headers = map[string]string{}
	msgs = append(msgs, m)
	m = g.Message("order-3")
	m.Payload = []byte(`"just a string with \"quotes\" and \\ and \u00e9"`)
	msgs = append(msgs, m)
	m = g.Message("order-4")
	m.Payload = []byte(`{"nested":{"a":[{"b":1e3}],"c":"\u2028"},"n":-0.000001}`)
	msgs = append(msgs, m)
	if s.h.Features.BinaryPayload {
		m = g.Message("order-4")
		m.Payload, m.PayloadJSON = []byte{0x00, 0xff, 0xfe, '{', 0x80, '\n', 0x00}, false
		msgs = append(msgs, m)
	}
	mustPublish(t, tg.Sink, msgs)
	CheckDelivered(t, s.h.Features, msgs, tg.Read(t), nil)
	s.closeSink(t, tg)
}

func (s *suite) ordering(t *testing.T) {
	tg := s.open(t)
	g := NewGen(2)
	keys := Keys(7)
	msgs := make([]*message.Message, 600)
	for i := range msgs {
		if i%37 == 0 {
			msgs[i] = g.NullKeyMessage() // a NULL key orders by id: a key of its own
		} else {
			msgs[i] = g.Message(keys[g.rnd.IntN(len(keys))])
		}
	}
	for _, b := range g.Split(msgs, 40) {
		mustPublish(t, tg.Sink, b)
	}
	CheckDelivered(t, s.h.Features, msgs, tg.Read(t), nil)
	s.closeSink(t, tg)
}

func (s *suite) acks(t *testing.T) {
	tg := s.open(t)
	g := NewGen(3)
	var published []*message.Message
	for i := range 5 {
		b := g.Interleave(20+i*40, Keys(4)...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := tg.Sink.Publish(ctx, b)
		cancel()
		if err != nil {
			t.Fatalf("Publish of batch %d (%d messages): %v", i, len(b), err)
		}
		published = append(published, b...)
		// No polling: an acknowledged message is readable now.
		if !CheckDelivered(t, s.h.Features, published, tg.Read(t), nil) {
			t.Fatalf("after batch %d was acknowledged the destination does not hold every acknowledged message", i)
		}
	}
	s.closeSink(t, tg)
}

func (s *suite) cancel(t *testing.T) {
	tg := s.open(t)
	g := NewGen(4)
	var published []*message.Message
	dupOK := map[string]bool{}

	// A context that has already ended: an error wrapping ctx.Err(), at once.
	a := g.Interleave(50, Keys(3)...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := tg.Sink.Publish(ctx, a)
	if el := time.Since(start); el > promptly {
		t.Errorf("Publish with a canceled context took %s", el)
	}
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a canceled context returned %v, want an error wrapping context.Canceled", err)
	}
	if publish.IsPermanent(err) {
		t.Errorf("cancellation reported as Permanent: %v", err)
	}
	mustPublish(t, tg.Sink, a) // the runner retries the whole batch
	published = append(published, a...)
	s.markDup(dupOK, a)

	// A context that ends during the call: nil (it finished first) or an
	// error wrapping ctx.Err(), promptly either way.
	b := g.Interleave(1000, Keys(5)...)
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	start = time.Now()
	go func() { done <- tg.Sink.Publish(ctx, b) }()
	time.AfterFunc(time.Millisecond, cancel)
	select {
	case err = <-done:
	case <-time.After(promptly + 10*time.Millisecond):
		t.Fatalf("Publish did not return within %s of its context being canceled", promptly)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Publish canceled during the call returned %v, want nil or an error wrapping context.Canceled", err)
	}
	t.Logf("Publish canceled during the call returned %v after %s", err, time.Since(start))
	if err != nil {
		mustPublish(t, tg.Sink, b) // the runner retries a batch that failed, and only such a one
	}
	published = append(published, b...)
	s.markDup(dupOK, b)

	c := g.Interleave(100, Keys(5)...)
	mustPublish(t, tg.Sink, c)
	published = append(published, c...)
	CheckDelivered(t, s.h.Features, published, tg.Read(t), dupOK)
	s.closeSink(t, tg)
}

// markDup allows msgs to appear twice, unless the destination delivers
// exactly once.
func (s *suite) markDup(dupOK map[string]bool, msgs []*message.Message) {
	if s.h.Features.ExactlyOnce {
		return
	}
	for _, m := range msgs {
		dupOK[m.ID] = true
	}
}

func (s *suite) outage(t *testing.T) {
	tg := s.open(t)
	if tg.Outage == nil {
		s.closeSink(t, tg)
		t.Skip("the harness cannot simulate an outage of this destination")
	}
	g := NewGen(5)
	keys := Keys(6)
	before := g.Interleave(300, keys...)
	mustPublish(t, tg.Sink, before)

	restore := tg.Outage(t)
	restored := false
	defer func() {
		if !restored {
			restore()
		}
	}()

	// One attempt during the outage: an error that is not Permanent, or a
	// block that ends promptly with the context.
	during := g.Interleave(400, keys...)
	const attempt = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), attempt)
	start := time.Now()
	err := tg.Sink.Publish(ctx, during)
	cancel()
	switch el := time.Since(start); {
	case err == nil:
		t.Fatal("Publish during the outage returned nil: it claims an acknowledgement the destination cannot have given")
	case publish.IsPermanent(err):
		t.Fatalf("Publish during the outage returned a Permanent error (the relay would stop): %v", err)
	case el > attempt+promptly:
		t.Errorf("Publish during the outage took %s with a %s context", el, attempt)
	}
	t.Logf("Publish during the outage: %v (after %s)", err, time.Since(start).Round(time.Millisecond))

	// The runner's retry loop: it must fail twice more while the
	// destination is down (the second time on a fresh attempt to reach
	// it), then succeed once it is back.
	var failures atomic.Int32
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r := Retry{AttemptTimeout: time.Second, OnError: func(int, error) { failures.Add(1) }}
		done <- r.Publish(ctx, tg.Sink, during)
	}()
	pgtest.Await(t, 45*time.Second, "two failed attempts of the retry loop during the outage", func() bool { return failures.Load() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("the retry loop ended during the outage: %v", err)
	default:
	}
	restore()
	restored = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the retry loop did not deliver after the outage ended: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the retry loop did not end within 60s of the outage ending")
	}
	t.Logf("delivered after %d failed attempts", failures.Load())

	after := g.Interleave(300, keys...)
	mustPublish(t, tg.Sink, after)

	dupOK := map[string]bool{}
	s.markDup(dupOK, during)
	want := append(append(append([]*message.Message{}, before...), during...), after...)
	CheckDelivered(t, s.h.Features, want, tg.Read(t), dupOK)
	s.closeSink(t, tg)
}

func (s *suite) large(t *testing.T) {
	tg := s.open(t)
	g := NewGen(6)
	msgs := g.Interleave(5000, Keys(10)...)
	for _, b := range Chunks(msgs, 1000) {
		mustPublish(t, tg.Sink, b)
	}
	if n := s.h.Features.MaxPayload; n > 0 {
		big := g.SizedMessage("agg-big", n)
		mustPublish(t, tg.Sink, []*message.Message{big})
		msgs = append(msgs, big)
		if len(big.Payload) != n {
			t.Fatalf("test bug: payload of %d bytes, want %d", len(big.Payload), n)
		}
	}
	CheckDelivered(t, s.h.Features, msgs, tg.Read(t), nil)
	s.closeSink(t, tg)
}
