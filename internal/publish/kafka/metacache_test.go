package kafka

import (
	"context"
	"errors"
	"net"
	"testing"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
)

// countingTransport answers every request with a fresh response and counts
// them; metadata requests for topic "bad" fail.
type countingTransport struct{ meta, other int }

func (c *countingTransport) RoundTrip(_ context.Context, _ net.Addr, req protocol.Message) (protocol.Message, error) {
	if r, ok := req.(*metadataAPI.Request); ok {
		c.meta++
		if r.TopicNames[0] == "bad" {
			return nil, errors.New("broker down")
		}
		return &metadataAPI.Response{Topics: []metadataAPI.ResponseTopic{{Name: r.TopicNames[0]}}}, nil
	}
	c.other++
	return &produceAPI.Response{}, nil
}

func TestMetaCacheAnswersATopicsMetadataOncePerCall(t *testing.T) {
	ct := &countingTransport{}
	c := newMetaCache(ct)
	addr := kafka.TCP("127.0.0.1:9092")
	ask := func(topic string, auto bool) (protocol.Message, error) {
		return c.RoundTrip(context.Background(), addr, &metadataAPI.Request{TopicNames: []string{topic}, AllowAutoTopicCreation: auto})
	}
	first, _ := ask("a", false)
	for range 99 {
		if res, err := ask("a", false); err != nil || res != first {
			t.Fatalf("second ask: %v %v, want the first answer", res, err)
		}
	}
	ask("b", false)
	ask("a", true)
	if ct.meta != 3 {
		t.Fatalf("%d metadata requests reached the transport for topics a, b and a with auto-create, want 3", ct.meta)
	}
	for range 2 {
		if _, err := ask("bad", false); err == nil {
			t.Fatal("a failed lookup was answered")
		}
	}
	if ct.meta != 5 {
		t.Fatalf("%d metadata requests after two failed ones, want 5: a failure is not kept", ct.meta)
	}
	c.reset()
	if res, _ := ask("a", false); res == first || ct.meta != 6 {
		t.Fatalf("after reset: same answer %v, %d requests; want a new request", res == first, ct.meta)
	}
	c.RoundTrip(context.Background(), addr, &metadataAPI.Request{TopicNames: []string{"a", "b"}})
	c.RoundTrip(context.Background(), addr, &metadataAPI.Request{TopicNames: []string{"a", "b"}})
	c.RoundTrip(context.Background(), addr, &produceAPI.Request{})
	if ct.meta != 8 || ct.other != 1 {
		t.Fatalf("requests for two topics and others: %d metadata, %d other; want every one passed on", ct.meta, ct.other)
	}
}
