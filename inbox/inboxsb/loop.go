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
	// RetryBackoff is the longest wait before a message whose Process
	// failed is abandoned. Waits start at inbox.FirstRetryBackoff (100ms)
	// and double with the message's DeliveryCount, with jitter
	// (inbox.Backoff), and never take more than half the time left on
	// the locks of the received messages still to be handled. Zero means
	// inbox.DefaultRetryBackoff (30s); it must not be negative.
	//
	// Service Bus counts every abandon toward the entity's
	// MaxDeliveryCount, whatever failed: a database down for longer than
	// the sum of the waits (about 2 minutes for MaxDeliveryCount 10 and
	// the default RetryBackoff, less with short locks) dead-letters the
	// messages that arrive meanwhile. Size MaxDeliveryCount (and the lock
	// duration) for the outages to ride out, and resubmit dead-lettered
	// messages after one: the inbox drops those already processed.
	RetryBackoff time.Duration
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
	// ClaimCheck, when set (inbox.WithClaimCheck), fetches the payload of
	// a claim-checked message (walpost's relay.claim_check) and puts it in
	// msg.Body before the effect runs. A fetch that fails, or whose
	// payload does not match the message's size and SHA-256, counts as a
	// failed Process: the message is abandoned after the same wait.
	ClaimCheck *inbox.ClaimCheck
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
	var err error
	if o.RetryBackoff, err = inbox.CheckRetry("inboxsb", o.RetryBackoff, 0); err != nil {
		return o, err
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
//     failed; nothing was recorded), it waits inbox.Backoff of the
//     message's DeliveryCount (100ms, doubling, up to
//     Options.RetryBackoff, and at most half the time left on the locks
//     of the batch's messages still to be handled), then abandons the
//     message, which Service Bus delivers again with a higher delivery
//     count (and dead-letters after the entity's MaxDeliveryCount). The
//     wait holds up the loop, so a failing database slows it down
//     instead of spinning through the deliveries. A message without a
//     MessageId is abandoned too (after the same wait), with
//     inbox.ErrEmptyID.
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
	l := &loop[Tx]{r: r, p: p, effect: effect, opts: opts}
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
					l.abandon(ctx, rest, nil)
				}
				break
			}
			l.handle(ctx, msg, msgs[i:])
		}
	}
}

// loop is one Loop call's state.
type loop[Tx any] struct {
	r      Receiver
	p      inbox.Processor[Tx]
	effect func(ctx context.Context, tx Tx, msg *azservicebus.ReceivedMessage) error
	opts   Options
}

// handle processes msg, the first of locked (the messages of the batch
// not yet handled), and completes it, or waits and abandons it.
func (l *loop[Tx]) handle(ctx context.Context, msg *azservicebus.ReceivedMessage, locked []*azservicebus.ReceivedMessage) {
	body, err := l.opts.ClaimCheck.Resolve(ctx, func(name string) string {
		v, _ := msg.ApplicationProperties[name].(string)
		return v
	}, msg.Body)
	var res inbox.Result
	if err == nil {
		msg.Body = body
		// Process's span continues the trace of the message's traceparent.
		traced := inbox.ContextFromHeaders(ctx, func(name string) string { v, _ := msg.ApplicationProperties[name].(string); return v })
		res, err = l.p.Process(traced, msg.MessageID, func(ctx context.Context, tx Tx) error {
			return l.effect(ctx, tx, msg)
		})
	} else {
		err = fmt.Errorf("inboxsb: message %q: %w", msg.MessageID, err)
	}
	if err != nil {
		if ctx.Err() == nil {
			inbox.SleepBackoff(ctx, max(1, int(msg.DeliveryCount)), l.retryWait(locked))
		}
		l.abandon(ctx, msg, err)
		return
	}
	if err := l.settle(ctx, func(ctx context.Context) error { return l.r.CompleteMessage(ctx, msg, nil) }); err != nil {
		l.report(msg, fmt.Errorf("inboxsb: message %q: %s, but completing it failed (it will be delivered again and found a duplicate): %w",
			msg.MessageID, res, err))
		return
	}
	if l.opts.OnCompleted != nil {
		l.opts.OnCompleted(msg, res)
	}
}

// retryWait is the longest wait before a failed message is abandoned:
// Options.RetryBackoff, but at most half the time left on the earliest
// lock of locked, so that the messages waiting behind it keep the rest
// of their locks for their effects. At least 1ns: inbox.Backoff takes
// zero for its default.
func (l *loop[Tx]) retryWait(locked []*azservicebus.ReceivedMessage) time.Duration {
	limit := l.opts.RetryBackoff
	for _, m := range locked {
		if m.LockedUntil != nil {
			limit = min(limit, time.Until(*m.LockedUntil)/2)
		}
	}
	return max(limit, time.Nanosecond)
}

// settle runs a Complete or Abandon with its own deadline, even when ctx
// has ended.
func (l *loop[Tx]) settle(ctx context.Context, f func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.SettleTimeout)
	defer cancel()
	return f(sctx)
}

// abandon gives msg back and reports cause (the error of its Process,
// nil when the loop is stopping) and any error of the abandon.
func (l *loop[Tx]) abandon(ctx context.Context, msg *azservicebus.ReceivedMessage, cause error) {
	err := l.settle(ctx, func(ctx context.Context) error { return l.r.AbandonMessage(ctx, msg, nil) })
	if err != nil {
		err = fmt.Errorf("inboxsb: message %q: abandoning it: %w", msg.MessageID, err)
		if cause != nil {
			err = errors.Join(cause, err)
		}
	} else {
		err = cause
	}
	if err != nil {
		l.report(msg, err)
	}
}

func (l *loop[Tx]) report(msg *azservicebus.ReceivedMessage, err error) {
	if l.opts.OnError != nil {
		l.opts.OnError(msg, err)
	}
}
