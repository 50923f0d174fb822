// Package backoff is the exponential backoff with jitter that every retry
// loop of the relay uses: reconnecting the replication stream, restarting
// a relay cycle, retrying a sink's batch. Each returns to its start after
// an attempt that made progress (Reset), so that a long-lived relay that
// saw many faults still retries at once after the next one.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff with jitter. The zero value is not
// usable; use New. Not safe for concurrent use.
type Backoff struct {
	start, max, next time.Duration
}

// New returns a backoff whose steps go from start to max.
func New(start, max time.Duration) *Backoff {
	return &Backoff{start: start, max: max, next: start}
}

// Next returns the wait before the next attempt (half to all of the
// current step) and doubles the step, up to max.
func (b *Backoff) Next() time.Duration {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(b.next*2, b.max)
	return d
}

// Reset returns the step to its start.
func (b *Backoff) Reset() { b.next = b.start }

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
