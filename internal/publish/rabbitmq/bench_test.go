package rabbitmq

import (
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkRabbitMQPublish measures Publish of batches of 1, 100 and 1000
// messages (sinktest.BenchPublish), persistent, with publisher confirms
// and mandatory, to the machine's RabbitMQ over loopback TCP: a topic
// exchange with one durable classic queue bound. The queue keeps at most
// 20,000 messages (x-max-length, dropping the oldest) so that the shared
// server does not fill up. ns/op is the latency of a call of that size
// (what the sink adds to end-to-end latency at low rates), msgs/s the
// catch-up throughput. Figures of a run: docs/sinks/rabbitmq.md,
// "Throughput".
func BenchmarkRabbitMQPublish(b *testing.B) {
	url := rabbittest.Start(b)
	tp := rabbittest.Declare(b, url, rabbittest.Topology{QueueArgs: amqp.Table{"x-max-length": int32(20000)}})
	s := newSink(b, url, tp.Exchange)
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { sinktest.BenchPublish(b, s, batch) })
	}
}
