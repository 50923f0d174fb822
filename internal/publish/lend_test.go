package publish

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
)

// oneAtATime is a sink that fails the test when two Publish calls overlap.
type oneAtATime struct {
	t    *testing.T
	in   atomic.Int32
	mu   sync.Mutex
	msgs int
}

func (s *oneAtATime) Name() string { return "one" }
func (s *oneAtATime) Close() error { return nil }
func (s *oneAtATime) Publish(ctx context.Context, msgs []*message.Message) error {
	if s.in.Add(1) != 1 {
		s.t.Error("two Publish calls at once on one sink")
	}
	time.Sleep(100 * time.Microsecond)
	s.mu.Lock()
	s.msgs += len(msgs)
	s.mu.Unlock()
	s.in.Add(-1)
	return nil
}

// TestLentSinkTakesTurnsWithItsRunner: a sink lent beside its runner
// (the console's resends through the relay's own sinks) is never called
// by both at once; a lent publish is counted, and once retired the lent
// sink refuses at once.
func TestLentSinkTakesTurnsWithItsRunner(t *testing.T) {
	s := &oneAtATime{t: t}
	var counted atomic.Int64
	lent := Lend(s, func(n int) { counted.Add(int64(n)) })
	in := make(chan []Delivery, 200)
	for i := range 200 {
		in <- []Delivery{{Msg: &message.Message{ID: fmt.Sprint(i)}}}
	}
	close(in)
	r := NewRunner(s, in, RunnerOptions{BatchSize: 3, Lock: lent, Log: zerolog.Nop(), Ack: func([]Delivery) {}})
	done := make(chan error)
	go func() { done <- r.Run(context.Background()) }()
	for range 100 {
		if err := lent.Publish(context.Background(), []*message.Message{{ID: "resent"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.msgs != 300 || counted.Load() != 100 {
		t.Errorf("the sink got %d messages, %d counted as lent; want 300 and 100", s.msgs, counted.Load())
	}
	if lent.Close() != nil || s.msgs != 300 {
		t.Error("closing the lent sink touched the sink")
	}
	lent.Retire()
	if err := lent.Publish(context.Background(), []*message.Message{{ID: "late"}}); err == nil || !strings.Contains(err.Error(), "cycle that held it ended") {
		t.Errorf("a publish after Retire: %v, want a refusal", err)
	}
}
