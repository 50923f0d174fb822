package inboxnats

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/inbox"
)

// DefaultIDHeader is the header Loop reads the message id from when
// Options.IDHeader is empty: the one walpost's nats sink sets.
const DefaultIDHeader = jetstream.MsgIDHeader

// DefaultPrefetch is how many messages Loop pulls ahead when
// Options.Prefetch is zero.
const DefaultPrefetch = 16

// ackGrace bounds an ack made after ctx ended: a message whose
// transaction committed still gets its ack, so that a graceful stop
// leaves no copy to be delivered again.
const ackGrace = 5 * time.Second

// Options configures Loop. The zero value is usable: the id is read from
// Nats-Msg-Id, 16 messages are pulled ahead, a failing message is Nak'ed with delays from 100ms up to
// 30s until it succeeds, and a message without an id stops the loop.
type Options struct {
	// IDHeader is the header holding the message id; empty means
	// DefaultIDHeader (Nats-Msg-Id). Surrounding spaces are trimmed.
	IDHeader string
	// Prefetch is how many messages the loop pulls ahead of the one it
	// processes (jetstream.PullMaxMessages). Zero means DefaultPrefetch
	// (16); it must not be negative. A message's AckWait runs from its
	// delivery, while it waits in the buffer too: keep Prefetch × the
	// time one message takes below the consumer's AckWait, or slow
	// effects get redeliveries of messages still queued (the inbox then
	// drops them as duplicates, at the cost of the work). The client's
	// own default, 500, is far too many for that.
	Prefetch int
	// RetryBackoff is the longest Nak delay (inbox.Backoff of the
	// delivery count); zero means inbox.DefaultRetryBackoff (30s).
	RetryBackoff time.Duration
	// MaxAttempts is how many deliveries in a row of a message may fail
	// in its effect (an error it returned, or a panic) before it is
	// poison (see OnPoison); the loop counts them per message id, in
	// memory. Zero means no limit. Only the effect's failures count
	// (inbox.ProcessOnce): a failing database is retried without limit,
	// since no message is to blame for it.
	MaxAttempts int
	// OnError, when set, is called from the loop's goroutine with every
	// failed attempt (effect or database error, or a failed ack).
	OnError func(m jetstream.Msg, msgID string, err error)
	// OnPoison decides about a message that retrying cannot fix: one
	// without an id (err wraps inbox.ErrEmptyID), or one whose effect
	// failed MaxAttempts times (err wraps inbox.ErrTooManyAttempts). Nil:
	// Loop returns err, the message neither acked nor terminated (it is
	// delivered again after the consumer's AckWait). Return nil to
	// terminate the message (Term: never delivered again) and go on.
	OnPoison func(ctx context.Context, m jetstream.Msg, err error) error
	// OnAcked, when set, is called after a message was acknowledged, with
	// what Process did.
	OnAcked func(m jetstream.Msg, msgID string, res inbox.Result)

	// beforeAck, when set (by tests), runs between Process and the ack;
	// an error stops the loop there, as a crash would.
	beforeAck func(m jetstream.Msg) error
	// ClaimCheck, when set (inbox.WithClaimCheck), resolves claim-checked
	// messages (walpost's relay.claim_check): in Process, before the
	// effect, the loop fetches the payload the message's
	// walpost-claim-check headers name, checks its size and SHA-256, and
	// hands the effect the message with the payload as its body (Data() of the message the effect gets). A
	// fetch that fails or does not match counts as a failing effect. A
	// duplicate fetches nothing.
	ClaimCheck *inbox.ClaimCheck
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Prefetch < 0:
		return o, fmt.Errorf("%w: inboxnats.Options.Prefetch: negative (%d)", inbox.ErrInvalidOptions, o.Prefetch)
	case o.Prefetch == 0:
		o.Prefetch = DefaultPrefetch
	}
	var err error
	if o.RetryBackoff, err = inbox.CheckRetry("inboxnats", o.RetryBackoff, o.MaxAttempts); err != nil {
		return o, err
	}
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	return o, nil
}

// Loop consumes c and runs effect once per message id through p (an
// *inbox.Inbox or *inbox.SQLInbox):
//
//  1. The next message (c.Messages, a pull subscription pulling
//     Options.Prefetch messages ahead).
//  2. Its id from Options.IDHeader; a message without one is poison.
//  3. p.Process(ctx, id, effect): the id and the effect commit in one
//     transaction, or neither does.
//  4. Processed or Duplicate: DoubleAck (the server confirms the ack). An
//     ack that fails is reported to OnError and the loop goes on: the
//     message comes back after AckWait and is then a Duplicate.
//  5. An error (a panicking effect included): NakWithDelay, the delay
//     inbox.Backoff of the delivery count; once the effect failed
//     MaxAttempts times in a row, poison (database failures do not
//     count).
//
// c's AckPolicy must be explicit (the default). Loop returns ctx.Err()
// when ctx ends, other errors when the consumer fails and for poison
// messages (see Options.OnPoison). One Loop per consumer.
func Loop[Tx any](ctx context.Context, c jetstream.Consumer, p inbox.Processor[Tx], effect func(ctx context.Context, tx Tx, m jetstream.Msg) error, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if c == nil || p == nil || effect == nil {
		return fmt.Errorf("%w: inboxnats.Loop needs a consumer, a processor and an effect", inbox.ErrInvalidOptions)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(opts.Prefetch))
	if err != nil {
		return fmt.Errorf("inboxnats: subscribing: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	l := &loop[Tx]{p: p, effect: effect, opts: opts, effectFailures: map[string]int{}}
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("inboxnats: fetching the next message: %w", err)
		}
		if err := l.handle(ctx, m); err != nil {
			return err
		}
	}
}

type loop[Tx any] struct {
	p      inbox.Processor[Tx]
	effect func(ctx context.Context, tx Tx, m jetstream.Msg) error
	opts   Options
	// effectFailures counts, per message id, the deliveries in a row
	// whose effect failed (at most maxTracked ids; cleared beyond).
	effectFailures map[string]int
}

// maxTracked bounds the failure counts the loop keeps per message id; the
// counts are cleared when it is reached.
const maxTracked = 10_000

func (l *loop[Tx]) handle(ctx context.Context, m jetstream.Msg) error {
	id := strings.TrimSpace(m.Headers().Get(l.opts.IDHeader))
	if id == "" {
		return l.poison(ctx, m, fmt.Errorf("inboxnats: %s: no %q header: %w", where(m), l.opts.IDHeader, inbox.ErrEmptyID))
	}
	// Process's span continues the trace of the message's traceparent.
	res, effectFailed, err := inbox.ProcessOnce(inbox.ContextFromHeaders(ctx, m.Headers().Get), l.p, id, func(ctx context.Context, tx Tx) error {
		data, err := l.opts.ClaimCheck.Resolve(ctx, m.Headers().Get, m.Data())
		if err != nil {
			return fmt.Errorf("inboxnats: %s: %w", where(m), err)
		}
		if l.opts.ClaimCheck != nil && m.Headers().Get(inbox.HeaderClaimCheck) != "" {
			return l.effect(ctx, tx, claimedMsg{m, data})
		}
		return l.effect(ctx, tx, m)
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // not acked: delivered again after AckWait
		}
		return l.failed(ctx, m, id, effectFailed, err)
	}
	delete(l.effectFailures, id)
	if l.opts.beforeAck != nil {
		if err := l.opts.beforeAck(m); err != nil {
			return err
		}
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackGrace)
	err = m.DoubleAck(actx)
	cancel()
	if err != nil {
		if l.opts.OnError != nil {
			l.opts.OnError(m, id, fmt.Errorf("inboxnats: %s: acknowledging: %w", where(m), err))
		}
		return nil
	}
	if l.opts.OnAcked != nil {
		l.opts.OnAcked(m, id, res)
	}
	return nil
}

// failed Naks m with a delay (inbox.Backoff of the delivery count), or
// treats it as poison once its effect failed MaxAttempts times in a row.
// A failure of the database (effectFailed false) does not count.
func (l *loop[Tx]) failed(ctx context.Context, m jetstream.Msg, id string, effectFailed bool, err error) error {
	attempt := 1
	if md, merr := m.Metadata(); merr == nil {
		attempt = int(md.NumDelivered)
	}
	err = fmt.Errorf("inboxnats: %s, delivery %d: %w", where(m), attempt, err)
	if l.opts.OnError != nil {
		l.opts.OnError(m, id, err)
	}
	if effectFailed {
		if _, ok := l.effectFailures[id]; !ok && len(l.effectFailures) >= maxTracked {
			clear(l.effectFailures)
		}
		l.effectFailures[id]++
		if n := l.effectFailures[id]; l.opts.MaxAttempts > 0 && n >= l.opts.MaxAttempts {
			delete(l.effectFailures, id)
			return l.poison(ctx, m, fmt.Errorf("%w (%d): %w", inbox.ErrTooManyAttempts, n, err))
		}
	}
	if nerr := m.NakWithDelay(inbox.Backoff(attempt, l.opts.RetryBackoff)); nerr != nil && l.opts.OnError != nil {
		l.opts.OnError(m, id, fmt.Errorf("inboxnats: %s: nak: %w", where(m), nerr))
	}
	return nil
}

func (l *loop[Tx]) poison(ctx context.Context, m jetstream.Msg, err error) error {
	if l.opts.OnPoison == nil {
		return err
	}
	if perr := l.opts.OnPoison(ctx, m, err); perr != nil {
		return perr
	}
	if terr := m.TermWithReason("walpost inbox: poison"); terr != nil {
		return fmt.Errorf("inboxnats: %s: terminating a poison message: %w", where(m), terr)
	}
	return nil
}

// where names m for errors: its subject and stream sequence.
func where(m jetstream.Msg) string {
	if md, err := m.Metadata(); err == nil {
		return fmt.Sprintf("subject %q, stream %s seq %d", m.Subject(), md.Stream, md.Sequence.Stream)
	}
	return fmt.Sprintf("subject %q", m.Subject())
}

// claimedMsg is a claim-checked message with its payload as Data.
type claimedMsg struct {
	jetstream.Msg
	data []byte
}

// Data returns the fetched payload.
func (c claimedMsg) Data() []byte { return c.data }
