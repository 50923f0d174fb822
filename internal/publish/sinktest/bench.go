package sinktest

import (
	"context"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// BenchPublish measures s.Publish of calls of batch messages with
// ~300-byte JSON payloads over 16 keys, cycling through 16 prepared
// batches. A first call, not timed, connects. One iteration is one call:
// ns/op is the latency of a call of that size, msgs/s the throughput.
func BenchPublish(b *testing.B, s publish.Sink, batch int) {
	b.Helper()
	BenchPublishKeys(b, s, batch, 16)
}

// BenchPublishKeys is BenchPublish over nkeys keys, taking turns (1: every
// message of one key).
func BenchPublishKeys(b *testing.B, s publish.Sink, batch, nkeys int) {
	b.Helper()
	g := NewGen(99)
	const batches = 16
	keys := Keys(nkeys)
	pool := make([][]*message.Message, batches)
	for i := range pool {
		pool[i] = make([]*message.Message, batch)
		for j := range pool[i] {
			pool[i][j] = g.SizedMessage(keys[(i*batch+j)%nkeys], 300)
		}
	}
	ctx := context.Background()
	if err := s.Publish(ctx, pool[0]); err != nil { // connect, authenticate, fetch metadata
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
