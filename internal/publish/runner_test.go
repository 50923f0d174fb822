package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/decoder"
)

// flaky fails every other Publish call before anything is delivered.
type flaky struct {
	calls int
	got   []string
	perm  bool
}

func (f *flaky) Name() string { return "flaky" }
func (f *flaky) Close() error { return nil }
func (f *flaky) Publish(ctx context.Context, msgs []*decoder.Message) error {
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
			ds = append(ds, Delivery{Msg: &decoder.Message{ID: fmt.Sprint(j)}, Tag: j})
		}
		in <- ds
	}
	close(in)
	var acked []int
	s := &flaky{}
	r := NewRunner(s, in, RunnerOptions{BatchSize: 7, MaxBackoff: time.Millisecond, Log: zerolog.Nop(),
		Ack: func(b []Delivery) {
			for _, d := range b {
				acked = append(acked, d.Tag.(int))
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
		in <- []Delivery{{Msg: &decoder.Message{ID: fmt.Sprint(i)}}}
	}
	r := NewRunner(&flaky{perm: true, calls: 1}, in, RunnerOptions{BatchSize: 3, Log: zerolog.Nop(), Ack: func([]Delivery) {}})
	err := r.Run(context.Background())
	if !IsPermanent(err) {
		t.Fatalf("err = %v, want the permanent error", err)
	}
}

func TestWindowBlocksWhenFullAndHonoursContext(t *testing.T) {
	w := NewWindow(2, 1<<20)
	ctx := context.Background()
	w.Acquire(ctx, 1, 10)
	w.Acquire(ctx, 1, 10)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.Acquire(short, 1, 10); err == nil {
		t.Fatal("Acquire on a full window returned at once")
	}
	go func() { time.Sleep(10 * time.Millisecond); w.Release(1, 10) }()
	if err := w.Acquire(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	// A message larger than the byte window passes when the window is empty.
	w2 := NewWindow(10, 100)
	if err := w2.Acquire(ctx, 1, 1000); err != nil {
		t.Fatal(err)
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
func (f *refuser) Publish(ctx context.Context, msgs []*decoder.Message) error {
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
		in <- []Delivery{{Msg: &decoder.Message{ID: fmt.Sprint(i)}, Tag: i}}
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
				events = append(events, fmt.Sprint("ack ", d.Tag))
			}
		},
		Refused: func(ctx context.Context, d Delivery, err error) error {
			if !IsRejected(err) || !strings.Contains(err.Error(), d.Msg.ID+" too large") {
				t.Errorf("Refused(%s) with %v", d.Msg.ID, err)
			}
			events = append(events, fmt.Sprint("refused ", d.Tag))
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
