package servicebus

import (
	"testing"

	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// BenchmarkServiceBusPublish measures Publish of batches of 1000 messages
// (sinktest.BenchPublish), sessions on, to a queue of
// the stand-in (which counts and drops them) over loopback TCP. One
// iteration is one Publish call; msgs/s is the figure to read. The
// stand-in is single-threaded JavaScript, so this bounds the sink's cost
// from below rather than predicting a namespace's throughput (Standard
// namespaces are throttled by messaging units well below it).
func BenchmarkServiceBusPublish(b *testing.B) {
	needFake(b, "measures against the stand-in")
	tg := newTarget(b, sbfake.QueueOptions{Discard: true})
	s := newSink(b, tg, "queue: "+tg.queue, "sessions: true")
	sinktest.BenchPublish(b, s, 1000)
}
