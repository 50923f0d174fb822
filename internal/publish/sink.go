package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
)

// Sink is a destination for outbox messages.
//
// The relay calls Publish from one goroutine per sink, one batch at a time,
// in WAL order, so a sink never sees two batches at once and needs no
// locking for Publish itself.
type Sink interface {
	// Name returns the sink's configured name (used in logs and metrics).
	Name() string

	// Publish delivers msgs, in order, and returns nil only once every one
	// of them is durable at the destination (fsynced, acknowledged by the
	// broker with the configured acks). msgs is never empty and must not be
	// retained or modified after Publish returns.
	//
	// On error, some of msgs may have been delivered. The sink may report
	// which of them are durable by marking the error with Partial: the
	// runner will not send those again. It retries the others (all of msgs
	// without Partial) in their order in msgs, so duplicates are possible
	// (a message stored whose acknowledgement was lost) and reordering is
	// not, as long as what the sink reports durable is, per unit of order
	// at the destination (a partition, an entity, a file), a prefix of
	// that unit's share of msgs. An error marked with Permanent stops the
	// relay, one marked with Rejected stops it or parks the refused
	// message (relay.on_refused); either may also be Partial, and the
	// runner then confirms the durable messages first and looks for the
	// refused one among the others only. Publish must return promptly with
	// ctx.Err() when ctx ends.
	Publish(ctx context.Context, msgs []*message.Message) error

	// Close releases the sink's resources. Publish is not called after it.
	Close() error
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not retryable: the destination will not accept
// the batch however often it is sent (not authorized, unknown topic, a
// setting it rejects). The relay stops with the error instead of
// retrying, and confirms nothing past the batch's durable prefix (see
// Partial). When one message alone is the cause, use Rejected.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked with
// Permanent or Rejected.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// rejectedError marks a refusal of one message for what it is; it wraps
// a permanentError, so that IsPermanent holds for it too.
type rejectedError struct{ permanentError }

func (e rejectedError) Unwrap() error { return e.permanentError }

// Rejected marks err as the destination refusing one message for good
// because of the message itself (larger than the destination takes, a
// name derived from it that the destination cannot use), while other
// messages would go through. It is Permanent; in addition, with
// relay.on_refused: dead_letter the relay parks that message and goes on
// instead of stopping. A sink returns it only for a call of one message,
// or names the message in the error. A problem with credentials, a
// missing topic or queue, or the configuration is Permanent, not
// Rejected: parking every message would not fix it.
func Rejected(err error) error {
	if err == nil {
		return nil
	}
	return rejectedError{permanentError{err}}
}

// IsRejected reports whether err (or an error it wraps) was marked with
// Rejected.
func IsRejected(err error) bool {
	var r rejectedError
	return errors.As(err, &r)
}

// partialError reports which messages of a failed Publish call are
// durable.
type partialError struct {
	err  error
	done []bool
}

func (e *partialError) Error() string { return e.err.Error() }
func (e *partialError) Unwrap() error { return e.err }

// Partial marks err, returned by Publish for msgs, with which of msgs are
// durable at the destination all the same: done[i] reports msgs[i], and
// done has one entry per message of the call. The relay confirms the
// durable messages (in WAL order: a durable message waits for those
// before it) and does not send them again; it retries the others. Report
// only what the destination acknowledged; a message not reported is sent
// again, so when in doubt leave it out.
//
// Partial composes with Permanent and Rejected in either order, and with
// wrapping (fmt.Errorf with %w): DoneOf, IsPermanent and IsRejected see
// through each other. Partial returns err itself when err is nil or done
// marks no message. The sink must not modify done after returning it.
func Partial(err error, done []bool) error {
	if err == nil || !slices.Contains(done, true) {
		return err
	}
	return &partialError{err: err, done: done}
}

// DoneOf returns the durable messages that err (or an error it wraps)
// reports with Partial, and whether it reports any. done[i] refers to the
// i-th message of the Publish call that returned err.
func DoneOf(err error) (done []bool, ok bool) {
	var p *partialError
	if errors.As(err, &p) {
		return p.done, true
	}
	return nil, false
}

// Position is a point in the stream, as the relay orders messages: by
// commit LSN, then LSN, then Seq (message.Message). The zero value is
// before every message.
type Position struct {
	CommitLSN, LSN pglogrepl.LSN
	Seq            uint32
}

// PositionOf returns the position of m.
func PositionOf(m *message.Message) Position {
	return Position{CommitLSN: m.CommitLSN, LSN: m.LSN, Seq: m.Seq}
}

// Covers reports whether m is at or before p.
func (p Position) Covers(m *message.Message) bool {
	switch {
	case m.CommitLSN != p.CommitLSN:
		return m.CommitLSN < p.CommitLSN
	case m.LSN != p.LSN:
		return m.LSN < p.LSN
	}
	return m.Seq <= p.Seq
}

// Resumer is an optional ability of a Sink: it keeps its own progress at
// the destination, written atomically with the messages (the kafka sink
// with exactly_once: each batch is one Kafka transaction that also writes
// the position of its last message). The relay checks for it by type
// assertion and calls Resume once per cycle, after opening the sink and
// before its first Publish; the sink then resumes from the later of that
// position and the progress table's, so that a message the destination
// already holds from this sink is not sent to it again.
type Resumer interface {
	// Resume takes over the destination for the sink on opts.Slot: it
	// fences any other instance writing there for the same slot and sink
	// (a stale one's next write fails, Permanent), and returns the
	// position of the last message the destination durably holds from
	// this sink, with Found false when it holds none or the sink keeps no
	// progress (its configuration does not ask for it). A position is
	// returned only when the sink can prove it wrote it itself and it is
	// not past opts.WALEnd; any other progress record is left out,
	// logged, and counted in Refused (the relay then resumes from the
	// progress table: duplicates, never a skipped message). An error
	// marked with Permanent stops the relay; others start a new cycle.
	// From Resume on, Publish writes each batch together with its
	// progress, and never commits a message at or before the last
	// position it knows committed (docs/sinks/kafka.md, "Exactly once").
	Resume(ctx context.Context, opts ResumeOptions) (Resumed, error)
}

// ResumeOptions are what the relay knows when it calls Resume.
type ResumeOptions struct {
	Slot string
	// WALEnd is the server's WAL position (pg_current_wal_lsn(), on a
	// standby pg_last_wal_replay_lsn()) read after the relay took the
	// slot and before this cycle sent anything: every message of the
	// stream, so every position a sink wrote, is at or before it. Zero:
	// not known, no bound (tests).
	WALEnd pglogrepl.LSN
}

// Resumed is Resume's result.
type Resumed struct {
	Pos   Position
	Found bool
	// Refused counts the progress records at the destination the sink
	// did not accept (not written by its own producer, or past WALEnd):
	// each is logged as forged; Pos is from before them, or not Found.
	Refused int
}

// SinkCounters are counters of what a sink alone sees; a nil one counts
// nothing. Each is safe for concurrent use (a prometheus.Counter is one).
type SinkCounters struct {
	// ReplaysDropped: messages of a Publish call the sink already holds
	// and did not send again (the kafka sink with exactly_once: a replay
	// after the replication connection dropped inside a transaction).
	ReplaysDropped interface{ Add(float64) }
	// Reordered: messages the broker stored after an earlier message of
	// the same partition failed in the same call (the kafka sink; never
	// expected: each is logged at error level).
	Reordered interface{ Add(float64) }
}

// Counted is implemented by a sink that counts in SinkCounters; the relay
// hands them before the first Publish.
type Counted interface {
	SetSinkCounters(SinkCounters)
}

// Scheduler is implemented by a sink that may hold a message back until
// its DeliverAt (message.Message.DeliverAt) with the broker's own
// scheduled delivery. Schedules reports whether this sink does, as
// configured; when it does, its Publish delivers no message before its
// DeliverAt, or refuses it (Rejected). The runner refuses a message whose
// DeliverAt is still to come for every other sink (PublishOnTime): it is
// never sent early.
type Scheduler interface {
	Schedules() bool
}

// Schedules reports whether s holds messages back until their DeliverAt
// (Scheduler).
func Schedules(s Sink) bool {
	sc, ok := s.(Scheduler)
	return ok && sc.Schedules()
}

// ErrTooEarly is in the refusal of a message whose deliver_at is still to
// come by a sink that cannot hold it back.
var ErrTooEarly = errors.New("deliver_at is still to come and this sink cannot hold a message back (the broker has no scheduled delivery); walpost never sends a message early")

// PublishOnTime publishes msgs through s, which does not schedule
// (Schedules false), up to the first message whose DeliverAt is after
// now, and refuses that one (Rejected, with the messages before it
// durable: Partial). Every message but such a one goes as with
// s.Publish.
func PublishOnTime(ctx context.Context, s Sink, msgs []*message.Message, now time.Time) error {
	i := slices.IndexFunc(msgs, func(m *message.Message) bool { return m.Delay(now) > 0 })
	if i < 0 {
		return s.Publish(ctx, msgs)
	}
	if i > 0 {
		if err := s.Publish(ctx, msgs[:i]); err != nil {
			if d, ok := DoneOf(err); ok {
				return Partial(err, append(slices.Clone(d), make([]bool, len(msgs)-len(d))...))
			}
			return err
		}
	}
	m := msgs[i]
	done := make([]bool, len(msgs))
	for j := range i {
		done[j] = true
	}
	return Partial(Rejected(fmt.Errorf("message %s (type %q): %w: its deliver_at is %s, and sink %s cannot deliver it then",
		m.ID, m.Type, ErrTooEarly, m.DeliverAt.UTC().Format(time.RFC3339Nano), s.Name())), done)
}
