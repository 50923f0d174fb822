package publish

import (
	"context"
	"errors"

	"github.com/walpost/walpost/internal/decoder"
)

// Sink is a destination for outbox messages.
//
// The relay calls Publish from one goroutine per sink, one batch at a time,
// in WAL order, so a sink never sees two batches at once and needs no
// locking for Publish itself.
type Sink interface {
	// Name returns the sink's configured name (used in logs and metrics).
	Name() string

	// Publish delivers msgs, in order, and returns nil only once every one
	// of them is durable at the destination (fsynced, acknowledged by the
	// broker with the configured acks). msgs is never empty and must not be
	// retained or modified after Publish returns.
	//
	// On error, any prefix of msgs may have been delivered. The relay then
	// retries the whole batch (so duplicates are possible, and order is
	// kept) unless the error is marked with Permanent, which stops the
	// relay. Publish must return promptly with ctx.Err() when ctx ends.
	Publish(ctx context.Context, msgs []*decoder.Message) error

	// Close releases the sink's resources. Publish is not called after it.
	Close() error
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not retryable: a message the destination will
// never accept (too large, not authorized, unknown topic). The relay stops
// with the error instead of retrying, and confirms nothing past the batch.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
