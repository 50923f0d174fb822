package sinktest

import (
	"context"
	"fmt"
	"time"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish"
)

// Retry publishes a batch the way the relay's runner does: the whole batch
// again after every error that is not publish.Permanent, with exponential
// backoff, until it succeeds, a Permanent error comes back or ctx ends.
//
// The zero value is ready to use. A Retry is safe for concurrent use if
// OnError is.
type Retry struct {
	// AttemptTimeout bounds one Publish call (default 10s).
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts (defaults
	// 20ms and 500ms); the wait doubles after each failed attempt.
	MinBackoff, MaxBackoff time.Duration
	// OnError, if set, is called after each failed attempt (1 for the
	// first) with its error, before the backoff.
	OnError func(attempt int, err error)
}

// Publish delivers msgs to sink, retrying the whole batch. It returns nil
// once one attempt returned nil; a Permanent error at once; and otherwise,
// when ctx ends, an error wrapping ctx.Err() and naming the last attempt's
// error.
func (r Retry) Publish(ctx context.Context, sink publish.Sink, msgs []*decoder.Message) error {
	attemptTimeout := r.AttemptTimeout
	if attemptTimeout <= 0 {
		attemptTimeout = 10 * time.Second
	}
	backoff := r.MinBackoff
	if backoff <= 0 {
		backoff = 20 * time.Millisecond
	}
	maxBackoff := r.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 500 * time.Millisecond
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := sink.Publish(actx, msgs)
		cancel()
		if err == nil {
			return nil
		}
		if publish.IsPermanent(err) {
			return err
		}
		if r.OnError != nil {
			r.OnError(attempt, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sinktest: giving up publishing %d messages (first %s) after %d attempts, the last failing with %v: %w",
				len(msgs), msgs[0].ID, attempt, err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// PublishWithRetry is Retry{}.Publish: it retries the whole batch after
// every error that is not publish.Permanent until it succeeds or ctx ends.
func PublishWithRetry(ctx context.Context, sink publish.Sink, msgs []*decoder.Message) error {
	return Retry{}.Publish(ctx, sink, msgs)
}
