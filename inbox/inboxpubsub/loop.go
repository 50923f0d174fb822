package inboxpubsub

import (
	"context"
	"errors"
	"fmt"
	"time"

	gps "cloud.google.com/go/pubsub/v2"

	"github.com/walpost/walpost/inbox"
)

// Attribute names the pubsub sink sets that carry the outbox id.
const (
	AttrID           = "id"
	AttrCloudEventID = "ce-id"
)

// Subscriber is the part of a pubsub/v2 Subscriber Loop uses;
// *pubsub.Subscriber satisfies it.
type Subscriber interface {
	// Receive calls f with each message until ctx ends (then it returns
	// nil) or receiving fails for good.
	Receive(ctx context.Context, f func(context.Context, *gps.Message)) error
}

// Options configures Loop. The zero value is usable.
type Options struct {
	// RetryBackoff is the longest wait before a message whose Process
	// failed is nacked: inbox.Backoff of its delivery attempt (known when
	// the subscription has a dead-letter policy, else 1). Zero means
	// inbox.DefaultRetryBackoff (30s). The wait holds the message's ack
	// deadline extended (the client does so up to
	// ReceiveSettings.MaxExtension).
	RetryBackoff time.Duration
	// ID returns a message's id for the inbox; nil reads the attribute id,
	// else ce-id.
	ID func(msg *gps.Message) string
	// OnError, when set, is called for every message not processed and
	// acked (the error of Process; the message was nacked). It may be
	// called concurrently.
	OnError func(msg *gps.Message, err error)
	// OnAcked, when set, is called after a message was acked, with what
	// Process did. It may be called concurrently.
	OnAcked func(msg *gps.Message, res inbox.Result)
	// ClaimCheck, when set (inbox.WithClaimCheck), resolves claim-checked
	// messages (walpost's relay.claim_check): in Process, before the
	// effect, the loop fetches the payload the message's
	// walpost-claim-check headers name, checks its size and SHA-256, and
	// hands the effect the message with the payload as its body (msg.Data). A
	// fetch that fails or does not match counts as a failing effect. A
	// duplicate fetches nothing.
	ClaimCheck *inbox.ClaimCheck
}

// MessageID returns the outbox id walpost's pubsub sink put in msg: the
// attribute id, else ce-id; "" when neither is there.
func MessageID(msg *gps.Message) string {
	if id := msg.Attributes[AttrID]; id != "" {
		return id
	}
	return msg.Attributes[AttrCloudEventID]
}

// Loop receives messages from sub and runs effect once per message id
// through p (an *inbox.Inbox or *inbox.SQLInbox), until ctx ends or
// receiving fails:
//
//   - For each message it calls p.Process with the message id
//     (Options.ID: the attribute id by default) and effect. Only after
//     Process returned inbox.Processed or inbox.Duplicate — the effect and
//     the id committed, or committed before — does it ack the message.
//   - When Process fails (nothing was recorded), or the message has no id
//     (inbox.ErrEmptyID), it waits inbox.Backoff of the delivery attempt
//     (at most Options.RetryBackoff) and nacks the message, which
//     Pub/Sub delivers again (on an ordered subscription, with the key's
//     later messages after it).
//
// When ctx ends Loop returns ctx.Err(); messages being handled are nacked
// if their Process did not complete. When Receive fails, Loop returns its
// error. Invalid options, or a nil subscriber, processor or effect, give
// an error wrapping inbox.ErrInvalidOptions. Set ReceiveSettings (and the
// subscription's ack deadline) on sub before calling Loop.
func Loop[Tx any](ctx context.Context, sub Subscriber, p inbox.Processor[Tx],
	effect func(ctx context.Context, tx Tx, msg *gps.Message) error, opts Options) error {
	var err error
	if opts.RetryBackoff, err = inbox.CheckRetry("inboxpubsub", opts.RetryBackoff, 0); err != nil {
		return err
	}
	if sub == nil || p == nil || effect == nil {
		return fmt.Errorf("%w: inboxpubsub.Loop needs a subscriber, a processor and an effect", inbox.ErrInvalidOptions)
	}
	if opts.ID == nil {
		opts.ID = MessageID
	}
	err = sub.Receive(ctx, func(ctx context.Context, msg *gps.Message) {
		id := opts.ID(msg)
		var res inbox.Result
		var err error
		if id == "" {
			err = fmt.Errorf("inboxpubsub: message %s: %w (no attribute %s or %s)", msg.ID, inbox.ErrEmptyID, AttrID, AttrCloudEventID)
		} else {
			// Process's span continues the trace of the message's traceparent.
			traced := inbox.ContextFromHeaders(ctx, func(name string) string { return msg.Attributes[name] })
			res, err = p.Process(traced, id, func(ctx context.Context, tx Tx) error {
				data, err := opts.ClaimCheck.Resolve(ctx, func(name string) string { return msg.Attributes[name] }, msg.Data)
				if err != nil {
					return fmt.Errorf("inboxpubsub: message %s: %w", msg.ID, err)
				}
				msg.Data = data
				return effect(ctx, tx, msg)
			})
		}
		if err != nil {
			attempt := 1
			if msg.DeliveryAttempt != nil {
				attempt = max(1, *msg.DeliveryAttempt)
			}
			if ctx.Err() == nil {
				inbox.SleepBackoff(ctx, attempt, opts.RetryBackoff)
			}
			msg.Nack()
			if opts.OnError != nil {
				opts.OnError(msg, err)
			}
			return
		}
		msg.Ack()
		if opts.OnAcked != nil {
			opts.OnAcked(msg, res)
		}
	})
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		return fmt.Errorf("inboxpubsub: receiving: %w", err)
	}
	return errors.New("inboxpubsub: Receive returned before its context ended")
}
