package inboxkafka

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/walpost/walpost/inbox"
)

// DefaultIDHeader is the record header Loop reads the message id from when
// Options.IDHeader is empty: the header walpost's kafka sink puts the
// outbox id in.
const DefaultIDHeader = "id"

// Options configures Loop. The zero value is usable: the id is read from
// the "id" header, a failing message is retried in place until ctx ends
// (waits from 100ms up to 30s), and a record without an id stops the
// loop.
type Options struct {
	// IDHeader is the record header holding the message id. Empty means
	// DefaultIDHeader ("id"), the header walpost's kafka sink sets. When
	// a record carries the header more than once, the last one counts
	// (as with the Java client's Headers.lastHeader). Surrounding spaces
	// are trimmed.
	IDHeader string
	// RetryBackoff is the longest wait between two attempts at a failing
	// message (its effect, the database, or the offset commit). Waits
	// start at inbox.FirstRetryBackoff (100ms) and double with each
	// failure, with jitter (inbox.Backoff). Zero means
	// inbox.DefaultRetryBackoff (30s); it must not be negative.
	RetryBackoff time.Duration
	// MaxAttempts is how many times in a row a message's effect may fail
	// (return an error or panic) before the message counts as poison
	// (see OnPoison). Zero means no limit: the message is retried until
	// ctx ends. Only the effect's failures count; a failing database
	// (connecting, beginning, committing) is retried until ctx ends,
	// since no message is to blame for it. It must not be negative.
	MaxAttempts int
	// ReadCommitted says that the topics come from a walpost kafka sink
	// with exactly_once: true, whose batches are Kafka transactions, so
	// that the reader must read with isolation.level=read_committed and
	// leave out transaction markers and the records of aborted
	// transactions (a batch the relay then sent again). Loop then refuses
	// a kafka-go *kafka.Reader, which does neither, and a *FranzReader
	// whose client does not read committed, with an error wrapping
	// inbox.ErrInvalidOptions. Readers of other types are taken as they
	// are.
	ReadCommitted bool
	// OnError, when set, is called with every failed attempt before the
	// loop waits and retries it: an effect or database error (msgID is
	// the message's id), or an offset commit error. It is called from the
	// loop's goroutine, e.g. to log.
	OnError func(m kafka.Message, msgID string, err error)
	// OnPoison decides what happens to a message that retrying cannot
	// fix: a record without a message id (err wraps inbox.ErrEmptyID), or
	// one whose effect failed MaxAttempts times (err wraps
	// inbox.ErrTooManyAttempts and the effect's last error).
	//
	// When OnPoison is nil, Loop returns err without committing the
	// message: the consumer stops at it and, restarted, reads it again.
	// Nothing is skipped without a decision.
	//
	// To go on instead, log the message, copy it somewhere (a dead-letter
	// table or topic) and return nil: Loop then commits its offset
	// without running the effect and without recording an id. Return an
	// error to stop Loop with that error, the message not committed.
	OnPoison func(ctx context.Context, m kafka.Message, err error) error
	// OnCommitted, when set, is called after a message's offset was
	// committed, with what Process did: inbox.Processed or
	// inbox.Duplicate. It is called from the loop's goroutine, e.g. for
	// metrics.
	OnCommitted func(m kafka.Message, msgID string, res inbox.Result)

	// beforeCommit, when set (by tests), runs between Process and the
	// offset commit; an error stops the loop there, as a crash would.
	beforeCommit func(m kafka.Message) error
	// ClaimCheck, when set (inbox.WithClaimCheck), resolves claim-checked
	// messages (walpost's relay.claim_check): in Process, before the
	// effect, the loop fetches the payload the message's
	// walpost-claim-check headers name, checks its size and SHA-256, and
	// hands the effect the message with the payload as its body (m.Value). A
	// fetch that fails or does not match counts as a failing effect. A
	// duplicate fetches nothing.
	ClaimCheck *inbox.ClaimCheck
}

// withDefaults checks o and fills in its defaults; errors wrap
// inbox.ErrInvalidOptions and name the field.
func (o Options) withDefaults() (Options, error) {
	var err error
	if o.RetryBackoff, err = inbox.CheckRetry("inboxkafka", o.RetryBackoff, o.MaxAttempts); err != nil {
		return o, err
	}
	if o.IDHeader == "" {
		o.IDHeader = DefaultIDHeader
	}
	return o, nil
}
