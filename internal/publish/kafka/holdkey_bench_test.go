package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

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

// BenchmarkKafkaHoldKeyDestinations measures what the rule of invariant 20
// costs a Kafka sink under relay.on_refused: hold_key (the runner never
// puts one key's messages for two topics in one call): batches of 1,000
// messages of ~300 bytes over 16 keys through publish.Runner, acks all,
// to a one-broker kfake cluster (6 partitions per topic). fixed: one
// topic; per-key: topic "bench.{type}" with each key's messages of one
// type (no key changes topic: no split); alternating: the type, so the
// topic, alternates from one message to the next whatever its key (every
// key changes topic within a call). calls/op are the Publish calls per
// 1,000 messages.
func BenchmarkKafkaHoldKeyDestinations(b *testing.B) {
	fk := startKafka(b, kfake.SeedTopics(6, "bench.a", "bench.b"))
	keys := sinktest.Keys(16)
	cases := []struct {
		name, topic string
		typ         func(j int) string
	}{
		{"fixed", "bench.a", func(j int) string { return "a" }},
		{"per-key", "bench.{type}", func(j int) string { return []string{"a", "b"}[j%16%2] }},
		{"alternating", "bench.{type}", func(j int) string { return []string{"a", "b"}[j/16%2] }},
	}
	for _, c := range cases {
		for _, hold := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/hold_key=%v", c.name, hold), func(b *testing.B) {
				s := &countingSink{Sink: newSink(b, fk.addrs, c.topic)}
				g := sinktest.NewGen(99)
				batch := make([]publish.Delivery, 1000)
				for j := range batch {
					m := g.SizedMessage(keys[j%16], 300)
					m.Type = c.typ(j)
					batch[j] = publish.Delivery{Msg: m}
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
				run(1) // connect, fetch metadata
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
