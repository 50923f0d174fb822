// Package backoff is the one backoff of walpost: every retry wait, in the
// relay and in the public inbox package, is computed here and slept with
// Sleep (docs/design.md, "Backoff").
//
// It has two forms of the same exponential rule, Step: the wait after
// the n-th failure in a row is start doubled n-1 times, at most max.
//
//   - Backoff counts the failures itself: reconnecting the replication
//     stream, restarting a relay cycle, retrying a sink's batch, the
//     sent_at and retention loops. Each returns to its start after an
//     attempt that made progress (Reset), so that a long-lived relay that
//     saw many faults still retries at once after the next one. Its waits
//     are jittered to half to all of the step.
//   - Step alone, for a caller that has the count from elsewhere (a
//     broker's delivery count: inbox.Backoff), jittered by the caller
//     with Between.
//
// Between is the jitter of both, and of fixed poll intervals (a slot held
// by another process is polled every postgres.standby_poll ±25%), so that
// processes that failed together do not retry in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff with jitter. The zero value is not
// usable; use New. Not safe for concurrent use.
type Backoff struct {
	start, max time.Duration
	failures   int // Next calls since New or Reset
}

// New returns a backoff whose steps go from start to max (Step).
func New(start, max time.Duration) *Backoff {
	return &Backoff{start: start, max: max}
}

// Next returns the wait before the next attempt, half to all of the
// current step (Step of the calls to Next since New or Reset, this one
// included), and so doubles the step, up to max.
func (b *Backoff) Next() time.Duration {
	b.failures++
	s := Step(b.start, b.max, b.failures)
	return Between(s/2, s)
}

// Reset returns the step to its start.
func (b *Backoff) Reset() { b.failures = 0 }

// Step returns the step of an exponential backoff after the attempt-th
// failure in a row (1 for the first; less counts as 1): start doubled
// attempt-1 times, at most max. It is deterministic; it does not overflow
// however large attempt is. A start of zero or less is returned as it is
// (at most max).
func Step(start, max time.Duration, attempt int) time.Duration {
	d := start
	for i := 1; i < attempt && d > 0 && d < max; i++ {
		if d > max/2 {
			return max
		}
		d *= 2
	}
	return min(d, max)
}

// Between returns a random duration from lo to hi, both included, with
// every nanosecond equally likely; lo when hi is not above lo.
func Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

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
