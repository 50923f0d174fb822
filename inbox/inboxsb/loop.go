package inboxsb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walpost/walpost/inbox"
)

// DefaultMaxMessages is how many messages one receive call of Loop asks
// for when Options.MaxMessages is zero.
const DefaultMaxMessages = 10

// DefaultSettleTimeout bounds a Complete or Abandon call of Loop when
// Options.SettleTimeout is zero.
const DefaultSettleTimeout = 30 * time.Second

// Receiver is the part of an azservicebus receiver that Loop uses.
// *azservicebus.Receiver (peek-lock mode, the default) and
// *azservicebus.SessionReceiver satisfy it.
type Receiver interface {
	// ReceiveMessages waits for at least one message (or ctx) and returns
	// up to maxMessages, locked.
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	// CompleteMessage removes a locked message from the entity.
	CompleteMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	// AbandonMessage releases the lock: the message is delivered again,
	// its delivery count one higher.
	AbandonMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
}

// Options configures Loop. The zero value is usable: up to 10 messages
// per receive call, 30s to settle each, failures not reported.
type Options struct {
	// MaxMessages is the most messages one ReceiveMessages call returns.
	// Zero means DefaultMaxMessages (10); it must not be negative. Each
	// is locked from receipt, so keep MaxMessages × the time one message
	// takes below the entity's lock duration.
	MaxMessages int
	// TimeAfterFirstMessage is how long a receive call waits for more
	// messages after the first one arrived (ReceiveMessagesOptions); zero
	// means the SDK's default (20ms in peek-lock mode); it must not be
	// negative.
	TimeAfterFirstMessage time.Duration
	// SettleTimeout bounds each Complete and Abandon call. Zero means
	// DefaultSettleTimeout (30s); it must not be negative. Settling runs
	// even after ctx ended, so that a message whose effect committed is
	// completed and one whose effect failed is given back at once rather
	// than when its lock expires.
	SettleTimeout time.Duration
	// OnError, when set, is called, from the loop's goroutine, for every
	// message that was not processed and completed: with the error of
	// Process (the message was abandoned), or of the Complete that
	// followed a commit (the message comes back and is then a Duplicate),
	// or of an Abandon. Use it to log; it must not block for long, since
	// the next messages' locks are running.
	OnError func(msg *azservicebus.ReceivedMessage, err error)
	// OnCompleted, when set, is called from the loop's goroutine after a
	// message was completed, with what Process did: inbox.Processed or
	// inbox.Duplicate. E.g. for metrics.
	OnCompleted func(msg *azservicebus.ReceivedMessage, res inbox.Result)
}

// withDefaults checks o and fills in its defaults; errors wrap
// inbox.ErrInvalidOptions and name the field.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.MaxMessages < 0:
		return o, fmt.Errorf("%w: inboxsb.Options.MaxMessages: negative (%d)", inbox.ErrInvalidOptions, o.MaxMessages)
	case o.MaxMessages == 0:
		o.MaxMessages = DefaultMaxMessages
	}
	if o.TimeAfterFirstMessage < 0 {
		return o, fmt.Errorf("%w: inboxsb.Options.TimeAfterFirstMessage: negative (%v)", inbox.ErrInvalidOptions, o.TimeAfterFirstMessage)
	}
	switch {
	case o.SettleTimeout < 0:
		return o, fmt.Errorf("%w: inboxsb.Options.SettleTimeout: negative (%v)", inbox.ErrInvalidOptions, o.SettleTimeout)
	case o.SettleTimeout == 0:
		o.SettleTimeout = DefaultSettleTimeout
	}
	return o, nil
}

// Loop receives messages from r and runs effect once per message id
// through p (an *inbox.Inbox or *inbox.SQLInbox), until ctx ends or
// receiving fails:
//
//   - The message id is the Service Bus MessageId, which walpost's
//     servicebus sink sets to the outbox id.
//   - For each message, in the order received, it calls p.Process with
//     the MessageId and effect. Only after Process returned
//     inbox.Processed or inbox.Duplicate — the effect and the id
//     committed, or committed before — does it complete the message.
//   - When Process fails (the effect failed or panicked, the database
//     failed; nothing was recorded), it abandons the message, which Service Bus delivers again
//     with a higher delivery count (and dead-letters after the entity's
//     MaxDeliveryCount). A message without a MessageId is abandoned too,
//     with inbox.ErrEmptyID.
//   - A Complete that fails after the commit (the lock expired, the
//     connection dropped) leaves the message to come back; its redelivery
//     returns Duplicate and is completed then.
//
// Failures of single messages go to Options.OnError and the loop goes
// on. Unlike inboxkafka.Loop it needs no retry in place and no poison
// policy: an abandoned message comes back by itself, after the messages
// behind it, and Service Bus moves a message that failed the entity's
// MaxDeliveryCount times (10 by default) to its dead-letter queue.
//
// When ctx ends, the messages received but not yet processed are
// abandoned and Loop returns ctx.Err(). When ReceiveMessages fails (the
// SDK retries connection trouble itself; what it returns is lasting: the
// entity is gone, the receiver was closed, the credential lacks the
// Listen right), Loop returns that error. Invalid options, or a nil
// receiver, processor or effect, give an error wrapping
// inbox.ErrInvalidOptions.
//
// Messages are processed one at a time, in the order received, which
// keeps the order of a session (use a *azservicebus.SessionReceiver for a
// session-enabled entity); for parallelism run several loops, each with
// its own receiver (Process is safe for concurrent use). The receiver must
// be in peek-lock mode (ReceiveModePeekLock, the default): in
// receive-and-delete mode Service Bus forgets a message before its effect
// commits. The lock must outlast the effect: a lock that expires after the
// commit only costs a redelivery (found a Duplicate), but one that expires
// before lets another receiver run the effect concurrently (the inbox's
// primary key still lets only one commit). Stop the loop by ending ctx,
// then close the receiver. One Loop per receiver.
func Loop[Tx any](ctx context.Context, r Receiver, p inbox.Processor[Tx],
	effect func(ctx context.Context, tx Tx, msg *azservicebus.ReceivedMessage) error, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if r == nil || p == nil || effect == nil {
		return fmt.Errorf("%w: inboxsb.Loop needs a receiver, a processor and an effect", inbox.ErrInvalidOptions)
	}
	var ropts *azservicebus.ReceiveMessagesOptions
	if opts.TimeAfterFirstMessage > 0 {
		ropts = &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: opts.TimeAfterFirstMessage}
	}
	report := func(msg *azservicebus.ReceivedMessage, err error) {
		if opts.OnError != nil {
			opts.OnError(msg, err)
		}
	}
	// settle runs a Complete or Abandon with its own deadline, even when
	// ctx has ended.
	settle := func(f func(ctx context.Context) error) error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.SettleTimeout)
		defer cancel()
		return f(sctx)
	}
	abandon := func(msg *azservicebus.ReceivedMessage, cause error) {
		err := settle(func(ctx context.Context) error { return r.AbandonMessage(ctx, msg, nil) })
		if err != nil {
			err = fmt.Errorf("inboxsb: message %q: abandoning it: %w", msg.MessageID, err)
			if cause != nil {
				err = errors.Join(cause, err)
			}
		} else {
			err = cause
		}
		if err != nil {
			report(msg, err)
		}
	}

	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msgs, err := r.ReceiveMessages(ctx, opts.MaxMessages, ropts)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return fmt.Errorf("inboxsb: receiving from Service Bus: %w", err)
		}
		for i, msg := range msgs {
			if ctx.Err() != nil {
				for _, rest := range msgs[i:] {
					abandon(rest, nil)
				}
				break
			}
			res, err := p.Process(ctx, msg.MessageID, func(ctx context.Context, tx Tx) error {
				return effect(ctx, tx, msg)
			})
			if err != nil {
				abandon(msg, err)
				continue
			}
			if err := settle(func(ctx context.Context) error { return r.CompleteMessage(ctx, msg, nil) }); err != nil {
				report(msg, fmt.Errorf("inboxsb: message %q: %s, but completing it failed (it will be delivered again and found a duplicate): %w",
					msg.MessageID, res, err))
				continue
			}
			if opts.OnCompleted != nil {
				opts.OnCompleted(msg, res)
			}
		}
	}
}
