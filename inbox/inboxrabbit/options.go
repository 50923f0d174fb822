package inboxrabbit

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/inbox"
)

// DefaultPrefetch is the channel's prefetch count (basic.qos) when
// Options.Prefetch is zero.
const DefaultPrefetch = 16

// Options configures Loop. The zero value is usable: 16 messages
// prefetched, a failing message given back after waits from 100ms up to
// 30s, retried until it succeeds, and a message without message_id stops
// the loop.
type Options struct {
	// Prefetch is how many unacknowledged messages RabbitMQ delivers
	// ahead (basic.qos on the channel). Zero means DefaultPrefetch (16);
	// it must not be negative. 1 keeps the queue's order even when a
	// message is requeued (see the package doc).
	Prefetch int
	// ConsumerTag names the consumer (basic.consume); empty lets the
	// client make one.
	ConsumerTag string
	// RetryBackoff is the longest wait before a failing message is given
	// back. Waits start at inbox.FirstRetryBackoff (100ms) and double with
	// each failure of the same message id in a row, with jitter
	// (inbox.Backoff). Zero means inbox.DefaultRetryBackoff (30s); it
	// must not be negative.
	RetryBackoff time.Duration
	// MaxAttempts is how many times in a row a message's effect may fail
	// (return an error or panic) before the message counts as poison
	// (see OnPoison); the loop counts them per message id. Zero means no
	// limit. Only the effect's failures count; a failing database is
	// retried without limit, since no message is to blame for it. It
	// must not be negative.
	MaxAttempts int
	// OnError, when set, is called with every failed attempt before the
	// wait and the requeue: an effect or database error (msgID is the
	// message's id), or an acknowledgement that could not be sent. It is
	// called from the loop's goroutine, e.g. to log.
	OnError func(d amqp.Delivery, msgID string, err error)
	// OnPoison decides what happens to a message that retrying cannot
	// fix: one without message_id (err wraps inbox.ErrEmptyID), or one
	// whose effect failed MaxAttempts times (err wraps
	// inbox.ErrTooManyAttempts and the effect's last error).
	//
	// When OnPoison is nil, Loop gives the message back (requeued) and
	// returns err: nothing is skipped without a decision.
	//
	// To go on instead, copy the message somewhere (a table, another
	// queue) and return nil: Loop then rejects it without requeue
	// (basic.reject), so that RabbitMQ dead-letters it when the queue has
	// a dead-letter exchange (x-dead-letter-exchange) and drops it
	// otherwise, without running the effect or recording an id. Return an
	// error to stop Loop with that error, the message requeued.
	OnPoison func(ctx context.Context, d amqp.Delivery, err error) error
	// OnAcked, when set, is called after a message was acknowledged, with
	// what Process did: inbox.Processed or inbox.Duplicate. It is called
	// from the loop's goroutine, e.g. for metrics.
	OnAcked func(d amqp.Delivery, msgID string, res inbox.Result)

	// beforeAck, when set (by tests), runs between Process and the ack;
	// an error stops the loop there, as a crash would.
	beforeAck func(d amqp.Delivery) error
	// ClaimCheck, when set (inbox.WithClaimCheck), resolves claim-checked
	// messages (walpost's relay.claim_check): in Process, before the
	// effect, the loop fetches the payload the message's
	// walpost-claim-check headers name, checks its size and SHA-256, and
	// hands the effect the message with the payload as its body (d.Body). A
	// fetch that fails or does not match counts as a failing effect. A
	// duplicate fetches nothing.
	ClaimCheck *inbox.ClaimCheck
}

// withDefaults checks o and fills in its defaults; errors wrap
// inbox.ErrInvalidOptions and name the field.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Prefetch < 0:
		return o, fmt.Errorf("%w: inboxrabbit.Options.Prefetch: negative (%d)", inbox.ErrInvalidOptions, o.Prefetch)
	case o.Prefetch == 0:
		o.Prefetch = DefaultPrefetch
	}
	var err error
	if o.RetryBackoff, err = inbox.CheckRetry("inboxrabbit", o.RetryBackoff, o.MaxAttempts); err != nil {
		return o, err
	}
	return o, nil
}
