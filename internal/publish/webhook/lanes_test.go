package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// keyWatch is an endpoint's behaviour for the lanes tests, installed as
// a receiver's answer: it holds every request for latency, answers the
// requests refuse picks with the status it returns, and records each
// time two requests of one ordering key were at the endpoint at once
// (which the lanes must never do) and when each request arrived.
type keyWatch struct {
	latency time.Duration
	start   time.Time

	mu       sync.Mutex
	refuse   func(r request, keys []string) (status int, header map[string]string)
	busy     map[string]bool
	overlaps []string
	arrivals map[string][]time.Duration // per key, since start
}

func watchKeys(rc *receiver, latency time.Duration) *keyWatch {
	kw := &keyWatch{latency: latency, start: time.Now(), busy: map[string]bool{}, arrivals: map[string][]time.Duration{}}
	rc.setAnswer(kw.answer)
	return kw
}

// keysOf returns the ordering keys of the messages a request carries: the
// key (or the id for a NULL key) from the headers in mode message, of
// every element of the array in mode batch.
func keysOf(r request) []string {
	if r.header.Get(headerCount) == "" {
		if k, ok := r.header[headerKey]; ok {
			return []string{k[0]}
		}
		return []string{r.header.Get(headerID)}
	}
	var lines []sinktest.Line
	_ = json.Unmarshal(r.body, &lines)
	var keys []string
	for _, l := range lines {
		k := l.ID
		if l.Key != nil {
			k = *l.Key
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

func (kw *keyWatch) answer(w http.ResponseWriter, r request) bool {
	keys := keysOf(r)
	kw.mu.Lock()
	for _, k := range keys {
		if kw.busy[k] {
			kw.overlaps = append(kw.overlaps, k)
		}
		kw.busy[k] = true
		kw.arrivals[k] = append(kw.arrivals[k], time.Since(kw.start))
	}
	refuse := kw.refuse
	kw.mu.Unlock()
	time.Sleep(kw.latency)
	status, header := 0, map[string]string(nil)
	if refuse != nil {
		status, header = refuse(r, keys)
	}
	kw.mu.Lock()
	for _, k := range keys {
		delete(kw.busy, k)
	}
	kw.mu.Unlock()
	if status == 0 {
		return false // recorded and answered 200 by the receiver
	}
	for k, v := range header {
		w.Header().Set(k, v)
	}
	http.Error(w, "refused by the test", status)
	return true
}

func (kw *keyWatch) setRefuse(f func(r request, keys []string) (int, map[string]string)) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	kw.refuse = f
}

// requireNoOverlap fails when two requests of one key were in flight at
// once.
func (kw *keyWatch) requireNoOverlap(t *testing.T) {
	t.Helper()
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if len(kw.overlaps) > 0 {
		t.Errorf("%d times two requests of one ordering key were at the endpoint at once (keys %v)", len(kw.overlaps), kw.overlaps[:min(5, len(kw.overlaps))])
	}
}

// received returns the messages the receiver answered 2xx, in the order
// it took them.
func received(t testing.TB, rc *receiver) []*message.Message {
	t.Helper()
	var got []*message.Message
	for _, r := range rc.requests() {
		if r.header.Get(headerCount) != "" {
			got = append(got, batchMessages(t, r)...)
		} else {
			got = append(got, rawMessage(r))
		}
	}
	return got
}

// requireDoneIsWhatArrived fails unless err reports durable exactly the
// messages of msgs that the receiver took (answered 2xx), and, per
// ordering key, a prefix of the key's messages.
func requireDoneIsWhatArrived(t *testing.T, err error, msgs []*message.Message, rc *receiver) []bool {
	t.Helper()
	done, ok := publish.DoneOf(err)
	if !ok {
		done = make([]bool, len(msgs))
	}
	if len(done) != len(msgs) {
		t.Fatalf("error reports %d entries durable or not for a call of %d", len(done), len(msgs))
	}
	arrived := map[string]bool{}
	for _, m := range received(t, rc) {
		arrived[m.ID] = true
	}
	stopped := map[string]int{} // key → position of its first message not durable
	for i, m := range msgs {
		if done[i] != arrived[m.ID] {
			t.Errorf("message %d (%s, key %s): reported durable %v, but the endpoint took it: %v", i, m.ID, m.OrderingKey(), done[i], arrived[m.ID])
		}
		k := m.OrderingKey()
		if at, ok := stopped[k]; ok && done[i] {
			t.Errorf("key %s: message %d reported durable after its message %d that is not: not a prefix of the key", k, i, at)
		}
		if !done[i] {
			if _, ok := stopped[k]; !ok {
				stopped[k] = i
			}
		}
	}
	return done
}

// interleaved returns n messages over keys drawn at random, every
// tenth with a NULL key (ordered by nothing but its id).
func interleaved(g *sinktest.Gen, n int, keys []string) []*message.Message {
	msgs := g.Interleave(n, keys...)
	for i := 9; i < n; i += 10 {
		msgs[i] = g.NullKeyMessage()
	}
	return msgs
}

// TestLanesKeepEachKeyInOrderWithManyRequestsInFlight: 1,000 messages
// over 50 keys (and some with a NULL key) to an endpoint that takes 20 ms
// per request, with concurrency 32: every message arrives once, each
// key's messages in WAL order, never two requests of one key at once,
// more than one and at most 32 requests at once, and the call takes a
// fraction of the 20 s one request at a time would.
func TestLanesKeepEachKeyInOrderWithManyRequestsInFlight(t *testing.T) {
	rc := newReceiver(t)
	kw := watchKeys(rc, 20*time.Millisecond)
	s := newSink(t, rc.srv.URL, "concurrency: 32")
	msgs := interleaved(sinktest.NewGen(40), 1000, sinktest.Keys(50))
	start := time.Now()
	if err := s.Publish(sinktest.Context(t, 60*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	sinktest.CheckDelivered(t, sinktest.Features{NullKey: true}, msgs, received(t, rc), nil)
	kw.requireNoOverlap(t)
	rc.mu.Lock()
	maxIn := rc.maxIn
	rc.mu.Unlock()
	if maxIn < 2 || maxIn > 32 {
		t.Errorf("at most %d requests at the endpoint at once, want 2..32", maxIn)
	}
	// One at a time: 1,000 × 20 ms = 20 s. 32 lanes over 50 keys: about
	// 36 rounds of 20 ms; allow a loaded machine ten times that.
	if el > 8*time.Second {
		t.Errorf("1,000 requests of 20 ms with concurrency 32 took %s", el)
	}
	t.Logf("1,000 messages, 50 keys, 20 ms per request, concurrency 32: %s (%.0f msgs/s), at most %d in flight", el, 1000/el.Seconds(), maxIn)
}

// TestLanesInBatchMode: mode batch with lanes sends arrays of messages
// of several keys, at most batch_size each, several at once, and each
// key's messages arrive in WAL order.
func TestLanesInBatchMode(t *testing.T) {
	rc := newReceiver(t)
	kw := watchKeys(rc, 10*time.Millisecond)
	s := newSink(t, rc.srv.URL, "concurrency: 4", "mode: batch", "batch_size: 7")
	msgs := interleaved(sinktest.NewGen(41), 300, sinktest.Keys(12))
	if err := s.Publish(sinktest.Context(t, 60*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, sinktest.Features{NullKey: true, LSN: true, ReencodesJSON: true}, msgs, received(t, rc), nil)
	kw.requireNoOverlap(t)
	reqs := rc.requests()
	for _, r := range reqs {
		if n := len(batchMessages(t, r)); n > 7 {
			t.Errorf("a request of %d messages, batch_size 7", n)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.maxIn < 2 || rc.maxIn > 4 {
		t.Errorf("at most %d requests at once, want 2..4", rc.maxIn)
	}
	if len(reqs) > 300/7*2 {
		t.Errorf("%d requests for 300 messages of batch_size 7: the batches are not filled", len(reqs))
	}
}

// TestLanesFailedRequestStopsOnlyItsKeys: a request that fails (503) stops
// the keys it carries for the rest of the call, while the other keys are
// delivered in full; the error reports durable exactly what the endpoint
// took, per key a prefix; the retry of the rest delivers every message
// once, and no key's messages arrive out of order.
func TestLanesFailedRequestStopsOnlyItsKeys(t *testing.T) {
	for _, mode := range []string{"message", "batch"} {
		t.Run(mode, func(t *testing.T) {
			rc := newReceiver(t)
			kw := watchKeys(rc, 2*time.Millisecond)
			s := newSink(t, rc.srv.URL, "concurrency: 6", "mode: "+mode, "batch_size: 3")
			msgs := interleaved(sinktest.NewGen(42), 240, sinktest.Keys(10))
			// The third message of agg-3 fails once.
			var bad *message.Message
			n := 0
			for _, m := range msgs {
				if m.Key == "agg-3" {
					if n++; n == 3 {
						bad = m
						break
					}
				}
			}
			var once sync.Once
			kw.setRefuse(func(r request, _ []string) (int, map[string]string) {
				status := 0
				if r.header.Get(headerID) == bad.ID || (mode == "batch" && bodyHas(r, bad.ID)) {
					once.Do(func() { status = http.StatusServiceUnavailable })
				}
				return status, nil
			})
			err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
			if err == nil || publish.IsPermanent(err) || !strings.Contains(err.Error(), "503") {
				t.Fatalf("got %v, want a transient error about the 503", err)
			}
			done := requireDoneIsWhatArrived(t, err, msgs, rc)
			var failedKeys []string
			for i, m := range msgs {
				if m == bad && done[i] {
					t.Errorf("the failed message is reported durable")
				}
				if !done[i] && !slices.Contains(failedKeys, m.OrderingKey()) {
					failedKeys = append(failedKeys, m.OrderingKey())
				}
			}
			if mode == "message" && (len(failedKeys) != 1 || failedKeys[0] != "agg-3") {
				t.Errorf("keys with messages not delivered: %v, want only agg-3 (the other keys go on)", failedKeys)
			}
			if len(failedKeys) > 3 {
				t.Errorf("keys with messages not delivered: %v, want only those of the failed request (at most 3)", failedKeys)
			}
			var rest []*message.Message
			for i, m := range msgs {
				if !done[i] {
					rest = append(rest, m)
				}
			}
			if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, rest); err != nil {
				t.Fatal(err)
			}
			sinktest.CheckDelivered(t, sinktest.Features{NullKey: true}, msgs, received(t, rc), nil)
			kw.requireNoOverlap(t)
		})
	}
}

// TestLanesPermanentFailureStopsEveryLane: a 401 stops the relay: the
// other lanes start no new request once it came (those in flight
// finish), and the error is Permanent, not Rejected, reporting durable
// exactly what the endpoint took.
func TestLanesPermanentFailureStopsEveryLane(t *testing.T) {
	rc := newReceiver(t)
	kw := watchKeys(rc, 10*time.Millisecond)
	s := newSink(t, rc.srv.URL, "concurrency: 4")
	msgs := interleaved(sinktest.NewGen(43), 400, sinktest.Keys(20))
	bad := msgs[40]
	var mu sync.Mutex
	var answered time.Time
	late := 0 // requests that arrived after the 401 was answered
	kw.setRefuse(func(r request, _ []string) (int, map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		if r.header.Get(headerID) == bad.ID {
			answered = time.Now()
			return http.StatusUnauthorized, nil
		}
		return 0, nil
	})
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		mu.Lock()
		if !answered.IsZero() {
			late++
		}
		mu.Unlock()
		return kw.answer(w, r)
	})
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	if !publish.IsPermanent(err) || publish.IsRejected(err) || !strings.Contains(err.Error(), bad.ID) {
		t.Fatalf("got %v, want a Permanent error, not Rejected, naming %s", err, bad.ID)
	}
	requireDoneIsWhatArrived(t, err, msgs, rc)
	mu.Lock()
	defer mu.Unlock()
	// Each of the 3 other lanes may have taken one request while the 401
	// was on its way back; none may start after that.
	if late > 6 {
		t.Errorf("%d requests arrived after the 401 was answered: the other lanes did not stop", late)
	}
	if n := len(rc.requests()); n >= len(msgs)-1 {
		t.Errorf("%d of %d messages delivered after a 401", n, len(msgs))
	}
}

// TestLanesRetryAfterIsWaitedOutByItsLane: a 429 with Retry-After: 1
// holds up its own lane (and key) only: the other keys are delivered in
// full meanwhile, and Publish returns once the wait is over, reporting
// them durable.
func TestLanesRetryAfterIsWaitedOutByItsLane(t *testing.T) {
	rc := newReceiver(t)
	kw := watchKeys(rc, 0)
	s := newSink(t, rc.srv.URL, "concurrency: 4", "max_retry_after: 30s")
	g := sinktest.NewGen(44)
	slow := g.Message("slow")
	msgs := append([]*message.Message{slow}, g.Interleave(200, sinktest.Keys(8)...)...)
	msgs = append(msgs, g.Message("slow"))
	kw.setRefuse(func(r request, _ []string) (int, map[string]string) {
		if r.header.Get(headerID) == slow.ID {
			return http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}
		}
		return 0, nil
	})
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	el := time.Since(start)
	if err == nil || publish.IsPermanent(err) {
		t.Fatalf("got %v, want a transient error", err)
	}
	if el < time.Second || el > 5*time.Second {
		t.Errorf("Publish returned after %s, want after the 1 s Retry-After", el)
	}
	done := requireDoneIsWhatArrived(t, err, msgs, rc)
	for i, m := range msgs {
		if done[i] != (m.Key != "slow") {
			t.Errorf("message %d (key %s) durable: %v", i, m.Key, done[i])
		}
	}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	for k, at := range kw.arrivals {
		if k != "slow" && at[len(at)-1] > 900*time.Millisecond {
			t.Errorf("key %s's last request came %s after the start: the other lanes waited for the Retry-After", k, at[len(at)-1])
		}
	}
}

// TestLanesRefusedMessageIsParkedOrStopsTheRelay: with lanes, the relay's
// runner finds the message the endpoint refuses (422) and, with a Refused
// handler (on_refused: dead_letter), parks exactly it and delivers every
// other message, each key in order, acking in WAL order; without one
// (on_refused: stop) it stops with a Rejected error naming the message,
// having acked the messages before it, and nothing of its key after it
// reached the endpoint.
func TestLanesRefusedMessageIsParkedOrStopsTheRelay(t *testing.T) {
	for _, deadLetter := range []bool{true, false} {
		t.Run(fmt.Sprintf("dead_letter=%v", deadLetter), func(t *testing.T) {
			rc := newReceiver(t)
			kw := watchKeys(rc, 3*time.Millisecond)
			s := newSink(t, rc.srv.URL, "concurrency: 8")
			msgs := interleaved(sinktest.NewGen(45), 300, sinktest.Keys(10))
			at := 150
			for msgs[at].Key != "agg-2" {
				at++
			}
			bad := msgs[at]
			kw.setRefuse(func(r request, _ []string) (int, map[string]string) {
				if r.header.Get(headerID) == bad.ID {
					return http.StatusUnprocessableEntity, nil
				}
				return 0, nil
			})
			in := make(chan []publish.Delivery, 1)
			ds := make([]publish.Delivery, len(msgs))
			for i, m := range msgs {
				ds[i] = publish.Delivery{Msg: m}
			}
			in <- ds
			close(in)
			var acked, parked []*message.Message
			opt := publish.RunnerOptions{
				Log: zerolog.Nop(),
				Ack: func(b []publish.Delivery) {
					for _, d := range b {
						acked = append(acked, d.Msg)
					}
				},
			}
			if deadLetter {
				opt.Refused = func(_ context.Context, d publish.Delivery, err error) error {
					if !strings.Contains(err.Error(), d.Msg.ID) {
						t.Errorf("the refusal %q does not name the message %s", err, d.Msg.ID)
					}
					parked = append(parked, d.Msg)
					return nil
				}
			}
			err := publish.NewRunner(s, in, opt).Run(sinktest.Context(t, 60*time.Second))
			got := received(t, rc)
			kw.requireNoOverlap(t)
			if !deadLetter {
				if !publish.IsRejected(err) || !strings.Contains(err.Error(), bad.ID) {
					t.Fatalf("got %v, want a Rejected error naming %s", err, bad.ID)
				}
				if fmt.Sprint(ids(acked)) != fmt.Sprint(ids(msgs[:at])) {
					t.Errorf("acked %d messages, want the %d before the refused one", len(acked), at)
				}
				var badKey []*message.Message
				for _, m := range got {
					if m.Key == bad.Key {
						badKey = append(badKey, m)
					}
				}
				var want []*message.Message
				for _, m := range msgs[:at] {
					if m.Key == bad.Key {
						want = append(want, m)
					}
				}
				if fmt.Sprint(ids(badKey)) != fmt.Sprint(ids(want)) {
					t.Errorf("the refused message's key reached the endpoint as %v, want its messages before it only: %v", ids(badKey), ids(want))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(parked) != 1 || parked[0].ID != bad.ID {
				t.Fatalf("parked %v, want only %s", ids(parked), bad.ID)
			}
			want := slices.Delete(slices.Clone(msgs), at, at+1)
			if fmt.Sprint(ids(acked)) != fmt.Sprint(ids(want)) {
				t.Errorf("acked %d messages, want every other in WAL order", len(acked))
			}
			sinktest.CheckDelivered(t, sinktest.Features{NullKey: true}, want, got, nil)
		})
	}
}

// TestLanesCanceledContextReturnsPromptly: ending ctx during a call of
// slow requests stops every lane: Publish returns promptly with an error
// wrapping context.Canceled, reporting durable what the endpoint took.
func TestLanesCanceledContextReturnsPromptly(t *testing.T) {
	rc := newReceiver(t)
	watchKeys(rc, 50*time.Millisecond)
	s := newSink(t, rc.srv.URL, "concurrency: 8")
	msgs := interleaved(sinktest.NewGen(46), 400, sinktest.Keys(16))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(120*time.Millisecond, cancel)
	start := time.Now()
	err := s.Publish(ctx, msgs)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Publish returned %s after the cancel", el)
	}
	if !errors.Is(err, context.Canceled) || publish.IsPermanent(err) {
		t.Fatalf("got %v, want an error wrapping context.Canceled", err)
	}
	done, _ := publish.DoneOf(err)
	n := 0
	for _, d := range done {
		if d {
			n++
		}
	}
	if n == 0 || n == len(msgs) {
		t.Errorf("%d of %d reported durable; want some, not all", n, len(msgs))
	}
	// The endpoint may have taken a request whose answer the cancel cut
	// off: durable ⊆ arrived.
	arrived := map[string]bool{}
	for _, m := range received(t, rc) {
		arrived[m.ID] = true
	}
	for i, d := range done {
		if d && !arrived[msgs[i].ID] {
			t.Errorf("message %d reported durable but never arrived", i)
		}
	}
}

// TestConcurrencyIsBounded: concurrency takes 1..256, defaults to 1, and
// anything else is refused naming the field.
func TestConcurrencyIsBounded(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"concurrency: 0", "concurrency: 0 is outside 1..256"},
		{"concurrency: -3", "concurrency: -3 is outside 1..256"},
		{"concurrency: 257", "concurrency: 257 is outside 1..256"},
		{"concurrency: many", "concurrency"},
	} {
		doc := "name: hook\nkind: webhook\nurl: http://h/x\n" + c.doc
		_, err := New(sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.doc, err, c.want)
		}
	}
	if s := newSink(t, "http://127.0.0.1:1/x"); s.concurrency != 1 {
		t.Errorf("default concurrency %d, want 1", s.concurrency)
	}
	if s := newSink(t, "http://127.0.0.1:1/x", "concurrency: 256"); s.concurrency != 256 || len(s.lanes) != 256 {
		t.Errorf("concurrency 256: %d (%d lanes)", s.concurrency, len(s.lanes))
	}
}

// TestIntegrationConformanceWithLanes runs the sink conformance suite
// with concurrency 4 in both modes: order is kept per ordering key, not
// over all messages.
func TestIntegrationConformanceWithLanes(t *testing.T) {
	for _, mode := range []string{"message", "batch"} {
		t.Run(mode, func(t *testing.T) {
			sinktest.Run(t, sinktest.Harness{
				NoRefusal: noRefusal,
				Open: func(t *testing.T) *sinktest.Target {
					rc := newReceiver(t)
					p, u := behindProxy(t, rc)
					s := newSink(t, u, "timeout: 2s", "concurrency: 4", "mode: "+mode, "batch_size: 7")
					return &sinktest.Target{
						Sink:   s,
						Read:   func(t testing.TB) []*message.Message { return received(t, rc) },
						Outage: outage(p),
					}
				},
				Features: sinktest.Features{NullKey: true, BinaryPayload: true, ReencodesJSON: mode == "batch", MaxPayload: 1 << 20},
			})
		})
	}
}

// TestConcurrencyOneKeepsWALOrderAndStopsAtTheFirstFailure: the default,
// concurrency 1, sends the messages of many keys one request at a time in
// WAL order, and the first failed request ends the call with the
// messages before it, whatever their key, as the only durable ones.
func TestConcurrencyOneKeepsWALOrderAndStopsAtTheFirstFailure(t *testing.T) {
	rc := newReceiver(t)
	kw := watchKeys(rc, time.Millisecond)
	s := newSink(t, rc.srv.URL)
	msgs := interleaved(sinktest.NewGen(47), 60, sinktest.Keys(6))
	bad := msgs[25]
	kw.setRefuse(func(r request, _ []string) (int, map[string]string) {
		if r.header.Get(headerID) == bad.ID {
			return http.StatusBadGateway, nil
		}
		return 0, nil
	})
	err := s.Publish(sinktest.Context(t, 30*time.Second), msgs)
	if err == nil || publish.IsPermanent(err) {
		t.Fatalf("got %v, want a transient error", err)
	}
	requirePartial(t, err, len(msgs), 25)
	kw.setRefuse(nil)
	if err := sinktest.PublishWithRetry(sinktest.Context(t, 30*time.Second), s, msgs[25:]); err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, sinktest.Features{GlobalOrder: true, NullKey: true}, msgs, received(t, rc), nil)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.maxIn != 1 {
		t.Errorf("%d requests at once with concurrency 1", rc.maxIn)
	}
}
