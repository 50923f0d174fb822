package natsjs

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestIntegrationCloudEventsDecodeWithTheSDK: with format: cloudevents a
// stored message's headers and data decode with the CloudEvents SDK
// (binary mode; the NATS binding's ce- headers are the HTTP binding's)
// into an event with the outbox id, type, source, commit time and the
// payload as data.
func TestIntegrationCloudEventsDecodeWithTheSDK(t *testing.T) {
	tg := newTarget(t, jetstream.StreamConfig{})
	s := tg.sink(t, "format: cloudevents", "source: /orders-service")
	m := sinktest.NewGen(13).Message("order-9")
	if err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
	got := natstest.Read(t, tg.url, tg.stream)
	if len(got) != 1 {
		t.Fatalf("%d messages stored", len(got))
	}
	// NATS headers are case-sensitive, and the SDK's NATS binding takes
	// the datacontenttype from "content-type" and the attributes from
	// "ce-"-prefixed names, exactly: pass on only what it would see
	// (http.Header alone would normalise the case and hide a mismatch).
	if ct := got[0].Header["content-type"]; len(ct) != 1 || ct[0] != "application/json" {
		t.Errorf("header content-type = %q, want [application/json] under that exact name (headers %v)", ct, got[0].Header)
	}
	h := http.Header{}
	for k, vs := range got[0].Header {
		if k != "content-type" && !strings.HasPrefix(k, "ce-") {
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	ev, err := binding.ToEvent(context.Background(), cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(got[0].Data))))
	if err != nil {
		t.Fatalf("the SDK does not decode the stored message: %v (headers %v)", err, got[0].Header)
	}
	if ev.ID() != m.ID || ev.Type() != m.Type || ev.Source() != "/orders-service" || ev.SpecVersion() != "1.0" ||
		!ev.Time().Equal(m.CommitTime) || ev.DataContentType() != "application/json" || string(ev.Data()) != string(m.Payload) {
		t.Errorf("event %v, want id %s type %s time %s data %s", ev, m.ID, m.Type, m.CommitTime, m.Payload)
	}
	if got[0].Header.Get(HeaderMsgID) != m.ID {
		t.Errorf("Nats-Msg-Id %q, want %s", got[0].Header.Get(HeaderMsgID), m.ID)
	}
}
