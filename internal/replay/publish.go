package replay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/tracing"
)

// publish sends a batch of rows to the sinks their routes take, each
// sink's share in order through a publish.Runner (retries, partial
// acknowledgements and refusals as in the relay: internal/publish,
// runner.go), the sinks at once, and returns once every sink is done with
// its share. A row that cannot be mapped is reported and left out.
func (rp *replayer) publish(ctx context.Context, batch []row, res *Result) error {
	share := make(map[int][]publish.Delivery)
	for _, r := range batch {
		if r.err != nil {
			res.Invalid++
			fmt.Fprintf(rp.o.Progress, "replay: id %s cannot be mapped, left out: %v\n", r.key.id(), r.err)
			continue
		}
		if r.msg.Expired(time.Now()) {
			// relay.on_expired, as the relay applies it, but that a
			// replay parks nothing: dead_letter leaves it out too.
			if rp.cfg.Relay.OnExpired != config.ExpiredSend {
				res.Expired++
				fmt.Fprintf(rp.o.Progress, "replay: id %s expired at %s, left out (relay.on_expired: %s)\n",
					r.key.id(), r.msg.ExpiresAt.UTC().Format(time.RFC3339), rp.cfg.Relay.OnExpired)
				continue
			}
			c := *r.msg
			c.ExpiresAt = time.Time{}
			r.msg = &c
		}
		to := rp.sinks.routes(r.msg)
		if len(to) == 0 {
			res.NotRouted++
		}
		for _, i := range to {
			share[i] = append(share[i], publish.Delivery{Msg: r.msg})
		}
	}
	var acked, rejected atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for i, ds := range share {
		sink, err := rp.sinks.get(gctx, i)
		if err != nil {
			return err
		}
		in := make(chan []publish.Delivery, 1)
		in <- ds
		close(in)
		name := sink.Name()
		opt := publish.RunnerOptions{
			BatchSize:       rp.cfg.Relay.BatchSize,
			MaxBackoff:      rp.cfg.Relay.RetryBackoff.D(),
			Ack:             func(b []publish.Delivery) { acked.Add(int64(len(b))) },
			RefusedAttempts: rp.cfg.Relay.RefusedAttempts,
			Log:             rp.o.Log.With().Str("sink", name).Logger(),
			Failing: func(f bool) {
				if f {
					fmt.Fprintf(rp.o.Progress, "replay: sink %s fails; retrying (interrupt twice to give up)\n", name)
				}
			},
		}
		opt.Trace = tracing.FromContext(ctx).Sink(&rp.cfg.Sinks[i], tracing.Replay) // nil when off
		if rp.o.SkipRejected {
			opt.Refused = func(_ context.Context, d publish.Delivery, err error) error {
				rejected.Add(1)
				fmt.Fprintf(rp.o.Progress, "replay: sink %s refuses message %s for good, left out (--skip-rejected): %v\n", name, d.Msg.ID, err)
				return nil
			}
		}
		g.Go(func() error {
			if err := publish.NewRunner(sink, in, opt).Run(gctx); err != nil {
				return fmt.Errorf("sink %s: %w", name, err)
			}
			return nil
		})
	}
	err := g.Wait()
	res.Deliveries += acked.Load()
	res.Rejected += rejected.Load()
	if err != nil && publish.IsRejected(err) {
		return fmt.Errorf("%w (give --skip-rejected to report such messages and go on)", err)
	}
	return err
}
