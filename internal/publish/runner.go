package publish

import (
	"context"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/decoder"
)

// Delivery is one message on its way to one sink. Tag is the caller's
// bookkeeping (the relay's checkpoint entry) handed back on ack.
type Delivery struct {
	Msg *decoder.Message
	Tag any
}

// RunnerOptions tunes a Runner.
type RunnerOptions struct {
	// BatchSize is the most deliveries per Publish call (default 1000).
	BatchSize int
	// MaxBackoff caps the wait between attempts of a failed batch
	// (default 30s); attempts start at 100ms and double, with jitter.
	MaxBackoff time.Duration
	// Ack is called, from the runner's goroutine, with each batch once the
	// sink has published it.
	Ack func(batch []Delivery)
	// Failing, if set, is called with true when a batch starts failing and
	// with false when it went through again (for metrics and status).
	Failing func(bool)
	// Refused, if set, takes over a message the sink refuses for good
	// (IsRejected). The runner then publishes the refused batch one
	// message at a time, acking each that goes through; a message that is
	// refused alone RefusedAttempts times in a row is handed to Refused,
	// which must store it durably and account for it (the runner does not
	// Ack it), and the runner goes on with the next. An error from Refused
	// stops the runner. When nil, a refusal stops the runner like any
	// Permanent error.
	Refused func(ctx context.Context, d Delivery, err error) error
	// RefusedAttempts is how often a message is tried alone before it
	// goes to Refused (default 3).
	RefusedAttempts int
	Log             zerolog.Logger
}

// Runner feeds one sink from a channel of delivery slices: it takes
// whatever is waiting (up to BatchSize deliveries) as one batch, publishes
// it, retries it whole on a retryable error with exponential backoff and
// jitter, forever, and acks it. One batch at a time, in channel order: a
// sink sees messages in WAL order, and a retry never reorders them.
//
// A Runner is used by one goroutine.
type Runner struct {
	sink    Sink
	in      <-chan []Delivery
	opt     RunnerOptions
	pending []Delivery // received, not yet in a batch
	closed  bool
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
	return &Runner{sink: sink, in: in, opt: opt}
}

// Run publishes until in is closed and drained (then it returns nil), ctx
// ends (ctx.Err()), or the sink returns a Permanent error (that error; a
// Rejected one only when opt.Refused is nil).
func (r *Runner) Run(ctx context.Context) error {
	msgs := make([]*decoder.Message, 0, r.opt.BatchSize)
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
		batch := r.pending[:n:n]
		msgs = msgs[:0]
		for _, d := range batch {
			msgs = append(msgs, d.Msg)
		}
		err := r.publish(ctx, msgs)
		switch {
		case err == nil:
			r.opt.Ack(batch)
		case r.opt.Refused != nil && IsRejected(err):
			if err := r.oneByOne(ctx, batch, msgs, err); err != nil {
				return err
			}
		default:
			return err
		}
		clear(msgs)
		r.pending = r.pending[n:]
	}
}

// oneByOne publishes a batch that was refused (first) one message at a
// time, in order, acking each message that goes through and handing each
// that is refused RefusedAttempts times to opt.Refused.
func (r *Runner) oneByOne(ctx context.Context, batch []Delivery, msgs []*decoder.Message, first error) error {
	r.opt.Log.Warn().Err(first).Int("batch", len(batch)).
		Msg("the sink refuses a message of this batch; publishing the batch one message at a time to find it")
	refused := 0
	defer func() {
		if refused == 0 && len(batch) > 1 {
			r.opt.Log.Warn().Int("batch", len(batch)).Msg("the sink refused the batch but took each of its messages alone: " +
				"the sink's batch limit (batch_bytes, max_batch_bytes) is likely above what the destination accepts; lower it")
		}
	}()
	for i := range batch {
		err := r.publish(ctx, msgs[i:i+1])
		for attempt := 2; attempt <= r.opt.RefusedAttempts && IsRejected(err); attempt++ {
			select {
			case <-time.After(time.Duration(attempt-1) * 100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			err = r.publish(ctx, msgs[i:i+1])
		}
		switch {
		case err == nil:
			r.opt.Ack(batch[i : i+1])
		case IsRejected(err):
			refused++
			if err := r.opt.Refused(ctx, batch[i], err); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

func (r *Runner) publish(ctx context.Context, msgs []*decoder.Message) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := r.sink.Publish(ctx, msgs)
		if err == nil {
			if attempt > 1 {
				r.opt.Log.Info().Int("attempts", attempt).Msg("sink recovered; batch published")
				if r.opt.Failing != nil {
					r.opt.Failing(false)
				}
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if IsPermanent(err) {
			return err
		}
		if attempt == 1 && r.opt.Failing != nil {
			r.opt.Failing(true)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.opt.Log.Warn().Err(err).Int("attempt", attempt).Int("batch", len(msgs)).
			Str("first_msg_id", msgs[0].ID).Str("lsn", msgs[0].LSN.String()).Dur("retry_in", wait).
			Msg("publish failed; retrying (the slot is not confirmed past this batch)")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(backoff*2, r.opt.MaxBackoff)
	}
}
