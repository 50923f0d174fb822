package inboxrabbit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/inbox"
)

// Channel is what Loop needs from an AMQP channel; *amqp091.Channel
// satisfies it. Deliveries are acknowledged through themselves
// (Delivery.Ack, Nack, Reject).
type Channel interface {
	// Qos sets the prefetch limit of the channel's consumers.
	Qos(prefetchCount, prefetchSize int, global bool) error
	// ConsumeWithContext starts a consumer on queue and returns its
	// deliveries; the consumer is cancelled when ctx ends, and the
	// deliveries channel is closed when the consumer or channel ends.
	ConsumeWithContext(ctx context.Context, queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error)
}

// maxTracked bounds the failure counts the loop keeps per message id; the
// counts are cleared when it is reached.
const maxTracked = 10_000

// Loop consumes queue on ch and runs effect once per message id through p
// (an *inbox.Inbox or *inbox.SQLInbox), acknowledging each message only
// after its database transaction committed:
//
//  1. Set the prefetch (Options.Prefetch) and consume with manual
//     acknowledgements.
//  2. Read the message id from message_id. A message without one is
//     poison: see Options.OnPoison (by default Loop requeues it and stops
//     with an error wrapping inbox.ErrEmptyID).
//  3. Process(ctx, id, effect). After inbox.Processed or inbox.Duplicate,
//     basic.ack.
//  4. When Process fails (the effect failed or panicked, the database
//     failed; nothing was recorded): wait inbox.Backoff of the message's
//     failures in a row, then basic.nack with requeue, and go on with the
//     next delivery. RabbitMQ delivers the message again. The wait holds
//     up the loop, so a queue whose messages fail slows down instead of
//     spinning. After Options.MaxAttempts failures of the effect the
//     message is poison.
//
// An ack that cannot be sent (the channel closed) leaves the message to
// be delivered again; Process then returns Duplicate and the effect does
// not run twice. Messages are processed one at a time, in the order
// delivered.
//
// Loop returns ctx.Err() when ctx ends (a message being waited on is
// requeued first), an error wrapping amqp091.ErrClosed when the
// deliveries end (the channel or connection closed: open new ones and
// call Loop again), the consume or qos error when the queue cannot be
// consumed (it does not exist, access refused), and poison errors (see
// Options.OnPoison). Invalid options, an empty queue name, or a nil
// channel, processor or effect, give an error wrapping
// inbox.ErrInvalidOptions. After Loop returns, close the channel:
// RabbitMQ then requeues the messages it had delivered ahead. One Loop per
// channel.
func Loop[Tx any](ctx context.Context, ch Channel, queue string, p inbox.Processor[Tx],
	effect func(ctx context.Context, tx Tx, d amqp.Delivery) error, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if ch == nil || p == nil || effect == nil || queue == "" {
		return fmt.Errorf("%w: inboxrabbit.Loop needs a channel, a queue name, a processor and an effect", inbox.ErrInvalidOptions)
	}
	if err := ch.Qos(opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("inboxrabbit: setting the prefetch count of the channel: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deliveries, err := ch.ConsumeWithContext(cctx, queue, opts.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("inboxrabbit: consuming queue %q: %w", queue, err)
	}
	l := &loop[Tx]{p: p, effect: effect, opts: opts, failed: map[string]*failures{}}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("inboxrabbit: queue %q: the deliveries ended (the consumer was cancelled, or the channel or connection closed): %w",
					queue, amqp.ErrClosed)
			}
			if err := l.handle(ctx, d); err != nil {
				return err
			}
		}
	}
}

// failures counts one message id's failed attempts in a row.
type failures struct {
	attempts int // every failed Process
	effect   int // those in which the effect failed
}

// loop is one Loop call's state.
type loop[Tx any] struct {
	p      inbox.Processor[Tx]
	effect func(ctx context.Context, tx Tx, d amqp.Delivery) error
	opts   Options
	failed map[string]*failures
}

// handle processes d and acknowledges it, or gives it back.
func (l *loop[Tx]) handle(ctx context.Context, d amqp.Delivery) error {
	id := strings.TrimSpace(d.MessageId)
	if id == "" {
		return l.poison(ctx, d, fmt.Errorf("inboxrabbit: %s: no message_id: %w", where(d), inbox.ErrEmptyID))
	}
	// Process's span continues the trace of the message's traceparent.
	traced := inbox.ContextFromHeaders(ctx, func(name string) string { v, _ := d.Headers[name].(string); return v })
	res, effectFailed, err := inbox.ProcessOnce(traced, l.p, id, func(ctx context.Context, tx Tx) error {
		body, err := l.opts.ClaimCheck.Resolve(ctx, func(name string) string { v, _ := d.Headers[name].(string); return v }, d.Body)
		if err != nil {
			return fmt.Errorf("inboxrabbit: %s: %w", where(d), err)
		}
		d := d
		d.Body = body
		return l.effect(ctx, tx, d)
	})
	if err != nil {
		return l.retryLater(ctx, d, id, effectFailed, err)
	}
	delete(l.failed, id)
	if l.opts.beforeAck != nil {
		if err := l.opts.beforeAck(d); err != nil {
			return err
		}
	}
	if err := d.Ack(false); err != nil {
		l.report(d, id, fmt.Errorf("inboxrabbit: %s: %s, but the ack failed (it will be delivered again and found a duplicate): %w", where(d), res, err))
		return nil // the closed channel ends the deliveries
	}
	if l.opts.OnAcked != nil {
		l.opts.OnAcked(d, id, res)
	}
	return nil
}

// retryLater handles a failed Process of d: report, wait, requeue; or
// poison after MaxAttempts failures of the effect.
func (l *loop[Tx]) retryLater(ctx context.Context, d amqp.Delivery, id string, effectFailed bool, err error) error {
	if ctx.Err() != nil {
		l.requeue(d, id)
		return ctx.Err()
	}
	f := l.failed[id]
	if f == nil {
		if len(l.failed) >= maxTracked {
			clear(l.failed)
		}
		f = &failures{}
		l.failed[id] = f
	}
	f.attempts++
	if effectFailed {
		f.effect++
	}
	err = fmt.Errorf("inboxrabbit: %s, attempt %d: %w", where(d), f.attempts, err)
	l.report(d, id, err)
	if effectFailed && l.opts.MaxAttempts > 0 && f.effect >= l.opts.MaxAttempts {
		delete(l.failed, id)
		return l.poison(ctx, d, fmt.Errorf("%w (%d): %w", inbox.ErrTooManyAttempts, f.effect, err))
	}
	if err := inbox.SleepBackoff(ctx, f.attempts, l.opts.RetryBackoff); err != nil {
		l.requeue(d, id)
		return err
	}
	l.requeue(d, id)
	return nil
}

// poison applies the poison policy to d: requeue it and stop with err, or
// reject it (dead-lettered or dropped by RabbitMQ) when OnPoison returns
// nil.
func (l *loop[Tx]) poison(ctx context.Context, d amqp.Delivery, err error) error {
	if l.opts.OnPoison == nil {
		l.requeue(d, d.MessageId)
		return err
	}
	if perr := l.opts.OnPoison(ctx, d, err); perr != nil {
		l.requeue(d, d.MessageId)
		return perr
	}
	if rerr := d.Reject(false); rerr != nil {
		l.report(d, d.MessageId, fmt.Errorf("inboxrabbit: %s: rejecting the poison message: %w", where(d), rerr))
	}
	return nil
}

// requeue gives d back to the queue (basic.nack with requeue). A failure
// means the channel closed, which requeues it anyway; it is reported.
func (l *loop[Tx]) requeue(d amqp.Delivery, id string) {
	if err := d.Nack(false, true); err != nil && !errors.Is(err, amqp.ErrClosed) {
		l.report(d, id, fmt.Errorf("inboxrabbit: %s: requeueing: %w", where(d), err))
	}
}

func (l *loop[Tx]) report(d amqp.Delivery, id string, err error) {
	if l.opts.OnError != nil {
		l.opts.OnError(d, id, err)
	}
}

// where names a delivery for errors.
func where(d amqp.Delivery) string {
	return fmt.Sprintf("message %q (delivery %d, exchange %q, routing key %q)", d.MessageId, d.DeliveryTag, d.Exchange, d.RoutingKey)
}
