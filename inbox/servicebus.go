package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// DefaultServiceBusMaxMessages is how many messages one receive call of
// ServiceBusLoop asks for when ServiceBusOptions.MaxMessages is zero.
const DefaultServiceBusMaxMessages = 10

// DefaultSettleTimeout bounds a Complete or Abandon call of ServiceBusLoop
// when ServiceBusOptions.SettleTimeout is zero.
const DefaultSettleTimeout = 30 * time.Second

// ServiceBusReceiver is the part of an azservicebus receiver that
// ServiceBusLoop uses. *azservicebus.Receiver (peek-lock mode, the
// default) and *azservicebus.SessionReceiver satisfy it.
type ServiceBusReceiver interface {
	// ReceiveMessages waits for at least one message (or ctx) and returns
	// up to maxMessages, locked.
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	// CompleteMessage removes a locked message from the entity.
	CompleteMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	// AbandonMessage releases the lock: the message is delivered again,
	// its delivery count one higher.
	AbandonMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
}

// ServiceBusOptions configures ServiceBusLoop. The zero value is usable.
type ServiceBusOptions struct {
	// MaxMessages is the most messages one ReceiveMessages call returns.
	// Zero means DefaultServiceBusMaxMessages. Each is locked from receipt,
	// so keep MaxMessages × the time one message takes below the entity's
	// lock duration.
	MaxMessages int
	// TimeAfterFirstMessage is how long a receive call waits for more
	// messages after the first one arrived (ReceiveMessagesOptions); zero
	// means the SDK's default (20ms in peek-lock mode).
	TimeAfterFirstMessage time.Duration
	// SettleTimeout bounds each Complete and Abandon call. Zero means
	// DefaultSettleTimeout. Settling runs even after ctx ended, so that a
	// message whose effect committed is completed and one whose effect
	// failed is given back at once rather than when its lock expires.
	SettleTimeout time.Duration
	// OnError, when set, is called, from the loop's goroutine, for every
	// message that was not processed and completed: with the error of
	// Process (the message was abandoned), or of the Complete that
	// followed a commit (the message comes back and is then a Duplicate),
	// or of an Abandon. Use it to log; it must not block for long, since
	// the next messages' locks are running.
	OnError func(msg *azservicebus.ReceivedMessage, err error)
	// OnCompleted, when set, is called from the loop's goroutine after a
	// message was completed, with what Process did: Processed or
	// Duplicate. E.g. for metrics.
	OnCompleted func(msg *azservicebus.ReceivedMessage, res Result)
}

func (o ServiceBusOptions) withDefaults() (ServiceBusOptions, error) {
	switch {
	case o.MaxMessages < 0:
		return o, fmt.Errorf("%w: ServiceBusOptions.MaxMessages: negative (%d)", ErrInvalidOptions, o.MaxMessages)
	case o.MaxMessages == 0:
		o.MaxMessages = DefaultServiceBusMaxMessages
	}
	if o.TimeAfterFirstMessage < 0 {
		return o, fmt.Errorf("%w: ServiceBusOptions.TimeAfterFirstMessage: negative (%v)", ErrInvalidOptions, o.TimeAfterFirstMessage)
	}
	switch {
	case o.SettleTimeout < 0:
		return o, fmt.Errorf("%w: ServiceBusOptions.SettleTimeout: negative (%v)", ErrInvalidOptions, o.SettleTimeout)
	case o.SettleTimeout == 0:
		o.SettleTimeout = DefaultSettleTimeout
	}
	return o, nil
}

// ServiceBusLoop receives messages from r and runs effect once per message
// id through p (an *Inbox or *SQLInbox), until ctx ends or receiving fails:
//
//   - The message id is the Service Bus MessageId, which walpost's
//     servicebus sink sets to the outbox id.
//   - For each message, in the order received, it calls p.Process with
//     the MessageId and effect. Only after Process returned Processed or
//     Duplicate — the effect and the id committed, or committed before —
//     does it complete the message.
//   - When Process fails (the effect failed, the database did; nothing was
//     recorded), it abandons the message, which Service Bus delivers again
//     with a higher delivery count (and dead-letters after the entity's
//     MaxDeliveryCount). A message without a MessageId is abandoned too,
//     with ErrEmptyID.
//   - A Complete that fails after the commit (the lock expired, the
//     connection dropped) leaves the message to come back; its redelivery
//     returns Duplicate and is completed then.
//
// Failures of single messages go to ServiceBusOptions.OnError and the loop
// goes on. Unlike KafkaLoop it needs no retry in place and no poison
// policy: an abandoned message comes back by itself, after the messages
// behind it, and Service Bus moves a message that failed the entity's
// MaxDeliveryCount times (10 by default) to its dead-letter queue.
//
// When ctx ends, the messages received but not yet processed are
// abandoned and ServiceBusLoop returns ctx.Err(). When ReceiveMessages
// fails (the SDK retries connection trouble itself; what it returns is
// lasting: the entity is gone, the receiver was closed, the credential
// lacks the Listen right), ServiceBusLoop returns that error. Invalid
// options, or a nil receiver, processor or effect, give an error wrapping
// ErrInvalidOptions.
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
// then close the receiver. One ServiceBusLoop per receiver.
func ServiceBusLoop[Tx any](ctx context.Context, r ServiceBusReceiver, p Processor[Tx],
	effect func(ctx context.Context, tx Tx, msg *azservicebus.ReceivedMessage) error, opts ServiceBusOptions) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if r == nil || p == nil || effect == nil {
		return fmt.Errorf("%w: ServiceBusLoop needs a receiver, a processor and an effect", ErrInvalidOptions)
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
			err = fmt.Errorf("inbox: message %q: abandoning it: %w", msg.MessageID, err)
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
			return fmt.Errorf("inbox: receiving from Service Bus: %w", err)
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
				report(msg, fmt.Errorf("inbox: message %q: %s, but completing it failed (it will be delivered again and found a duplicate): %w",
					msg.MessageID, res, err))
				continue
			}
			if opts.OnCompleted != nil {
				opts.OnCompleted(msg, res)
			}
		}
	}
}
