package publish

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
)

// num is the number a test delivery's message id holds (the deliveries
// are numbered in channel order).
func num(d Delivery) int {
	n, err := strconv.Atoi(d.Msg.ID)
	if err != nil {
		panic(err)
	}
	return n
}

// flaky fails every other Publish call before anything is delivered.
type flaky struct {
	calls int
	got   []string
	perm  bool
}

func (f *flaky) Name() string { return "flaky" }
func (f *flaky) Close() error { return nil }
func (f *flaky) Publish(ctx context.Context, msgs []*message.Message) error {
	f.calls++
	if f.perm && len(f.got) >= 3 {
		return Permanent(errors.New("message too large"))
	}
	if f.calls%2 == 1 {
		// Deliver a prefix, then fail: the retry re-sends it.
		f.got = append(f.got, msgs[0].ID)
		return errors.New("broker unavailable")
	}
	for _, m := range msgs {
		f.got = append(f.got, m.ID)
	}
	return nil
}

func TestRunnerRetriesWholeBatchesInOrderAndAcksOnce(t *testing.T) {
	in := make(chan []Delivery, 100)
	for i := 0; i < 50; i += 5 {
		var ds []Delivery
		for j := i; j < i+5; j++ {
			ds = append(ds, Delivery{Msg: &message.Message{ID: fmt.Sprint(j)}})
		}
		in <- ds
	}
	close(in)
	var acked []int
	s := &flaky{}
	r := NewRunner(s, in, RunnerOptions{BatchSize: 7, MaxBackoff: time.Millisecond, Log: zerolog.Nop(),
		Ack: func(b []Delivery) {
			for _, d := range b {
				acked = append(acked, num(d))
			}
		}})
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, v := range acked {
		if v != i {
			t.Fatalf("ack %d is %d: acks out of order or twice", i, v)
		}
	}
	if len(acked) != 50 {
		t.Fatalf("%d acks, want 50", len(acked))
	}
	// Per message, the last delivery happened in order: the sequence of
	// first deliveries after dropping retried prefixes is 0..49.
	last := -1
	for _, id := range s.got {
		var n int
		fmt.Sscan(id, &n)
		if n > last+1 {
			t.Fatalf("message %d delivered before %d", n, last+1)
		}
		last = max(last, n)
	}
}

func TestRunnerStopsOnPermanentError(t *testing.T) {
	in := make(chan []Delivery, 10)
	for i := 0; i < 10; i++ {
		in <- []Delivery{{Msg: &message.Message{ID: fmt.Sprint(i)}}}
	}
	r := NewRunner(&flaky{perm: true, calls: 1}, in, RunnerOptions{BatchSize: 3, Log: zerolog.Nop(), Ack: func([]Delivery) {}})
	err := r.Run(context.Background())
	if !IsPermanent(err) {
		t.Fatalf("err = %v, want the permanent error", err)
	}
}

// refuser refuses, with Rejected, every call holding a message in always,
// and a call holding a message in times until that message was refused
// that many times. It delivers a call whole or not at all.
type refuser struct {
	always map[string]bool
	times  map[string]int
	broken string // a call holding this message fails Permanent (not Rejected)
	alone  map[string]int
	got    []string
}

func (f *refuser) Name() string { return "refuser" }
func (f *refuser) Close() error { return nil }
func (f *refuser) Publish(ctx context.Context, msgs []*message.Message) error {
	for _, m := range msgs {
		if len(msgs) == 1 {
			f.alone[m.ID]++
		}
		if m.ID == f.broken {
			return Permanent(errors.New("not authorized"))
		}
		if f.always[m.ID] {
			return Rejected(fmt.Errorf("message %s too large", m.ID))
		}
		if f.times[m.ID] > 0 {
			f.times[m.ID]--
			return Rejected(fmt.Errorf("message %s too large (for now)", m.ID))
		}
	}
	for _, m := range msgs {
		f.got = append(f.got, m.ID)
	}
	return nil
}

func deliveries(n int) chan []Delivery {
	in := make(chan []Delivery, n)
	for i := range n {
		in <- []Delivery{{Msg: &message.Message{ID: fmt.Sprint(i)}}}
	}
	close(in)
	return in
}

func TestRunnerHandsRefusedMessagesToRefusedAndGoesOnInOrder(t *testing.T) {
	s := &refuser{always: map[string]bool{"7": true, "13": true}, times: map[string]int{"4": 2}, alone: map[string]int{}}
	var events []string
	r := NewRunner(s, deliveries(20), RunnerOptions{BatchSize: 10, RefusedAttempts: 3, MaxBackoff: time.Millisecond, Log: zerolog.Nop(),
		Ack: func(b []Delivery) {
			for _, d := range b {
				events = append(events, "ack "+d.Msg.ID)
			}
		},
		Refused: func(ctx context.Context, d Delivery, err error) error {
			if !IsRejected(err) || !strings.Contains(err.Error(), d.Msg.ID+" too large") {
				t.Errorf("Refused(%s) with %v", d.Msg.ID, err)
			}
			events = append(events, "refused "+d.Msg.ID)
			return nil
		}})
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 20 {
		if i == 7 || i == 13 {
			want = append(want, fmt.Sprint("refused ", i))
		} else {
			want = append(want, fmt.Sprint("ack ", i))
		}
	}
	if !slices.Equal(events, want) {
		t.Fatalf("events\n%v\nwant\n%v", events, want)
	}
	// 4 was refused in its batch and once alone, and went through on its
	// second attempt alone; 7 and 13 were tried alone exactly
	// RefusedAttempts times.
	if s.alone["4"] != 2 || s.alone["7"] != 3 || s.alone["13"] != 3 {
		t.Fatalf("attempts alone: 4→%d 7→%d 13→%d, want 2, 3, 3", s.alone["4"], s.alone["7"], s.alone["13"])
	}
	var delivered []string
	for i := range 20 {
		if i != 7 && i != 13 {
			delivered = append(delivered, fmt.Sprint(i))
		}
	}
	if !slices.Equal(s.got, delivered) {
		t.Fatalf("sink got %v", s.got)
	}
}

func TestRunnerStopsOnRefusalWithoutRefusedAndOnOtherPermanentErrors(t *testing.T) {
	s := &refuser{always: map[string]bool{"3": true}, alone: map[string]int{}}
	r := NewRunner(s, deliveries(10), RunnerOptions{BatchSize: 5, Log: zerolog.Nop(), Ack: func([]Delivery) {}})
	if err := r.Run(context.Background()); !IsRejected(err) || !IsPermanent(err) {
		t.Fatalf("without Refused: err = %v, want the refusal", err)
	}
	if len(s.got) != 0 {
		t.Fatalf("delivered %v after a refusal in their batch", s.got)
	}

	// With Refused, an error that is Permanent but not a refusal of one
	// message, met while publishing one by one, still stops the runner.
	s = &refuser{always: map[string]bool{"3": true}, broken: "4", alone: map[string]int{}}
	var refused []string
	r = NewRunner(s, deliveries(10), RunnerOptions{BatchSize: 5, Log: zerolog.Nop(), Ack: func([]Delivery) {},
		Refused: func(ctx context.Context, d Delivery, err error) error {
			refused = append(refused, d.Msg.ID)
			return nil
		}})
	err := r.Run(context.Background())
	if !IsPermanent(err) || IsRejected(err) {
		t.Fatalf("err = %v, want the permanent error", err)
	}
	if !slices.Equal(s.got, []string{"0", "1", "2"}) || !slices.Equal(refused, []string{"3"}) {
		t.Fatalf("delivered %v, refused %v", s.got, refused)
	}

	// An error from Refused (the message could not be parked) stops it.
	s = &refuser{always: map[string]bool{"1": true}, alone: map[string]int{}}
	r = NewRunner(s, deliveries(3), RunnerOptions{BatchSize: 5, RefusedAttempts: 1, Log: zerolog.Nop(), Ack: func([]Delivery) {},
		Refused: func(context.Context, Delivery, error) error { return errors.New("dead-letter table unreachable") }})
	if err := r.Run(context.Background()); err == nil || err.Error() != "dead-letter table unreachable" {
		t.Fatalf("err = %v", err)
	}
	if !slices.Equal(s.got, []string{"0"}) {
		t.Fatalf("delivered %v", s.got)
	}
}

// scripted is a sink whose every call is answered by a script: next gets
// the ids of the call and returns which of them the sink stores and the
// error to return (nil stores all). What it stores is durable; storing a
// message twice is a resend of a durable message.
type scripted struct {
	t      *testing.T
	next   func(call int, ids []string) (done []bool, err error)
	calls  [][]string
	stored map[string]int
}

func (s *scripted) Name() string { return "scripted" }
func (s *scripted) Close() error { return nil }
func (s *scripted) Publish(ctx context.Context, msgs []*message.Message) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
		if s.stored[m.ID] > 0 {
			s.t.Errorf("call %d sends %s, which the sink reported durable", len(s.calls)+1, m.ID)
		}
	}
	s.calls = append(s.calls, ids)
	done, err := s.next(len(s.calls), ids)
	for i, id := range ids {
		if err == nil || done != nil && done[i] {
			s.stored[id]++
		}
	}
	if err != nil && done != nil {
		return Partial(err, done)
	}
	return err
}

// bools parses "x.x" into {true, false, true}.
func bools(s string) []bool {
	b := make([]bool, len(s))
	for i := range s {
		b[i] = s[i] == 'x'
	}
	return b
}

// ackLog records the Ack calls of a runner as "0,1,2" strings, and
// refusals as "refused 3".
type ackLog struct {
	t      *testing.T
	events []string
	seen   map[int]bool
}

func (a *ackLog) ack(b []Delivery) {
	var s []string
	for _, d := range b {
		n := num(d)
		if a.seen[n] {
			a.t.Errorf("delivery %d acked twice", n)
		}
		a.seen[n] = true
		s = append(s, fmt.Sprint(n))
	}
	a.events = append(a.events, strings.Join(s, ","))
}

func newAckLog(t *testing.T) *ackLog { return &ackLog{t: t, seen: map[int]bool{}} }

// runOne runs a runner over one batch of n deliveries (ids "0".."n-1")
// with waits recorded instead of slept.
func runOne(t *testing.T, s Sink, n int, opt RunnerOptions) (waits []time.Duration, err error) {
	in := make(chan []Delivery, 1)
	var ds []Delivery
	for i := range n {
		ds = append(ds, Delivery{Msg: &message.Message{ID: fmt.Sprint(i)}})
	}
	in <- ds
	close(in)
	if opt.BatchSize == 0 {
		opt.BatchSize = n
	}
	opt.Log = zerolog.Nop()
	r := NewRunner(s, in, opt)
	r.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	err = r.Run(context.Background())
	return waits, err
}

func TestRunnerResendsOnlyWhatIsNotDurableAndHoldsBackAcksBehindAGap(t *testing.T) {
	s := &scripted{t: t, stored: map[string]int{}, next: func(call int, ids []string) ([]bool, error) {
		switch call {
		case 1:
			return bools("x.xx.x"), errors.New("partition 1 not leader")
		case 2:
			return bools("x."), errors.New("throttled")
		case 3:
			return nil, errors.New("connection reset") // nothing durable: all again
		}
		return nil, nil
	}}
	acks := newAckLog(t)
	var failing []bool
	_, err := runOne(t, s, 6, RunnerOptions{Ack: acks.ack, Failing: func(f bool) { failing = append(failing, f) }})
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := [][]string{{"0", "1", "2", "3", "4", "5"}, {"1", "4"}, {"4"}, {"4"}}
	if !slices.EqualFunc(s.calls, wantCalls, slices.Equal) {
		t.Errorf("calls %v, want %v", s.calls, wantCalls)
	}
	// 0 at once; 2 and 3 are durable after call 1 but wait for 1; 5 for 4.
	if want := []string{"0", "1,2,3", "4,5"}; !slices.Equal(acks.events, want) {
		t.Errorf("acks %q, want %q", acks.events, want)
	}
	for id, n := range s.stored {
		if n != 1 {
			t.Errorf("message %s stored %d times", id, n)
		}
	}
	if !slices.Equal(failing, []bool{true, false}) {
		t.Errorf("Failing calls %v, want [true false]", failing)
	}
}

func TestRunnerIgnoresAReportOfTheWrongSize(t *testing.T) {
	calls := 0
	s := &funcSink{publish: func(ctx context.Context, msgs []*message.Message) error {
		calls++
		if calls == 1 {
			return Partial(errors.New("broken sink"), bools("xx"))
		}
		if len(msgs) != 3 {
			t.Errorf("retry of %d messages after a report that did not fit the call, want all 3", len(msgs))
		}
		return nil
	}}
	acks := newAckLog(t)
	if _, err := runOne(t, s, 3, RunnerOptions{Ack: acks.ack}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(acks.events, []string{"0,1,2"}) {
		t.Errorf("acks %q", acks.events)
	}
}

func TestRunnerAcksTheDurablePrefixBeforeStoppingOnAPermanentError(t *testing.T) {
	for _, wrap := range []struct {
		name string
		mark func(error, []bool) error
	}{
		{"PartialOfPermanent", func(err error, done []bool) error { return Partial(Permanent(err), done) }},
		{"PermanentOfPartial", func(err error, done []bool) error { return Permanent(Partial(err, done)) }},
		{"Wrapped", func(err error, done []bool) error {
			return fmt.Errorf("context: %w", Partial(Permanent(err), done))
		}},
	} {
		t.Run(wrap.name, func(t *testing.T) {
			s := &funcSink{publish: func(ctx context.Context, msgs []*message.Message) error {
				return wrap.mark(errors.New("not authorized for topic b"), bools("xx.x"))
			}}
			acks := newAckLog(t)
			_, err := runOne(t, s, 4, RunnerOptions{Ack: acks.ack})
			if !IsPermanent(err) || IsRejected(err) {
				t.Fatalf("err = %v, want the permanent error", err)
			}
			if done, ok := DoneOf(err); !ok || !slices.Equal(done, bools("xx.x")) {
				t.Errorf("DoneOf(%v) = %v, %v", err, done, ok)
			}
			if !slices.Equal(acks.events, []string{"0,1"}) {
				t.Errorf("acks %q, want [0,1]: 3 is durable but behind 2", acks.events)
			}
		})
	}
}

func TestRunnerLooksForARefusedMessageOnlyAmongTheNotDurable(t *testing.T) {
	s := &scripted{t: t, stored: map[string]int{}, next: func(call int, ids []string) ([]bool, error) {
		if call == 1 {
			return bools("x.x..x"), Rejected(errors.New("message 3 too large"))
		}
		if slices.Contains(ids, "3") {
			return nil, Rejected(errors.New("message 3 too large"))
		}
		return nil, nil
	}}
	acks := newAckLog(t)
	_, err := runOne(t, s, 6, RunnerOptions{Ack: acks.ack, RefusedAttempts: 2,
		Refused: func(ctx context.Context, d Delivery, err error) error {
			acks.events = append(acks.events, "refused "+d.Msg.ID)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := [][]string{{"0", "1", "2", "3", "4", "5"}, {"1"}, {"3"}, {"3"}, {"4"}}
	if !slices.EqualFunc(s.calls, wantCalls, slices.Equal) {
		t.Errorf("calls %v, want %v", s.calls, wantCalls)
	}
	if want := []string{"0", "1,2", "refused 3", "4,5"}; !slices.Equal(acks.events, want) {
		t.Errorf("events %q, want %q", acks.events, want)
	}
}

// TestRunnerKeepsPerKeyOrderWithRandomPartialFailures drives the runner
// with a sink that, like Kafka, stores each key's share of a call up to a
// random failure point (a per-partition prefix) and reports it: every
// message is stored once, per key in publish order, and acked once, in
// order, only after it was stored.
func TestRunnerKeepsPerKeyOrderWithRandomPartialFailures(t *testing.T) {
	const n, keys = 2000, 5
	rnd := rand.New(rand.NewPCG(1, 2))
	var stored []string
	storedSet := map[string]bool{}
	calls, partial := 0, 0
	s := &funcSink{publish: func(ctx context.Context, msgs []*message.Message) error {
		calls++
		if rnd.IntN(3) > 0 {
			for _, m := range msgs {
				stored = append(stored, m.ID)
				storedSet[m.ID] = true
			}
			return nil
		}
		// Per key, a random share of the call's messages is stored.
		fail := map[string]bool{}
		for k := range keys {
			fail[fmt.Sprint(k)] = rnd.IntN(2) == 0
		}
		done := make([]bool, len(msgs))
		for i, m := range msgs {
			if storedSet[m.ID] {
				t.Fatalf("message %s sent again after it was reported durable", m.ID)
			}
			if !fail[m.Key] && rnd.IntN(20) == 0 {
				fail[m.Key] = true // fails from here on for this key
			}
			if !fail[m.Key] {
				done[i] = true
				stored = append(stored, m.ID)
				storedSet[m.ID] = true
			}
		}
		if slices.Contains(done, true) {
			partial++
		}
		return Partial(errors.New("some partitions failed"), done)
	}}
	in := make(chan []Delivery, n)
	var all []*message.Message
	for i := range n {
		m := &message.Message{ID: fmt.Sprint(i), Key: fmt.Sprint(rnd.IntN(keys)), HasKey: true}
		all = append(all, m)
		in <- []Delivery{{Msg: m}}
	}
	close(in)
	next := 0
	r := NewRunner(s, in, RunnerOptions{BatchSize: 97, Log: zerolog.Nop(), Ack: func(b []Delivery) {
		for _, d := range b {
			if num(d) != next {
				t.Fatalf("acked %s, want %d", d.Msg.ID, next)
			}
			if !storedSet[d.Msg.ID] {
				t.Fatalf("acked %s before the sink stored it", d.Msg.ID)
			}
			next++
		}
	}})
	r.sleep = func(context.Context, time.Duration) error { return nil }
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if next != n || len(stored) != n {
		t.Fatalf("%d acked, %d stored, want %d each", next, len(stored), n)
	}
	last := map[string]int{}
	for _, id := range stored {
		var i int
		fmt.Sscan(id, &i)
		k := all[i].Key
		if p, ok := last[k]; ok && p > i {
			t.Fatalf("key %s: message %d stored after %d", k, i, p)
		}
		last[k] = i
	}
	t.Logf("%d calls, %d of them partial", calls, partial)
	if partial < 10 {
		t.Fatalf("only %d partial calls: the test did not exercise partial failures", partial)
	}
}

// TestRunnerBackoffStartsAgainAfterProgress: the wait before a retry
// doubles while attempts make no progress, and is back at its minimum
// after an attempt that made a message durable, and for a later batch
// after a success.
func TestRunnerBackoffStartsAgainAfterProgress(t *testing.T) {
	// Batch one (ids 0-3): three failures, then a partial one, then a
	// failure, then success. Batch two (ids 4-7): one failure.
	s := &scripted{t: t, stored: map[string]int{}, next: func(call int, ids []string) ([]bool, error) {
		switch call {
		case 1, 2, 3:
			return nil, errors.New("down")
		case 4:
			return bools("x..."), errors.New("throttled")
		case 5:
			return nil, errors.New("down")
		case 7:
			return nil, errors.New("down again")
		}
		return nil, nil
	}}
	in := make(chan []Delivery, 2)
	for b := range 2 {
		var ds []Delivery
		for i := b * 4; i < b*4+4; i++ {
			ds = append(ds, Delivery{Msg: &message.Message{ID: fmt.Sprint(i)}})
		}
		in <- ds
	}
	close(in)
	var waits []time.Duration
	r := NewRunner(s, in, RunnerOptions{BatchSize: 4, Log: zerolog.Nop(), Ack: func([]Delivery) {}})
	r.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The wait before a retry is jittered within [backoff/2, backoff].
	backoffs := []time.Duration{100, 200, 400, 100, 200, 100} // ms
	if len(waits) != len(backoffs) {
		t.Fatalf("waits %v, want %d of them", waits, len(backoffs))
	}
	for i, b := range backoffs {
		b *= time.Millisecond
		if waits[i] < b/2 || waits[i] > b {
			t.Errorf("wait %d is %s, want within [%s, %s] (all waits: %v)", i+1, waits[i], b/2, b, waits)
		}
	}
}

type funcSink struct {
	publish func(context.Context, []*message.Message) error
}

func (s *funcSink) Name() string { return "func" }
func (s *funcSink) Publish(ctx context.Context, msgs []*message.Message) error {
	return s.publish(ctx, msgs)
}
func (s *funcSink) Close() error { return nil }

// keyHolder holds the keys of refused messages (relay.on_refused:
// hold_key, as pipeline.Settler does); a key in released is found
// released at its next Hold.
type keyHolder struct {
	held     map[string]bool
	released map[string]bool
	events   *[]string
}

func (h *keyHolder) Holds(m *message.Message) bool { return h.held[m.Key] }
func (h *keyHolder) Hold(ctx context.Context, d Delivery) (bool, error) {
	if h.released[d.Msg.Key] {
		delete(h.held, d.Msg.Key)
		return false, nil
	}
	*h.events = append(*h.events, "held "+d.Msg.ID)
	return true, nil
}

// TestRunnerHoldsTheKeyOfARefusedMessageInOrder: messages 0..19 over keys
// a/b/c (i%3); 4 (key b) is refused for good. With a Holder, every later
// message of b is handed to Hold, in channel order with the acks of the
// others (which are published); a key released meanwhile (c, held from
// before) is published from then on.
func TestRunnerHoldsTheKeyOfARefusedMessageInOrder(t *testing.T) {
	s := &refuser{always: map[string]bool{"4": true}, alone: map[string]int{}}
	var events []string
	h := &keyHolder{held: map[string]bool{"c": true}, released: map[string]bool{}, events: &events}
	in := make(chan []Delivery, 20)
	for i := range 20 {
		in <- []Delivery{{Msg: &message.Message{ID: fmt.Sprint(i), Key: string(rune('a' + i%3)), HasKey: true}}}
	}
	close(in)
	r := NewRunner(s, in, RunnerOptions{BatchSize: 7, RefusedAttempts: 1, MaxBackoff: time.Millisecond, Log: zerolog.Nop(), Hold: h,
		Ack: func(b []Delivery) {
			for _, d := range b {
				events = append(events, "ack "+d.Msg.ID)
			}
		},
		Refused: func(ctx context.Context, d Delivery, err error) error {
			events = append(events, "refused "+d.Msg.ID)
			h.held[d.Msg.Key] = true
			if d.Msg.ID == "4" {
				h.released["c"] = true // c's head was resent meanwhile
			}
			return nil
		}})
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for i := range 20 {
		switch {
		case i == 4:
			want = append(want, "refused 4")
		case i%3 == 1 && i > 4:
			want = append(want, fmt.Sprint("held ", i))
		case i%3 == 2 && i < 4:
			want = append(want, fmt.Sprint("held ", i)) // c held until 4's refusal found it released
		default:
			want = append(want, fmt.Sprint("ack ", i))
			got = append(got, fmt.Sprint(i))
		}
	}
	if !slices.Equal(events, want) {
		t.Fatalf("events\n%v\nwant\n%v", events, want)
	}
	if !slices.Equal(s.got, got) {
		t.Fatalf("sink got %v, want %v", s.got, got)
	}
}

// unitSink publishes each message to the unit its type names
// (RefusalUnits): a refused message (always) is not stored, nor, when
// ordered, any later message of its unit in the call; every other message
// is stored (the units are independent), and the call reports them with
// Partial.
type unitSink struct {
	always  map[string]bool
	ordered bool
	got     []string
	calls   int
}

func (f *unitSink) Name() string { return "units" }
func (f *unitSink) Close() error { return nil }
func (f *unitSink) RefusalUnit(m *message.Message) (string, bool) {
	return m.Type, f.ordered
}
func (f *unitSink) Publish(ctx context.Context, msgs []*message.Message) error {
	f.calls++
	done := make([]bool, len(msgs))
	failed := map[string]bool{}
	var refused error
	for i, m := range msgs {
		switch {
		case f.always[m.ID]:
			failed[m.Type] = true
			if refused == nil {
				refused = Rejected(fmt.Errorf("message %s too large", m.ID))
			}
		case f.ordered && failed[m.Type]:
		default:
			done[i] = true
			f.got = append(f.got, m.ID)
		}
	}
	if refused == nil {
		return nil
	}
	return Partial(refused, done)
}

// TestRunnerHoldKeyNeverHasAKeyInOneCallToTwoUnits: under hold_key,
// messages 0..11 alternate keys a and b, and each key alternates units x
// and y (2 messages per unit in turn); 4 (a, x) is refused for good. A
// sink whose units are independent stores a message of another unit in
// the same call whatever happened to 4: the runner must not put a's 6 (y)
// in 4's call, so that once 4 is refused a's later messages are held,
// never stored ahead of it. The same with a sink that orders no refusal
// (NATS): a key's second message never shares a call with its first.
func TestRunnerHoldKeyNeverHasAKeyInOneCallToTwoUnits(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			s := &unitSink{always: map[string]bool{"4": true}, ordered: ordered}
			var events []string
			h := &keyHolder{held: map[string]bool{}, released: map[string]bool{}, events: &events}
			var ds []Delivery
			for i := range 12 {
				key, unit := string(rune('a'+i%2)), string(rune('x'+(i/2)%2))
				ds = append(ds, Delivery{Msg: &message.Message{ID: fmt.Sprint(i), Key: key, HasKey: true, Type: unit}})
			}
			in := make(chan []Delivery, 1)
			in <- ds
			close(in)
			r := NewRunner(s, in, RunnerOptions{BatchSize: 12, RefusedAttempts: 1, MaxBackoff: time.Millisecond, Log: zerolog.Nop(), Hold: h,
				Ack: func(b []Delivery) {
					for _, d := range b {
						events = append(events, "ack "+d.Msg.ID)
					}
				},
				Refused: func(ctx context.Context, d Delivery, err error) error {
					events = append(events, "refused "+d.Msg.ID)
					h.held[d.Msg.Key] = true
					return nil
				}})
			if err := r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			var stored []string
			for _, id := range s.got {
				if n, _ := strconv.Atoi(id); n%2 == 0 {
					stored = append(stored, id)
				}
			}
			if !slices.Equal(stored, []string{"0", "2"}) {
				t.Fatalf("key a: stored %v, want 0 and 2 only (nothing of a past its refused 4); events %v", stored, events)
			}
			want := []string{"ack 0", "ack 1", "ack 2", "ack 3", "refused 4", "ack 5", "held 6", "ack 7", "held 8", "ack 9", "held 10", "ack 11"}
			if !slices.Equal(events, want) {
				t.Fatalf("events\n%v\nwant\n%v", events, want)
			}
			t.Logf("%d Publish calls for 12 messages", s.calls)
		})
	}
}
