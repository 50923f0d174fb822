package pipeline

import (
	"context"
	"testing"
	"time"
)

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
	if n, b := w.InFlight(); n != 2 || b != 20 {
		t.Fatalf("in flight %d deliveries, %d bytes; want 2, 20", n, b)
	}
	// A message larger than the byte window passes when the window is empty.
	w2 := NewWindow(10, 100)
	if err := w2.Acquire(ctx, 1, 1000); err != nil {
		t.Fatal(err)
	}
	if w2.TryAcquire(1, 1) {
		t.Fatal("TryAcquire took room past the byte window")
	}
}
