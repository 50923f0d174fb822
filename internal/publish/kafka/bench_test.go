package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkKafkaPublish measures Publish of batches of 1, 100 and 1000
// messages with ~300-byte JSON payloads over 16 keys, acks all, to a
// one-broker kfake cluster with a 6-partition topic, over loopback TCP.
// One iteration is one batch: ns/op is the latency of a call of that
// size (what the sink adds to end-to-end latency at low rates), msgs/s
// the throughput.
func BenchmarkKafkaPublish(b *testing.B) {
	fk := startKafka(b, kfake.SeedTopics(6, "bench"))
	s := newSink(b, fk.addrs, "bench")
	g := sinktest.NewGen(99)
	const batches = 16
	for _, batch := range []int{1, 100, 1000} {
		pool := make([][]*decoder.Message, batches)
		for i := range pool {
			pool[i] = make([]*decoder.Message, batch)
			for j := range pool[i] {
				pool[i][j] = g.SizedMessage(sinktest.Keys(16)[(i*batch+j)%16], 300)
			}
		}
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			if err := s.Publish(ctx, pool[0]); err != nil { // connect and fetch metadata
				b.Fatal(err)
			}
			b.SetBytes(int64(batch * 300))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := s.Publish(ctx, pool[i%batches]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
