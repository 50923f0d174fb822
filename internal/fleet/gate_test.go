package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/replication"
)

var _ replication.Gate = (*entry)(nil)

// syncBuffer is a log written by several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testEntry is an entry of g whose probe answers unowned (and counts its
// calls), logging to log, without the spread's wait.
func testEntry(g *Gate, log *syncBuffer, unowned *atomic.Bool, probes *atomic.Int32) *entry {
	return &entry{g: g, poll: 20 * time.Millisecond, log: zerolog.New(log),
		sleep: func(context.Context, time.Duration) bool { return true },
		probe: func(context.Context) (bool, error) {
			probes.Add(1)
			return unowned.Load(), nil
		},
		waitingG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "w"}), unownedG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "u"})}
}

// At most max entries are in at once; the others wait (counted in
// walpost_source_waiting_for_capacity) until one leaves, and a waiting
// entry whose context ends returns having taken nothing.
func TestGateHoldsAtMostMaxActive(t *testing.T) {
	g := NewGate(2, 5)
	var log syncBuffer
	var unowned atomic.Bool
	var probes atomic.Int32
	var es []*entry
	for range 5 {
		es = append(es, testEntry(g, &log, &unowned, &probes))
	}
	ctx := t.Context()
	if err := es[0].Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := es[1].Enter(ctx); err != nil {
		t.Fatal(err)
	}
	in := make(chan int, 3)
	for i := 2; i < 5; i++ {
		go func() {
			if es[i].Enter(ctx) == nil {
				in <- i
			}
		}()
	}
	waiting := func() int {
		n := 0
		for _, e := range es {
			if e.snapshot().waiting {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for waiting() != 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := waiting(); n != 3 || g.Used() != 2 {
		t.Fatalf("%d waiting, %d used; want 3 waiting, 2 used", n, g.Used())
	}
	if v := testutil.ToFloat64(es[2].waitingG); v != 1 {
		t.Errorf("waiting gauge %v, want 1", v)
	}
	select {
	case i := <-in:
		t.Fatalf("entry %d got in with the gate full", i)
	case <-time.After(50 * time.Millisecond):
	}
	es[0].Leave()
	i := <-in
	if g.Used() != 2 || waiting() != 2 || testutil.ToFloat64(es[i].waitingG) != 0 {
		t.Fatalf("after one Leave: %d used, %d waiting; want 2, 2", g.Used(), waiting())
	}
	// A waiting entry whose context ends takes nothing.
	cctx, cancel := context.WithCancel(ctx)
	e := testEntry(g, &log, &unowned, &probes)
	done := make(chan error)
	go func() { done <- e.Enter(cctx) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || e.snapshot().held {
		t.Fatalf("Enter after its context ended: %v, held %v", err, e.snapshot().held)
	}
	if g.Used() != 2 {
		t.Fatalf("%d used, want 2", g.Used())
	}
}

// A source waiting for capacity looks whether any process holds its
// slot: none does, and it is counted unowned and logged, once; when it
// gets a place, no longer.
func TestWaitingForCapacityWithTheSlotHeldByNobodyIsShown(t *testing.T) {
	g := NewGate(1, 2)
	g.probeEvery = 10 * time.Millisecond
	var log syncBuffer
	var unowned atomic.Bool
	var probes atomic.Int32
	unowned.Store(true)
	holder := testEntry(g, &log, &unowned, &probes)
	waiter := testEntry(g, &log, &unowned, &probes)
	if err := holder.Enter(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- waiter.Enter(t.Context()) }()
	deadline := time.Now().Add(5 * time.Second)
	for probes.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !waiter.snapshot().unowned || testutil.ToFloat64(waiter.unownedG) != 1 {
		t.Fatalf("after %d probes: unowned %v, gauge %v", probes.Load(), waiter.snapshot().unowned, testutil.ToFloat64(waiter.unownedG))
	}
	if n := strings.Count(log.String(), "nothing relays this source"); n != 1 {
		t.Errorf("the unowned slot was logged %d times, want once:\n%s", n, log.String())
	}
	holder.Leave()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waiter.snapshot().unowned || testutil.ToFloat64(waiter.unownedG) != 0 || testutil.ToFloat64(waiter.waitingG) != 0 {
		t.Error("a source that got a place is still shown unowned or waiting")
	}
}

// The spread: an attempt waits poll/2 × used/capacity first, so that an
// instance with fewer active sources tries a free slot sooner.
func TestSpreadGrowsWithTheCapacityInUse(t *testing.T) {
	for _, tc := range []struct {
		max, sources, used int
		want               time.Duration
	}{
		{2, 6, 0, 0},
		{2, 6, 1, 250 * time.Millisecond},
		{2, 6, 2, 500 * time.Millisecond},
		{0, 4, 1, 125 * time.Millisecond}, // no limit: against the sources
		{0, 4, 4, 500 * time.Millisecond},
	} {
		g := NewGate(tc.max, tc.sources)
		g.used.Store(int64(tc.used))
		if got := g.spread(time.Second); got != tc.want {
			t.Errorf("max %d, %d sources, %d used: spread %v, want %v", tc.max, tc.sources, tc.used, got, tc.want)
		}
	}
	// Enter waits it.
	g := NewGate(2, 2)
	g.used.Store(1)
	var slept time.Duration
	e := &entry{g: g, poll: time.Second, log: zerolog.Nop(), waitingG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "w"}),
		unownedG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "u"}),
		sleep:    func(_ context.Context, d time.Duration) bool { slept = d; return true }}
	if err := e.Enter(t.Context()); err != nil || slept != 250*time.Millisecond {
		t.Fatalf("Enter: %v after a wait of %v, want 250ms", err, slept)
	}
}
