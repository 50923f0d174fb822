package natsjs

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// noHolds is a publish.Holder that holds nothing: the runner under
// relay.on_refused: hold_key with no key held.
type noHolds struct{}

func (noHolds) Holds(*message.Message) bool { return false }
func (noHolds) Hold(context.Context, publish.Delivery) (bool, error) {
	return false, nil
}

// countingSink counts the Publish calls the runner makes.
type countingSink struct {
	*Sink
	calls int
}

func (c *countingSink) Publish(ctx context.Context, msgs []*message.Message) error {
	c.calls++
	return c.Sink.Publish(ctx, msgs)
}

// BenchmarkNATSHoldKey measures what the rule of invariant 20 costs a
// NATS sink under relay.on_refused: hold_key: JetStream acknowledges each
// message on its own, so the runner never puts two messages of one key in
// one call. Batches of 1,000 ~300-byte messages through publish.Runner to
// a memory stream on the server natstest.Start returns (through the
// tests' proxy), over 16 keys (each key repeats every 16 messages) and
// over 1,000 keys (no key repeats within a batch). calls/op are the
// Publish calls per 1,000 messages.
func BenchmarkNATSHoldKey(b *testing.B) {
	tg := newTarget(b, jetstream.StreamConfig{Storage: jetstream.MemoryStorage})
	for _, nkeys := range []int{16, 1000} {
		for _, hold := range []bool{false, true} {
			name := "keys=16"
			if nkeys == 1000 {
				name = "keys=1000"
			}
			if hold {
				name += "/hold_key=true"
			} else {
				name += "/hold_key=false"
			}
			b.Run(name, func(b *testing.B) {
				s := &countingSink{Sink: tg.sink(b)}
				g := sinktest.NewGen(99)
				keys := sinktest.Keys(nkeys)
				batch := make([]publish.Delivery, 1000)
				for j := range batch {
					batch[j] = publish.Delivery{Msg: g.SizedMessage(keys[j%nkeys], 300)}
				}
				run := func(n int) {
					in := make(chan []publish.Delivery, n)
					for range n {
						in <- batch
					}
					close(in)
					opt := publish.RunnerOptions{BatchSize: 1000, Ack: func([]publish.Delivery) {}, Log: zerolog.Nop()}
					if hold {
						opt.Hold = noHolds{}
					}
					if err := publish.NewRunner(s, in, opt).Run(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				run(1) // connect
				s.calls = 0
				b.SetBytes(1000 * 300)
				b.ResetTimer()
				start := time.Now()
				run(b.N)
				b.ReportMetric(float64(b.N*1000)/time.Since(start).Seconds(), "msgs/s")
				b.ReportMetric(float64(s.calls)/float64(b.N), "calls/op")
			})
		}
	}
}
