package publish

import (
	"context"
	"errors"
	"fmt"
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
