package sqs

import (
	"testing"

	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// BenchmarkSQSPublish measures Publish of batches of 1000 messages
// (sinktest.BenchPublish) to a FIFO queue of the stand-in over loopback
// HTTP: 100 SendMessageBatch requests per call, one at a time. One
// iteration is one Publish call; msgs/s is the figure to read. The
// stand-in runs in the benchmark's process and keeps every message, so
// this bounds the sink's cost from below rather than predicting SQS's
// throughput (there every request is a round trip to the region).
func BenchmarkSQSPublish(b *testing.B) {
	srv := sqsfake.Start(b)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(b, srv, q)
	sinktest.BenchPublish(b, s, 1000)
}
