package sinktest

import (
	"context"
	"fmt"
	"time"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// Retry publishes a batch the way the relay's runner does: after every
// error that is not publish.Permanent it publishes again, with exponential
// backoff, the messages that are not durable yet (the whole batch, less
// what the sink reported durable with publish.Partial, in batch order),
// until they all are, a Permanent error comes back or ctx ends. A Partial
// report that does not match the call is an error.
//
// The zero value is ready to use. A Retry is safe for concurrent use if
// OnError is.
type Retry struct {
	// AttemptTimeout bounds one Publish call (default 10s).
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts (defaults
	// 20ms and 500ms): it doubles after each failed attempt, with jitter,
	// as the runner's (internal/backoff).
	MinBackoff, MaxBackoff time.Duration
	// OnError, if set, is called after each failed attempt (1 for the
	// first) with its error, before the backoff.
	OnError func(attempt int, err error)
}

// Publish delivers msgs to sink, retrying what is not durable. It returns
// nil once every message is durable (an attempt returned nil, or reported
// the rest durable); a Permanent error at once; an error when the sink
// reports a Partial done of the wrong length; and otherwise, when ctx
// ends, an error wrapping ctx.Err() and naming the last attempt's error.
func (r Retry) Publish(ctx context.Context, sink publish.Sink, msgs []*message.Message) error {
	attemptTimeout := r.AttemptTimeout
	if attemptTimeout <= 0 {
		attemptTimeout = 10 * time.Second
	}
	minBackoff := r.MinBackoff
	if minBackoff <= 0 {
		minBackoff = 20 * time.Millisecond
	}
	maxBackoff := r.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 500 * time.Millisecond
	}
	retry := backoff.New(minBackoff, maxBackoff)
	rest := msgs
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := sink.Publish(actx, rest)
		cancel()
		if err == nil {
			return nil
		}
		if done, ok := publish.DoneOf(err); ok {
			if len(done) != len(rest) {
				return fmt.Errorf("sinktest: the sink reported %d messages durable or not (publish.Partial) for a call of %d: %w",
					len(done), len(rest), err)
			}
			var left []*message.Message
			for i, m := range rest {
				if !done[i] {
					left = append(left, m)
				}
			}
			if len(left) == 0 {
				return nil
			}
			rest = left
		}
		if publish.IsPermanent(err) {
			return err
		}
		if r.OnError != nil {
			r.OnError(attempt, err)
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			return fmt.Errorf("sinktest: giving up publishing %d messages (first %s) after %d attempts, the last failing with %v: %w",
				len(rest), rest[0].ID, attempt, err, ctx.Err())
		}
	}
}

// PublishWithRetry is Retry{}.Publish: after every error that is not
// publish.Permanent it retries what the sink did not report durable,
// until everything is or ctx ends.
func PublishWithRetry(ctx context.Context, sink publish.Sink, msgs []*message.Message) error {
	return Retry{}.Publish(ctx, sink, msgs)
}
