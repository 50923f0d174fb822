package natsjs

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkNATSPublish measures Publish of batches of 1, 100 and 1000
// messages (sinktest.BenchPublish: ~300-byte JSON payloads, 16 keys, six
// types) to a file-storage stream on the server natstest.Start returns,
// through the proxy the tests use (loopback TCP), with the default
// max_pending. ns/op is the latency of a call of that size, msgs/s the
// catch-up throughput.
func BenchmarkNATSPublish(b *testing.B) {
	tg := newTarget(b, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	for _, pending := range []int{64, 512} {
		s := tg.sink(b, fmt.Sprintf("max_pending: %d", pending))
		for _, batch := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("max_pending=%d/batch=%d", pending, batch), func(b *testing.B) { sinktest.BenchPublish(b, s, batch) })
		}
	}
}
