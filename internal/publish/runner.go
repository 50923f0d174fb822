package publish

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/message"
)

// Delivery is one message on its way to one sink. Txn is the checkpoint
// entry of the message's transaction, in which the delivery is
// acknowledged once the sink made it durable (pipeline.Settler); the
// runner hands it back on ack untouched. It may be nil where nothing is
// tracked (cdc replay, tests).
type Delivery struct {
	Msg *message.Message
	Txn *checkpoint.Txn
}

// RunnerOptions tunes a Runner.
type RunnerOptions struct {
	// Lock, when set, is held around each Publish: the sink is lent to
	// others between them (Lent).
	Lock sync.Locker
	// BatchSize is the most deliveries per Publish call (default 1000).
	BatchSize int
	// MaxBackoff caps the wait between attempts of a failed batch
	// (default 30s); attempts start at 100ms and double, with jitter, and
	// start at 100ms again after an attempt that made progress.
	MaxBackoff time.Duration
	// Ack is called, from the runner's goroutine, with the deliveries the
	// sink has made durable: in channel order, each delivery once, each
	// call the next contiguous run of them. A delivery the sink reports
	// durable (Partial) after one that is not yet waits for it.
	Ack func(batch []Delivery)
	// Failing, if set, is called with true when a Publish call fails and
	// the runner retries, and with false when a Publish call goes through
	// again (for metrics and status). It is called on changes only.
	Failing func(bool)
	// Failed, if set, is called with the error of each Publish call that
	// fails and is retried (cdc status shows the last one).
	Failed func(error)
	// Refused, if set, takes over a message the sink refuses for good
	// (IsRejected). The runner then publishes the refused batch's messages
	// that are not durable yet one at a time, acking each that goes
	// through; a message that is refused alone RefusedAttempts times in a
	// row is handed to Refused, which must store it durably and account
	// for it (the runner does not Ack it), and the runner goes on with the
	// next. An error from Refused stops the runner. When nil, a refusal
	// stops the runner like any Permanent error.
	Refused func(ctx context.Context, d Delivery, err error) error
	// RefusedAttempts is how often a message is tried alone before it
	// goes to Refused (default 3).
	RefusedAttempts int
	// Hold, if set, holds messages by ordering key (relay.on_refused:
	// hold_key): a message it Holds is handed to its Hold, in order, once
	// every message before it is settled, instead of being published.
	Hold Holder
	// Trace, if set, records the deliveries as trace spans (tracing:;
	// internal/tracing). Nil when tracing is off: nothing is called.
	Trace Tracer
	Log   zerolog.Logger
}

// Holder holds the messages of keys a sink refused a message of
// (relay.on_refused: hold_key; pipeline.Settler is one). It is used from
// the runner's goroutine only.
type Holder interface {
	// Holds reports whether m's key is held and m is not before the
	// message that holds it.
	Holds(m *message.Message) bool
	// Hold parks d behind its key's head and settles it (the runner does
	// not Ack it), reporting true; false: the key was released meanwhile,
	// and the runner publishes d as usual. An error stops the runner.
	Hold(ctx context.Context, d Delivery) (bool, error)
}

// RefusalUnits is an optional ability of a Sink, used under
// relay.on_refused: hold_key (RunnerOptions.Hold): it tells the runner
// within which unit of a Publish call a refusal is ordered, so that no
// message of a key is stored while the refusal of an earlier message of
// the key could still come back (invariant 20, docs/design.md "Held
// keys"). A sink without it takes the whole call as one such unit.
type RefusalUnits interface {
	// RefusalUnit returns the unit of m — the destination it goes to (a
	// topic, subject, queue or entity expanded from the sink's template;
	// "" when the name is illegal: m will be refused) — with ordered true
	// when, refusing a message of a Publish call, the sink stores none of
	// the call's later messages of that unit and key. ordered false: a
	// message may be refused alone while later ones are stored (NATS
	// JetStream acknowledges each message on its own). Called from the
	// runner's goroutine, between Publish calls.
	RefusalUnit(m *message.Message) (unit string, ordered bool)
}

// unitOf is where a key's first message of a call goes (RefusalUnits).
type unitOf struct {
	unit    string
	ordered bool
}

// minBackoff is the wait before the first retry of a batch, and again
// after an attempt that made progress.
const minBackoff = 100 * time.Millisecond

// Runner feeds one sink from a channel of delivery slices: it takes
// whatever is waiting (up to BatchSize deliveries) as one batch, publishes
// it, retries it on a retryable error with exponential backoff and
// jitter, forever, and acks it. One batch at a time, in channel order: a
// sink sees messages in WAL order, and a retry never reorders them.
//
// A retry sends the messages of the batch that are not durable yet: all
// of them, unless the sink reported some durable with Partial. Those are
// not sent again; the rest keep their relative order, which keeps a
// sink's order argument (a sink reports per partition or entity a prefix
// of its messages, so a retry sends each partition's or entity's
// remainder in order, after what it stored). Acks follow WAL order: the
// runner acks the longest durable prefix of the batch after each attempt
// (so a Permanent error still confirms what was stored), and never acks a
// delivery twice. The backoff starts at 100ms for each batch and again
// after any attempt that made some message durable, so it grows only
// while the sink makes no progress.
//
// A Runner is used by one goroutine.
type Runner struct {
	sink Sink
	in   <-chan []Delivery
	opt  RunnerOptions
	// schedules: the sink holds messages back until their deliver_at
	// (Scheduler); otherwise PublishOnTime refuses one still to come.
	schedules bool
	// units, with opt.Hold and a sink with RefusalUnits: per ordering
	// key, where its first message of the call being formed goes.
	refusals RefusalUnits
	units    map[string]unitOf
	pending  []Delivery // received, not yet in a batch
	closed   bool
	failing  bool // opt.Failing was last called with true

	// sleep waits d or until ctx ends (ctx.Err()); tests replace it.
	sleep func(ctx context.Context, d time.Duration) error

	// The batch being published.
	batch   []Delivery
	durable []bool // durable[i]: the sink has made batch[i] durable
	settled int    // batch[:settled] was acked or handed to Refused
	msgs    []*message.Message
	idx     []int // idx[j]: the index in batch of msgs[j]
}

// NewRunner returns a runner feeding sink from in. The runner owns the
// slices it receives.
func NewRunner(sink Sink, in <-chan []Delivery, opt RunnerOptions) *Runner {
	if opt.BatchSize <= 0 {
		opt.BatchSize = 1000
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 30 * time.Second
	}
	if opt.RefusedAttempts <= 0 {
		opt.RefusedAttempts = 3
	}
	r := &Runner{sink: sink, in: in, opt: opt, sleep: sleep, schedules: Schedules(sink)}
	if ru, ok := sink.(RefusalUnits); ok && opt.Hold != nil {
		r.refusals, r.units = ru, map[string]unitOf{}
	}
	return r
}

// sleep waits d or until ctx ends (ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	if !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// Run publishes until in is closed and drained (then it returns nil), ctx
// ends (ctx.Err()), or the sink returns a Permanent error (that error; a
// Rejected one only when opt.Refused is nil). Before it returns an error
// it acks what the sink reported durable of the batch.
func (r *Runner) Run(ctx context.Context) error {
	r.msgs = make([]*message.Message, 0, r.opt.BatchSize)
	r.idx = make([]int, 0, r.opt.BatchSize)
	r.durable = make([]bool, 0, r.opt.BatchSize)
	for {
		if len(r.pending) == 0 {
			if r.closed {
				return nil
			}
			select {
			case ds, ok := <-r.in:
				if !ok {
					return nil
				}
				r.pending = ds
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Let the stages upstream run once before publishing a small batch:
		// with few threads they are usually runnable with more messages,
		// and one larger batch costs less than several small ones. This
		// adds one scheduling round, not a timer, to the latency.
		if len(r.pending) < r.opt.BatchSize {
			runtime.Gosched()
		}
	fill:
		for len(r.pending) < r.opt.BatchSize && !r.closed {
			select {
			case ds, ok := <-r.in:
				if !ok {
					r.closed = true
					break fill
				}
				r.pending = append(r.pending, ds...)
			default:
				break fill
			}
		}
		n := min(len(r.pending), r.opt.BatchSize)
		r.batch, r.settled = r.pending[:n:n], 0
		r.durable = r.durable[:n]
		clear(r.durable)
		if r.opt.Trace != nil {
			r.opt.Trace.Batch(r.batch)
		}
		err := r.send(ctx, n)
		clear(r.msgs[:n]) // drop references to payloads
		r.batch = nil
		if err != nil {
			return err
		}
		r.pending = r.pending[n:]
	}
}

// send publishes batch[:n]; with opt.Hold, the messages it holds are
// handed to it in order instead, and the runs between them published. A
// run ends, too, before a message of a key whose earlier message in the
// run goes to another unit of the sink (RefusalUnits), or to a unit in
// which a refusal is not ordered: that message goes in the next call,
// once the refusal of the earlier one, if any, is known and its key
// held.
func (r *Runner) send(ctx context.Context, n int) error {
	if r.opt.Hold == nil {
		return r.sendRange(ctx, 0, n)
	}
	released := -1 // a message whose key Hold found released: published
	for lo := 0; lo < n; {
		hi, split := lo, false
		clear(r.units)
		for hi < n {
			if hi != released && r.opt.Hold.Holds(r.batch[hi].Msg) {
				break
			}
			if !r.joins(r.batch[hi].Msg) {
				split = true
				break
			}
			hi++
		}
		if err := r.sendRange(ctx, lo, hi); err != nil {
			return err
		}
		if hi == n {
			return nil
		}
		if split {
			lo = hi
			continue
		}
		held, err := r.hold(ctx, hi)
		if err != nil {
			return err
		}
		if held {
			lo = hi + 1
		} else {
			lo, released = hi, hi
		}
	}
	return nil
}

// joins reports whether m may go in the call being formed: its key has
// no message in it yet, or that message goes to the same unit as m, one
// in which a refusal is ordered (RefusalUnits). It records m's unit for
// its key.
func (r *Runner) joins(m *message.Message) bool {
	if r.refusals == nil {
		return true
	}
	unit, ordered := r.refusals.RefusalUnit(m)
	key := m.OrderingKey()
	first, seen := r.units[key]
	if !seen {
		r.units[key] = unitOf{unit: unit, ordered: ordered}
		return true
	}
	return ordered && first.ordered && first.unit == unit
}

// sendRange publishes batch[lo:hi], one at a time after a refusal when
// opt.Refused is set.
func (r *Runner) sendRange(ctx context.Context, lo, hi int) error {
	if lo == hi {
		return nil
	}
	err := r.publish(ctx, lo, hi)
	if err != nil && r.opt.Refused != nil && IsRejected(err) {
		err = r.oneByOne(ctx, hi, err)
	}
	return err
}

// hold hands batch[i] to opt.Hold; every message before it is settled.
func (r *Runner) hold(ctx context.Context, i int) (bool, error) {
	held, err := r.opt.Hold.Hold(ctx, r.batch[i])
	if err != nil || !held {
		return false, err
	}
	if r.opt.Trace != nil {
		r.opt.Trace.Held(r.batch[i])
	}
	r.settled = i + 1
	r.ackDurable()
	return true, nil
}

// oneByOne publishes the messages of batch[:hi] that were refused (first)
// and are not durable yet one at a time, in order, acking each message
// that goes through and handing each that is refused RefusedAttempts
// times to opt.Refused; with opt.Hold, a message it holds (its key's
// message was refused just before) is handed to it instead.
func (r *Runner) oneByOne(ctx context.Context, hi int, first error) error {
	left := 0
	for i := r.settled; i < hi; i++ {
		if !r.durable[i] {
			left++
		}
	}
	r.opt.Log.Warn().Err(first).Int("batch", len(r.batch)).Int("not_durable", left).
		Msg("the sink refuses a message of this batch; publishing its messages not yet durable one at a time to find it")
	refused := 0
	defer func() {
		if refused == 0 && left > 1 {
			r.opt.Log.Warn().Int("batch", len(r.batch)).Msg("the sink refused the batch but took each of its messages alone: " +
				"the sink's batch limit (batch_bytes, max_batch_bytes) is likely above what the destination accepts; lower it")
		}
	}()
	for i := r.settled; i < hi; i++ {
		if r.durable[i] {
			continue // acked already: everything before it is settled
		}
		// Here r.settled == i: every earlier message is acked or refused.
		if r.opt.Hold != nil && r.opt.Hold.Holds(r.batch[i].Msg) {
			held, err := r.hold(ctx, i)
			if err != nil {
				return err
			}
			if held {
				continue
			}
		}
		err := r.publish(ctx, i, i+1)
		for attempt := 2; attempt <= r.opt.RefusedAttempts && IsRejected(err); attempt++ {
			if err := r.sleep(ctx, time.Duration(attempt-1)*minBackoff); err != nil {
				return err
			}
			err = r.publish(ctx, i, i+1)
		}
		switch {
		case err == nil:
			// publish acked it, and the durable messages after it.
		case IsRejected(err):
			refused++
			if r.opt.Trace != nil {
				r.opt.Trace.Refused(r.batch[i], err)
			}
			if err := r.opt.Refused(ctx, r.batch[i], err); err != nil {
				return err
			}
			r.settled = i + 1
			r.ackDurable()
		default:
			return err
		}
	}
	return nil
}

// publish publishes the messages of batch[lo:hi] that are not durable,
// retrying with backoff until every one of them is durable (nil), the
// sink returns a Permanent error (that error) or ctx ends (ctx.Err()).
// After every attempt it records what the sink made durable and acks the
// batch's durable prefix.
func (r *Runner) publish(ctx context.Context, lo, hi int) error {
	retry := backoff.New(minBackoff, r.opt.MaxBackoff)
	for attempt := 1; ; attempt++ {
		r.msgs, r.idx = r.msgs[:0], r.idx[:0]
		for i := lo; i < hi; i++ {
			if !r.durable[i] {
				r.msgs = append(r.msgs, r.batch[i].Msg)
				r.idx = append(r.idx, i)
			}
		}
		if len(r.msgs) == 0 {
			return nil
		}
		var err error
		if r.opt.Lock != nil {
			r.opt.Lock.Lock()
		}
		began := time.Now()
		if r.schedules {
			err = r.sink.Publish(ctx, r.msgs)
		} else {
			err = PublishOnTime(ctx, r.sink, r.msgs, began)
		}
		took := time.Since(began)
		if r.opt.Lock != nil {
			r.opt.Lock.Unlock()
		}
		progress := r.record(err)
		r.ackDurable()
		if err == nil || progress == len(r.msgs) {
			if attempt > 1 {
				r.opt.Log.Info().Int("attempts", attempt).Msg("sink recovered; batch published")
			}
			r.setFailing(false)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if IsPermanent(err) {
			return err
		}
		r.setFailing(true)
		if r.opt.Failed != nil {
			r.opt.Failed(err)
		}
		if progress > 0 {
			retry.Reset()
		}
		wait := retry.Next()
		if r.opt.Trace != nil {
			r.opt.Trace.Retry(r.msgs, attempt, err, wait)
		}
		ev := r.opt.Log.Warn().Err(err).Int("attempt", attempt).Int("batch", len(r.msgs))
		if progress > 0 {
			ev = ev.Int("durable", progress)
		}
		// attempt_ms: how long the failed attempt took, a client's own
		// retries inside it included (the Service Bus SDK's max_retries):
		// the time between two of these lines is attempt_ms plus the
		// previous line's retry_in_ms.
		ev.Str("first_msg_id", r.msgs[0].ID).Str("trace_id", r.msgs[0].TraceID()).Str("lsn", r.msgs[0].LSN.String()).Dur("attempt_ms", took).Dur("retry_in_ms", wait).
			Msg("publish failed; retrying the messages not yet durable (the slot is not confirmed past them)")
		if err := r.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// record marks as durable what the Publish call of r.msgs made durable,
// by err: all of them for nil, those done for a Partial error. It returns
// how many it marked. A Partial error whose done does not match the call
// counts as no progress (the messages are sent again).
func (r *Runner) record(err error) int {
	if err == nil {
		for _, i := range r.idx {
			r.durable[i] = true
		}
		return len(r.idx)
	}
	done, ok := DoneOf(err)
	if !ok {
		return 0
	}
	if len(done) != len(r.idx) {
		r.opt.Log.Error().Int("batch", len(r.idx)).Int("reported", len(done)).
			Msg("the sink reported durable messages for a call of another size; ignoring the report (a bug in the sink)")
		return 0
	}
	n := 0
	for j, d := range done {
		if d && !r.durable[r.idx[j]] {
			r.durable[r.idx[j]] = true
			n++
		}
	}
	return n
}

// ackDurable acks the durable deliveries that follow the settled prefix
// of the batch, up to the first that is not durable.
func (r *Runner) ackDurable() {
	end := r.settled
	for end < len(r.batch) && r.durable[end] {
		end++
	}
	if end > r.settled {
		if r.opt.Trace != nil {
			r.opt.Trace.Acked(r.batch[r.settled:end:end])
		}
		r.opt.Ack(r.batch[r.settled:end:end])
		r.settled = end
	}
}

// setFailing reports a change of the sink's state to opt.Failing.
func (r *Runner) setFailing(f bool) {
	if f != r.failing && r.opt.Failing != nil {
		r.opt.Failing(f)
	}
	r.failing = f
}
