package kafka

import (
	"context"
	"net"
	"sync"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
)

// metaCache is the writer's transport. kafka-go's Writer.WriteMessages
// asks its transport for the topic's metadata once per message, to count
// its partitions; the transport answers from its own cache, but building
// and filtering that answer was a visible share of the relay's CPU in a
// catch-up to Kafka (BENCHMARKS.md, "What each optimisation bought").
// metaCache keeps the answer for a one-topic metadata request
// until reset, which Publish calls before each WriteMessages: one lookup
// per topic per call, with kafka-go's caching (and its refresh) unchanged
// between calls. Every other request goes to the transport.
type metaCache struct {
	tr kafka.RoundTripper // the sink's *kafka.Transport

	mu   sync.Mutex
	last map[metaKey]protocol.Message
}

type metaKey struct {
	addr, topic string
	autoCreate  bool
}

func newMetaCache(tr kafka.RoundTripper) *metaCache {
	return &metaCache{tr: tr, last: map[metaKey]protocol.Message{}}
}

// RoundTrip implements kafka.RoundTripper.
func (c *metaCache) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	r, ok := req.(*metadataAPI.Request)
	if !ok || len(r.TopicNames) != 1 {
		return c.tr.RoundTrip(ctx, addr, req)
	}
	k := metaKey{addr: addr.String(), topic: r.TopicNames[0], autoCreate: r.AllowAutoTopicCreation}
	c.mu.Lock()
	res, hit := c.last[k]
	c.mu.Unlock()
	if hit {
		return res, nil
	}
	res, err := c.tr.RoundTrip(ctx, addr, req)
	if err == nil {
		c.mu.Lock()
		c.last[k] = res
		c.mu.Unlock()
	}
	return res, err
}

// reset forgets the answers kept since the last reset.
func (c *metaCache) reset() {
	c.mu.Lock()
	clear(c.last)
	c.mu.Unlock()
}
