package replication

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff bounds. A reconnect waits Backoff.Start (jittered) after a
// connection that streamed, doubling up to StreamOptions.MaxBackoff while
// attempts keep failing; a slot held by another process is tried again
// every SlotPoll (jittered), however long it stays held.
const (
	BackoffStart = 250 * time.Millisecond
	SlotPoll     = time.Second
)

// Backoff is an exponential backoff with jitter that Reset returns to its
// start: after a connection that worked, the next fault waits little
// again. The zero value is not usable; use NewBackoff. Not safe for
// concurrent use.
type Backoff struct {
	start, max, next time.Duration
}

// NewBackoff returns a backoff from start to max.
func NewBackoff(start, max time.Duration) *Backoff {
	return &Backoff{start: start, max: max, next: start}
}

// Next returns the wait before the next attempt (half to all of the
// current step) and doubles the step up to max.
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

func jitter(d time.Duration) time.Duration { return d*3/4 + rand.N(d/2+1) }
