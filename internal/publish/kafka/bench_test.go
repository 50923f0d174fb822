package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkKafkaPublish measures Publish of batches of 1, 100 and 1000
// messages (sinktest.BenchPublish), acks all, to a one-broker kfake
// cluster with a 6-partition topic, over loopback TCP. ns/op is the
// latency of a call of that size (what the sink adds to end-to-end
// latency at low rates), msgs/s the throughput.
func BenchmarkKafkaPublish(b *testing.B) {
	fk := startKafka(b, kfake.SeedTopics(6, "bench"))
	s := newSink(b, fk.addrs, "bench")
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { sinktest.BenchPublish(b, s, batch) })
	}
}
