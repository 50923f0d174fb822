package sqs

import (
	"testing"

	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// BenchmarkSQSPublish measures Publish of batches of 1000 messages
// (sinktest.BenchPublish) to a FIFO queue of the stand-in over loopback
// HTTP over 16 keys: 100 SendMessageBatch requests per call, one at a
// time. One
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

// BenchmarkSQSPublishOneKey is BenchmarkSQSPublish with every message of
// one key: a FIFO request holds one entry per group (awsbatch), so a call
// of 1,000 is 1,000 requests, the cost of the FIFO order rule at its
// worst (docs/sinks/sqs.md, "Ordering").
func BenchmarkSQSPublishOneKey(b *testing.B) {
	srv := sqsfake.Start(b)
	q := newQueue(srv, true, sqsfake.QueueOptions{})
	s := newSink(b, srv, q)
	sinktest.BenchPublishKeys(b, s, 1000, 1)
}
