package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// DefaultKafkaIDHeader is the record header KafkaLoop reads the message id
// from when KafkaOptions.IDHeader is empty: the header walpost's kafka
// sink puts the outbox id in.
const DefaultKafkaIDHeader = "id"

// DefaultKafkaRetryBackoff is the longest wait between two attempts at a
// failing message when KafkaOptions.RetryBackoff is zero.
const DefaultKafkaRetryBackoff = 30 * time.Second

// kafkaFirstBackoff is the wait after a message's first failed attempt;
// each further failure doubles it, up to KafkaOptions.RetryBackoff.
const kafkaFirstBackoff = 100 * time.Millisecond

// kafkaCommitGrace bounds an offset commit made after ctx ended: a message
// whose database transaction committed still gets its offset committed,
// so that a graceful stop leaves no copy to be read again.
const kafkaCommitGrace = 5 * time.Second

var (
	// ErrKafkaNoID means a record has no message id: no header named
	// KafkaOptions.IDHeader, or an empty one.
	ErrKafkaNoID = errors.New("inbox: kafka record has no message id")
	// ErrKafkaTooManyAttempts means a message's effect failed
	// KafkaOptions.MaxAttempts times in a row.
	ErrKafkaTooManyAttempts = errors.New("inbox: effect failed too many times")
)

// KafkaReader is what KafkaLoop needs from a Kafka consumer. A kafka-go
// *kafka.Reader with a GroupID satisfies it.
type KafkaReader interface {
	// FetchMessage returns the next message without committing its
	// offset; it blocks until there is one, ctx ends or the reader fails.
	FetchMessage(ctx context.Context) (kafka.Message, error)
	// CommitMessages commits the offsets after msgs, so that the consumer
	// group does not read them again; it returns when the commit is done
	// (or queued, for a kafka-go Reader with a CommitInterval).
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// KafkaOptions configures KafkaLoop. The zero value is usable: the id is
// read from the "id" header, failing messages are retried until ctx ends,
// and a record without an id stops the loop.
type KafkaOptions struct {
	// IDHeader is the record header holding the message id. Empty means
	// DefaultKafkaIDHeader ("id"), the header walpost's kafka sink sets.
	// When a record carries the header more than once, the last one
	// counts (as with the Java client's Headers.lastHeader).
	IDHeader string
	// RetryBackoff is the longest wait between two attempts at a failing
	// message (its effect, the database, or the offset commit). Waits
	// start at 100ms and double with each failure, with jitter. Zero
	// means DefaultKafkaRetryBackoff; it must not be negative.
	RetryBackoff time.Duration
	// MaxAttempts is how many times in a row a message's effect may fail
	// before the message counts as poison (see OnPoison). Zero means no
	// limit: the message is retried until ctx ends. Only errors returned
	// by the effect count; a failing database (connecting, beginning,
	// committing) is retried until ctx ends, since no message is to blame
	// for it. It must not be negative.
	MaxAttempts int
	// OnError, when set, is called with every failed attempt before the
	// loop waits and retries it: an effect or database error (msgID is the
	// message's id), or an offset commit error. It is called from the
	// loop's goroutine, e.g. to log.
	OnError func(m kafka.Message, msgID string, err error)
	// OnPoison decides what happens to a message that retrying cannot
	// fix: a record without a message id (err wraps ErrKafkaNoID), or one
	// whose effect failed MaxAttempts times (err wraps
	// ErrKafkaTooManyAttempts and the effect's last error).
	//
	// When OnPoison is nil, KafkaLoop returns err without committing the
	// message: the consumer stops at it and, restarted, reads it again.
	// Nothing is skipped without a decision.
	//
	// To go on instead, log the message, copy it somewhere (a dead-letter
	// table or topic) and return nil: KafkaLoop then commits its offset
	// without running the effect and without recording an id. Return an
	// error to stop KafkaLoop with that error, the message not committed.
	OnPoison func(ctx context.Context, m kafka.Message, err error) error
	// OnCommitted, when set, is called after a message's offset was
	// committed, with what Process did: Processed or Duplicate. It is
	// called from the loop's goroutine, e.g. for metrics.
	OnCommitted func(m kafka.Message, msgID string, res Result)

	// beforeCommit, when set (by tests), runs between Process and the
	// offset commit; an error stops the loop there, as a crash would.
	beforeCommit func(m kafka.Message) error
}

func (o KafkaOptions) withDefaults() (KafkaOptions, error) {
	switch {
	case o.RetryBackoff < 0:
		return o, fmt.Errorf("%w: KafkaOptions.RetryBackoff: negative (%v)", ErrInvalidOptions, o.RetryBackoff)
	case o.RetryBackoff == 0:
		o.RetryBackoff = DefaultKafkaRetryBackoff
	}
	if o.MaxAttempts < 0 {
		return o, fmt.Errorf("%w: KafkaOptions.MaxAttempts: negative (%d)", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.IDHeader == "" {
		o.IDHeader = DefaultKafkaIDHeader
	}
	return o, nil
}

// KafkaLoop consumes r and runs effect once per message id through p (an
// *Inbox or *SQLInbox), committing each message's offset only after its
// database transaction committed:
//
//  1. FetchMessage.
//  2. Read the message id from the IDHeader header. A record without one
//     is poison: see KafkaOptions.OnPoison (by default KafkaLoop stops
//     with an error wrapping ErrKafkaNoID).
//  3. Process(ctx, id, effect). On an error nothing was recorded and the
//     offset is not committed: KafkaLoop retries the same message in
//     place, with backoff (KafkaOptions.RetryBackoff), until it succeeds,
//     ctx ends, or the effect failed KafkaOptions.MaxAttempts times.
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
// run more KafkaLoops, each with its own Reader in the same group, up to
// the number of partitions.
//
// r must be a consumer-group reader: a *kafka.Reader without a GroupID
// cannot commit offsets and is refused. With ReaderConfig.CommitInterval
// zero (kafka-go's default) each commit is synchronous; with an interval,
// kafka-go commits in the background, so a crash re-reads more messages
// (all reported Duplicate) but loses none.
//
// KafkaLoop returns ctx.Err() when ctx ends. An offset commit due when ctx
// ends is still made, within a few seconds, so that a graceful stop leaves
// no copy behind. It returns other errors when FetchMessage fails (an
// error wrapping io.EOF when r was closed), when r is closed while a
// commit is retried, and for poison messages (see OnPoison). Stop it by
// ending ctx, then close r. One KafkaLoop per Reader.
//
// A sketch, with pgx:
//
//	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "billing", Topic: "orders"})
//	defer r.Close()
//	err := inbox.KafkaLoop(ctx, r, ib, func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, body) VALUES ($1, $2)`, string(m.Key), m.Value)
//		return err
//	}, inbox.KafkaOptions{OnError: func(m kafka.Message, id string, err error) { log.Print(err) }})
func KafkaLoop[Tx any](ctx context.Context, r KafkaReader, p Processor[Tx], effect func(ctx context.Context, tx Tx, m kafka.Message) error, opts KafkaOptions) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if r == nil || p == nil || effect == nil {
		return fmt.Errorf("%w: KafkaLoop needs a reader, a processor and an effect", ErrInvalidOptions)
	}
	if kr, ok := r.(*kafka.Reader); ok && (kr == nil || kr.Config().GroupID == "") {
		return fmt.Errorf("%w: the kafka.Reader has no GroupID: without a consumer group there are no offsets to commit", ErrInvalidOptions)
	}
	l := &kafkaLoop[Tx]{r: r, p: p, effect: effect, opts: opts}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("inbox: kafka: fetching the next message: %w", err)
		}
		if err := l.handle(ctx, m); err != nil {
			return err
		}
	}
}

// kafkaLoop is one KafkaLoop call's state.
type kafkaLoop[Tx any] struct {
	r      KafkaReader
	p      Processor[Tx]
	effect func(ctx context.Context, tx Tx, m kafka.Message) error
	opts   KafkaOptions
}

// handle processes m and commits its offset, retrying in place.
func (l *kafkaLoop[Tx]) handle(ctx context.Context, m kafka.Message) error {
	id := kafkaMessageID(m, l.opts.IDHeader)
	if id == "" {
		return l.poison(ctx, m, fmt.Errorf("%w: %s: no %q header", ErrKafkaNoID, kafkaWhere(m), l.opts.IDHeader))
	}
	res, err := l.process(ctx, m, id)
	if err != nil {
		return err
	}
	if res == 0 { // poison, parked by OnPoison and already committed
		return nil
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

// process runs Process until it succeeds; it returns 0 and no error when
// the message turned poison and OnPoison let it go (committed).
func (l *kafkaLoop[Tx]) process(ctx context.Context, m kafka.Message, id string) (Result, error) {
	failures := 0 // consecutive attempts whose effect failed
	for attempt := 1; ; attempt++ {
		effectFailed := false
		res, err := l.p.Process(ctx, id, func(ctx context.Context, tx Tx) error {
			if err := l.effect(ctx, tx, m); err != nil {
				effectFailed = true
				return err
			}
			return nil
		})
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		err = fmt.Errorf("inbox: kafka: %s, attempt %d: %w", kafkaWhere(m), attempt, err)
		if l.opts.OnError != nil {
			l.opts.OnError(m, id, err)
		}
		if effectFailed {
			failures++
			if l.opts.MaxAttempts > 0 && failures >= l.opts.MaxAttempts {
				return 0, l.poison(ctx, m, fmt.Errorf("%w (%d): %w", ErrKafkaTooManyAttempts, failures, err))
			}
		}
		if err := sleepBackoff(ctx, attempt, l.opts.RetryBackoff); err != nil {
			return 0, err
		}
	}
}

// poison applies the poison policy to m: stop with err, or commit past m
// when OnPoison returns nil.
func (l *kafkaLoop[Tx]) poison(ctx context.Context, m kafka.Message, err error) error {
	if l.opts.OnPoison == nil {
		return err
	}
	if perr := l.opts.OnPoison(ctx, m, err); perr != nil {
		return perr
	}
	return l.commit(ctx, m, kafkaMessageID(m, l.opts.IDHeader))
}

// commit commits m's offset, retrying until it succeeds or ctx ends. Each
// attempt runs even when ctx has just ended, bounded by kafkaCommitGrace:
// the database transaction before it committed, and a commit now spares a
// duplicate later.
func (l *kafkaLoop[Tx]) commit(ctx context.Context, m kafka.Message, id string) error {
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kafkaCommitGrace)
		err := l.r.CommitMessages(cctx, m)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = fmt.Errorf("inbox: kafka: %s: committing the offset: %w", kafkaWhere(m), err)
		if errors.Is(err, io.ErrClosedPipe) { // kafka-go: the reader was closed
			return err
		}
		if l.opts.OnError != nil {
			l.opts.OnError(m, id, err)
		}
		if err := sleepBackoff(ctx, attempt, l.opts.RetryBackoff); err != nil {
			return err
		}
	}
}

// kafkaMessageID returns the trimmed value of m's last header named
// header, or "".
func kafkaMessageID(m kafka.Message, header string) string {
	id := ""
	for _, h := range m.Headers {
		if h.Key == header {
			id = strings.TrimSpace(string(h.Value))
		}
	}
	return id
}

// kafkaWhere names a record for errors: topic[partition]@offset.
func kafkaWhere(m kafka.Message) string {
	return fmt.Sprintf("record %s[%d]@%d", m.Topic, m.Partition, m.Offset)
}

// sleepBackoff waits after the attempt-th failure: 100ms doubling up to
// limit, less up to a fifth at random so that consumers do not retry in
// step. It returns ctx.Err() if ctx ends first.
func sleepBackoff(ctx context.Context, attempt int, limit time.Duration) error {
	d := limit
	if attempt < 30 {
		d = min(limit, kafkaFirstBackoff<<(attempt-1))
	}
	d -= time.Duration(rand.Int64N(int64(d)/5 + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
