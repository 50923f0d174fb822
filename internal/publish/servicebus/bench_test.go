package servicebus

import (
	"context"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkServiceBusPublish measures Publish of batches of 1000 messages
// with ~300-byte JSON payloads over 16 keys, sessions on, to a queue of
// the stand-in (which counts and drops them) over loopback TCP. One
// iteration is one Publish call; msgs/s is the figure to read. The
// stand-in is single-threaded JavaScript, so this bounds the sink's cost
// from below rather than predicting a namespace's throughput (Standard
// namespaces are throttled by messaging units well below it).
func BenchmarkServiceBusPublish(b *testing.B) {
	needFake(b, "measures against the stand-in")
	tg := newTarget(b, sbfake.QueueOptions{Discard: true})
	s := newSink(b, tg, "queue: "+tg.queue, "sessions: true")
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
	if err := s.Publish(ctx, pool[0]); err != nil { // connect, authenticate, attach
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
