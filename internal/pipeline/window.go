package pipeline

import (
	"context"
	"sync"
)

// Window bounds what is in flight: deliveries read from the stream and not
// yet acknowledged, by count and by bytes. It gives the relay its
// back-pressure: when the window is full the pipeline stops reading the
// replication stream, TCP flow control stops the server, and memory stays
// bounded whatever the size of a transaction (docs/design.md, invariant 5).
//
// Acquire is called by one goroutine (the pipeline); Release by any. A
// Window is safe for concurrent use under that rule.
type Window struct {
	mu       sync.Mutex
	maxN     int
	maxBytes int64
	n        int
	bytes    int64
	wake     chan struct{}
}

// NewWindow returns a window of at most maxN deliveries and maxBytes bytes.
func NewWindow(maxN int, maxBytes int64) *Window {
	return &Window{maxN: maxN, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// Acquire takes room for n deliveries of size bytes in all, waiting until
// there is room or ctx ends. A delivery larger than the whole byte window
// is let in when the window is empty, so that it cannot block forever.
func (w *Window) Acquire(ctx context.Context, n int, bytes int64) error {
	for {
		if w.TryAcquire(n, bytes) {
			return nil
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryAcquire is Acquire without waiting: it reports whether it took room.
func (w *Window) TryAcquire(n int, bytes int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 || (w.n+n <= w.maxN && w.bytes+bytes <= w.maxBytes) {
		w.n += n
		w.bytes += bytes
		return true
	}
	return false
}

// Release gives back room for n deliveries of size bytes in all.
func (w *Window) Release(n int, bytes int64) {
	w.mu.Lock()
	w.n -= n
	w.bytes -= bytes
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// InFlight returns the deliveries and bytes in flight now.
func (w *Window) InFlight() (int, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.bytes
}
