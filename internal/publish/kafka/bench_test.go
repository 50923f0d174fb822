package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkKafkaPublish measures Publish of batches of 1000 messages with
// ~300-byte JSON payloads over 16 keys, acks all, to a one-broker kfake
// cluster with a 6-partition topic, over loopback TCP. One iteration is
// one batch; msgs/s is the figure to read.
func BenchmarkKafkaPublish(b *testing.B) {
	fk := startKafka(b, kfake.SeedTopics(6, "bench"))
	s := newSink(b, fk.addrs, "bench")
	g := sinktest.NewGen(99)
	const batch, batches = 1000, 16
	pool := make([][]*decoder.Message, batches)
	for i := range pool {
		pool[i] = make([]*decoder.Message, batch)
		for j := range pool[i] {
			pool[i][j] = g.SizedMessage(sinktest.Keys(16)[(i*batch+j)%16], 300)
		}
	}
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
}
