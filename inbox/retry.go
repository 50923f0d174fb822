package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/walpost/walpost/internal/backoff"
)

// What the receive loops share (inboxkafka, inboxsb and the loops written
// after them): Processor and Result for running an effect once per id,
// ProcessOnce for one attempt that tells the effect's failures from the
// database's, ProcessRetrying for retrying one message in place with
// backoff until it succeeds or turns poison, and SleepBackoff for any
// other retry (an offset commit, an acknowledgement, a wait before a
// message is given back). See the package documentation,
// "Receive loops".

// DefaultRetryBackoff is the longest wait between two attempts at a
// failing message when Retry.Backoff (or a loop's RetryBackoff option) is
// zero.
const DefaultRetryBackoff = 30 * time.Second

// FirstRetryBackoff is the wait after a message's first failed attempt;
// each further failure in a row doubles it, up to the loop's limit.
const FirstRetryBackoff = 100 * time.Millisecond

// Backoff returns how long to wait after the attempt-th failure in a row
// (1 for the first): FirstRetryBackoff doubled with each further failure,
// at most limit, less up to a fifth at random so that consumers that
// failed together do not retry in step. A limit of zero or less means
// DefaultRetryBackoff.
func Backoff(attempt int, limit time.Duration) time.Duration {
	if limit <= 0 {
		limit = DefaultRetryBackoff
	}
	d := backoff.Step(FirstRetryBackoff, limit, attempt)
	return backoff.Between(d-d/5, d)
}

// SleepBackoff waits Backoff(attempt, limit). It returns ctx.Err() if ctx
// ends first, and nil otherwise.
func SleepBackoff(ctx context.Context, attempt int, limit time.Duration) error {
	if !backoff.Sleep(ctx, Backoff(attempt, limit)) {
		return ctx.Err()
	}
	return nil
}

// CheckRetry checks a loop's RetryBackoff and MaxAttempts options, named
// in errors as pkg.Options.RetryBackoff and pkg.Options.MaxAttempts
// (errors wrap ErrInvalidOptions), and returns the backoff with its
// default (DefaultRetryBackoff) filled in.
func CheckRetry(pkg string, backoff time.Duration, maxAttempts int) (time.Duration, error) {
	switch {
	case backoff < 0:
		return 0, fmt.Errorf("%w: %s.Options.RetryBackoff: negative (%v)", ErrInvalidOptions, pkg, backoff)
	case backoff == 0:
		backoff = DefaultRetryBackoff
	}
	if maxAttempts < 0 {
		return 0, fmt.Errorf("%w: %s.Options.MaxAttempts: negative (%d)", ErrInvalidOptions, pkg, maxAttempts)
	}
	return backoff, nil
}

// Retry says how ProcessRetrying retries one message in place. The zero
// value retries until ctx ends, waiting up to DefaultRetryBackoff between
// attempts. A loop fills it from its own options, after checking them
// (errors naming the loop's fields, wrapping ErrInvalidOptions).
type Retry struct {
	// Backoff is the longest wait between two attempts (see Backoff).
	// Zero or less means DefaultRetryBackoff.
	Backoff time.Duration
	// MaxAttempts is how many times in a row the effect may fail before
	// ProcessRetrying gives up with ErrTooManyAttempts: the message is
	// poison. Zero or less means no limit. Only the effect's failures
	// count (an error it returned, or a panic; see ProcessOnce): a
	// failing database (connecting, beginning, committing) is retried
	// until ctx ends, since no message is to blame for it. An effect
	// that itself returns a database error (its statement failed because
	// the database went away) counts as an effect failure.
	MaxAttempts int
	// OnError, when set, is called with each failed attempt (1 for the
	// first) and its error, before the wait; from the caller's goroutine,
	// e.g. to log.
	OnError func(attempt int, err error)
}

// ProcessRetrying calls p.Process(ctx, msgID, effect) until it returns
// Processed or Duplicate, waiting SleepBackoff between attempts. It
// returns:
//
//   - the Result and nil once Process succeeded;
//   - 0 and ctx.Err() when ctx ends (during an attempt or a wait);
//   - 0 and an error wrapping ErrTooManyAttempts and the effect's last
//     error once the effect failed r.MaxAttempts times in a row. The
//     message is poison: the loop applies its poison policy (stop, or
//     let the user park it and acknowledge it without an effect).
//
// Each attempt is a fresh transaction, so nothing of a failed one is
// recorded. ProcessRetrying is for loops that must not move past a
// message before it is processed (a Kafka partition's offset commit
// covers every earlier record); a loop whose broker redelivers a message
// given back (Service Bus abandon, a negative acknowledgement) may instead
// call Process once and give the message back on error.
func ProcessRetrying[Tx any](ctx context.Context, p Processor[Tx], msgID string, effect func(ctx context.Context, tx Tx) error, r Retry) (Result, error) {
	failures := 0 // attempts in a row whose effect failed
	for attempt := 1; ; attempt++ {
		res, effectFailed, err := ProcessOnce(ctx, p, msgID, effect)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if r.OnError != nil {
			r.OnError(attempt, err)
		}
		if effectFailed {
			failures++
			if r.MaxAttempts > 0 && failures >= r.MaxAttempts {
				return 0, fmt.Errorf("%w (%d): %w", ErrTooManyAttempts, failures, err)
			}
		}
		if err := SleepBackoff(ctx, attempt, r.Backoff); err != nil {
			return 0, err
		}
	}
}

// ProcessOnce makes one attempt at a message: p.Process(ctx, msgID,
// effect). It returns Process's Result and error, and, when err is not
// nil, whether the effect is to blame: effectFailed is true when effect
// returned an error or panicked, and false when the database failed
// around it (connecting, beginning, inserting the id, committing) or
// effect never ran. Loops count only attempts with effectFailed toward
// their MaxAttempts, so that a database outage, for which no message is
// to blame, never makes a good message poison.
//
// The effect's own error counts as the effect's, whatever it is: an
// effect whose statement fails because the database went away (a
// connection error returned through the effect) is an effect failure, as
// Process cannot tell it from any other error of the effect. With a
// small MaxAttempts, an outage that strikes during effects can therefore
// make a message poison; leave MaxAttempts at zero (no limit), or high
// enough to ride out an outage, when that matters.
func ProcessOnce[Tx any](ctx context.Context, p Processor[Tx], msgID string, effect func(ctx context.Context, tx Tx) error) (res Result, effectFailed bool, err error) {
	res, err = p.Process(ctx, msgID, func(ctx context.Context, tx Tx) error {
		effectFailed = true // stays true if effect panics
		err := effect(ctx, tx)
		effectFailed = err != nil
		return err
	})
	if err == nil {
		effectFailed = false
	}
	return res, effectFailed, err
}
