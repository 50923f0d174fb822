package replication

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// countingGate is a Gate of one place that records its calls; an Enter
// while the place is taken fails the test (the stream entered twice).
type countingGate struct {
	t     *testing.T
	open  chan struct{} // Enter waits for it when not nil
	mu    sync.Mutex
	in    bool
	enter int
	leave int
}

func (g *countingGate) Enter(ctx context.Context) error {
	if g.open != nil {
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.in {
		g.t.Error("Enter while the stream held the gate")
	}
	g.in = true
	g.enter++
	return nil
}

func (g *countingGate) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.in {
		g.t.Error("Leave without Enter")
	}
	g.in = false
	g.leave++
}

func (g *countingGate) counts() (enter, leave int, in bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.enter, g.leave, g.in
}

// A standby holds nothing of the gate while it waits: each attempt on a
// held slot enters and leaves it; the attempt that gets the slot keeps it
// until Run returns.
func TestGateIsHeldOnlyWhileTryingOrHoldingTheSlot(t *testing.T) {
	g := &countingGate{t: t}
	h := newHarness(t, StreamOptions{Gate: g})
	h.srv.refuse(slotActive())
	h.srv.refuse(slotActive())
	c := h.srv.accept()
	if err := h.stream.Acquire(t.Context()); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if e, l, in := g.counts(); e != 3 || l != 2 || !in {
		t.Fatalf("after two refusals and a success: %d Enter, %d Leave, held %v; want 3, 2, held", e, l, in)
	}
	h.run(t)
	c.send(txMsgs(0x100, 0x1A0, 1, 0, 0)...)
	expectTx(t, h, 0x100, 0x1A0, 1)
	if _, _, in := g.counts(); !in {
		t.Fatal("the stream left the gate while streaming")
	}
	h.stop()
	h.closeDrained()
	go func() {
		for range h.out {
		}
	}()
	if err := <-h.ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	h.ran <- nil // for the harness's cleanup
	if e, l, in := g.counts(); e != 3 || l != 3 || in {
		t.Fatalf("after Run returned: %d Enter, %d Leave, held %v; want 3, 3, not held", e, l, in)
	}
}

// Release gives the gate back with the connection; a fatal error leaves
// it at once.
func TestGateIsLeftByReleaseAndByAFatalError(t *testing.T) {
	g := &countingGate{t: t}
	h := newHarness(t, StreamOptions{Gate: g})
	h.srv.accept()
	if err := h.stream.Acquire(t.Context()); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	h.stream.Release()
	if e, l, in := g.counts(); e != 1 || l != 1 || in {
		t.Fatalf("after Release: %d Enter, %d Leave, held %v; want 1, 1, not held", e, l, in)
	}
	h = newHarness(t, StreamOptions{Gate: g})
	h.srv.refuse(fatalError{errors.New("fake: refused")})
	if err := h.stream.Acquire(t.Context()); !isFatal(err) {
		t.Fatalf("Acquire: %v, want the fatal error", err)
	}
	if _, _, in := g.counts(); in {
		t.Fatal("a fatal error left the gate held")
	}
}

// While the gate is closed the stream does not try the slot; when its
// context ends there, Acquire returns having taken nothing.
func TestGateClosedMeansNoAttempt(t *testing.T) {
	g := &countingGate{t: t, open: make(chan struct{})}
	h := newHarness(t, StreamOptions{Gate: g})
	h.srv.accept()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := h.stream.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire behind a closed gate: %v, want the context's end", err)
	}
	if n := h.srv.dials(); n != 0 {
		t.Fatalf("%d dials behind a closed gate", n)
	}
	close(g.open)
	if err := h.stream.Acquire(t.Context()); err != nil {
		t.Fatalf("Acquire once open: %v", err)
	}
	h.stream.Release()
	if e, l, in := g.counts(); e != 1 || l != 1 || in {
		t.Fatalf("%d Enter, %d Leave, held %v; want 1, 1, not held", e, l, in)
	}
}
