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
	// relay, or Rejected, which stops it or parks the refused message
	// (relay.on_refused). Publish must return promptly with ctx.Err() when
	// ctx ends.
	Publish(ctx context.Context, msgs []*decoder.Message) error

	// Close releases the sink's resources. Publish is not called after it.
	Close() error
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not retryable: the destination will not accept
// the batch however often it is sent (not authorized, unknown topic, a
// setting it rejects). The relay stops with the error instead of
// retrying, and confirms nothing past the batch. When one message alone
// is the cause, use Rejected.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked with
// Permanent or Rejected.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// rejectedError marks a refusal of one message for what it is; it wraps
// a permanentError, so that IsPermanent holds for it too.
type rejectedError struct{ permanentError }

func (e rejectedError) Unwrap() error { return e.permanentError }

// Rejected marks err as the destination refusing one message for good
// because of the message itself (larger than the destination takes, a
// name derived from it that the destination cannot use), while other
// messages would go through. It is Permanent; in addition, with
// relay.on_refused: dead_letter the relay parks that message and goes on
// instead of stopping. A sink returns it only for a call of one message,
// or names the message in the error. A problem with credentials, a
// missing topic or queue, or the configuration is Permanent, not
// Rejected: parking every message would not fix it.
func Rejected(err error) error {
	if err == nil {
		return nil
	}
	return rejectedError{permanentError{err}}
}

// IsRejected reports whether err (or an error it wraps) was marked with
// Rejected.
func IsRejected(err error) bool {
	var r rejectedError
	return errors.As(err, &r)
}
