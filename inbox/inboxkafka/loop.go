package inboxkafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/walpost/walpost/inbox"
)

// commitGrace bounds an offset commit made after ctx ended: a message
// whose database transaction committed still gets its offset committed,
// so that a graceful stop leaves no copy to be read again.
const commitGrace = 5 * time.Second

// Reader is what Loop needs from a Kafka consumer. A kafka-go
// *kafka.Reader with a GroupID satisfies it.
type Reader interface {
	// FetchMessage returns the next message without committing its
	// offset; it blocks until there is one, ctx ends or the reader fails.
	FetchMessage(ctx context.Context) (kafka.Message, error)
	// CommitMessages commits the offsets after msgs, so that the consumer
	// group does not read them again; it returns when the commit is done
	// (or queued, for a kafka-go Reader with a CommitInterval).
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Loop consumes r and runs effect once per message id through p (an
// *inbox.Inbox or *inbox.SQLInbox), committing each message's offset only
// after its database transaction committed:
//
//  1. FetchMessage.
//  2. Read the message id from the Options.IDHeader header. A record
//     without one is poison: see Options.OnPoison (by default Loop stops
//     with an error wrapping inbox.ErrEmptyID).
//  3. Process(ctx, id, effect), through inbox.ProcessRetrying. On an
//     error nothing was recorded and the offset is not committed: Loop
//     retries the same message in place, with backoff
//     (Options.RetryBackoff), until it succeeds, ctx ends, or the effect
//     failed Options.MaxAttempts times. A panicking effect is a failing
//     effect (inbox.ErrPanicked).
//  4. After Processed or Duplicate, CommitMessages, retried likewise.
//
// Why in place: a kafka-go consumer-group Reader reads ahead and never
// rewinds; an offset left uncommitted is read again only after a restart
// or a rebalance moves the partition. Moving on to the next message would
// commit past the failed one (a commit covers every earlier offset of its
// partition), so its effect would be lost. The price is that a message
// whose effect always fails blocks its partition; MaxAttempts with
// OnPoison parks it and goes on.
//
// A crash after the database commit but before the offset commit makes
// the group read the message again; Process then returns Duplicate and
// the effect does not run twice. A rebalance that moves a partition while
// its message is being retried makes the new owner process it too; the
// inbox's primary key lets only one effect commit.
//
// Messages are processed one at a time, in the order r returns them,
// which keeps Kafka's per-partition (per-key) order. For more throughput,
// run more Loops, each with its own Reader in the same group, up to the
// number of partitions.
//
// r must be a consumer-group reader: a *kafka.Reader without a GroupID
// cannot commit offsets and is refused. With ReaderConfig.CommitInterval
// zero (kafka-go's default) each commit is synchronous; with an interval,
// kafka-go commits in the background, so a crash re-reads more messages
// (all reported Duplicate) but loses none.
//
// Loop returns ctx.Err() when ctx ends. An offset commit due when ctx
// ends is still made, within a few seconds, so that a graceful stop
// leaves no copy behind. It returns other errors when FetchMessage fails
// (an error wrapping io.EOF when r was closed), when r is closed while a
// commit is retried, and for poison messages (see Options.OnPoison).
// Invalid options, or a nil reader, processor or effect, give an error
// wrapping inbox.ErrInvalidOptions. Stop it by ending ctx, then close r.
// One Loop per Reader.
func Loop[Tx any](ctx context.Context, r Reader, p inbox.Processor[Tx], effect func(ctx context.Context, tx Tx, m kafka.Message) error, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if r == nil || p == nil || effect == nil {
		return fmt.Errorf("%w: inboxkafka.Loop needs a reader, a processor and an effect", inbox.ErrInvalidOptions)
	}
	if kr, ok := r.(*kafka.Reader); ok && (kr == nil || kr.Config().GroupID == "") {
		return fmt.Errorf("%w: the kafka.Reader has no GroupID: without a consumer group there are no offsets to commit", inbox.ErrInvalidOptions)
	}
	if opts.ReadCommitted {
		switch rr := r.(type) {
		case *kafka.Reader:
			return fmt.Errorf("%w: ReadCommitted: kafka-go's Reader hands transaction markers and records of aborted transactions to Loop as messages; "+
				"use NewFranzReader with kgo.FetchIsolationLevel(kgo.ReadCommitted())", inbox.ErrInvalidOptions)
		case *FranzReader:
			if !rr.readsCommitted() {
				return fmt.Errorf("%w: ReadCommitted: the franz-go client reads uncommitted records; give it kgo.FetchIsolationLevel(kgo.ReadCommitted())", inbox.ErrInvalidOptions)
			}
		}
	}
	l := &loop[Tx]{r: r, p: p, effect: effect, opts: opts}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("inboxkafka: fetching the next message: %w", err)
		}
		if err := l.handle(ctx, m); err != nil {
			return err
		}
	}
}

// loop is one Loop call's state.
type loop[Tx any] struct {
	r      Reader
	p      inbox.Processor[Tx]
	effect func(ctx context.Context, tx Tx, m kafka.Message) error
	opts   Options
}

// handle processes m and commits its offset, retrying in place.
func (l *loop[Tx]) handle(ctx context.Context, m kafka.Message) error {
	id := messageID(m, l.opts.IDHeader)
	if id == "" {
		return l.poison(ctx, m, fmt.Errorf("inboxkafka: %s: no %q header: %w", where(m), l.opts.IDHeader, inbox.ErrEmptyID))
	}
	// Process's span continues the trace of the record's traceparent.
	traced := inbox.ContextFromHeaders(ctx, func(name string) string { return lastHeader(m, name) })
	res, err := inbox.ProcessRetrying(traced, l.p, id, func(ctx context.Context, tx Tx) error {
		value, err := l.opts.ClaimCheck.Resolve(ctx, func(name string) string {
			v := ""
			for _, h := range m.Headers {
				if h.Key == name {
					v = string(h.Value) // the last one counts
				}
			}
			return v
		}, m.Value)
		if err != nil {
			return fmt.Errorf("inboxkafka: %s: %w", where(m), err)
		}
		m := m
		m.Value = value
		return l.effect(ctx, tx, m)
	}, inbox.Retry{
		Backoff:     l.opts.RetryBackoff,
		MaxAttempts: l.opts.MaxAttempts,
		OnError: func(attempt int, err error) {
			if l.opts.OnError != nil {
				l.opts.OnError(m, id, fmt.Errorf("inboxkafka: %s, attempt %d: %w", where(m), attempt, err))
			}
		},
	})
	switch {
	case errors.Is(err, inbox.ErrTooManyAttempts):
		return l.poison(ctx, m, fmt.Errorf("inboxkafka: %s: %w", where(m), err))
	case err != nil:
		return err // ctx ended
	}
	if l.opts.beforeCommit != nil {
		if err := l.opts.beforeCommit(m); err != nil {
			return err
		}
	}
	if err := l.commit(ctx, m, id); err != nil {
		return err
	}
	if l.opts.OnCommitted != nil {
		l.opts.OnCommitted(m, id, res)
	}
	return nil
}

// poison applies the poison policy to m: stop with err, or commit past m
// when OnPoison returns nil.
func (l *loop[Tx]) poison(ctx context.Context, m kafka.Message, err error) error {
	if l.opts.OnPoison == nil {
		return err
	}
	if perr := l.opts.OnPoison(ctx, m, err); perr != nil {
		return perr
	}
	return l.commit(ctx, m, messageID(m, l.opts.IDHeader))
}

// commit commits m's offset, retrying until it succeeds or ctx ends. Each
// attempt runs even when ctx has just ended, bounded by commitGrace: the
// database transaction before it committed, and a commit now spares a
// duplicate later.
func (l *loop[Tx]) commit(ctx context.Context, m kafka.Message, id string) error {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitGrace)
		err := l.r.CommitMessages(cctx, m)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = fmt.Errorf("inboxkafka: %s: committing the offset: %w", where(m), err)
		if errors.Is(err, io.ErrClosedPipe) { // kafka-go: the reader was closed
			return err
		}
		if l.opts.OnError != nil {
			l.opts.OnError(m, id, err)
		}
		if err := inbox.SleepBackoff(ctx, attempt, l.opts.RetryBackoff); err != nil {
			return err
		}
	}
}

// messageID returns the trimmed value of m's last header named header, or
// "".
func messageID(m kafka.Message, header string) string {
	id := ""
	for _, h := range m.Headers {
		if h.Key == header {
			id = strings.TrimSpace(string(h.Value))
		}
	}
	return id
}

// lastHeader returns the value of m's last header named name, or "".
func lastHeader(m kafka.Message, name string) string {
	v := ""
	for _, h := range m.Headers {
		if h.Key == name {
			v = string(h.Value)
		}
	}
	return v
}

// where names a record for errors: topic[partition]@offset.
func where(m kafka.Message) string {
	return fmt.Sprintf("record %s[%d]@%d", m.Topic, m.Partition, m.Offset)
}
